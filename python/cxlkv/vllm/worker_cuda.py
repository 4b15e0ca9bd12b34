"""The worker side on a GPU: CxlkvCudaWorker.

The same contract as CxlkvWorker (worker.py: one part per rank of each slot
EngineCore reserved, per-part loads verified against the committed CRC), with
the bytes moved between the GPU's KV tensors and the region by the GPU's copy
engines and SM copies (src/transfer/region_gpu.h, ``RegionGpu.fill_parts`` /
``load_parts``). The region is registered with CUDA once, when the worker is
built; the GPU checksums every part, so the CPU never reads the KV bytes.

Tensors: vLLM's CanonicalKVCaches. 0.26-0.28 hand over one cross-layer
int8 tensor ``(num_blocks, layers x page)`` with one data ref when the model
has a single KV group whose attention backend keeps num_blocks outermost
(their OffloadingConnector prefers cross-layer blocks); otherwise, and in
every release from 0.29, one ``(num_blocks, page)`` int8 tensor per layer,
whose row stride can exceed the page (layouts that pack layers into a
block). Either way each KV group becomes a list of ``KvTensor`` (base, row
stride, the data ref's page bytes, rows), one per data ref: the values the
CPU worker keeps as tuples.

Ordering: a store is submitted at the start of the step after the one that
computed its KV (vLLM defers it); the worker records a CUDA event on the
current stream at submit time and the transfer thread waits for that event
before copying, so the copy reads the KV the forward pass wrote. A load
returns once its copies are complete on the device, before vLLM learns the
job finished and schedules the request.

Blocks of a chunk that a load must not overwrite (the chunk is entered or left
mid-way) still have their bytes copied, into a device scratch buffer, so the
part's CRC covers every byte.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from vllm.v1.kv_offload.base import TransferResult

from .. import BlockKey, _cxlkv
from ..errors import Error
from . import _log
from .worker import CxlkvWorker, _Blocks

if TYPE_CHECKING:
    from .manager import CxlkvLoadSpec, CxlkvStoreSpec

logger = _log.get(__name__)

_FAILED_LOAD = ("NotFound", "Corruption")  # the chunk is recomputed (or the job fails)


class CxlkvCudaWorker(CxlkvWorker):
    def _build_groups(self, kv_caches: Any) -> list[Any]:
        if not getattr(_cxlkv, "HAVE_CUDA", False):
            raise Error("cxlkv.vllm: KV tensors are on a GPU but this cxlkv was built without the "
                        "GPU data path; rebuild with pip install . -Ccmake.define.CXLKV_CUDA=ON")
        devices = {t.tensor.device for t in kv_caches.tensors}
        if len(devices) != 1 or next(iter(devices)).type != "cuda":
            raise ValueError(f"cxlkv.vllm: KV tensors on {sorted(map(str, devices))}; one CUDA "
                             "device per worker is supported")
        self.device = next(iter(devices))
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        opts = _cxlkv.RegionGpuOptions()
        opts.device = index
        t0 = time.perf_counter()
        self.gpu = _cxlkv.RegionGpu.open(self.region, opts)
        self.register_s = time.perf_counter() - t0
        info = self.region.info()
        logger.info("cxlkv: rank %d: region %s registered with CUDA device %d in %.2f s (%s path, "
                    "%.1f GiB)", self.rank, info.path, index, self.register_s,
                    "direct" if self.gpu.direct else "staged", info.size / 2**30)
        groups: list[list[Any]] = []  # per group: a KvTensor per layer ref
        self.row_bytes: list[int] = []
        self.group_tensors: list[list[tuple[Any, int]]] = []  # (tensor, page bytes)
        for refs in kv_caches.group_data_refs:
            group: list[Any] = []
            tensors: list[tuple[Any, int]] = []
            for ref in refs:
                t = kv_caches.tensors[ref.tensor_idx].tensor
                group.append(_cxlkv.KvTensor(t.data_ptr(), t.stride(0) * t.element_size(),
                                             int(ref.page_size_bytes), int(t.shape[0])))
                tensors.append((t, int(ref.page_size_bytes)))
            self.group_tensors.append(tensors)
            row = sum(k.block_bytes for k in group)
            self._check_part(row)
            groups.append(group)
            self.row_bytes.append(row)
        # Which form this vLLM handed over (module doc): one cross-layer
        # tensor for the group, or one per layer.
        n_tensors = sum(len(t) for t in self.group_tensors)
        logger.info("cxlkv: rank %d: KV layout %s: %d tensor(s) in %d group(s), %s B per block "
                    "row", self.rank, "cross-layer" if n_tensors == len(groups) else "per-layer",
                    n_tensors, len(groups), "/".join(str(r) for r in self.row_bytes))
        self._scratch: Any = None  # torch.uint8 tensor on the device, or None
        self._ready: dict[int, Any] = {}  # store job id -> CUDA event recorded at submit
        # The first load of this process (first touch of the mapping), seconds.
        self.first_load_s: float | None = None
        return groups

    # ---- OffloadingWorker (submit_store/submit_load: worker.py, per version) ----
    def _submit_store(self, job_id: int, blocks: _Blocks, dst_spec: CxlkvStoreSpec) -> bool:
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(self.device))
        self._ready[job_id] = ready
        return super()._submit_store(job_id, blocks, dst_spec)

    def shutdown(self) -> None:
        super().shutdown()
        self._scratch = None

    # ---- transfers (on the transfer thread) ----
    def _scratch_ptr(self, nbytes: int) -> int:
        if nbytes == 0:
            return 0
        if self._scratch is None or self._scratch.numel() < nbytes:
            self._scratch = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        return self._scratch.data_ptr()

    def _store(self, job_id: int, blocks: _Blocks, dst_spec: CxlkvStoreSpec) -> TransferResult:
        t0 = time.perf_counter()
        self._ready.pop(job_id).synchronize()
        tokens = dst_spec.tokens
        # group -> ([write token], [block ids]) of its whole chunks
        by_group: dict[int, tuple[list[_cxlkv.WriteToken], list[Any]]] = {}
        for i, (g, ids, skip) in enumerate(self._chunks(blocks)):
            if i >= len(tokens):
                break
            if skip or len(ids) != self.bpc:
                continue  # a partial chunk cannot be stored; its commit is refused
            tok, flat = by_group.setdefault(g, ([], []))
            tok.append(tokens[i])
            flat.append(ids)
        size = 0
        for g, (tok, flat) in by_group.items():
            ids = np.concatenate(flat).astype(np.int64).tolist()
            ok, statuses, lens = self.gpu.fill_parts(tok, dst_spec.parts, dst_spec.part_len,
                                                     self.rank, self.groups[g], ids, self.bpc)
            size += sum(lens)
            self.counts["stored"] += ok
            for code, msg in statuses:
                if code == "NotFound":
                    # The reservation was lost (EngineCore judged dead and
                    # reclaimed): nothing of ours may be committed.
                    self.counts["store_lost"] += 1
                elif code != "OK":
                    raise Error(f"cxlkv: rank {self.rank}: store job {job_id}: {code}: {msg}")
        return TransferResult(job_id=job_id, success=True, transfer_size=size,
                              transfer_time=time.perf_counter() - t0)

    def _load(self, job_id: int, src_spec: CxlkvLoadSpec, blocks: _Blocks) -> TransferResult:
        t0 = time.perf_counter()
        entries = src_spec.entries
        bpc = self.bpc
        # (group, ns) -> ([BlockKey], [padded ids], [gpu ids], missing blocks)
        by_key: dict[tuple[int, int],
                     tuple[list[BlockKey], list[Any], list[Any], list[int]]] = {}
        for i, (g, ids, skip) in enumerate(self._chunks(blocks)):
            ns, hi, lo = entries[i]
            keys, padded, real, missing = by_key.setdefault((g, ns), ([], [], [], [0]))
            row = np.full(bpc, -1, dtype=np.int64)
            row[skip:skip + len(ids)] = ids
            keys.append(BlockKey(hi, lo))
            padded.append(row)
            real.append(ids)
            missing[0] += bpc - len(ids)
        size, ok_all = 0, True
        for (g, ns), (keys, padded, real, missing) in by_key.items():
            scratch_bytes = missing[0] * self.row_bytes[g]
            scratch = self._scratch_ptr(scratch_bytes)
            ok, statuses, lens, _writers = self.gpu.load_parts(
                ns, keys, self.parts, self.part_len, self.rank, self.groups[g],
                np.concatenate(padded).tolist(), bpc, scratch=scratch, scratch_bytes=scratch_bytes)
            for c, (code, msg) in enumerate(statuses):
                if code == "OK":
                    # Bytes that reached the KV cache (scratch excluded).
                    size += lens[c] * len(real[c]) // bpc
                    self.counts["loaded"] += 1
                    continue
                if code not in _FAILED_LOAD:
                    raise Error(f"cxlkv: rank {self.rank}: load job {job_id}: {code}: {msg}")
                self.counts["load_failed"] += 1
                logger.warning("cxlkv: rank %d: chunk %s of load job %d not loaded (%s: %s); %s",
                               self.rank, keys[c].hex(), job_id, code, msg,
                               "recomputing it" if self.report_load_errors
                               else "failing the job (use CxlkvOffloadingConnector to recompute)")
                self._fail_blocks(job_id, real[c])
                ok_all = False
        elapsed = time.perf_counter() - t0
        if self.first_load_s is None:
            self.first_load_s = elapsed
            logger.info("cxlkv: rank %d: first load (first touch of the region here) %.1f ms, "
                        "%d bytes", self.rank, elapsed * 1e3, size)
        return TransferResult(job_id=job_id, success=ok_all or self.report_load_errors,
                              transfer_size=size, transfer_time=elapsed)
