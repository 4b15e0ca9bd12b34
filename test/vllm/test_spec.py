"""cxlkv.vllm without an engine: bad input gets a clear error at construction
(unknown extra-config keys, a region too small for one chunk, a region of
another slot geometry, an unsupported vLLM version), importing opens nothing,
and the manager and worker move a chunk through a real region with vLLM's
own spec classes (the 0.33-only hooks included)."""
import dataclasses
import os
import sys

import offload_checks
import pytest

import cxlkv
from cxlkv.vllm.keys import block_key
from cxlkv.errors import InvalidArgumentError, UnsupportedError


def _config(extra, world=1, rank=0, bytes_per_block=4096, bpc=1, events=False):
    from vllm.v1.kv_offload import config as c

    fields = {f.name for f in dataclasses.fields(c.OffloadingParallelConfig)}
    par = {"rank": rank, "world_size": world, "tp_size": world, "pp_size": 1, "pcp_size": 1,
           "dcp_size": 1, "data_parallel_index": 0, "data_parallel_size": 1,
           "data_parallel_rank_local": None, "is_parallelism_agnostic": False}
    model_fields = {f.name for f in dataclasses.fields(c.OffloadingModelConfig)}
    model = {"name": "test-model", "dtype": "bfloat16", "max_model_len": 4096}
    group_fields = {f.name for f in dataclasses.fields(c.OffloadingGroupConfig)}
    group = {"tokens_per_block": 32, "layer_names": ("l0", "l1"), "group_id": 0,
             "sliding_window_size_in_chunks": None}
    return c.OffloadingConfig(
        groups=(c.OffloadingGroupConfig(**{k: v for k, v in group.items() if k in group_fields}),),
        worker_kv_bytes_per_block=bytes_per_block, enable_kv_cache_events=events,
        extra_config=extra, engine_id="e",
        model=c.OffloadingModelConfig(**{k: v for k, v in model.items() if k in model_fields}),
        cache=c.OffloadingCacheConfig(tokens_per_hash=32, blocks_per_chunk=bpc),
        parallel=c.OffloadingParallelConfig(**{k: v for k, v in par.items() if k in fields}))


@pytest.fixture
def region_path():
    p = f"/dev/shm/cxlkv/spec-test-{os.getpid()}"
    yield p
    if os.path.exists(p):
        os.unlink(p)


_extra = offload_checks.spec_extra


def test_import_opens_no_region():
    code = ("import vllm, sys; from vllm.v1.kv_offload import factory; import cxlkv.vllm; "
            "import os; print(sum('cxlkv' in os.readlink(f'/proc/self/fd/{f}') "
            "for f in os.listdir('/proc/self/fd') if os.path.exists(f'/proc/self/fd/{f}')))")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "0"


def test_unknown_extra_config_key_is_refused(region_path):
    from cxlkv.vllm import CxlkvOffloadingSpec

    with pytest.raises(ValueError, match="unknown kv_connector_extra_config key.*regoin_size"):
        CxlkvOffloadingSpec(_config(_extra(region_path, regoin_size=1)))


def test_unsupported_vllm_version_is_refused():
    from cxlkv.vllm import compat

    with pytest.raises(UnsupportedError, match="this is vLLM 0.25.1"):
        compat.check_supported("0.25.1")
    assert compat.check_supported("0.33.0") == "0.33.0"


def test_region_too_small_for_a_chunk_is_refused(region_path):
    from cxlkv.vllm import CxlkvOffloadingSpec

    spec = CxlkvOffloadingSpec(_config(_extra(region_path, region_size=64 << 10),
                                       bytes_per_block=32 << 10))
    with pytest.raises(ValueError, match="too small: one chunk of this engine"):
        spec.get_manager()
    assert not os.path.exists(region_path)


def test_region_of_another_slot_geometry_is_refused(region_path):
    from cxlkv.vllm import CxlkvOffloadingSpec

    CxlkvOffloadingSpec(_config(_extra(region_path), bytes_per_block=4096)).get_manager()
    other = CxlkvOffloadingSpec(_config(_extra(region_path), bytes_per_block=8192))
    with pytest.raises(InvalidArgumentError, match="slot_size mismatch"):
        other.get_manager()


def test_manager_and_worker_move_a_chunk(region_path):
    """EngineCore-side reserve, worker-side fill, commit, lookup pin, load: in
    one process, through vLLM's own spec classes."""
    import torch
    from vllm.v1.kv_offload.base import (CanonicalKVCacheRef, CanonicalKVCaches,
                                         CanonicalKVCacheTensor, GPULoadStoreSpec,
                                         LookupResult, ReqContext, make_offload_key)

    from cxlkv.vllm import CxlkvOffloadingSpec

    spec = CxlkvOffloadingSpec(_config(_extra(region_path), bytes_per_block=2 * 2048))
    m = spec.get_manager()
    kv = [torch.randint(-128, 127, (16, 2048), dtype=torch.int8) for _ in range(2)]
    caches = CanonicalKVCaches([CanonicalKVCacheTensor(t, 2048) for t in kv],
                               [[CanonicalKVCacheRef(0, 2048), CanonicalKVCacheRef(1, 2048)]])
    w = spec.get_worker(caches)
    key = make_offload_key(os.urandom(32), 0)
    ctx = ReqContext(req_id="r1")
    assert m.lookup(key, ctx) == LookupResult.MISS
    out = m.prepare_store([key], ctx)
    assert out.keys_to_store == [key]
    assert w.submit_store(1, GPULoadStoreSpec([3], group_sizes=[1], block_indices=[0]),
                          out.store_spec)
    w.wait({1})
    assert [r.success for r in w.get_finished()] == [True]
    m.complete_store([key], ctx)
    assert m.prepare_store([key], ReqContext(req_id="r2")).keys_to_store == []  # duplicate
    ctx2 = ReqContext(req_id="r3")
    assert m.lookup(key, ctx2) == LookupResult.HIT
    assert m.pinned() == 1
    load = m.prepare_load([key], ctx2)
    expect = [t[3].clone() for t in kv]
    for t in kv:
        t[9].zero_()
    from cxlkv.vllm import compat

    # 0.33+ pass expedited=True for a sync load (then wait); 0.32 has no such argument.
    kw = {"expedited": True} if compat.load_is_expedited() else {}
    assert w.submit_load(2, load, GPULoadStoreSpec([9], group_sizes=[1], block_indices=[0]), **kw)
    w.wait({2})
    assert [r.success for r in w.get_finished()] == [True]
    assert all(torch.equal(t[9], e) for t, e in zip(kv, expect))
    m.complete_load([key], ctx2)
    assert m.pinned() == 0
    # The 0.33 hooks.
    with m.lock:
        pass
    assert m.config_info()[0]["parts"] == 1
    assert CxlkvOffloadingSpec.config_info_keys({}) == ("region", "slot_size", "num_slots", "parts")
    st = m.get_stats()
    assert st is not None
    w.shutdown()
    m.shutdown()


def test_lookup_pin_expires_without_prepare_load(region_path):
    from vllm.v1.kv_offload.base import ReqContext, make_offload_key

    from cxlkv.vllm import CxlkvOffloadingSpec

    spec = CxlkvOffloadingSpec(_config(_extra(region_path, pin_ttl_s=0.01)))
    m = spec.get_manager()
    key = make_offload_key(os.urandom(32), 0)
    ns = m.namespaces[0]
    from cxlkv.vllm.keys import block_key

    m.region.store(ns, block_key(key), b"x")  # not a parted block: lookups only
    assert m.lookup(key, ReqContext(req_id="r")).name == "HIT"
    assert m.pinned() == 1
    import time

    time.sleep(0.05)
    m.on_schedule_end(None)
    assert m.pinned() == 0
    m.region.drop(ns, block_key(key))  # unpinned now
    m.shutdown()


def test_reset_closes_jobs_in_flight_on_0_32(region_path):
    """0.26/0.32 discard the jobs in flight at reset_cache and never say when
    the workers are done with them (0.33's on_reset_flushed: test_v033.py):
    their reservations are closed and their pins released at the reset, so
    no slot stays WRITING and the discarded key is stored again."""
    from vllm.v1.kv_offload.base import GPULoadStoreSpec, ReqContext, make_offload_key

    from cxlkv import _cxlkv
    from cxlkv.vllm import compat

    if compat.reset_is_fenced():
        pytest.skip("this vLLM has on_reset_flushed (test_v033.py covers it)")
    m, w = _replica(region_path)
    key = make_offload_key(os.urandom(32), 0)
    out = m.prepare_store([key], ReqContext(req_id="s"))
    assert out.keys_to_store == [key]

    def writing():
        return [v for v in _cxlkv.scan_slots(m.region, 0, m.region.info().num_entries)
                if v[1] == "writing"]

    assert len(writing()) == 1
    m.reset_cache()
    assert writing() == [] and m.pinned() == 0
    again = m.prepare_store([key], ReqContext(req_id="s2"))
    assert again.keys_to_store == [key], "the discarded key is stored again"
    assert w.submit_store(1, GPULoadStoreSpec([1], group_sizes=[1], block_indices=[0]),
                          again.store_spec)
    w.wait({1})
    assert [r.success for r in w.get_finished()] == [True]
    m.complete_store([key], ReqContext(req_id="s2"))
    assert m.region.lookup(m._ns(key), block_key(key))
    w.shutdown()
    m.shutdown()


def _replica(path, **kw):
    """A manager and a worker of one replica (one 64 KiB page per block, a
    region of about 35 slots)."""
    import torch
    from vllm.v1.kv_offload.base import (CanonicalKVCacheRef, CanonicalKVCaches,
                                         CanonicalKVCacheTensor)

    from cxlkv.vllm import CxlkvOffloadingSpec

    page = 64 << 10
    spec = CxlkvOffloadingSpec(_config(_extra(path, region_size=5 << 19), bytes_per_block=page,
                                       **kw))
    kv = torch.randint(-128, 127, (4, page), dtype=torch.int8)
    w = spec.get_worker(CanonicalKVCaches([CanonicalKVCacheTensor(kv, page)],
                                          [[CanonicalKVCacheRef(0, page)]]))
    return spec.get_manager(), w


def _store(m, w, keys, job):
    from vllm.v1.kv_offload.base import GPULoadStoreSpec, ReqContext

    ctx = ReqContext(req_id=f"s{job}")
    stored = []
    for key in keys:
        out = m.prepare_store([key], ctx)
        if out is None or not out.keys_to_store:
            continue
        assert w.submit_store(job, GPULoadStoreSpec([1], group_sizes=[1], block_indices=[0]),
                              out.store_spec)
        w.wait({job})
        assert [r.success for r in w.get_finished()] == [True]
        m.complete_store(out.keys_to_store, ctx)
        stored += out.keys_to_store
        job += 1
    return stored


def test_events_report_removals_by_another_replica(region_path):
    """Replica A announces what it stored; after replica B's stores evict
    those chunks, A's own events withdraw them (A never saw the evictions)."""
    from vllm.v1.kv_offload.base import make_offload_key

    a_m, a_w = _replica(region_path, events=True)
    b_m, b_w = _replica(region_path, events=True)
    slots = a_m.region.info().num_slots
    a_keys = [make_offload_key(os.urandom(32), 0) for _ in range(3)]
    assert _store(a_m, a_w, a_keys, 100) == a_keys
    (ev,) = a_m.take_events()
    assert (ev.removed, list(ev.keys)) == (False, a_keys)
    # 0.32/0.33: the announcer promises the withdrawal (compat.offloading_event).
    assert getattr(ev, "removal_expected", True) is True
    assert a_m.take_events() == ()  # nothing new, nothing withdrawn
    b_keys = [make_offload_key(os.urandom(32), 0) for _ in range(3 * slots)]
    b_stored = _store(b_m, b_w, b_keys, 200)
    assert len(b_stored) >= slots
    gone = [k for k in a_keys if not a_m.region.lookup(a_m._ns(k), block_key(k))]
    assert gone, "B's stores evicted A's chunks"
    removed = [k for e in a_m.take_events() for k in e.keys if e.removed]
    assert sorted(removed) == sorted(gone)
    # B announced its own stores and withdrew those it evicted itself; it
    # never announces A's chunks.
    b_events = b_m.take_events()
    b_announced = [k for e in b_events for k in e.keys if not e.removed]
    assert set(b_announced) <= set(b_stored) and not set(b_announced) & set(a_keys)
    for x in (a_w, b_w):
        x.shutdown()
    for x in (a_m, b_m):
        x.shutdown()


def test_events_a_chunk_stored_again_by_its_writer_stays_announced(region_path):
    """A announced k; B's stores evict it; A stores k again: no withdrawal and
    no second announcement (one BlockStored per chunk for an indexer that
    counts them, and vLLM's tracker keeps the new store's payload); once B
    evicts the new copy too, A withdraws k once."""
    from vllm.v1.kv_offload.base import ReqContext, make_offload_key

    a_m, a_w = _replica(region_path, events=True)
    b_m, b_w = _replica(region_path, events=True)
    slots = a_m.region.info().num_slots
    k = make_offload_key(os.urandom(32), 0)
    assert _store(a_m, a_w, [k], 1) == [k]
    assert [(e.removed, list(e.keys)) for e in a_m.take_events()] == [(False, [k])]

    def evict_k(first):
        n = first
        while a_m.region.lookup(a_m._ns(k), block_key(k)):
            _store(b_m, b_w, [make_offload_key(os.urandom(32), 0) for _ in range(slots)], n)
            n += slots
        return n

    n = evict_k(100)
    out = a_m.prepare_store([k], ReqContext(req_id="again"))  # A misses k and stores it again
    assert list(out.keys_to_store) == [k]
    assert a_m.take_events() == (), "no withdrawal while A stores it again"
    from vllm.v1.kv_offload.base import GPULoadStoreSpec

    assert a_w.submit_store(7, GPULoadStoreSpec([1], group_sizes=[1], block_indices=[0]),
                            out.store_spec)
    a_w.wait({7})
    assert [r.success for r in a_w.get_finished()] == [True]
    a_m.complete_store([k], ReqContext(req_id="again"))
    assert a_m.region.lookup(a_m._ns(k), block_key(k))
    assert a_m.take_events() == (), "still announced: not announced twice"
    n = evict_k(n)
    assert [(e.removed, list(e.keys)) for e in a_m.take_events()] == [(True, [k])]
    # Announced afresh; lost again; a store of it again that fails withdraws it.
    assert _store(a_m, a_w, [k], 8) == [k]
    assert [(e.removed, list(e.keys)) for e in a_m.take_events()] == [(False, [k])]
    evict_k(n)
    out = a_m.prepare_store([k], ReqContext(req_id="lost"))
    assert list(out.keys_to_store) == [k]
    a_m.complete_store([k], ReqContext(req_id="lost"), success=False)
    assert [(e.removed, list(e.keys)) for e in a_m.take_events()] == [(True, [k])]
    for x in (a_w, b_w):
        x.shutdown()
    for x in (a_m, b_m):
        x.shutdown()


def test_no_events_tracked_when_kv_events_are_off(region_path):
    from vllm.v1.kv_offload.base import make_offload_key

    m, w = _replica(region_path)
    _store(m, w, [make_offload_key(os.urandom(32), 0)], 1)
    assert m.take_events() == () and not m._shared_events.announced
    w.shutdown()
    m.shutdown()


def test_other_weights_under_one_name_refused_while_a_replica_is_attached(region_path):
    """The model-name claim: a second engine serving "test-model" with other
    weights is refused at start while the first is attached (message names
    both fingerprints); once the first is gone, the new weights take the
    name over, in a namespace of their own (no hit on the old weights' KV)."""
    from vllm.v1.kv_offload.base import ReqContext, make_offload_key

    from cxlkv.vllm import CxlkvOffloadingSpec

    first = CxlkvOffloadingSpec(_config(_extra(region_path))).get_manager()
    key = make_offload_key(os.urandom(32), 0)
    first.region.store(first.namespaces[0], block_key(key), b"x")
    again = CxlkvOffloadingSpec(_config(_extra(region_path))).get_manager()  # same weights: fine
    other = _extra(region_path, model_fingerprint="e" * 32)
    with pytest.raises(InvalidArgumentError) as e:
        CxlkvOffloadingSpec(_config(other)).get_manager()
    msg = str(e.value)
    assert "model_fingerprint mismatch" in msg and "f" * 32 in msg and "e" * 32 in msg, msg
    first.shutdown()
    with pytest.raises(InvalidArgumentError):  # `again` still holds the name
        CxlkvOffloadingSpec(_config(other)).get_manager()
    again.shutdown()
    new = CxlkvOffloadingSpec(_config(other)).get_manager()
    assert new.lookup(key, ReqContext(req_id="r")).name == "MISS"
    new.shutdown()


def test_coherence_settings_resolve_from_hosts_or_the_cdi_environment():
    from cxlkv.vllm.settings import Settings

    def s(extra, env=None):
        return Settings.from_extra_config(dict({"region_path": "/dev/shm/x"}, **extra), env or {})

    hw = s({})
    assert (hw.coherence, hw.software_partitions, hw.software_partition) == ("hardware", 0, -1)
    hosts = {"coherence": "software", "software_hosts": "host-a, host-b,host-c"}
    b = s(hosts, {"NODE_NAME": "host-b"})
    assert (b.coherence, b.software_partitions, b.software_partition, b.host) == (
        "software", 3, 1, "host-b")
    assert s(dict(hosts, host="host-c"), {"NODE_NAME": "host-b"}).software_partition == 2
    # What the DRA driver's CDI spec sets, with no extra-config key at all.
    cdi = s({}, {"CXL_COHERENCE": "software", "CXL_SOFTWARE_PARTITIONS": "2",
                 "CXL_SOFTWARE_PARTITION": "1"})
    assert (cdi.coherence, cdi.software_partitions, cdi.software_partition) == ("software", 2, 1)
    refused = [
        ({"coherence": "sofware"}, {}, "one of hardware, software"),
        ({"coherence": "software"}, {"NODE_NAME": "host-z"}, "needs the write partition"),
        (hosts, {"NODE_NAME": "host-z"}, "'host-z'"),
        ({"coherence": "software", "software_partitions": 2, "software_partition": 2}, {},
         "software_partition=2 does not exist"),
        ({"coherence": "software", "software_partitions": 17, "software_partition": 0}, {},
         "1..16"),
        (dict(hosts, software_partition=0), {"NODE_NAME": "host-b"}, "is partition 1"),
        ({"software_partition": 1}, {}, "need coherence=software"),
    ]
    for extra, env, want in refused:
        with pytest.raises(ValueError, match=want):
            s(extra, env)


def test_settings_refuse_bad_values_naming_the_key_and_what_it_takes():
    from cxlkv.vllm.settings import Settings

    refused = [
        ({"prefault": "eager"}, r"prefault='eager': one of metadata, none, at_attach, background"),
        ({"pin_ttl_s": "soon"}, r"pin_ttl_s='soon' is not a number"),
        ({"pin_ttl_s": 0}, r"pin_ttl_s must be positive"),
        ({"load_policy": "never"}, r"load_policy='never': one of measured, always"),
        ({"load_min_gain": None}, r"load_min_gain=None is not a number"),
        ({"load_min_gain": 1.5}, r"load_min_gain=1.5: above 0, at most 1"),
        ({"region_offset": -1}, r"region_offset=-1 is negative"),
    ]
    for extra, want in refused:
        with pytest.raises(ValueError, match=want):
            Settings.from_extra_config(dict({"region_path": "/dev/shm/x"}, **extra), {})
    ok = Settings.from_extra_config({"region_path": "/dev/shm/x", "prefault": "none",
                                     "pin_ttl_s": "2.5", "load_policy": "always",
                                     "load_min_gain": "0.5"}, {})
    assert (ok.prefault, ok.pin_ttl_s, ok.load_policy, ok.load_min_gain) == (
        "none", 2.5, "always", 0.5)


def test_software_mode_worker_first_then_another_host_loads_without_pins(region_path):
    """coherence=software: the worker of partition 0 starts first on a blank
    region (formats it, then attaches read-only), the manager takes partition
    0 and stores; an engine of partition 1 finds the chunk with no pin and
    loads it byte-equal."""
    import torch
    from vllm.v1.kv_offload.base import (CanonicalKVCacheRef, CanonicalKVCaches,
                                         CanonicalKVCacheTensor, GPULoadStoreSpec,
                                         LookupResult, ReqContext, make_offload_key)

    from cxlkv.vllm import CxlkvOffloadingSpec

    def engine(host, kv):
        extra = _extra(region_path, coherence="software", software_hosts=["host-a", "host-b"],
                       host=host)
        spec = CxlkvOffloadingSpec(_config(extra, bytes_per_block=2 * 2048))
        caches = CanonicalKVCaches([CanonicalKVCacheTensor(t, 2048) for t in kv],
                                   [[CanonicalKVCacheRef(0, 2048), CanonicalKVCacheRef(1, 2048)]])
        w = spec.get_worker(caches)  # before the manager, as vLLM may start them
        return spec.get_manager(), w

    kv_a = [torch.randint(-128, 127, (16, 2048), dtype=torch.int8) for _ in range(2)]
    m, w = engine("host-a", kv_a)
    i = m.region.info()
    assert (i.layout_version, i.config.software_partitions, i.participant) == (6, 2, 0)
    assert w.region.info().participant == -1, "workers attach read-only"
    key = make_offload_key(os.urandom(32), 0)
    ctx = ReqContext(req_id="r1")
    out = m.prepare_store([key], ctx)
    assert w.submit_store(1, GPULoadStoreSpec([3], group_sizes=[1], block_indices=[0]),
                          out.store_spec)
    w.wait({1})
    assert [r.success for r in w.get_finished()] == [True]
    m.complete_store([key], ctx)

    kv_b = [torch.zeros((16, 2048), dtype=torch.int8) for _ in range(2)]
    m2, w2 = engine("host-b", kv_b)
    assert m2.region.info().participant == 1
    ctx2 = ReqContext(req_id="r2")
    assert m2.lookup(key, ctx2) == LookupResult.HIT
    load = m2.prepare_load([key], ctx2)
    assert w2.submit_load(2, load, GPULoadStoreSpec([9], group_sizes=[1], block_indices=[0]))
    w2.wait({2})
    assert [r.success for r in w2.get_finished()] == [True]
    assert all(torch.equal(b[9], a[3]) for a, b in zip(kv_a, kv_b))
    m2.complete_load([key], ctx2)
    assert m2.pinned() == 0
    for x in (w2, m2, w, m):
        x.shutdown()


def test_software_mode_second_engine_on_a_node_is_refused_naming_the_lock(region_path,
                                                                         monkeypatch):
    """coherence=software with the node's partition lock (CXL_PARTITION_LOCK,
    which the DRA driver's CDI spec gives every pod of the claim on a node):
    engine 1's manager (another process, as another engine's EngineCore is)
    holds the host's partition; engine 2 on the same node is refused at
    get_manager, naming the lock file and engine 1's process, and engine 1
    keeps its partition. Once engine 1 is gone, engine 2 starts. A worker
    (read-only) takes no lock, and rank 0's worker that formats a blank
    region gives it back before its manager takes it."""
    import subprocess

    from cxlkv.errors import BusyError
    from cxlkv.vllm import CxlkvOffloadingSpec

    lock = region_path + ".lock"
    open(lock, "w").close()
    monkeypatch.setenv("CXL_PARTITION_LOCK", lock)
    extra = _extra(region_path, coherence="software", software_hosts=["host-a", "host-b"],
                   host="host-a")
    here = os.path.dirname(os.path.abspath(__file__))
    child = (
        "import sys\n"
        f"sys.path.insert(0, {here!r})\n"
        "import test_spec\n"
        "from cxlkv.vllm import CxlkvOffloadingSpec\n"
        f"m = CxlkvOffloadingSpec(test_spec._config({extra!r})).get_manager()\n"
        "print('holding', m.region.info().participant, flush=True)\n"
        "sys.stdin.read()\n"
        "print(m.region.info().participant)\n")
    first = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # vLLM may log to stdout before the child's own line (its warning
        # that the OffloadingSpec API is experimental, on the GPU image).
        line = []
        for raw in first.stdout:
            if raw.startswith("holding"):
                line = raw.split()
                break
        if line != ["holding", "0"]:
            first.kill()
            pytest.fail(f"engine 1 did not start: {line} {first.communicate()[1][-3000:]}")
        spec = CxlkvOffloadingSpec(_config(extra))
        with pytest.raises(BusyError) as ei:
            spec.get_manager()
        msg = str(ei.value)
        print(msg)
        assert f"{lock} ($CXL_PARTITION_LOCK) is locked by pid {first.pid} (" in msg
        assert "only one of them may write" in msg
        out, err = first.communicate("", timeout=120)
        assert first.returncode == 0, err[-3000:]
        assert out.split()[-1] == "0", "engine 1 kept partition 0 to the end"
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    m = CxlkvOffloadingSpec(_config(extra)).get_manager()
    assert m.region.info().participant == 0
    m.shutdown()
    import cxlkv

    cxlkv.release_partition_lock()
    os.unlink(lock)


def test_a_model_without_weight_files_says_to_set_model_fingerprint(region_path, tmp_path):
    """A config-only model directory, or --load-format dummy (no file holds
    the weights): the fingerprint cannot be computed, and the refusal says
    how to go on (model_fingerprint). With it, the engine starts."""
    import json

    from vllm.config import LoadConfig, VllmConfig, set_current_vllm_config

    from cxlkv.vllm import CxlkvOffloadingSpec

    model = tmp_path / "config-only"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    extra = _extra(region_path)
    del extra["model_fingerprint"]
    cfg = _config(extra)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, name=str(model)))
    with pytest.raises(ValueError) as ei:
        CxlkvOffloadingSpec(cfg).get_manager()
    msg = str(ei.value)
    assert f"no weight files in {model}" in msg and "a config-only directory?" in msg
    assert "set kv_connector_extra_config['model_fingerprint']" in msg
    with set_current_vllm_config(VllmConfig(load_config=LoadConfig(load_format="dummy"))):
        with pytest.raises(ValueError) as ei:
            CxlkvOffloadingSpec(cfg).get_manager()
    msg = str(ei.value)
    assert "--load-format dummy" in msg and "model_fingerprint" in msg
    assert "dummy weights from a fixed seed" in msg
    m = CxlkvOffloadingSpec(dataclasses.replace(
        cfg, extra_config=dict(extra, model_fingerprint="dummy-qwen2-vllm0.32"))).get_manager()
    assert m.namespaces
    m.shutdown()
