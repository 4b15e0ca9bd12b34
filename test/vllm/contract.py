"""cxlkv.vllm against one vLLM release's own offloading classes, without an engine.

Run by test_contract.py, one interpreter per release, with that release's
Python tree (``CXLKV_VLLM_SRC``: the wheel's ``*.py`` files and dist-info,
unpacked by scripts/vllm-src.sh, never installed) first on ``sys.path``, so
``import vllm`` is that release, whole: its ``v1/kv_offload/`` and connector
modules, its hashing, its events tracker, its metrics. Only the native parts
are missing (no vLLM kernel runs here); torch, numpy and the rest come from
the test venv (scripts/vllm-venv.sh). cxlkv.vllm is imported after it, so its
manager, worker and spec subclass this release's abstract classes.

Checked, with this release's argument types (``GPULoadStoreSpec`` up to 0.33,
``DevicePointers`` resolved by the release's own ``resolve_device_pointers``
from 0.34): every member cxlkv implements takes exactly the release's
parameters and no abstract member is missing; the release's factory builds
the spec from the release's ``OffloadingConfig``; a chunk goes through
lookup / prepare_store / submit_store / get_finished / complete_store, then
lookup HIT / prepare_load / submit_load (a load entering the chunk mid-way)
/ complete_load, bytes equal, pins released; failures in the part table and
CRC keep their meaning (a corrupted part fails its load and is reported);
take_events yields the release's ``OffloadingEvent`` that its tracker turns
into BlockStored/BlockRemoved; get_stats is the release's stats object; the
NONE_HASH fingerprint cxlkv records equals what the release's
``init_none_hash`` makes. The newest release's interface also equals
``compat.NEWEST_INTERFACE``, and a simulated next release whose interface
changed is refused, naming the change.

What the tree lacks, and how the test stands without it:

- vLLM's platform is fixed to its ``UnspecifiedPlatform`` (what vLLM
  itself picks where it detects no accelerator, as on the CPU machine) the
  moment ``vllm.platforms`` is loaded, before anything resolves
  ``current_platform``. Where NVML reports a GPU (the GPU machine:
  ``scripts/gpu-vllm.sh --contract``) vLLM would pick ``CudaPlatform``, whose
  module imports the wheel's native kernels first thing (0.34:
  ``vllm/platforms/cuda.py`` imports ``vllm._C_stable_libtorch``; 0.26-0.33
  ``vllm._C``), which a ``*.py`` tree has not. Nothing under test needs a
  platform: the CUDA side here is the KV tensors and cxlkv's own
  CxlkvCudaWorker. test_the_tree_is_this_release_whole prints what vLLM's
  own detection names, and checks that no accelerator platform module was
  imported.
- The release's modules are imported once, when this file is loaded: a tree
  that does not load fails collection with its own error. (Imported per
  test, a module that failed half-way was executed again by the next test:
  0.34's ``vllm.utils.torch_utils`` registers ``LayerName`` with torch
  before it resolves the platform, and the second run failed with "Type
  'vllm.utils.torch_utils.LayerName' is already registered as an opaque
  type", hiding the first error.)
"""
import dataclasses
import importlib
import importlib.machinery
import inspect
import os
import sys

SRC = os.environ.get("CXLKV_VLLM_SRC", "")
RELEASE = os.environ.get("CXLKV_VLLM_RELEASE", "")


class _NoAcceleratorPlatform:
    """A meta-path finder for ``vllm.platforms`` alone: loads the module from
    the tree as usual, then sets its ``_current_platform`` (what its
    ``current_platform`` returns, resolved on first use in every release
    0.26-0.34) to vLLM's own UnspecifiedPlatform (module doc). 0.26-0.31
    resolve the platform while ``import vllm`` runs, so it must be in place
    before vllm is imported."""

    def find_spec(self, name, path, target=None):
        if name != "vllm.platforms":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            from vllm.platforms.interface import UnspecifiedPlatform

            module._current_platform = UnspecifiedPlatform()

        spec.loader.exec_module = exec_module
        return spec


# Every module of the release a test imports (module doc: loaded once).
RELEASE_MODULES = (
    "vllm.v1.kv_offload.base", "vllm.v1.kv_offload.config", "vllm.v1.kv_offload.factory",
    "vllm.v1.core.kv_cache_utils", "vllm.utils.hashing", "vllm.v1.core.sched.scheduler",
    "vllm.distributed.kv_transfer.kv_connector.v1.base",
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector",
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading.events",
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics",
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler",
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker",
)
if SRC:
    sys.path.insert(0, SRC)
    sys.meta_path.insert(0, _NoAcceleratorPlatform())
    for _name in RELEASE_MODULES:
        importlib.import_module(_name)
    if os.path.exists(os.path.join(SRC, "vllm", "v1", "kv_offload", "pointer_utils.py")):
        importlib.import_module("vllm.v1.kv_offload.pointer_utils")  # 0.34+

import numpy as np  # noqa: E402
import offload_checks  # noqa: E402  (beside this file: what the release tests share)
import pytest  # noqa: E402
import torch  # noqa: E402

pytestmark = pytest.mark.skipif(not SRC, reason="run by test_contract.py (CXLKV_VLLM_SRC)")

PAGE = 2048
BPC = 2  # blocks per chunk: loads can enter a chunk mid-way
# "cuda" on the GPU machine (scripts/gpu-vllm.sh --contract): the KV tensors
# on the GPU, so the spec builds CxlkvCudaWorker.
DEVICE = os.environ.get("CXLKV_CONTRACT_DEVICE", "cpu")


def _vllm():
    import vllm

    return vllm


def _base():
    from vllm.v1.kv_offload import base

    return base


def test_the_tree_is_this_release_whole():
    vllm = _vllm()
    assert vllm.__file__.startswith(SRC), vllm.__file__
    assert vllm.__version__ == RELEASE, (vllm.__version__, RELEASE)
    for mod in RELEASE_MODULES:
        assert sys.modules[mod].__file__.startswith(SRC), (mod, sys.modules[mod].__file__)
    import vllm.platforms
    from vllm.platforms.interface import UnspecifiedPlatform

    # The platform it runs on is the pinned one: no accelerator platform
    # module, so none of the native kernels they load. Then what vLLM's own
    # detection names here (CudaPlatform where NVML reports a GPU).
    assert type(vllm.platforms.current_platform) is UnspecifiedPlatform
    loaded = sorted(m for m in sys.modules if m.startswith("vllm.platforms.")
                    and m != "vllm.platforms.interface")
    assert not loaded, loaded
    print(f"vLLM {RELEASE} detects {vllm.platforms.resolve_current_platform_cls_qualname()}; "
          f"the test runs on its UnspecifiedPlatform")
    # What vLLM's API server does: import the spec's module for its metric
    # classmethods (this is the first test: no region opened before it).
    from cxlkv.vllm import CxlkvOffloadingSpec, compat

    fds = [os.readlink(f"/proc/self/fd/{f}") for f in os.listdir("/proc/self/fd")
           if os.path.exists(f"/proc/self/fd/{f}")]
    assert not [f for f in fds if "cxlkv" in f], fds
    defs = CxlkvOffloadingSpec.build_metric_definitions({})
    assert defs and all(isinstance(d, (_base().OffloadingCounterMetadata,
                                       _base().OffloadingGaugeMetadata)) for d in defs.values())
    assert compat.check_supported() == RELEASE
    assert compat.CHECKED[compat.minor()] == RELEASE


def _config(extra, world=1, rank=0, bytes_per_block=2 * PAGE, events=False):
    """This release's OffloadingConfig: every field it has, from one table;
    a field the table lacks fails here, naming it."""
    from vllm.v1.kv_offload import config as c

    values = {
        "OffloadingGroupConfig": dict(tokens_per_block=16, layer_names=("l0", "l1"), group_id=0,
                                      sliding_window_size_in_chunks=None),
        "OffloadingModelConfig": dict(name="contract-model", dtype="bfloat16",
                                      max_model_len=4096),
        "OffloadingCacheConfig": dict(tokens_per_hash=16, blocks_per_chunk=BPC),
        "OffloadingParallelConfig": dict(rank=rank, world_size=world, tp_size=world, pp_size=1,
                                         pcp_size=1, dcp_size=1, data_parallel_index=0,
                                         data_parallel_size=1, data_parallel_rank_local=None,
                                         is_parallelism_agnostic=False),
    }

    def build(cls, table):
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in table
                   and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        assert not missing, f"{cls.__name__} of {RELEASE} has fields the test does not know: " \
                            f"{missing}"
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in table.items() if k in names})

    top = dict(groups=(build(c.OffloadingGroupConfig, values["OffloadingGroupConfig"]),),
               worker_kv_bytes_per_block=bytes_per_block, enable_kv_cache_events=events,
               extra_config=extra, engine_id="contract",
               model=build(c.OffloadingModelConfig, values["OffloadingModelConfig"]),
               cache=build(c.OffloadingCacheConfig, values["OffloadingCacheConfig"]),
               parallel=build(c.OffloadingParallelConfig, values["OffloadingParallelConfig"]),
               replicated_layout=False, canonical_layout=False, kv_cache_layout="LBHNC")
    return build(c.OffloadingConfig, top)


@pytest.fixture
def region_path():
    p = f"/dev/shm/cxlkv/contract-{RELEASE}-{os.getpid()}"
    os.makedirs(os.path.dirname(p), exist_ok=True)
    yield p
    if os.path.exists(p):
        os.unlink(p)


_extra = offload_checks.spec_extra


class _Engine:
    """Spec (through this release's factory), manager and a worker over two
    layers of 16 blocks of PAGE bytes, and how this release hands the worker
    its blocks."""

    def __init__(self, path, events=False):
        from vllm.v1.kv_offload.factory import OffloadingSpecFactory

        b = _base()
        self.spec = OffloadingSpecFactory.create_spec(
            _config(_extra(path), events=events))
        self.manager = self.spec.get_manager()
        self.kv = [torch.randint(-128, 127, (16, PAGE), dtype=torch.int8, device=DEVICE)
                   for _ in range(2)]
        self.caches = b.CanonicalKVCaches(
            [b.CanonicalKVCacheTensor(t, PAGE) for t in self.kv],
            [[b.CanonicalKVCacheRef(0, PAGE), b.CanonicalKVCacheRef(1, PAGE)]])
        self.worker = self.spec.get_worker(self.caches)
        want = "CxlkvCudaWorker" if DEVICE == "cuda" else "CxlkvWorker"
        assert type(self.worker).__name__ == want, type(self.worker)

    def blocks(self, ids, first=0):
        """What this release passes for GPU blocks `ids` starting at logical block `first`."""
        b = _base()
        spec = b.GPULoadStoreSpec(list(ids), group_sizes=[len(ids)], block_indices=[first])
        if not hasattr(b, "DevicePointers"):
            return spec
        from vllm.v1.kv_offload.pointer_utils import resolve_device_pointers

        return resolve_device_pointers(spec, self.caches)

    def store(self, job, ids, store_spec):
        assert self.worker.submit_store(job, self.blocks(ids), store_spec) is True

    def load(self, job, load_spec, ids, first=0):
        assert self.worker.submit_load(job, load_spec, self.blocks(ids, first)) is True

    def finish(self, jobs):
        self.worker.wait(set(jobs))
        got = self.worker.get_finished()
        assert all(isinstance(r, _base().TransferResult) for r in got)
        return sorted((r.job_id, r.success) for r in got)

    def close(self):
        self.worker.shutdown()
        self.manager.shutdown()


def _key(i):
    return _base().make_offload_key(i.to_bytes(32, "big"), 0)


def _ctx(req_id):
    return _base().ReqContext(req_id=req_id)


def _compare(ours, theirs, where):
    a = list(inspect.signature(ours).parameters.values())
    b = list(inspect.signature(theirs).parameters.values())
    got = [(p.name, p.kind, p.default) for p in a]
    want = [(p.name, p.kind, p.default) for p in b]
    assert got == want, f"{where}: ours {inspect.signature(ours)}, {RELEASE}'s " \
                        f"{inspect.signature(theirs)}"


@pytest.mark.parametrize("ours,theirs", [("manager.CxlkvManager", "OffloadingManager"),
                                         ("worker.CxlkvWorker", "OffloadingWorker"),
                                         ("worker_cuda.CxlkvCudaWorker", "OffloadingWorker"),
                                         ("spec.CxlkvOffloadingSpec", "OffloadingSpec")])
def test_members_take_this_releases_parameters(ours, theirs):
    import importlib

    mod, cls = ours.split(".")
    ours = getattr(importlib.import_module(f"cxlkv.vllm.{mod}"), cls)
    theirs = getattr(_base(), theirs)
    assert issubclass(ours, theirs)
    checked = offload_checks.check_members(ours, theirs, _compare, RELEASE)
    assert checked >= {"OffloadingManager": 13, "OffloadingWorker": 5,
                       "OffloadingSpec": 3}[theirs.__name__]


def test_a_chunk_round_trip_with_this_releases_types(region_path):
    b = _base()
    e = _Engine(region_path)
    m, w = e.manager, e.worker
    try:
        assert isinstance(e.spec, b.OffloadingSpec) and isinstance(m, b.OffloadingManager)
        assert isinstance(w, b.OffloadingWorker)
        key = _key(1)
        ctx = _ctx("r1")
        assert isinstance(m.on_new_request(ctx), b.RequestOffloadingContext)
        assert m.lookup(key, ctx) == b.LookupResult.MISS
        out = m.prepare_store([key], ctx)
        assert isinstance(out, b.PrepareStoreOutput) and list(out.keys_to_store) == [key]
        assert isinstance(out.store_spec, b.LoadStoreSpec)
        e.store(1, [3, 7], out.store_spec)
        assert e.finish([1]) == [(1, True)]
        m.complete_store([key], ctx)
        m.on_request_finished(ctx)
        m.on_schedule_end(b.ScheduleEndContext(new_req_ids=["r1"], preempted_req_ids=[]))
        if hasattr(m, "touch") and "touch" in vars(b.OffloadingManager):
            m.touch([key], ctx)  # 0.26-0.33 declare it (0.26-0.30 call it)
        want = [t[[3, 7]].clone() for t in e.kv]
        # Another request: HIT, load the chunk entering it at its second block.
        ctx2 = _ctx("r2")
        m.on_new_request(ctx2)
        with m.lock:
            assert m.lookup(key, ctx2) == b.LookupResult.HIT
            load = m.prepare_load([key], ctx2)
        assert isinstance(load, b.LoadStoreSpec)
        for t in e.kv:
            t[[9, 10, 11]] = 0
        e.load(2, load, [11], first=1)  # the chunk's second block only
        assert e.finish([2]) == [(2, True)]
        assert all(torch.equal(t[11], w_[1]) for t, w_ in zip(e.kv, want))
        assert all(not t[9].any() and not t[10].any() for t in e.kv), "a block beyond the load"
        m.complete_load([key], ctx2)
        m.on_request_finished(ctx2)
        assert m.pinned() == 0
        # The whole chunk into two other blocks.
        ctx3 = _ctx("r3")
        assert m.lookup(key, ctx3) == b.LookupResult.HIT
        load = m.prepare_load([key], ctx3)
        e.load(3, load, [9, 10])
        assert e.finish([3]) == [(3, True)]
        assert all(torch.equal(t[[9, 10]], w_) for t, w_ in zip(e.kv, want))
        m.complete_load([key], ctx3)
        st = m.get_stats()
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
            OffloadingConnectorStats,
        )

        assert isinstance(st, OffloadingConnectorStats)
        assert not m.has_pending_work()
        m.reset_cache()
        if hasattr(m, "on_reset_flushed"):
            m.on_reset_flushed()
        assert m.pinned() == 0
    finally:
        e.close()


def test_stored_chunks_carry_their_depth_in_the_request(region_path):
    """The region evicts a prefix's chunks tail first (issue 24), so the
    manager reserves each chunk with its depth in the request's chain: from
    the end-token positions vLLM's scheduler records in the request's
    context (0.34+), else from the scheduler's own state of the request,
    which CxlkvOffloadingConnector hands the manager (this release's
    RequestGroupState holds the chunk keys). Read back from the slots."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading import scheduler as sch

    from cxlkv import _cxlkv

    e = _Engine(region_path)
    m = e.manager
    try:
        # Keys whose block hashes differ in their first 128 bits (the
        # region's key): _key(i) differs only in the low bytes.
        keys = [_base().make_offload_key(bytes([40 + i]) * 32, 0) for i in range(5)]
        ctx = _ctx("d")
        if hasattr(ctx, "set_offload_key_position"):
            cfg = e.spec.config
            per_chunk = cfg.groups[0].tokens_per_block * cfg.cache.blocks_per_chunk
            for i, k in enumerate(keys):
                ctx.set_offload_key_position(k, (i + 1) * per_chunk)
        else:
            state = type("State", (), {"group_states": (sch.RequestGroupState(
                offload_keys=list(keys)),)})()
            m.attach_scheduler(type("Sched", (), {"_req_status": {"d": state}})())
        out = m.prepare_store(keys[2:], ctx)  # the request's later chunks
        assert list(out.keys_to_store) == keys[2:]
        slots = [t[1] for t in out.store_spec.tokens]
        depths = [_cxlkv.scan_slots(m.region, s, 1)[0][7] for s in slots]
        assert depths == [2, 3, 4], depths
        first = m.prepare_store(keys[:1], _ctx("other"))  # a request it knows nothing of
        assert _cxlkv.scan_slots(m.region, first.store_spec.tokens[0][1], 1)[0][7] == 0
        m.complete_store(keys[2:], ctx, success=False)
        m.complete_store(keys[:1], _ctx("other"), success=False)
    finally:
        e.close()


def _flip(path, region, store_spec, at):
    """Flips one byte of the stored chunk's payload in the region file."""
    from cxlkv import _cxlkv

    _epoch, slot, _word, _len = store_spec.tokens[0]
    info = region.info()
    (v,) = _cxlkv.scan_slots(region, slot, 1)  # the entry's data slot (layout 5)
    off = info.offset + info.data_offset + v[8] * info.slot_stride + at
    with open(path, "r+b") as f:
        f.seek(off)
        c = f.read(1)
        f.seek(off)
        f.write(bytes([c[0] ^ 0x5A]))


def test_a_corrupted_part_fails_its_load_and_is_reported(region_path):
    """The part table and CRC keep their meaning whatever form the blocks
    came in: a flipped byte in the stored part fails that chunk's load and
    the slot is dropped; the job reports it (success False under the plain
    connector; under CxlkvOffloadingConnector success), its blocks listed for
    recompute."""
    from cxlkv.vllm.keys import block_key

    b = _base()
    e = _Engine(region_path)
    m, w = e.manager, e.worker
    try:
        for job, (key, report) in enumerate(((_key(2), False), (_key(3), True))):
            w.report_load_errors = report
            out = m.prepare_store([key], _ctx(f"s{job}"))
            e.store(10 + job, [0, 1], out.store_spec)
            assert e.finish([10 + job]) == [(10 + job, True)]
            m.complete_store([key], _ctx(f"s{job}"))
            _flip(region_path, m.region, out.store_spec, 100 + job * PAGE)
            ctx = _ctx(f"l{job}")
            assert m.lookup(key, ctx) == b.LookupResult.HIT
            load = m.prepare_load([key], ctx)
            e.load(20 + job, load, [4, 5])
            assert e.finish([20 + job]) == [(20 + job, report)]
            assert w.take_failed_block_ids() == {4, 5}
            m.complete_load([key], ctx)
            assert not m.region.lookup(m.namespaces[0], block_key(key)), "slot not dropped"
        assert w.counts["load_failed"] == 2
    finally:
        e.close()


def test_events_are_this_releases_and_pass_its_tracker(region_path):
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.events import (
        OffloadingEventsTracker,
    )

    b = _base()
    e = _Engine(region_path, events=True)
    m = e.manager
    try:
        key = _key(4)
        out = m.prepare_store([key], _ctx("s"))
        e.store(1, [2, 3], out.store_spec)
        assert e.finish([1]) == [(1, True)]
        m.complete_store([key], _ctx("s"))
        stored = list(m.take_events())
        assert [type(ev) for ev in stored] == [b.OffloadingEvent]
        assert list(stored[0].keys) == [key] and not stored[0].removed
        assert stored[0].medium == (b.Medium.CPU if hasattr(b, "Medium") else "CPU")
        m.region.drop(m.namespaces[0], __import__("cxlkv.vllm.keys", fromlist=["x"])
                      .block_key(key))
        removed = list(m.take_events())
        assert [(list(ev.keys), ev.removed) for ev in removed] == [([key], True)]
        tracker = OffloadingEventsTracker(e.spec.kv_events_config)
        out = list(tracker.take_events(stored + removed))
        assert [type(ev).__name__ for ev in out] == ["BlockStored", "BlockRemoved"]
        want = int.from_bytes(bytes(key)[:-4], "big") & ((1 << 64) - 1)
        assert all(list(ev.block_hashes) == [want] for ev in out), out
    finally:
        e.close()


def test_the_none_hash_fingerprint_is_what_this_release_makes(monkeypatch):
    """cxlkv records the NONE_HASH every replica must share; computed as this
    release's init_none_hash does (with PYTHONHASHSEED set: 0.26-0.28 draw it
    at random otherwise, which cxlkv refuses)."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core import kv_cache_utils

    from cxlkv.vllm import keys

    monkeypatch.setenv("PYTHONHASHSEED", "4242")
    for algo in ("sha256", "sha256_cbor"):
        kv_cache_utils.init_none_hash(get_hash_fn_by_name(algo))
        want = int.from_bytes(bytes(kv_cache_utils.NONE_HASH)[:8], "big") or 1
        assert keys.hash_identity(algo) == (algo, want)
    monkeypatch.delenv("PYTHONHASHSEED")
    if not hasattr(kv_cache_utils, "DEFAULT_NONE_HASH_SEED"):
        with pytest.raises(ValueError, match="PYTHONHASHSEED"):
            keys.hash_identity("sha256")


def test_device_pointers_outside_the_kv_are_refused(region_path):
    """0.34+: a pointer that is not the start of a page of the registered KV
    tensors (or a size that is not its page size) is refused before any copy."""
    b = _base()
    if not hasattr(b, "DevicePointers"):
        pytest.skip(f"{RELEASE} hands over GPULoadStoreSpec, not DevicePointers")
    e = _Engine(region_path)
    try:
        out = e.manager.prepare_store([_key(5)], _ctx("s"))
        good = e.blocks([2, 3])
        for bad, what in ((good.ptrs + np.uint64(8), "is not a page"),
                          (good.ptrs + np.uint64(16 * PAGE), "is not a page")):
            dp = b.DevicePointers(ptrs=bad, sizes=good.sizes,
                                  group_block_counts=good.group_block_counts,
                                  group_data_ref_counts=good.group_data_ref_counts,
                                  block_indices=good.block_indices)
            with pytest.raises(ValueError, match=what):
                e.worker.submit_store(1, dp, out.store_spec)
        dp = dataclasses.replace(good, sizes=good.sizes - np.uint64(1))
        with pytest.raises(ValueError, match="size 2047 is not a page"):
            e.worker.submit_store(1, dp, out.store_spec)
        e.store(1, [2, 3], out.store_spec)
        assert e.finish([1]) == [(1, True)]
        e.manager.complete_store([_key(5)], _ctx("s"))
    finally:
        e.close()


def test_the_newest_interface_is_recorded_and_a_next_release_is_refused():
    """compat.NEWEST_INTERFACE is the newest checked release's, read here from
    its own module; a release past it is refused, naming what changed."""
    from cxlkv.errors import UnsupportedError
    from cxlkv.vllm import compat

    if compat.minor() != compat.NEWEST:
        pytest.skip(f"{RELEASE} is not the newest checked release ({compat.NEWEST})")
    b = _base()
    have = compat.interface(b)
    assert have == compat.NEWEST_INTERFACE, "\n".join(compat.interface_diff(
        have, compat.NEWEST_INTERFACE)) + f"\nNEWEST_INTERFACE = {have!r}"
    # A simulated 0.35: the worker's store takes one more argument, a new
    # abstract manager hook, an event field gone.
    import types
    from abc import abstractmethod

    def variant(cls, **members):
        ns = {k: v for k, v in vars(cls).items()
              if k not in ("__dict__", "__weakref__", "__abstractmethods__", "_abc_impl")}
        ns.update(members)
        return type(cls)(cls.__name__, cls.__bases__, ns)

    def submit_store(self, job_id, device_ptrs, dst_spec, stream):
        ...

    def on_evict(self, keys):
        ...

    @dataclasses.dataclass
    class OffloadingEvent:
        keys: list
        medium: object
        removed: bool

    nxt = types.SimpleNamespace(**dict(vars(b)))
    nxt.OffloadingWorker = variant(b.OffloadingWorker, submit_store=abstractmethod(submit_store))
    nxt.OffloadingManager = variant(b.OffloadingManager, on_evict=abstractmethod(on_evict))
    nxt.OffloadingEvent = OffloadingEvent
    major, minor_ = compat.NEWEST.split(".")
    version = f"{major}.{int(minor_) + 1}.0"
    with pytest.raises(UnsupportedError) as ei:
        compat.check_supported(version, base=nxt)
    msg = str(ei.value)
    print(msg)
    assert f"this is vLLM {version}, newer than {compat.NEWEST}" in msg
    assert "OffloadingWorker.submit_store is abstract (self, job_id, device_ptrs, dst_spec, " \
           "stream)" in msg
    assert "new OffloadingManager.on_evict abstract (self, keys)" in msg
    assert "OffloadingEvent is fields keys, medium, removed (was fields keys, medium, " in msg
    # Unchanged interface, unknown release: refused all the same, saying so.
    with pytest.raises(UnsupportedError, match="no difference in the classes cxlkv "
                                               "implements or builds, but no contract test"):
        compat.check_supported(version, base=b)
    with pytest.raises(UnsupportedError, match="older than 0.26"):
        compat.check_supported("0.25.1")


def test_the_connector_subclass_finds_what_it_overrides_and_reads():
    """CxlkvOffloadingConnector (connector.py) subclasses this release's
    OffloadingConnector, overrides get_block_ids_with_load_errors (declared by
    the release's KVConnectorBase_V1 and read by its model runner; the
    scheduler recomputes what it lists), and reads the connector's
    ``connector_scheduler`` / ``connector_worker.worker`` and the scheduler's
    ``_events_tracker`` and ``_req_status`` (each request's chunk keys, for
    the depths of what it stores before 0.34): each is assigned in this
    release's source, and its request state has the fields read."""
    import vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector as oc
    from vllm.distributed.kv_transfer.kv_connector.v1 import base as cbase
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading import scheduler, worker

    from cxlkv.vllm.connector import CxlkvOffloadingConnector

    assert issubclass(CxlkvOffloadingConnector, oc.OffloadingConnector)
    assert "get_block_ids_with_load_errors" in vars(cbase.KVConnectorBase_V1)
    _compare(CxlkvOffloadingConnector.get_block_ids_with_load_errors,
             cbase.KVConnectorBase_V1.get_block_ids_with_load_errors,
             "CxlkvOffloadingConnector.get_block_ids_with_load_errors")
    _compare(CxlkvOffloadingConnector.register_kv_caches,
             oc.OffloadingConnector.register_kv_caches, "register_kv_caches")
    init = inspect.getsource(oc.OffloadingConnector.__init__)
    assert "self.connector_scheduler" in init and "self.connector_worker" in init
    assert "self.worker = self.spec.get_worker(" in inspect.getsource(worker)
    sched = inspect.getsource(scheduler)
    assert "self._events_tracker" in sched
    assert "self._req_status" in sched
    fields = {c: {f.name for f in dataclasses.fields(getattr(scheduler, c))}
              for c in ("RequestOffloadState", "RequestGroupState")}
    assert "group_states" in fields["RequestOffloadState"], fields
    assert "offload_keys" in fields["RequestGroupState"], fields
    from vllm.v1.core.sched import scheduler as core_scheduler

    assert "_update_requests_with_invalid_blocks" in inspect.getsource(core_scheduler)
