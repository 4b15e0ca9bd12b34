"""The report's arithmetic on synthetic logs (run by scripts/test.d/70-ttft.sh
with pytest): percentiles, the last record per key winning, first reads left
out of the cells, the alignment bound, the T4 bound and the projection, and
an oracle that must fail when the poisoned control changed nothing or the
KV bytes differ."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import report  # noqa: E402

KVPT = 57344


def call():
    return {"kind": "call", "call": 0, "replicas": 2, "gpus": 1, "vllm_version": "0.26.0",
            "platform": "gpu", "grid_model": {"name": "qwen7b", "load_format": "dummy",
                                              "kv_bytes_per_token": KVPT},
            "oracle_model": {"config": {"num_hidden_layers": 2, "hidden_size": 256}},
            "granularity": 256, "query_len": 64, "max_tokens": 8, "max_model_len": 32768}


def counters(**kw):
    base = dict.fromkeys(("prompt", "computed", "local_hit", "external_hit", "external_queries",
                          "kv_load_bytes", "kv_store_bytes", "kv_load_s"), 0.0)
    base.update(kw)
    return base


def req(tier, arm, prefix, session, n, ttft, hit_rate, replica="A", first=False, **kw):
    r = {"kind": "req", "phase": "grid", "tier": tier, "arm": arm, "prefix": prefix,
         "session": session, "req": n, "ttft_ms": ttft, "hit_rate": hit_rate,
         "replica": replica, "first_read": first, "query_len": 64,
         "key": f"grid/r0/{tier}/{prefix}/{arm}/{session}/req{n}",
         "counters": {replica: counters()}}
    r.update(kw)
    return r


def test_percentiles_interpolate_like_numpy():
    assert report.pct([1, 2, 3, 4], 50) == 2.5
    assert report.pct([10], 90) == 10
    assert abs(report.pct(list(range(1, 101)), 99) - 99.01) < 1e-9
    assert report.pct([], 50) is None


def test_last_record_per_key_wins_and_first_reads_stay_out():
    recs = [call(),
            req("T4", "cross", 8173, 0, 2, 999.0, 0.5, "B"),   # redone by a later call
            req("T4", "cross", 8173, 0, 2, 200.0, 0.97, "B"),
            req("T4", "cross", 8173, 1, 2, 210.0, 0.97, "B"),
            req("T4", "cross", 8173, 2, 2, 700.0, 0.97, "B", first=True)]
    recs[-1]["key"] = "grid/r0/T4/8173/cross/2/req2"
    s = report.build(recs)
    (row,) = s["rows"]
    assert (row["n"], row["p50_ms"], row["p99_ms"]) == (2, 205.0, None)
    assert set(row) == {"tier", "arm", "prefix", "p50_ms", "p90_ms", "p99_ms", "hit_rate", "n"}
    assert [f["ttft_ms"] for f in s["first_reads"]] == [700.0]


def test_bounds_projection_and_targets():
    recs = [call(), {"kind": "ceiling", "pinned_h2d_gbps": 50.0}]
    for i in range(3):
        recs += [req("T1", "same", 8173, i, 2, 30.0, 0.96),
                 req("T2", "same", 8173, i, 2, 60.0, 0.96),
                 req("T0", "cross", 8173, i, 2, 200.0, 0.0, "B"),
                 req("T4", "same", 8173, i, 2, 50.0, 0.9634),
                 req("T4", "cross", 8173, i, 2, 51.0, 0.9634, "B")]
    s = report.build(recs)
    (d,) = s["derived"]
    kv = 7936 * KVPT  # 31 full chunks of 256 tokens
    assert d["aligned_tokens"] == 7936 and d["kv_bytes"] == kv
    assert d["alignment_bound"] == round(7936 / (8173 + 64), 4)
    assert d["t4_bound_ms"] == round(30.0 + 1.2 * kv / 50.0 / 1e6, 1)
    assert d["projection_27gbps_ms"] == round(30.0 + kv / 27.1 / 1e6, 1)
    assert d["t4_cross_same"] == 1.02
    met = {t["target"]: t["met"] for t in d["targets"]}
    assert met["T4 cross <= T2 same"] and met["T4 cross/same <= 1.05"]
    assert met["T4 cross hit rate at the alignment bound"]
    md = report.tables(s)
    assert "## Table 5" in md and "8K" in md


def oracle_log(poison_changes=True, loaded=1 << 20):
    recs = [call()]
    for j in range(10):
        toks = [j, 1, 2, 3]
        for tier, arm, n, key in (("T0", "none", 2, "req2"), ("T1", "same", 2, "req2"),
                                  ("T4", "cross", 1, "req1"), ("T4", "cross", 2, "req2"),
                                  ("T4", "cross-poisoned", 2, "poisoned")):
            r = {"kind": "req", "phase": "oracle", "tier": tier, "arm": arm, "req": n,
                 "session": j, "key": f"oracle/{tier}/{j}/{key}", "tokens": toks,
                 "logprobs": [-1.0] * 4, "replica": "B", "hit_tokens": 2048,
                 "counters": {"B": counters(kv_load_bytes=loaded)}, "stored_bytes": 1 << 20}
            if arm == "cross-poisoned":
                r["tokens"] = [9, 9, 9, 9] if poison_changes else toks
                r["poison_counts"] = {"x": {"zeroed_blocks": 128}}
            recs.append(r)
    return recs


def test_oracle_passes_only_with_a_poison_that_bites_and_equal_bytes():
    assert report.build(oracle_log())["oracle"]["pass"]
    o = report.build(oracle_log(poison_changes=False))["oracle"]
    assert not o["pass"] and o["poisoned_changed"] == 0
    o = report.build(oracle_log(loaded=12345))["oracle"]
    assert not o["pass"] and o["kv_equal"] == 0


def test_per_repetition_medians_and_spread():
    recs = [call()]
    for rep, base in ((0, 100.0), (1, 110.0)):
        for i in range(3):
            r = req("T4", "cross", 2054, i, 2, base + i, 0.96, "B", rep=rep)
            r["key"] = f"grid/r{rep}/T4/2054/cross/{i}/req2"
            recs.append(r)
    s = report.build(recs)
    (x,) = s["repetitions"]
    assert x["medians"] == {0: 101.0, 1: 111.0}
    assert x["spread"] == round(10 / 106.0, 4)
    assert "## Table 8" in report.tables(s)


def test_a_start_that_failed_then_succeeded_in_a_later_call_is_a_retry_not_a_failure():
    failed = {"kind": "start_failed", "phase": "grid", "rep": 0, "tier": "T4", "call": 2,
              "error": "grid-r0-T4-A-c2 (T4) exited with 1 before it was ready", "log_tail": ""}
    started = {"kind": "replica", "phase": "grid", "tier": "T4", "call": 3, "role": "A",
               "name": "grid-r0-T4-A-c3", "ready_s": 70.0}
    s = report.build([call(), failed, started, req("T4", "cross", 8173, 0, 2, 80.0, 0.96, "B")])
    assert s["start_failures"] == []
    assert [r["started_in_call"] for r in s["start_retries"]] == [3]
    assert "started in call 3" in report.tables(s)
    # Never restarted: still a failure (what check_report.py fails on).
    s = report.build([call(), failed, req("T4", "cross", 8173, 0, 2, 80.0, 0.96, "B")])
    assert len(s["start_failures"]) == 1 and not s["start_retries"]
    assert "did not start" in report.tables(s)


def test_cxlkv_manager_time_is_split_out_of_the_reusing_request():
    c = counters(kv_load_s=0.010, kv_load_bytes=434e6, cxlkv_lookup_s=0.001,
                 cxlkv_prepare_load_s=0.0005, cxlkv_complete_load_s=0.0005)
    recs = [call()] + [req("T4", "cross", 8173, i, 2, 80.0, 0.96, "B", counters={"B": c})
                       for i in range(3)]
    (x,) = report.build(recs)["load_time"]
    assert x["load_p50_ms"] == 10.0 and x["manager_p50_ms"] == 2.0
    assert "| 2.00 | 68.0 |" in report.tables(report.build(recs))
    # Logs from before the counter existed: not measured, not zero.
    old = [call(), req("T4", "cross", 8173, 0, 2, 80.0, 0.96, "B",
                       counters={"B": counters(kv_load_s=0.01, kv_load_bytes=434e6)})]
    assert report.build(old)["load_time"][0]["manager_p50_ms"] is None


def test_median_difference_interval_is_seeded_and_brackets_the_difference():
    a = [80.0 + i for i in range(20)]
    b = [78.0 + i for i in range(20)]
    ci = report.median_diff_ci(a, b)
    assert ci == report.median_diff_ci(a, b)          # rebuilds the same numbers
    assert ci[0] <= 2.0 <= ci[1] and ci[0] < 0        # a 2 ms gap in 20 samples: noise
    far = report.median_diff_ci([200.0 + i for i in range(20)], b)
    assert far[0] > 0                                 # a real gap is not called noise
    assert report.median_diff_ci(a[:3], b) is None


def test_lmcache_rows_and_integrity_verdicts_get_their_own_tables():
    recs = [call(), {"kind": "ceiling", "pinned_h2d_gbps": 50.0}]
    for i in range(2):
        recs += [req("T4", "cross", 8173, i, 2, 51.0, 0.9634, "B"),
                 req("T5", "cross", 8173, i, 2, 70.0, 0.9634, "B"),
                 req("T5", "same", 8173, i, 2, 69.0, 0.9634)]
    for tier, j, mode, verdict in (("T4", 0, "byte", "detected, recomputed"),
                                   ("T5", 0, "byte", "served, output unchanged"),
                                   ("T5", 1, "zero", "served, output changed")):
        recs.append({"kind": "integrity", "key": f"integrity/{tier}/{j}", "tier": tier,
                     "session": j, "prefix": 2048, "damage": mode, "verdict": verdict,
                     "damaged_ranges": 8, "damaged_bytes": 8 << 18, "clean_hit_tokens": 2048,
                     "damaged_hit_tokens": 0 if tier == "T4" else 2048,
                     "output_equal": verdict != "served, output changed",
                     "tier_load_fallbacks": 8 if tier == "T4" else 0})
    s = report.build(recs)
    assert {(r["tier"], r["arm"]) for r in s["rows"]} == {("T4", "cross"), ("T5", "cross"),
                                                          ("T5", "same")}
    assert [(r["tier"], r["verdict"]) for r in s["integrity"]] == [
        ("T4", "detected, recomputed"), ("T5", "served, output unchanged"),
        ("T5", "served, output changed")]
    md = report.tables(s)
    assert "## T4 beside its peers" in md and "| 8K | cross | T5 | 2 | 70.0 |" in md
    assert "| T5 | 1 | zero | 8 | 2097152 | 2048 → 2048 | 0 | False | served, output changed |" \
        in md


def test_pairs_of_four_replicas_every_ordered_pair_at_the_bound():
    import ttft

    recs = [dict(call(), replicas=4)]
    bound = round(7936 / (8173 + 64), 4)
    for i in range(12):
        s, d = ttft.session_pair(4, "cross", i)
        pair = f"{'ABCD'[s]}>{'ABCD'[d]}"
        # The first pair's only session misses one chunk: below the bound.
        hit = bound - 256 / (8173 + 64) if i == 0 else bound
        recs.append(req("T4", "cross", 8173, i, 2, 50.0 + i, hit, "ABCD"[d], pair=pair,
                        first=(i < 4)))
    s = report.build(recs)
    rows = {r["pair"]: r for r in s["pairs"] if r["tier"] == "T4"}
    assert sorted(rows) == sorted(f"{a}>{b}" for a in "ABCD" for b in "ABCD" if a != b)
    assert not rows["A>B"]["at_bound"] and all(r["at_bound"] for k, r in rows.items()
                                               if k != "A>B")
    assert rows["A>B"]["p50_ms"] is None and rows["D>C"]["p50_ms"] == 61.0  # first reads out
    c = s["pairs_complete"]["T4"]["8173"]
    assert (c["pairs"], c["with_sessions"], c["at_bound"], c["complete"]) == (12, 12, 11, False)
    md = report.tables(s)
    assert "## Replica pairs: cross-arm hits per ordered pair (4 replicas)" in md
    assert "| T4 | 8K | A>B | 1 |" in md and "11 of 12 ordered pairs at the bound" in md


def test_session_pairs_cover_every_ordered_pair_once_per_round():
    import ttft

    for n in (2, 3, 4):
        cross = [ttft.session_pair(n, "cross", i) for i in range(n * (n - 1))]
        assert len(set(cross)) == n * (n - 1) and all(a != b for a, b in cross)
        assert [ttft.session_pair(n, "same", i) for i in range(n)] == [(i, i) for i in range(n)]
    assert ttft.session_pair(2, "cross", 0) == (0, 1)  # session 0 is the paper's A>B


def test_recorded_argv_names_the_checkouts_files_relative_to_it():
    """A run's log.jsonl lands in docs/results: the argv it records must not
    carry the paths of the machine it ran on."""
    import replica

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    argv = [os.path.join(root, "bench", "ttft", "offline_server.py"), "--model",
            "/tmp/cxlkv-ttft-models/m", "--port", 8000, root + "-other/x"]
    assert replica.repo_relative(argv) == [
        os.path.join("bench", "ttft", "offline_server.py"), "--model",
        "/tmp/cxlkv-ttft-models/m", "--port", 8000, root + "-other/x"]
