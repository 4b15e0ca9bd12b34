"""Load or recompute (cxlkv/vllm/policy.py): the manager decides per request,
from the load and step costs this engine measured, whether loading a hit
pays; different measured costs give different decisions for the same hit,
the decisions are counted, and a recomputed hit lets its pins go."""
import os

import pytest

from cxlkv.vllm import metrics
from cxlkv.vllm.policy import LinearCost, LoadPolicy
from test_spec import _config, _extra, region_path  # noqa: F401 (fixture)


def test_linear_cost_fits_fixed_and_per_unit_parts():
    c = LinearCost()
    for n in (4, 8, 16, 32):
        c.add(n, 0.010 + 0.001 * n)
    assert c.predict(64) == pytest.approx(0.074)
    assert c.slope() == pytest.approx(0.001)
    one = LinearCost()
    one.add(8, 0.040)
    assert one.slope() is None
    assert one.predict(4) == pytest.approx(0.040)   # smaller: as if all fixed
    assert one.predict(16) == pytest.approx(0.080)  # larger: as if all per chunk


def _measured(policy, load_fixed_s, load_per_chunk_s, step_fixed_s, per_token_s):
    for n in (4, 8, 32, 128):
        policy.observe_load(n, load_fixed_s + load_per_chunk_s * n)
    for t in (1, 8, 2048, 8192):
        policy.observe_step(t, step_fixed_s + per_token_s * t)


def test_decisions_follow_the_measured_costs():
    # A fast link and slow prefill: every hit of a chunk or more loads.
    fast = LoadPolicy()
    _measured(fast, 0.002, 0.0005, 0.010, 25e-6)
    assert fast.decide(2048, 8)[0] is True
    # A slow first read (a fixed 40 ms per load) and fast prefill: short
    # prefixes recompute, long ones still load.
    slow = LoadPolicy()
    _measured(slow, 0.040, 0.0005, 0.010, 20e-6)
    assert slow.decide(2048, 8)[:2] == (False, "dearer")  # 44 ms load vs 0.9 x 41 ms
    assert slow.decide(32768, 128)[:2] == (True, "cheaper")
    # After explore_every recomputes in a row one hit loads, to measure again.
    again = LoadPolicy(explore_every=4)
    _measured(again, 0.040, 0.0005, 0.010, 20e-6)
    assert [again.decide(2048, 8)[1] for _ in range(10)] == ["dearer"] * 4 + ["explore"] + \
        ["dearer"] * 4 + ["explore"]
    # Nothing measured yet: load (the only way to learn what a load costs).
    assert LoadPolicy().decide(2048, 8)[:2] == (True, "unmeasured")
    assert LoadPolicy(mode="always").decide(256, 1)[0] is True
    with pytest.raises(ValueError, match="load_policy='never'"):
        LoadPolicy(mode="never")


def test_a_slope_from_decode_steps_alone_never_prices_a_recompute():
    # Only decode steps (a few tokens each, times that do not grow with them):
    # the fitted slope is 0 and would price any recompute at nothing. Until a
    # step of 256 tokens or more is kept, hits load.
    p = LoadPolicy()
    for n in (4, 8, 32, 128):
        p.observe_load(n, 0.030)
    for t in (1, 2, 4, 8, 16) * 4:
        p.observe_step(t, 0.020 - 0.0001 * t)
    assert p.decide(32512, 127)[:2] == (True, "unmeasured")
    p.observe_step(8192, 0.400)
    load, why, _, recompute_s = p.decide(32512, 127)
    assert (load, why) == (True, "cheaper") and recompute_s > 1.0
    assert "steps: 21 at 1-8192" in p.describe()


def _four_stored_chunks(region_path):
    """A spec's manager and worker over a small region, and four chunks of 32
    tokens stored through them: (manager, worker, kv tensors, keys)."""
    import torch
    from vllm.v1.kv_offload.base import (CanonicalKVCacheRef, CanonicalKVCaches,
                                         CanonicalKVCacheTensor, GPULoadStoreSpec,
                                         ReqContext, make_offload_key)

    from cxlkv.vllm import CxlkvOffloadingSpec

    spec = CxlkvOffloadingSpec(_config(_extra(region_path), bytes_per_block=2 * 2048))
    m = spec.get_manager()
    kv = [torch.randint(-128, 127, (16, 2048), dtype=torch.int8) for _ in range(2)]
    w = spec.get_worker(CanonicalKVCaches(
        [CanonicalKVCacheTensor(t, 2048) for t in kv],
        [[CanonicalKVCacheRef(0, 2048), CanonicalKVCacheRef(1, 2048)]]))
    keys = [make_offload_key(os.urandom(32), 0) for _ in range(4)]
    ctx = ReqContext(req_id="writer")
    out = m.prepare_store(keys, ctx)
    assert w.submit_store(1, GPULoadStoreSpec([0, 1, 2, 3], group_sizes=[4], block_indices=[0]),
                          out.store_spec)
    w.wait({1})
    assert [r.success for r in w.get_finished()] == [True]
    m.complete_store(keys, ctx)
    return m, w, kv, keys


def test_manager_recomputes_when_measured_loads_cost_more(region_path, caplog):  # noqa: F811
    import logging

    import torch
    from vllm.v1.kv_offload.base import GPULoadStoreSpec, LookupResult, ReqContext

    m, w, kv, keys = _four_stored_chunks(region_path)  # 4 chunks of 32 tokens

    def lookups(req):
        c = ReqContext(req_id=req)
        return c, [m.lookup(k, c) for k in keys]

    # Measured: a load costs 30 ms however small, a token 20 us to compute:
    # the 128 hit tokens recompute in about 2.6 ms.
    _measured(m.policy, 0.030, 0.0005, 0.010, 20e-6)
    _, res = lookups("r1")
    assert res == [LookupResult.HIT] * 4
    assert m.pinned() == 4
    with caplog.at_level(logging.INFO, logger="cxlkv.vllm.manager"):
        assert m.decide_load("r1", 128) is False
        lookups("r1b")
        assert m.decide_load("r1b", 128) is False  # within 10 s of the line: counted only
    said = [r.getMessage() for r in caplog.records if "recomputing a hit" in r.getMessage()]
    assert len(said) == 1 and "request r1: recomputing a hit of 128 tokens in 4 chunks" in said[0]
    assert "load 32.0 ms, recompute 2.6 ms" in said[0] and "steps: 4 at 1-8192" in said[0]
    assert m._recomputes_unlogged == 1
    assert m.pinned() == 0  # the hit's pins are let go
    assert m.decide_load("r1", 128) is False  # asked again (no room yet): counted once
    assert m.totals[(metrics.LOAD_DECISIONS, "recompute")] == 2
    assert m.totals[(metrics.LOAD_DECISIONS, "load")] == 0

    # Other measurements, the same hit: loads cost 0.1 ms + 20 us a chunk.
    m.policy = LoadPolicy()
    _measured(m.policy, 0.0001, 0.00002, 0.010, 20e-6)
    c2, res = lookups("r2")
    assert res == [LookupResult.HIT] * 4
    assert m.decide_load("r2", 128) is True
    assert m.pinned() == 4
    assert m.totals[(metrics.LOAD_DECISIONS, "load")] == 1
    load = m.prepare_load(keys, c2)
    assert w.submit_load(2, load, GPULoadStoreSpec([8, 9, 10, 11], group_sizes=[4],
                                                   block_indices=[0]))
    w.wait({2})
    assert [r.success for r in w.get_finished()] == [True]
    m.complete_load(keys, c2)
    assert m.pinned() == 0
    assert len(m.policy.loads) == 4  # a process's first load is not a rate (one-time costs)
    c3, _ = lookups("r3")
    assert m.decide_load("r3", 128) is True
    m.prepare_load(keys, c3)
    m.complete_load(keys, c3)  # the manager times the promise, not the copy
    assert len(m.policy.loads) == 5  # the next load is
    assert all(torch.equal(t[8:12], t[0:4]) for t in kv)
    m.shutdown()
    w.shutdown()


def test_a_loads_cost_leaves_out_its_wait_for_gpu_blocks(region_path, monkeypatch):  # noqa: F811
    """vLLM asks for a request's hit every step until it finds GPU blocks for
    it; under load (many 32K sessions on one engine) that wait took seconds.
    A recompute waits for the same blocks, so the load's cost is timed from
    prepare_load (blocks found, job handed to the workers) to complete_load,
    not from the first decision: charged with the wait, the policy once
    predicted a 127-chunk load dearer than its prefill and recomputed it."""
    import time as real_time

    from vllm.v1.kv_offload.base import LookupResult, ReqContext

    from cxlkv.vllm import manager as manager_mod

    now = [1000.0]

    class Clock:
        perf_counter = staticmethod(real_time.perf_counter)

        @staticmethod
        def monotonic():
            return now[0]

    monkeypatch.setattr(manager_mod, "time", Clock)
    m, w, _, keys = _four_stored_chunks(region_path)

    def load(req, waited_s, copy_s):
        c = ReqContext(req_id=req)
        assert [m.lookup(k, c) for k in keys] == [LookupResult.HIT] * 4
        assert m.decide_load(req, 128) is True
        for _ in range(3):  # no room yet: vLLM asks again each step
            now[0] += waited_s / 3
            assert m.decide_load(req, 128) is True
        m.prepare_load(keys, c)
        now[0] += copy_s
        m.complete_load(keys, c)

    load("first", 0.0, 0.005)  # a process's first load is not observed
    load("r1", 3.0, 0.020)
    load("r2", 6.0, 0.030)
    assert [round(t, 6) for _, t in m.policy.loads.obs] == [0.02, 0.03]
    assert m.totals[(metrics.LOAD_DECISIONS, "load")] == 3
    m.shutdown()
    w.shutdown()


def test_load_policy_settings_are_checked(region_path):  # noqa: F811
    from cxlkv.vllm import CxlkvOffloadingSpec

    with pytest.raises(ValueError, match="load_policy='sometimes'"):
        CxlkvOffloadingSpec(_config(_extra(region_path, load_policy="sometimes")))
    with pytest.raises(ValueError, match="load_min_gain=1.5"):
        CxlkvOffloadingSpec(_config(_extra(region_path, load_min_gain=1.5)))
    spec = CxlkvOffloadingSpec(_config(_extra(region_path, load_policy="always")))
    assert spec.get_manager().policy.mode == "always"
