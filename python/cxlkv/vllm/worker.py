"""The worker side (one per vLLM worker process, i.e. per TP/PP rank): CxlkvWorker.

Copies between vLLM's KV cache and region slots. 0.32/0.33 hand the worker
one int8 ``(num_blocks, page)`` tensor per layer (K and V inside one page;
CanonicalKVCaches); a slot holds, for each rank, the group's tensors' pages of
the chunk's blocks (cxlkv/delegate.h). The page lists are computed natively
from (tensor base, block stride, page size, block ids); CPU tensors are
copied by memcpy with the GIL released, on one transfer thread per worker so
that ``submit_*`` never block. ``wait`` blocks until the listed jobs are done,
so the source pages of a flushed store have really been read.

A chunk that fails to load (CRC mismatch, or gone) is never reported as
loaded: under CxlkvOffloadingConnector its GPU blocks are reported through
get_block_ids_with_load_errors and vLLM recomputes them
(kv_load_failure_policy="recompute"); under the plain OffloadingConnector
the job fails, which vLLM treats as fatal (it asserts), rather than letting
the model read unverified KV.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from vllm.v1.kv_offload.base import OffloadingWorker, TransferResult

from .. import BlockKey, Region, _cxlkv
from ..errors import CorruptionError, Error, NotFoundError
from . import _log, compat

if TYPE_CHECKING:
    from .manager import CxlkvLoadSpec, CxlkvStoreSpec

logger = _log.get(__name__)


class _Blocks:
    """The KV blocks of a transfer, whatever form vLLM named them in: block
    ids in group order, each group's count and its first block's index in
    the request (the GPULoadStoreSpec fields; DevicePointers are turned into
    these by CxlkvWorker._blocks_of)."""

    __slots__ = ("block_ids", "group_sizes", "block_indices")

    def __init__(self, block_ids: Any, group_sizes: Sequence[int] | None,
                 block_indices: Sequence[int] | None) -> None:
        self.block_ids = block_ids
        self.group_sizes = group_sizes
        self.block_indices = block_indices

    @classmethod
    def of_spec(cls, spec: Any) -> _Blocks:
        return cls(spec.block_ids, spec.group_sizes, spec.block_indices)


class CxlkvWorker(OffloadingWorker):
    def __init__(self, region: Region, kv_caches: Any, rank: int, layout: tuple[int, int],
                 blocks_per_chunk: int) -> None:
        self.region = region
        self.rank = int(rank)
        self.parts, self.part_len = layout
        self.bpc = int(blocks_per_chunk)
        self.groups = self._build_groups(kv_caches)
        self._kv_caches = kv_caches  # keeps the tensors (and so the pointers) alive
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                           thread_name_prefix="cxlkv-xfer")
        self._jobs: dict[int, concurrent.futures.Future[Any]] = {}  # job_id -> TransferResult
        self._mu = threading.Lock()
        self._failed_blocks: set[int] = set()
        # Blocks of load jobs not yet reported finished: they reach vLLM
        # (get_block_ids_with_load_errors) only with their job's result, so
        # the scheduler never sees a failure before the load it belongs to.
        self._job_failed: dict[int, set[int]] = {}  # job_id -> GPU block ids
        # Set by CxlkvOffloadingConnector: failed loads become recomputes.
        self.report_load_errors = False
        self.counts = {"stored": 0, "store_lost": 0, "loaded": 0, "load_failed": 0}

    def _build_groups(self, kv_caches: Any) -> list[Any]:
        """Per KV group: (base, block stride, page bytes, num blocks) per layer ref."""
        groups = []
        for refs in kv_caches.group_data_refs:
            group = []
            for ref in refs:
                t = kv_caches.tensors[ref.tensor_idx].tensor
                if t.device.type != "cpu":
                    raise ValueError(f"cxlkv.vllm: CxlkvWorker copies CPU tensors; KV tensors on "
                                     f"{t.device.type} go to CxlkvCudaWorker (worker_cuda.py)")
                stride = t.stride(0) * t.element_size()
                group.append((t.data_ptr(), stride, int(ref.page_size_bytes), int(t.shape[0])))
            self._check_part(sum(g[2] for g in group))
            groups.append(group)
        return groups

    def _check_part(self, row_bytes: int) -> None:
        need = row_bytes * self.bpc
        if need > self.part_len:
            raise ValueError(f"cxlkv: a chunk of this rank's KV is {need} bytes, more than the "
                             f"{self.part_len} bytes per rank the slot layout gives")

    # ---- OffloadingWorker ----
    # Each version's own parameters (compat.py): 0.34+ hand over vLLM's
    # DevicePointers, earlier ones a GPULoadStoreSpec; 0.33+ add `expedited`
    # (a sync load, then wait()ed on: the single transfer thread runs jobs in
    # order and wait() covers it). Both forms become (block ids per group)
    # before the transfer thread sees them.
    if compat.worker_takes_device_pointers():
        def submit_store(self, job_id: int, device_ptrs: Any, dst_spec: CxlkvStoreSpec) -> bool:
            return self._submit_store(job_id, self._blocks_of(device_ptrs), dst_spec)

        def submit_load(self, job_id: int, src_spec: CxlkvLoadSpec, device_ptrs: Any,
                        expedited: bool = False) -> bool:
            return self._submit_load(job_id, src_spec, self._blocks_of(device_ptrs))
    elif compat.load_is_expedited():
        def submit_store(  # type: ignore[misc]  # 0.26-0.33 name it src_spec
                self, job_id: int, src_spec: Any, dst_spec: CxlkvStoreSpec) -> bool:
            return self._submit_store(job_id, _Blocks.of_spec(src_spec), dst_spec)

        def submit_load(  # type: ignore[misc]  # 0.33 names it dst_spec
                self, job_id: int, src_spec: CxlkvLoadSpec, dst_spec: Any,
                expedited: bool = False) -> bool:
            return self._submit_load(job_id, src_spec, _Blocks.of_spec(dst_spec))
    else:
        def submit_store(  # type: ignore[misc]  # 0.26-0.33 name it src_spec
                self, job_id: int, src_spec: Any, dst_spec: CxlkvStoreSpec) -> bool:
            return self._submit_store(job_id, _Blocks.of_spec(src_spec), dst_spec)

        def submit_load(  # type: ignore[misc]  # 0.26-0.32: no expedited
                self, job_id: int, src_spec: CxlkvLoadSpec, dst_spec: Any) -> bool:
            return self._submit_load(job_id, src_spec, _Blocks.of_spec(dst_spec))

    def _submit_store(self, job_id: int, blocks: _Blocks, dst_spec: CxlkvStoreSpec) -> bool:
        self._jobs[job_id] = self._pool.submit(self._store, job_id, blocks, dst_spec)
        return True

    def _submit_load(self, job_id: int, src_spec: CxlkvLoadSpec, blocks: _Blocks) -> bool:
        self._jobs[job_id] = self._pool.submit(self._load, job_id, src_spec, blocks)
        return True

    def _blocks_of(self, device_ptrs: Any) -> _Blocks:
        """The block ids a DevicePointers (0.34+) addresses, checked against
        this worker's KV tensors: every pointer must be the start of a page of
        the tensor its data ref names (base + block id x row stride, inside the
        tensor), with that ref's page size, and all refs of a group must name
        the same blocks. Anything else raises ValueError before a byte moves,
        so the native copies only ever touch pages of the registered KV (the
        same bounds as the GPULoadStoreSpec path), and the parts stay
        byte-compatible with those the other versions store."""
        ptrs = np.asarray(device_ptrs.ptrs, dtype=np.uint64)
        sizes = np.asarray(device_ptrs.sizes, dtype=np.uint64)
        counts = tuple(int(n) for n in device_ptrs.group_block_counts)
        nrefs = tuple(int(n) for n in device_ptrs.group_data_ref_counts)
        starts = tuple(int(i) for i in device_ptrs.block_indices)
        if not (len(counts) == len(nrefs) == len(starts) == len(self.groups)):
            raise ValueError(
                f"cxlkv: DevicePointers for {len(counts)} group(s) ({len(nrefs)} ref counts, "
                f"{len(starts)} block indices); this worker has {len(self.groups)} KV group(s)")
        if len(ptrs) != len(sizes):
            raise ValueError(f"cxlkv: DevicePointers: {len(ptrs)} pointers, {len(sizes)} sizes")
        ids: list[Any] = []
        off = 0
        for g, (n, r) in enumerate(zip(counts, nrefs)):
            if n == 0:
                continue  # vLLM lists no pointer for an empty group
            refs = self.groups[g]
            if r != len(refs):
                raise ValueError(f"cxlkv: DevicePointers: group {g} has {r} data ref(s); this "
                                 f"worker's KV has {len(refs)} tensor ref(s) in it")
            if off + n * r > len(ptrs):
                raise ValueError(f"cxlkv: DevicePointers: {len(ptrs)} pointers, group {g} needs "
                                 f"{off + n * r}")
            got: Any = None
            for i, ref in enumerate(refs):
                base, stride, page, rows = (  # a tuple here, a KvTensor in CxlkvCudaWorker
                    (ref.base, ref.stride, ref.block_bytes, ref.num_blocks)
                    if hasattr(ref, "block_bytes") else ref)
                p = ptrs[off + i * n:off + (i + 1) * n]
                s = sizes[off + i * n:off + (i + 1) * n]
                rel = p.astype(np.int64) - np.int64(base)  # page of a tensor: < 2^63 apart
                blk = rel // stride
                bad = (p < np.uint64(base)) | (rel % stride != 0) | (blk >= rows) | (s != page)
                if bad.any():
                    j = int(np.argmax(bad))
                    raise ValueError(
                        f"cxlkv: DevicePointers: group {g} ref {i} block {j}: pointer "
                        f"{int(p[j]):#x} size {int(s[j])} is not a page of this worker's KV "
                        f"tensor (base {base:#x}, {rows} rows of stride {stride}, page {page} B)")
                if got is None:
                    got = blk
                elif not np.array_equal(got, blk):
                    raise ValueError(f"cxlkv: DevicePointers: group {g}: ref {i} names other "
                                     "blocks than ref 0")
            ids.append(got.astype(np.int32))
            off += n * r
        if off != len(ptrs):
            raise ValueError(f"cxlkv: DevicePointers: {len(ptrs)} pointers, the groups account "
                             f"for {off}")
        return _Blocks(np.concatenate(ids) if ids else np.zeros(0, np.int32), counts, starts)

    def get_finished(self) -> list[TransferResult]:
        done = [j for j, f in self._jobs.items() if f.done()]
        out = [self._jobs.pop(j).result() for j in done]
        with self._mu:
            for j in done:
                self._failed_blocks |= self._job_failed.pop(j, set())
        return out

    def wait(self, job_ids: set[int]) -> None:
        futures = [self._jobs[j] for j in job_ids if j in self._jobs]
        concurrent.futures.wait(futures)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)

    def take_failed_block_ids(self) -> set[int]:
        with self._mu:
            out, self._failed_blocks = self._failed_blocks, set()
        return out

    def _fail_blocks(self, job_id: int, ids: Any) -> None:
        with self._mu:
            self._job_failed.setdefault(job_id, set()).update(int(b) for b in ids)

    # ---- transfers (on the transfer thread) ----
    def _chunks(self, blocks: _Blocks) -> Iterator[tuple[int, Any, int]]:
        """(group index, block ids, skip) per chunk, in the order of the blocks (_Blocks)."""
        ids = np.ascontiguousarray(blocks.block_ids, dtype=np.int32)
        sizes = list(blocks.group_sizes) if blocks.group_sizes is not None else [len(ids)]
        starts = (list(blocks.block_indices) if blocks.block_indices is not None
                  else [0] * len(sizes))
        off = 0
        for g, (n, start) in enumerate(zip(sizes, starts)):
            skip = int(start) % self.bpc
            left = int(n)
            while left > 0:
                take = min(self.bpc - skip, left)
                yield g, ids[off:off + take], skip
                off += take
                left -= take
                skip = 0

    def _store(self, job_id: int, blocks: _Blocks, dst_spec: CxlkvStoreSpec) -> TransferResult:
        t0 = time.perf_counter()
        size = 0
        tokens = dst_spec.tokens
        for i, (g, ids, skip) in enumerate(self._chunks(blocks)):
            if i >= len(tokens):
                break
            if skip or len(ids) != self.bpc:
                continue  # a partial chunk cannot be stored; its commit is refused
            try:
                _cxlkv.fill_part(self.region, tokens[i], dst_spec.parts, dst_spec.part_len,
                                 self.rank, self.groups[g], self.bpc, ids)
                size += sum(p[2] for p in self.groups[g]) * self.bpc
                self.counts["stored"] += 1
            except NotFoundError:
                # The reservation was lost (the scheduler process was judged dead
                # and reclaimed): nothing of ours may be committed.
                self.counts["store_lost"] += 1
        return TransferResult(job_id=job_id, success=True, transfer_size=size,
                              transfer_time=time.perf_counter() - t0)

    def _load(self, job_id: int, src_spec: CxlkvLoadSpec, blocks: _Blocks) -> TransferResult:
        t0 = time.perf_counter()
        size, ok = 0, True
        entries = src_spec.entries
        for i, (g, ids, skip) in enumerate(self._chunks(blocks)):
            ns, hi, lo = entries[i]
            try:
                n, _writer = _cxlkv.load_part(self.region, ns, BlockKey(hi, lo), self.parts,
                                              self.part_len, self.rank, self.groups[g], self.bpc,
                                              ids, skip)
                size += n
                self.counts["loaded"] += 1
            except (CorruptionError, NotFoundError) as e:
                self.counts["load_failed"] += 1
                logger.warning("cxlkv: rank %d: chunk %d of load job %d not loaded (%s); %s",
                               self.rank, i, job_id, e,
                               "recomputing it" if self.report_load_errors
                               else "failing the job (use CxlkvOffloadingConnector to recompute)")
                self._fail_blocks(job_id, ids)
                ok = False
            except Error:
                raise
        success = ok or self.report_load_errors
        return TransferResult(job_id=job_id, success=success, transfer_size=size,
                              transfer_time=time.perf_counter() - t0)
