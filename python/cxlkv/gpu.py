"""The GPU data path from Python: KV blocks in CUDA tensors <-> the region by DMA.

Layout (vLLM's OffloadingConnector, docs/gpu.md): the KV cache is a list of
CUDA tensors whose dim 0 is the GPU block id, each block's bytes contiguous
(vLLM's canonical int8 tensors of shape (num_blocks, page_bytes); one
cross-layer tensor for uniform models, several for per-layer caches). One
region slot holds one offloaded chunk of ``blocks_per_chunk`` GPU blocks:
for each tensor in order, the pages of the chunk's block ids in order.

Loads and stores are synchronous (they return after the DMA and the GPU
CRC32C checks) and release the GIL. A store first waits for the work queued
on ``stream`` (default: the current stream of the KV tensors' device), so a
KV written by the model is complete before it is copied. ``submit_load`` and
``submit_store`` run the same calls on one worker thread per GpuRegion, in
submission order, and return futures (vLLM's worker submits transfers and
polls for finished ones).
"""

import concurrent.futures
import threading
from collections.abc import Sequence
from typing import Any, Union

from . import BlockKey, Region, _cxlkv, as_keys
from .errors import LoadFailedError, UnsupportedError

# Block keys as every call takes them: BlockKeys, int ids, hash bytes or hex (as_key).
Keys = Sequence[Union[BlockKey, int, bytes, str]]

_PATHS: dict[str, Any] = {}
if _cxlkv.HAVE_CUDA:
    _PATHS = {"direct": _cxlkv.GpuPath.DIRECT, "staged": _cxlkv.GpuPath.STAGED}


def kv_tensors(kv_caches: Sequence[Any]) -> list[Any]:
    """One ``_cxlkv.KvTensor`` (base, stride, block_bytes, num_blocks) per KV tensor.

    Dim 0 of each tensor is the GPU block id and each block's bytes must be
    contiguous. The per-piece list (one per tensor and block: 57,344 for a
    32K-token load of a 28-layer model) is built natively from these.
    """
    out = []
    for t in kv_caches:
        if not t.is_cuda:
            raise ValueError("KV tensors must be CUDA tensors")
        if t.dim() > 1 and not t[0].is_contiguous():
            raise ValueError("each block's bytes must be contiguous (dim 0 = block id)")
        stride = t.stride(0) * t.element_size()
        block_bytes = t[0].numel() * t.element_size() if t.dim() > 1 else t.element_size()
        out.append(_cxlkv.KvTensor(t.data_ptr(), stride, block_bytes, t.shape[0]))
    return out


def _block_ids(block_ids: Any, blocks_per_chunk: int) -> tuple[list[int], int]:
    if hasattr(block_ids, "tolist"):
        block_ids = block_ids.tolist()
    block_ids = [int(b) for b in block_ids]
    f = int(blocks_per_chunk)
    if f <= 0 or len(block_ids) % f:
        raise ValueError(f"{len(block_ids)} block ids are not whole chunks of {f}")
    return block_ids, f


class StoreResult:
    def __init__(self, stored: int, statuses: list[tuple[str, str]],
                 outcomes: list[Any]) -> None:
        self.stored = stored
        self.statuses = statuses  # per chunk: (code name, message); "OK" when fine
        self.outcomes = outcomes  # per chunk: cxlkv.StoreOutcome


class LoadResult:
    def __init__(self, loaded: int, prefix: int, statuses: list[tuple[str, str]],
                 lengths: list[int]) -> None:
        self.loaded = loaded      # chunks loaded and verified
        self.prefix = prefix      # leading chunks loaded and verified
        self.statuses = statuses  # per chunk: (code name, message)
        self.lengths = lengths    # per chunk: bytes loaded

    @property
    def failed(self) -> list[tuple[int, str, str]]:
        """[(chunk index, code name, message)] of the chunks that did not load."""
        return [(i, c, m) for i, (c, m) in enumerate(self.statuses) if c != "OK"]


class GpuRegion:
    """A Region plus the CUDA transfer engine, for KV blocks in CUDA tensors.

    ``device``: CUDA device ordinal (default: torch's current device). The
    region's slot area is registered with CUDA here (about 125 ms per GiB);
    if that fails and ``fallback_to_staged`` the staged path is used.
    ``copy_method``: "auto" (SM threads for small pieces, the copy engines
    for large pieces and for loads of 256 MiB and more), "dma" or "sm"
    (docs/gpu.md has the measurements behind auto).
    """

    def __init__(self, region: Region, *, device: int | None = None,
                 registration_segment_bytes: int | None = None, staging_bytes: int | None = None,
                 batch_api: bool = True, fallback_to_staged: bool = True, gpu_crc: bool = True,
                 copy_method: str = "auto") -> None:
        if not _cxlkv.HAVE_CUDA:
            raise UnsupportedError("cxlkv was built without CUDA (-DCXLKV_CUDA=OFF)")
        if device is None:
            import torch
            device = torch.cuda.current_device()
        o = _cxlkv.RegionGpuOptions()
        o.device = int(device)
        if registration_segment_bytes is not None:
            o.registration_segment_bytes = int(registration_segment_bytes)
        if staging_bytes is not None:
            o.staging_bytes = int(staging_bytes)
        o.batch_api = bool(batch_api)
        o.fallback_to_staged = bool(fallback_to_staged)
        o.gpu_crc = bool(gpu_crc)
        methods = {"auto": _cxlkv.GpuCopyMethod.AUTO, "dma": _cxlkv.GpuCopyMethod.DMA,
                   "sm": _cxlkv.GpuCopyMethod.SM}
        if copy_method not in methods:
            raise ValueError(f"copy_method must be one of {sorted(methods)}, not {copy_method!r}")
        o.copy_method = methods[copy_method]
        self.region = region
        self.device = int(device)
        self._gpu = _cxlkv.RegionGpu.open(region, o)
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()

    @property
    def direct(self) -> bool:
        """True if the region is registered and loads/stores DMA directly."""
        return self._gpu.direct

    @property
    def registered_segments(self) -> int:
        return self._gpu.registered_segments

    def store(self, ns: int, keys: Keys, kv_caches: Sequence[Any], block_ids: Any,
              blocks_per_chunk: int = 1, *, path: str = "direct", stream: Any = None,
              depths: Sequence[int] = ()) -> StoreResult:
        """Stores chunk i of ``block_ids`` under keys[i]. Returns a StoreResult.

        ``depths``: chunk i's depth in its prefix chain (0 = head), one per
        key, the eviction hint of Region.store; none: every chunk a head.
        Raises only if the DMA itself failed (all writes of the call then aborted).
        """
        bkeys = as_keys(keys)
        ids, f = _block_ids(block_ids, blocks_per_chunk)
        if len(ids) // f != len(bkeys):
            raise ValueError(f"{len(bkeys)} keys for {len(ids) // f} chunks")
        after = self._after_stream(kv_caches, stream)
        stored, statuses, outcomes = self._gpu.store_layout(ns, bkeys, kv_tensors(kv_caches), ids,
                                                            f, _PATHS[path], after, list(depths))
        return StoreResult(stored, statuses, outcomes)

    @staticmethod
    def _after_stream(kv_caches: Sequence[Any], stream: Any) -> int:
        if stream is None:
            import torch
            stream = torch.cuda.current_stream(kv_caches[0].device)
        return int(getattr(stream, "cuda_stream", stream) or 0)

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._executor_lock:
            if self._executor is None:
                # One thread: the engine serializes its calls anyway, and one
                # thread keeps transfers in submission order.
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="cxlkv-gpu")
            return self._executor

    def submit_store(self, ns: int, keys: Keys, kv_caches: Sequence[Any],
                     block_ids: Any, blocks_per_chunk: int = 1, *, path: str = "direct",
                     stream: Any = None, depths: Sequence[int] = ()
                     ) -> "concurrent.futures.Future[StoreResult]":
        """store() on the worker thread; returns a Future of the StoreResult.

        The stream to wait for is taken now (default: the caller's current
        stream), so the copy follows the work queued before this call.
        """
        after = self._after_stream(kv_caches, stream)
        return self._pool().submit(self.store, ns, keys, kv_caches, block_ids, blocks_per_chunk,
                                   path=path, stream=after, depths=depths)

    def submit_load(self, ns: int, keys: Keys, kv_caches: Sequence[Any],
                    block_ids: Any, blocks_per_chunk: int = 1, **kwargs: Any
                    ) -> "concurrent.futures.Future[LoadResult]":
        """load() on the worker thread; returns a Future of the LoadResult (or
        of the LoadFailedError it raises). The destination pages must not be
        read until the future is done."""
        return self._pool().submit(self.load, ns, keys, kv_caches, block_ids, blocks_per_chunk,
                                   **kwargs)

    def close(self) -> None:
        """Waits for submitted transfers and stops the worker thread."""
        with self._executor_lock:
            ex, self._executor = self._executor, None
        if ex is not None:
            ex.shutdown(wait=True)

    def load(self, ns: int, keys: Keys, kv_caches: Sequence[Any], block_ids: Any,
             blocks_per_chunk: int = 1, *, path: str = "direct", on_failure: str = "raise",
             verify_crc: bool = True) -> LoadResult:
        """Loads keys[i] into chunk i of ``block_ids``. Returns a LoadResult.

        Every chunk is checked (GPU CRC32C against the CRC recorded at store, and
        the slot's generation); a chunk that fails is not loaded and a corrupt
        slot is dropped. ``on_failure="raise"`` raises LoadFailedError if any
        chunk failed (vLLM's default policy treats a failed promised load as
        fatal); ``"report"`` returns the result so the caller can recompute the
        failed chunks (vLLM's kv_load_failure_policy="recompute").
        ``verify_crc=False`` skips the GPU CRC32C (generation check only).
        """
        if on_failure not in ("raise", "report"):
            raise ValueError("on_failure must be 'raise' or 'report'")
        bkeys = as_keys(keys)
        ids, f = _block_ids(block_ids, blocks_per_chunk)
        if len(ids) // f != len(bkeys):
            raise ValueError(f"{len(bkeys)} keys for {len(ids) // f} chunks")
        loaded, prefix, statuses, lengths = self._gpu.load_layout(
            ns, bkeys, kv_tensors(kv_caches), ids, f, _PATHS[path], bool(verify_crc))
        result = LoadResult(loaded, prefix, statuses, lengths)
        if on_failure == "raise" and loaded != len(bkeys):
            failed = result.failed
            raise LoadFailedError(
                f"{len(failed)} of {len(bkeys)} chunks failed to load; first: chunk "
                f"{failed[0][0]}: {failed[0][1]}: {failed[0][2]}", failed, prefix)
        return result
