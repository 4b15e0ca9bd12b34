"""A replica that joins a region another replica already filled (scale-out,
restart): its first read of the other's chunks must not wait for its own
attach. Without an engine, through vLLM's spec classes, in one process as
vLLM's EngineCore holds them (TP=1: the worker and the manager share the
process), while a thread maps and unmaps memory as the engine's allocators
do.

The failure this guards against: the manager's handle populated the whole
mapping in a background thread (MADV_POPULATE_WRITE over every page of the
region), which holds the process's memory map for as long as it runs; every
mmap/munmap of the process waits behind it, and, with one waiting, so does
every page fault: a late joiner's first loads stalled for the length of a
populate of the whole region (docs/benchmarks.md, "A late joiner's first
reads")."""
import mmap
import os
import threading
import time

import pytest

from test_spec import _config, _extra, region_path  # noqa: F401 (fixture)

_REGION = 1 << 30   # pages to populate: what made the stall long
_PAGE = 64 << 10    # one layer's block: 2 layers x 64 KiB per block
_CHUNKS = 8


class _Mapper(threading.Thread):
    """Maps and unmaps 1 MiB every 2 ms; keeps the longest wait after `mark`."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop, self.mark, self.worst = False, None, 0.0

    def run(self):
        while not self.stop:
            t = time.perf_counter()
            m = mmap.mmap(-1, 1 << 20)
            m[0] = 1
            m.close()
            d = time.perf_counter() - t
            if self.mark is not None and t >= self.mark:
                self.worst = max(self.worst, d)
            time.sleep(0.002)


def _caches(torch, n_blocks):
    from vllm.v1.kv_offload.base import (CanonicalKVCacheRef, CanonicalKVCaches,
                                         CanonicalKVCacheTensor)

    kv = [torch.randint(-128, 127, (n_blocks, _PAGE), dtype=torch.int8) for _ in range(2)]
    return kv, CanonicalKVCaches([CanonicalKVCacheTensor(t, _PAGE) for t in kv],
                                 [[CanonicalKVCacheRef(0, _PAGE), CanonicalKVCacheRef(1, _PAGE)]])


def _load(m, w, keys, job, req):
    from vllm.v1.kv_offload.base import GPULoadStoreSpec, LookupResult, ReqContext

    ctx = ReqContext(req_id=req)
    t0 = time.perf_counter()
    assert all(m.lookup(k, ctx) == LookupResult.HIT for k in keys)
    spec = m.prepare_load(keys, ctx)
    ids = list(range(len(keys)))
    assert w.submit_load(job, spec, GPULoadStoreSpec(ids, group_sizes=[len(ids)],
                                                     block_indices=[0]))
    w.wait({job})
    assert [r.success for r in w.get_finished()] == [True]
    m.complete_load(keys, ctx)
    return time.perf_counter() - t0


def test_late_joiner_first_read_does_not_wait_for_its_attach(region_path):  # noqa: F811
    import torch
    from vllm.v1.kv_offload.base import GPULoadStoreSpec, ReqContext, make_offload_key

    from cxlkv.vllm import CxlkvOffloadingSpec

    # Replica A: every page of the region written (populated at attach, as a
    # region that served a while is), then _CHUNKS chunks stored.
    extra_a = _extra(region_path, region_size=_REGION, prefault="at_attach")
    spec_a = CxlkvOffloadingSpec(_config(extra_a, bytes_per_block=2 * _PAGE))
    ma = spec_a.get_manager()
    kv_a, caches_a = _caches(torch, _CHUNKS)
    wa = spec_a.get_worker(caches_a)
    keys = [make_offload_key(os.urandom(32), 0) for _ in range(_CHUNKS)]
    ctx = ReqContext(req_id="a")
    out = ma.prepare_store(keys, ctx)
    assert out.keys_to_store == keys
    ids = list(range(_CHUNKS))
    assert wa.submit_store(1, GPULoadStoreSpec(ids, group_sizes=[_CHUNKS], block_indices=[0]),
                           out.store_spec)
    wa.wait({1})
    assert [r.success for r in wa.get_finished()] == [True]
    ma.complete_store(keys, ctx)

    # Replica B joins now, with the backend's defaults: worker first, then
    # the manager (vLLM's order), then its first request reads A's chunks.
    extra_b = {k: v for k, v in _extra(region_path, region_size=_REGION).items()
               if k != "prefault"}
    spec_b = CxlkvOffloadingSpec(_config(extra_b, bytes_per_block=2 * _PAGE))
    kv_b, caches_b = _caches(torch, _CHUNKS)
    wb = spec_b.get_worker(caches_b)
    mapper = _Mapper()
    mapper.start()
    try:
        time.sleep(0.05)
        t_attach = time.perf_counter()
        mapper.mark = t_attach
        mb = spec_b.get_manager()
        attach = time.perf_counter() - t_attach
        first = _load(mb, wb, keys, 2, "b1")
        worst_first = mapper.worst
        second = _load(mb, wb, keys, 3, "b2")
    finally:
        mapper.stop = True
        mapper.join()
    assert all(torch.equal(a, b) for a, b in zip(kv_a, kv_b))
    print(f"late joiner: manager attach {attach * 1e3:.1f} ms, first read {first * 1e3:.1f} ms, "
          f"second {second * 1e3:.1f} ms, longest wait for the memory map {worst_first * 1e3:.1f} ms")
    # Before the fix: attach returned at once, then the first read and the
    # mapper waited for the populate of the whole GiB (about 1.5 s on the
    # 2-core development VM; 0.1 s or more anywhere).
    assert worst_first < 0.050, f"the memory map was held {worst_first * 1e3:.0f} ms after attach"
    assert first < 4 * second + 0.050, (first, second)
    mb.shutdown()
    ma.shutdown()
    wa.shutdown()
    wb.shutdown()
