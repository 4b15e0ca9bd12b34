"""A replica that joins a region another replica already filled (scale-out,
restart): its attach must not populate the region's data. Without an
engine, through vLLM's spec classes, in one process as vLLM's EngineCore
holds them (TP=1: the worker and the manager share the process).

The failure this guards against: the manager's handle populated the whole
mapping in a background thread (MADV_POPULATE_WRITE over every page of the
region), which holds the process's memory map for as long as it runs; every
mmap/munmap of the process waits behind it, and, with one waiting, so does
every page fault: a late joiner's first loads stalled for the length of a
populate of the whole region (docs/benchmarks.md, "A late joiner's first
reads", measured by bench/ttft/attach_probe.py). The test checks the cause,
not the stall's length (speed is the benchmark's): after B attaches and reads,
B's mappings of the region hold its metadata and the chunks it read, not the
region's data pages."""
import os
import time

import pytest

from test_spec import _config, _extra, region_path  # noqa: F401 (fixture)

_REGION = 1 << 30   # pages to populate: what made the stall long
_PAGE = 64 << 10    # one layer's block: 2 layers x 64 KiB per block
_CHUNKS = 8
# What B may map: the region's metadata (under 1 MiB here) in its worker's and
# its manager's handle, and the chunks it read (1 MiB), with room to spare;
# a populate of the data maps up to the whole GiB.
_BOUND = 32 << 20


def _resident_bytes(path):
    """Resident bytes of this process's mappings of `path` (/proc/self/smaps:
    the pages each mapping has mapped, whatever the page cache holds)."""
    real, total, ours = os.path.realpath(path), 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                ours = len(head) >= 6 and head[5] == real
            elif ours and head and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


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


def test_late_joiner_attach_does_not_populate_the_regions_data(region_path):  # noqa: F811
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
    before = _resident_bytes(region_path)  # A's mappings, every page populated
    assert before >= _REGION, "A populated its mapping at attach"
    t0 = time.perf_counter()
    wb = spec_b.get_worker(caches_b)
    mb = spec_b.get_manager()
    attach = time.perf_counter() - t0
    first = _load(mb, wb, keys, 2, "b1")
    second = _load(mb, wb, keys, 3, "b2")
    assert all(torch.equal(a, b) for a, b in zip(kv_a, kv_b))
    # A populate in the background would go on after attach: give one the
    # time to map a good part of the GiB (this machine populated it all in
    # about 1.5 s), polling, so a correct attach costs the wait once.
    grown, deadline = 0, time.monotonic() + 2.0
    while time.monotonic() < deadline and grown <= _BOUND:
        time.sleep(0.1)
        grown = _resident_bytes(region_path) - before
    print(f"late joiner: B's mappings hold {grown / 2**20:.1f} MiB of the {_REGION >> 20} MiB "
          f"region after attach and two reads of {_CHUNKS} chunks (attach {attach * 1e3:.1f} "
          f"ms, first read {first * 1e3:.1f} ms, second {second * 1e3:.1f} ms)")
    assert grown <= _BOUND, (
        f"B's attach populated {grown >> 20} MiB of the region's data (bound {_BOUND >> 20} "
        "MiB: metadata and the chunks read)")
    mb.shutdown()
    ma.shutdown()
    wa.shutdown()
    wb.shutdown()
