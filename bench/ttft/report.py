"""Rebuilds everything from a run's raw log (RUN_DIR/log.jsonl), nothing
transcribed by hand (as the paper's section 4 does it):

- summary.json: a row per tier x arm x prefix (tier, arm, prefix, p50_ms,
  p90_ms, p99_ms only where n >= 50, hit_rate, n) and at top level replicas,
  gpus, vllm_version, h2d_ceiling_gbps (measured in the same run),
  kv_bytes_per_token; plus the validity controls, first reads, oracle, load
  runs, projection and targets;
- tables.md: the paper's Tables 3-7 with the paper's numbers beside ours,
  each tier's exact flags and every memory size; with several replicas, the
  hits of every ordered pair (pairs in summary.json) and each shared store's
  region-wide counters (region_counters);
- ttft.png, read_rate.png, load.png (when matplotlib imports).

Statistics: percentiles by linear interpolation between order statistics
(numpy's default). The reusing request (req2) is the measured one; the first
request with an external hit on each replica process (its first read: page
faults, lazy setup) is reported on its own and left out of the cells.
"""

import json
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import paper  # noqa: E402
from runlog import read  # noqa: E402

TIERS = ("T0", "T1", "T2", "T4")          # the paper's (its tables, plots)
# The peers run beside T4 (issue 28: LMCache, bench/ttft/lmcache_tier.py;
# issue 29: Mooncake Store, mooncake_tier.py): rows like every tier's, in a
# table of their own (the paper has none).
PEERS = ("T3", "T5", "T6")
ARMS = ("same", "cross")
ALL_TIERS = TIERS + ("T4pc",)             # T4 with vLLM's prefix caching on
ALL_ARMS = ARMS + ("late", "restarted")   # B started after what it reads was stored
CROSS_ARMS = ("cross", "late", "restarted")


def pct(v, q):
    v = sorted(v)
    if not v:
        return None
    k = (len(v) - 1) * q / 100
    f = math.floor(k)
    c = min(f + 1, len(v) - 1)
    return v[f] + (v[c] - v[f]) * (k - f)


def r1(x, d=1):
    return None if x is None else round(x, d)


def latest(records, kind):
    """Records of a kind, the last one per key (a resumed call may redo a session)."""
    out = {}
    for r in records:
        if r.get("kind") == kind:
            out[r.get("key", id(r))] = r
    return list(out.values())


def build(records):
    calls = [r for r in records if r.get("kind") == "call"]
    if not calls:
        raise SystemExit("report: the log has no call record (not a ttft.py run log)")
    last = calls[-1]
    kvpt = last["grid_model"]["kv_bytes_per_token"]
    ceilings = [r["pinned_h2d_gbps"] for r in records
                if r.get("kind") == "ceiling" and r.get("pinned_h2d_gbps")]
    ceiling = pct(ceilings, 50) if ceilings else None
    reqs = latest(records, "req")
    grid = [r for r in reqs if r.get("phase") == "grid"]
    rows, req1_rows, first_reads, store_incomplete, time_split = [], [], [], [], []
    cells = {}
    for r in grid:
        if r["req"] == 2 and r.get("first_read"):
            first_reads.append({"tier": r["tier"], "arm": r["arm"], "prefix": r["prefix"],
                                "replica": r["replica"], "ttft_ms": r["ttft_ms"],
                                "call": r.get("call"), "rep": r.get("rep")})
            continue
        cells.setdefault((r["tier"], r["arm"], r["prefix"], r["req"]), []).append(r)
    prefixes = sorted({k[2] for k in cells})
    for t in ALL_TIERS + PEERS:
        for arm in ALL_ARMS:
            for p in prefixes:
                c = cells.get((t, arm, p, 2))
                if not c:
                    continue
                v = [x["ttft_ms"] for x in c]
                row = {"tier": t, "arm": arm, "prefix": p, "p50_ms": r1(pct(v, 50)),
                       "p90_ms": r1(pct(v, 90)),
                       "p99_ms": r1(pct(v, 99)) if len(v) >= 50 else None,
                       "hit_rate": round(sum(x["hit_rate"] for x in c) / len(c), 4), "n": len(v)}
                # The manager's load-or-recompute choices in the cell (policy.py).
                dec = [x["counters"][x["replica"]] for x in c]
                if any("cxlkv_decided_load" in d for d in dec):
                    row["decided_load"] = int(sum(d.get("cxlkv_decided_load", 0) for d in dec))
                    row["decided_recompute"] = int(sum(d.get("cxlkv_decided_recompute", 0)
                                                       for d in dec))
                rows.append(row)
                loads = [x["counters"][x["replica"]].get("kv_load_s") for x in c]
                loads = [v * 1e3 for v in loads if v]
                if loads:
                    # Where the time went: the worker's own load time against
                    # the whole TTFT (the rest is engine: scheduling, prefill
                    # of the tail, first decode step, HTTP).
                    time_split.append({"tier": t, "arm": arm, "prefix": p,
                                       "ttft_p50_ms": row["p50_ms"],
                                       "load_p50_ms": r1(pct(loads, 50)),
                                       "load_gbps_p50": r1(pct(
                                           [x["counters"][x["replica"]]["kv_load_bytes"] /
                                            x["counters"][x["replica"]]["kv_load_s"] / 1e9
                                            for x in c if x["counters"][x["replica"]].get(
                                                "kv_load_s")], 50), 2),
                                       # cxlkv's manager on the scheduler thread (logs
                                       # from before the counter existed: None).
                                       "manager_p50_ms": r1(pct(
                                           [_manager_ms(x["counters"][x["replica"]]) for x in c
                                            if _MGR[0] in x["counters"][x["replica"]]], 50), 2)})
                bad = sum(1 for x in cells.get((t, arm, p, 1), [])
                          if x.get("store_complete") is False)
                if bad:
                    store_incomplete.append({"tier": t, "arm": arm, "prefix": p, "sessions": bad})
                c1 = cells.get((t, arm, p, 1), [])
                if c1:
                    req1_rows.append({"tier": t, "arm": arm, "prefix": p, "n": len(c1),
                                      "hit_rate": round(max(x["hit_rate"] for x in c1), 4),
                                      "mean_hit_rate": round(sum(x["hit_rate"] for x in c1)
                                                             / len(c1), 4)})
    per_rep = {}
    for r in grid:
        if r["req"] == 2 and r["arm"] == "cross" and not r.get("first_read"):
            per_rep.setdefault((r["tier"], r["prefix"]), {}).setdefault(
                r.get("rep", 0), []).append(r["ttft_ms"])
    reps_table = []
    for (t, p), by in sorted(per_rep.items()):
        meds = {k: r1(pct(v, 50)) for k, v in sorted(by.items())}
        vals = list(meds.values())
        mid = pct(vals, 50)
        reps_table.append({"tier": t, "prefix": p, "medians": meds,
                           "spread": round((max(vals) - min(vals)) / mid, 4) if mid else None})
    controls = latest(records, "control")
    # Per tier too: T4 and the peers run the same never-stored prompts.
    by_tier = {}
    for x in controls:
        b = by_tier.setdefault(x.get("tier", "T4"), {"requests": 0, "queried_tokens": 0,
                                                     "hit_tokens": 0})
        b["requests"] += 1
        b["queried_tokens"] += x["counters"][x["replica"]]["external_queries"]
        b["hit_tokens"] += x["hit_tokens"]
    control = {"requests": len(controls), "by_tier": by_tier,
               "queried_tokens": sum(x["counters"][x["replica"]]["external_queries"]
                                     for x in controls),
               "hit_tokens": sum(x["hit_tokens"] for x in controls),
               "external_hit_tokens": sum(x["counters"][x["replica"]]["external_hit"]
                                          for x in controls)}
    stopped = {r["name"]: r.get("setup_lines", []) for r in records
               if r.get("kind") == "replica_stopped"}
    summary = {
        "replicas": last["replicas"], "gpus": last["gpus"], "vllm_version": last["vllm_version"],
        "h2d_ceiling_gbps": r1(ceiling, 2), "kv_bytes_per_token": kvpt,
        "platform": last["platform"], "model": last["grid_model"]["name"],
        "load_format": last["grid_model"]["load_format"],
        "weights": "random (load_format=dummy): TTFT and KV volume do not depend on weight "
                   "values" if last["grid_model"]["load_format"] == "dummy"
                   else "seeded normal init (models.py small)",
        "memory": last.get("memory"), "tier_flags": last.get("tier_flags"),
        "granularity": last.get("granularity"), "query_len": last.get("query_len"),
        "max_tokens": last.get("max_tokens"), "max_model_len": last.get("max_model_len"),
        "calls": len(calls), "rows": rows, "req1": req1_rows, "first_reads": first_reads,
        "store_incomplete": store_incomplete, "load_time": time_split,
        "repetitions": reps_table,
        "control": control,
        "skipped": [{"tier": r["tier"], "phase": r.get("phase"), "reason": r["reason"]}
                    for r in latest(records, "skip")],
        # A start that failed in one call and succeeded in a later one (the
        # harness resumes) is a retry, reported as such, not a failure.
        "start_failures": [_failed_start(r) for r in records
                           if r.get("kind") == "start_failed" and not _restarted(records, r)],
        "start_retries": [dict(_failed_start(r), started_in_call=_restarted(records, r))
                          for r in records
                          if r.get("kind") == "start_failed" and _restarted(records, r)],
        "errors": [{"tier": r.get("tier"), "phase": r.get("phase"), "error": r["error"]}
                   for r in records if r.get("kind") == "error"],
        "warnings": [{"tier": r.get("tier"), "warning": r["warning"]}
                     for r in records if r.get("kind") == "warning"],
        # Lines logged while serving (the CUDA worker's first load: first
        # touch) are in the log only at stop: the stopped record's list wins.
        "replica_setup": [{"name": r["name"], "tier": r["tier"], "role": r["role"],
                           "ready_s": r["ready_s"], "gpu": r.get("gpu"),
                           "setup_lines": stopped.get(r["name"], r.get("setup_lines", []))}
                          for r in records if r.get("kind") == "replica"],
        "ceilings": [{k: v for k, v in r.items() if k not in ("kind",)}
                     for r in records if r.get("kind") == "ceiling"],
    }
    ocfg = next((c["oracle_model"]["config"] for c in reversed(calls)
                 if (c.get("oracle_model") or {}).get("config")), {})
    summary["oracle"] = oracle(reqs, records, ocfg)
    summary["load"] = load(records)
    summary["integrity"] = integrity(records)
    samples = {(t, arm, p): [x["ttft_ms"] for x in c]
               for (t, arm, p, n), c in cells.items() if n == 2}
    summary["derived"] = derived(rows, kvpt, ceiling, last.get("granularity") or 256,
                                 {r["prefix"]: r.get("query_len", last.get("query_len") or 0)
                                  for r in grid}, samples)
    summary["pairs"], summary["pairs_complete"] = pairs(grid, summary["derived"],
                                                        last["replicas"])
    summary["region_counters"] = [{k: r.get(k) for k in ("tier", "phase", "rep", "call",
                                                         "replicas", "store", "per_replica")}
                                  for r in records if r.get("kind") == "region_counters"]
    return summary


def _cause(tail):
    """For logs from before replicas recorded their cause: the last exception
    message in the log tail that is not the API server's generic one."""
    from replica import _EXC

    for x in reversed([x.strip() for x in tail.splitlines()]):
        if _EXC.search(x) and "initialization failed" not in x:
            return x[-300:]
    return None


def _row(rows, t, arm, p):
    for r in rows:
        if (r["tier"], r["arm"], r["prefix"]) == (t, arm, p):
            return r
    return None


def median_diff_ci(a, b, n=2000, seed=0):
    """95 % bootstrap interval of median(a) - median(b) (ms), seeded so the
    report rebuilds the same numbers; None with fewer than 5 samples a side.
    With n = 20 a side a difference of a few ms is often inside it: the
    targets table says so rather than calling a 4 % gap a miss or a pass."""
    if len(a) < 5 or len(b) < 5:
        return None
    rng = random.Random(seed)
    d = sorted(pct([rng.choice(a) for _ in a], 50) - pct([rng.choice(b) for _ in b], 50)
               for _ in range(n))
    return [r1(d[int(0.025 * n)]), r1(d[int(0.975 * n) - 1])]


def derived(rows, kvpt, ceiling, gran, qlen, samples=None):
    """Per prefix: KV bytes of the prefix's full chunks, effective read rate,
    projection T1 + KV / 27 GB/s, bounds and the issue's targets.

    The alignment bound of the hit rate is over the whole reusing prompt
    (prefix + Q2), as vLLM's counters count it: only full 256-token chunks of
    SHARED hit (Q2 differs from Q1), so hit tokens <= floor(prefix / 256) x 256
    and the rate's bound is that over prefix + Q2."""
    out = []
    for p in sorted({r["prefix"] for r in rows}):
        aligned = p // gran * gran
        prompt = p + qlen.get(p, 0)
        kv = aligned * kvpt
        g = {(r["tier"], r["arm"]): r["p50_ms"] for r in rows if r["prefix"] == p}
        t4c, t4s, t1s, t2s, t0c = (g.get(("T4", "cross")), g.get(("T4", "same")),
                                   g.get(("T1", "same")), g.get(("T2", "same")),
                                   g.get(("T0", "cross")))
        d = {"prefix": p, "aligned_tokens": aligned, "alignment_bound": round(aligned / prompt, 4),
             "kv_bytes": kv, "kv_mib": round(kv / (1 << 20), 1),
             "t4_cross_p50_ms": t4c, "effective_read_gbps": r1(kv / (t4c / 1e3) / 1e9, 2)
             if t4c else None}
        d["effective_of_ceiling"] = r1(d["effective_read_gbps"] / ceiling, 3) \
            if d["effective_read_gbps"] and ceiling else None
        d["projection_27gbps_ms"] = r1(t1s + kv / paper.FABRIC_GBPS / 1e6) if t1s else None
        bound = t1s + 1.2 * kv / ceiling / 1e6 if (t1s and ceiling) else None
        d["t4_bound_ms"] = r1(bound)
        d["t4_vs_t0"] = r1(t0c / t4c, 2) if (t0c and t4c) else None
        d["t4_vs_t0_bound"] = r1(t0c / (t1s + kv / ceiling / 1e6), 2) \
            if (t0c and t1s and ceiling) else None
        d["t4_cross_same"] = r1(t4c / t4s, 3) if (t4c and t4s) else None
        hit = _row(rows, "T4", "cross", p)
        d["t4_cross_hit_rate"] = hit["hit_rate"] if hit else None
        targets = []
        if p >= 8000 and t4c and t2s:
            targets.append({"target": "T4 cross <= T2 same", "ours": t4c, "limit": t2s,
                            "met": t4c <= t2s,
                            "ci95_diff_ms": median_diff_ci(
                                (samples or {}).get(("T4", "cross", p), []),
                                (samples or {}).get(("T2", "same", p), []))})
        if t4c and bound:
            targets.append({"target": "T4 cross <= T1 same + 1.2 x KV / ceiling", "ours": t4c,
                            "limit": r1(bound), "met": t4c <= bound})
        if d["t4_cross_same"]:
            targets.append({"target": "T4 cross/same <= 1.05", "ours": d["t4_cross_same"],
                            "limit": 1.05, "met": d["t4_cross_same"] <= 1.05})
        if hit:
            targets.append({"target": "T4 cross hit rate at the alignment bound",
                            "ours": hit["hit_rate"], "limit": round(aligned / prompt, 4),
                            "met": hit["hit_rate"] >= aligned / prompt - 0.005})
        d["targets"] = targets + gap_targets(g, p, kv, ceiling, t1s)
        out.append(d)
    return out


def gap_targets(g, p, kv, ceiling, t1s):
    """The sharing gap's bounds for every cross arm (B there from the start,
    late, restarted; prefix caching off and on): at >= 8K, arm - T1 same <=
    1.1 x KV / ceiling + 5 ms; arm / T4 same <= 1.05; and T4 <= 1.02 x T0."""
    out = []
    t4s, t0 = g.get(("T4", "same")), g.get(("T0", "cross")) or g.get(("T0", "same"))
    for t in ("T4", "T4pc"):
        for arm in CROSS_ARMS:
            v = g.get((t, arm))
            if not v:
                continue
            name = f"{t} {arm}"
            if p >= 8000 and t1s and ceiling:
                lim = 1.1 * kv / ceiling / 1e6 + 5
                out.append({"target": f"{name} - T1 same <= 1.1 x KV / ceiling + 5 ms",
                            "ours": r1(v - t1s), "limit": r1(lim), "met": v - t1s <= lim})
            if t4s:
                out.append({"target": f"{name} / T4 same <= 1.05", "ours": r1(v / t4s, 3),
                            "limit": 1.05, "met": v / t4s <= 1.05})
            if t0:
                out.append({"target": f"{name} <= 1.02 x T0", "ours": v, "limit": r1(1.02 * t0),
                            "met": v <= 1.02 * t0})
    return out


def _diverge(a, b):
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n if len(a) == len(b) else n


def oracle(reqs, records, ocfg):
    o = [r for r in reqs if r.get("phase") == "oracle"]
    if not o:
        return None
    by = {}
    for r in o:
        name = {"none": "T0", "same": "T1_same", "cross": "T4_cross",
                "cross-poisoned": "T4_poisoned"}[r["arm"]] if r["req"] == 2 else None
        if r["req"] == 1 and r["tier"] == "T4":
            by.setdefault(r["session"], {})["T4_req1"] = r
        if name:
            by.setdefault(r["session"], {})[name] = r
    out = {"prompts": 0, "tokens": None, "identical": {}, "max_logprob_diff": {},
           "kv_equal": 0, "kv_compared": 0, "poisoned_changed": 0, "poisoned_compared": 0,
           "zeroed_blocks": 0, "per_prompt": []}
    pairs = (("T4_cross", "T1_same"), ("T4_cross", "T0"), ("T1_same", "T0"))
    for j, d in sorted(by.items()):
        out["prompts"] += 1
        pp = {"prompt": j}
        for a, b in pairs:
            if a in d and b in d:
                ta, tb = d[a]["tokens"], d[b]["tokens"]
                k = f"{a}_vs_{b}"
                same = ta == tb
                out["identical"][k] = out["identical"].get(k, 0) + int(same)
                n = _diverge(ta, tb)
                la, lb = d[a].get("logprobs") or [], d[b].get("logprobs") or []
                m = max((abs(x - y) for x, y in zip(la[:n], lb[:n])), default=0.0)
                out["max_logprob_diff"][k] = max(out["max_logprob_diff"].get(k, 0.0), m)
                pp[k] = {"identical": same, "diverge_at": None if same else n,
                         "max_logprob_diff": round(m, 5)}
        if "T4_cross" in d and "T4_req1" in d:
            stored = d["T4_req1"].get("stored_bytes")
            loaded = d["T4_cross"]["counters"][d["T4_cross"]["replica"]]["kv_load_bytes"]
            pp["kv_stored_bytes"], pp["kv_loaded_bytes"] = stored, loaded
            out["kv_compared"] += 1
            out["kv_equal"] += int(stored is not None and stored > 0 and stored == loaded)
            pp["hit_tokens"] = d["T4_cross"]["hit_tokens"]
        if "T4_poisoned" in d and "T4_cross" in d:
            out["poisoned_compared"] += 1
            changed = d["T4_poisoned"]["tokens"] != d["T4_cross"]["tokens"]
            out["poisoned_changed"] += int(changed)
            pp["poisoned_changed"] = changed
            zb = sum(c.get("zeroed_blocks", 0)
                     for c in (d["T4_poisoned"].get("poison_counts") or {}).values())
            out["zeroed_blocks"] = max(out["zeroed_blocks"], zb)
        out["tokens"] = len(d.get("T0", d.get("T1_same", {})).get("tokens") or [])
        out["per_prompt"].append(pp)
    out["max_logprob_diff"] = {k: round(v, 5) for k, v in out["max_logprob_diff"].items()}
    out["model"] = ocfg.get("num_hidden_layers"), ocfg.get("hidden_size")
    out["pass"] = (out["prompts"] >= 10 and out["poisoned_compared"] == out["prompts"]
                   and out["poisoned_changed"] == out["poisoned_compared"]
                   and out["kv_compared"] == out["prompts"]
                   and out["kv_equal"] == out["kv_compared"] and out["zeroed_blocks"] > 0)
    return out


def integrity(records):
    """What each tier did with KV damaged between store and load (damage.py):
    one row per damaged session."""
    out = []
    for r in sorted(latest(records, "integrity"), key=lambda r: (r["tier"], r["session"])):
        out.append({k: r.get(k) for k in (
            "tier", "session", "prefix", "damage", "verdict", "damaged_ranges", "damaged_bytes",
            "clean_hit_tokens", "damaged_hit_tokens", "output_equal", "tier_load_fallbacks",
            "tier_crc_failures", "error")})
    return out


def pairs(grid, derived, n):
    """Hits per ordered pair of replicas (storing>reading, e.g. "C>A"), per
    shared tier and prefix, from the reusing requests (first reads
    included: the hit, not the time, is the point here; the TTFT median
    leaves them out). pairs_complete: per tier and prefix, whether every
    ordered pair of the n replicas has a session and all of them hit at the
    alignment bound."""
    bound = {d["prefix"]: d["alignment_bound"] for d in derived}
    by = {}
    for r in grid:
        if r["req"] == 2 and r.get("pair") and r["arm"] == "cross":
            by.setdefault((r["tier"], r["prefix"], r["pair"]), []).append(r)
    rows = []
    for (t, p, pr), v in sorted(by.items()):
        hits = [x["hit_rate"] for x in v]
        steady = [x["ttft_ms"] for x in v if not x.get("first_read")]
        rows.append({"tier": t, "prefix": p, "pair": pr, "n": len(v),
                     "hit_rate": round(sum(hits) / len(hits), 4),
                     "min_hit_rate": round(min(hits), 4), "p50_ms": r1(pct(steady, 50)),
                     "at_bound": bound.get(p) is not None and min(hits) >= bound[p] - 0.005})
    want = {f"{chr(65 + a)}>{chr(65 + b)}" for a in range(n) for b in range(n) if a != b}
    complete = {}
    for t, p in sorted({(x["tier"], x["prefix"]) for x in rows}):
        got = {x["pair"]: x["at_bound"] for x in rows if (x["tier"], x["prefix"]) == (t, p)}
        complete.setdefault(t, {})[str(p)] = {
            "pairs": len(want), "with_sessions": len(want & set(got)),
            "at_bound": sum(1 for k in want if got.get(k)),
            "complete": want <= set(got) and all(got[k] for k in want)}
    return rows, complete


def load(records):
    rs = [r for r in latest(records, "load_req") if r.get("req") == 2]
    cells = {}
    for r in rs:
        cells.setdefault((r["tier"], r["prefix"], r["concurrency"]), []).append(r)
    out = []
    for (t, p, c), v in sorted(cells.items()):
        x = [r["ttft_ms"] for r in v]
        out.append({"tier": t, "arm": v[0]["arm"], "prefix": p, "concurrency": c, "n": len(x),
                    "p50_ms": r1(pct(x, 50)), "p90_ms": r1(pct(x, 90)),
                    "hit_rate": round(sum(r["hit_rate"] for r in v) / len(v), 4)})
    return out


# ---------------- Markdown ----------------

def _f(x, d=1, suffix=""):
    return "—" if x is None else f"{x:.{d}f}{suffix}"


def _plabel(p):
    return paper.LABEL.get(p, str(p))


def tables(s):
    rows = s["rows"]
    prefixes = sorted({r["prefix"] for r in rows})
    L = []
    w = L.append
    w(f"# TTFT: cxlkv (T4) beside vLLM's own tiers\n")
    w(f"Rebuilt by `bench/ttft/ttft.py report` from `log.jsonl`. Platform {s['platform']}, "
      f"{s['gpus']} GPU(s), {s['replicas']} replicas, vLLM {s['vllm_version']}, model "
      f"{s['model']} ({s['weights']}), {s['kv_bytes_per_token']} B of KV per token, "
      f"pinned H2D ceiling {_f(s['h2d_ceiling_gbps'], 2, ' GB/s')} (same run). Query "
      f"{s['query_len']} tokens, {s['max_tokens']} generated, offload granularity "
      f"{s['granularity']} tokens. Paper: [Fan26] §4, one L4 per node, vLLM 0.23.0, CXL at "
      f"{paper.FABRIC_GBPS} GB/s, n = 60 per cell. Ours: n per cell below, first reads "
      f"excluded (own table).\n")
    w("## Tiers and memory\n")
    w("| tier | flags |\n|---|---|")
    for t, fl in (s.get("tier_flags") or {}).items():
        w(f"| {t} | `{' '.join(fl)}` |")
    m = s.get("memory") or {}
    w(f"\nGPU share per engine {m.get('gpu_memory_utilization')} (KV cache "
      f"{_gib(m.get('gpu_kv_cache_bytes'))} each when sharing a GPU), T4 region "
      f"{_gib(m.get('region_bytes'))}, `/dev/shm` {_gib(m.get('dev_shm_bytes'))}, T2 CPU "
      f"{m.get('t2_cpu_gib')} GiB per engine, CPU KV cache {_gib(m.get('cpu_kv_cache_bytes'))}.")
    for sk in s["skipped"]:
        what = f"{sk['tier']}'s {sk['phase']} step" if sk.get("phase") else sk["tier"]
        w(f"\n{what} skipped: {sk['reason']}.")
    for e in s["start_failures"]:
        w(f"\n{e['tier']} ({e['phase']}) did not start: {e['error']}"
          f"{'; the engine log says: `' + e['cause'] + '`' if e.get('cause') else ''}.")
    for e in s.get("start_retries", []):
        w(f"\n{e['tier']} ({e['phase']}) failed to start in call {e['call']} ({e['error']}"
          f"{'; the engine log says: `' + e['cause'] + '`' if e.get('cause') else ''}) and "
          f"started in call {e['started_in_call']}, whose results are the ones shown.")
    w("\n## Table 3: cross arm, median TTFT (ms); ours | paper\n")
    w("| prefix | T0 | T1 | T2 | T4 | T4 vs T0 | T4 hit | cross/same T1 | cross/same T4 |")
    w("|---|---|---|---|---|---|---|---|---|")
    for p in prefixes:
        i = paper.at(p)
        cells = []
        for t in TIERS:
            r = _row(rows, t, "cross", p)
            pp = paper.TABLE6[(t, "cross")][i][0] if i is not None else None
            cells.append(f"{_f(r and r['p50_ms'])} \\| {_f(pp)}")
        d = next(x for x in s["derived"] if x["prefix"] == p)
        cs = {}
        for t in ("T1", "T4"):
            c, sa = _row(rows, t, "cross", p), _row(rows, t, "same", p)
            cs[t] = c["p50_ms"] / sa["p50_ms"] if (c and sa) else None
        hit = d["t4_cross_hit_rate"]
        w(f"| {_plabel(p)} | " + " | ".join(cells) +
          f" | {_f(d['t4_vs_t0'], 1, '×')} \\| {_f(paper.SPEEDUP_T4_T0[i] if i is not None else None, 1, '×')}"
          f" | {_f(hit and hit * 100, 1, '%')} \\| {_f(paper.TABLE6[('T4', 'cross')][i][3] if i is not None else None, 1, '%')}"
          f" | {_f(cs['T1'], 1, '×')} \\| {_f(paper.CROSS_SAME['T1'][i] if i is not None else None, 1, '×')}"
          f" | {_f(cs['T4'], 2, '×')} \\| {_f(paper.CROSS_SAME['T4'][i] if i is not None else None, 2, '×')} |")
    w("\n## Table 4: cross/same ratio of median TTFT; ours | paper\n")
    w("| prefix | " + " | ".join(TIERS) + " |\n|---|---|---|---|---|")
    for p in prefixes:
        i = paper.at(p)
        cells = []
        for t in TIERS:
            c, sa = _row(rows, t, "cross", p), _row(rows, t, "same", p)
            ours = c["p50_ms"] / sa["p50_ms"] if (c and sa) else None
            cells.append(f"{_f(ours, 2, '×')} \\| "
                         f"{_f(paper.CROSS_SAME[t][i] if i is not None else None, 2, '×')}")
        w(f"| {_plabel(p)} | " + " | ".join(cells) + " |")
    w("\n## Table 5: effective KV read rate of T4 (cross arm, whole median TTFT)\n")
    w("| prefix | KV MiB | T4 p50 ms | effective GB/s | of our ceiling | paper: MiB, ms, GB/s, % of 27.1 | projection T1 + KV ÷ 27 GB/s (ms) |")
    w("|---|---|---|---|---|---|---|")
    for d in s["derived"]:
        i = paper.at(d["prefix"])
        pv = paper.TABLE5[i] if i is not None else None
        w(f"| {_plabel(d['prefix'])} | {d['kv_mib']} | {_f(d['t4_cross_p50_ms'])} | "
          f"{_f(d['effective_read_gbps'], 2)} | {_f(d['effective_of_ceiling'] and d['effective_of_ceiling'] * 100, 0, '%')} | "
          f"{'—' if pv is None else f'{pv[0]}, {pv[1]}, {pv[2]}, {pv[3]}%'} | "
          f"{_f(d['projection_27gbps_ms'])} |")
    w("\n## Table 6: TTFT of the reusing request (ms); ours | paper\n")
    w("| tier | arm | prefix | n | p50 | p90 | p99 (n ≥ 50) | hit % |")
    w("|---|---|---|---|---|---|---|---|")
    for r in rows:
        i = paper.at(r["prefix"])
        # The paper has no LMCache or T4pc rows, nor late/restarted arms: empty.
        pt = paper.TABLE6.get((r["tier"], r["arm"]))
        pv = pt[i] if (i is not None and pt) else (None,) * 4
        w(f"| {r['tier']} | {r['arm']} | {_plabel(r['prefix'])} | {r['n']} | "
          f"{_f(r['p50_ms'])} \\| {_f(pv[0])} | {_f(r['p90_ms'])} \\| {_f(pv[1])} | "
          f"{_f(r['p99_ms'])} \\| {_f(pv[2])} | {_f(r['hit_rate'] * 100, 1)} \\| {_f(pv[3])} |")
    w("\n## Table 7: same arm, T1 vs T4 (ms); ours | paper\n")
    w("| prefix | T1 p50 | T4 p50 | T4/T1 |\n|---|---|---|---|")
    for p in prefixes:
        i = paper.at(p)
        a, b = _row(rows, "T1", "same", p), _row(rows, "T4", "same", p)
        pv = paper.TABLE7[i] if i is not None else (None,) * 3
        ratio = b["p50_ms"] / a["p50_ms"] if (a and b) else None
        w(f"| {_plabel(p)} | {_f(a and a['p50_ms'])} \\| {_f(pv[0])} | "
          f"{_f(b and b['p50_ms'])} \\| {_f(pv[1])} | {_f(ratio, 2, '×')} \\| {_f(pv[2], 2, '×')} |")
    if any(len(x["medians"]) > 1 for x in s.get("repetitions", [])):
        w("\n## Table 8: per-repetition median TTFT, cross arm (ms); spread = (max - min) / "
          "median (paper: within 3.1 % on 15 of 16 cells)\n")
        nrep = max(max(x["medians"]) for x in s["repetitions"]) + 1
        w("| tier | prefix | " + " | ".join(f"rep {i + 1}" for i in range(nrep)) + " | spread |")
        w("|---|---|" + "---|" * nrep + "---|")
        for x in s["repetitions"]:
            cells = " | ".join(_f(x["medians"].get(i)) for i in range(nrep))
            w(f"| {x['tier']} | {_plabel(x['prefix'])} | {cells} | "
              f"{_f(x['spread'] and x['spread'] * 100, 1, '%')} |")
    w("\n## Targets (issues 12 and 23)\n")
    w("| prefix | target | ours | limit | met |\n|---|---|---|---|---|")
    for d in s["derived"]:
        for t in d["targets"]:
            ci = t.get("ci95_diff_ms")
            note = (f" (difference {t['ours'] - t['limit']:+.1f} ms, 95 % bootstrap interval "
                    f"{ci[0]:+.1f} to {ci[1]:+.1f}{': inside noise' if ci[0] <= 0 <= ci[1] else ''})"
                    if ci else "")
            w(f"| {_plabel(d['prefix'])} | {t['target']} | {t['ours']} | {t['limit']} | "
              f"{'yes' if t['met'] else '**no**'}{note} |")
        w(f"| {_plabel(d['prefix'])} | T4 vs T0 speedup (bound T0 ÷ (T1 + KV ÷ ceiling)) | "
          f"{_f(d['t4_vs_t0'], 2, '×')} | {_f(d['t4_vs_t0_bound'], 2, '×')} | reported |")
    if s.get("load_time"):
        w("\n## Where the time went: the worker's load time (vllm:kv_offload_load_time) in the "
          "reusing request\n")
        w("Load = the worker's copy (and CRC) time; cxlkv manager = its lookup, pin and load "
          "bookkeeping on the scheduler thread (cxlkv:manager_seconds); rest = TTFT minus both "
          "(scheduling, prefill of the tail, first decode step, HTTP).\n")
        w("| tier | arm | prefix | TTFT p50 ms | load p50 ms | load GB/s p50 | "
          "cxlkv manager p50 ms | rest (engine) ms |")
        w("|---|---|---|---|---|---|---|---|")
        for x in s["load_time"]:
            mgr = x.get("manager_p50_ms")
            rest = (x["ttft_p50_ms"] - x["load_p50_ms"] - (mgr or 0)
                    if x["load_p50_ms"] is not None else None)
            w(f"| {x['tier']} | {x['arm']} | {_plabel(x['prefix'])} | {_f(x['ttft_p50_ms'])} | "
              f"{_f(x['load_p50_ms'])} | {_f(x['load_gbps_p50'], 2)} | "
              f"{_f(mgr, 2) if mgr is not None else '— (not measured)'} | {_f(rest)} |")
    w("\n## Validity controls\n")
    w("| tier | arm | prefix | req1 n | req1 max hit % |\n|---|---|---|---|---|")
    for r in s["req1"]:
        w(f"| {r['tier']} | {r['arm']} | {_plabel(r['prefix'])} | {r['n']} | "
          f"{_f(r['hit_rate'] * 100, 2)} |")
    c = s["control"]
    w(f"\nNever-stored prompts sent to the T4 replicas: {c['requests']} requests, "
      f"{int(c['queried_tokens'])} tokens queried through the connector, "
      f"{int(c['hit_tokens'])} tokens hit (must be 0). Paper: 0 of 12,298 queries.\n")
    if len(c.get("by_tier", {})) > 1:
        w("By tier: " + "; ".join(
            f"{t} {b['requests']} requests, {int(b['queried_tokens'])} tokens queried, "
            f"{int(b['hit_tokens'])} hit" for t, b in sorted(c["by_tier"].items())) + ".\n")
    w("Sessions whose req2 was sent before A's store counter covered req1's chunks "
      f"(after --store-wait-s): {s['store_incomplete'] or 'none'}.\n")
    w("First read of each replica process (left out of the cells above; paper: 521.2 ms "
      "against 101.6 ms steady at 2K):\n")
    w("| tier | arm | prefix | replica | TTFT ms |\n|---|---|---|---|---|")
    for f in s["first_reads"]:
        w(f"| {f['tier']} | {f['arm']} | {_plabel(f['prefix'])} | {f['replica']} | "
          f"{f['ttft_ms']:.1f} |")
    w("\nEngine start (spawn to /health) and cxlkv setup lines per replica:\n")
    w("| replica | tier | ready s | cxlkv setup lines (ms) |\n|---|---|---|---|")
    for r in s["replica_setup"]:
        lines = "; ".join(_setup(x) for x in r["setup_lines"][:6]) or "—"
        w(f"| {r['name']} | {r['tier']} | {r['ready_s']} | {lines.replace('|', '/')} |")
    o = s["oracle"]
    if o:
        w("\n## Correctness oracle\n")
        w(f"Seeded small Qwen2 (layers, hidden = {o['model']}), {o['prompts']} prompts, "
          f"{o['tokens']} greedy tokens each. Identical continuations: " +
          ", ".join(f"{k.replace('_', ' ')} {v}/{o['prompts']}" for k, v in o["identical"].items())
          + f" (paper: T0 vs T4 {paper.ORACLE_IDENTICAL[0]}/{paper.ORACLE_IDENTICAL[1]} across "
          "two GPUs). Largest logprob difference before the first divergence: " +
          ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in o["max_logprob_diff"].items()) +
          f". KV bytes loaded == stored: {o['kv_equal']}/{o['kv_compared']}. Poisoned KV "
          f"(loaded pages zeroed, {o['zeroed_blocks']} blocks) changed the output in "
          f"{o['poisoned_changed']}/{o['poisoned_compared']}. Oracle "
          f"{'PASSES' if o['pass'] else 'FAILS'}.")
    if s["load"]:
        w("\n## Load: closed-loop sessions per replica (the paper could not run this, §6)\n")
        w("| tier | arm | prefix | sessions per replica | n | p50 ms | p90 ms | hit % |")
        w("|---|---|---|---|---|---|---|---|")
        for r in s["load"]:
            w(f"| {r['tier']} | {r['arm']} | {_plabel(r['prefix'])} | {r['concurrency']} | "
              f"{r['n']} | {_f(r['p50_ms'])} | {_f(r['p90_ms'])} | {_f(r['hit_rate'] * 100, 1)} |")
    shared_pairs = [r for r in s.get("pairs", []) if r["tier"] not in ("T0", "T1")]
    if shared_pairs:
        w(f"\n## Replica pairs: cross-arm hits per ordered pair ({s['replicas']} replicas)\n")
        w("The storing replica's prefix read by another (`C>A`: C stored, A read); hit % over "
          "every session of the pair (first reads included), p50 without first reads. On one "
          "shared GPU the TTFT mostly shows contention between the engines.\n")
        w("| tier | prefix | pair | n | hit % | min hit % | at bound | p50 ms |")
        w("|---|---|---|---|---|---|---|---|")
        for r in shared_pairs:
            w(f"| {r['tier']} | {_plabel(r['prefix'])} | {r['pair']} | {r['n']} | "
              f"{_f(r['hit_rate'] * 100, 1)} | {_f(r['min_hit_rate'] * 100, 1)} | "
              f"{'yes' if r['at_bound'] else '**no**'} | {_f(r['p50_ms'])} |")
        for t, by in sorted(s.get("pairs_complete", {}).items()):
            if t in ("T0", "T1"):
                continue
            w(f"\n{t}: " + "; ".join(
                f"{_plabel(int(p))}: {c['at_bound']} of {c['pairs']} ordered pairs at the bound "
                f"({c['with_sessions']} with sessions)" for p, c in sorted(
                    by.items(), key=lambda kv: int(kv[0]))) + ".")
    if s.get("region_counters"):
        w("\n## Region-wide counters at the end of each shared tier run\n")
        w("The store's own counters (T4: the region's, hits of another participant's stores "
          "among them; T3: mooncake_master's; T5/T6: the L1 object count) and each replica's "
          "external hits and KV bytes (vLLM's /metrics).\n")
        w("| tier | phase | call | replicas | store | per replica: external hit tokens / "
          "loaded MiB / stored MiB |")
        w("|---|---|---|---|---|---|")
        for x in s["region_counters"]:
            st = x.get("store") or {}
            keys = ("stores", "lookups", "hits", "cross_participant_hits", "evictions",
                    "crc_failures", "master_key_count",
                    "master_evicted_key_count", "master_allocated_bytes", "l1_objects")
            stt = ", ".join(f"{k} {int(st[k]) if isinstance(st[k], (int, float)) else st[k]}"
                            for k in keys if k in st) or str(st)[:120]
            per = "; ".join(
                f"{role} {int(c.get('external_hit', 0))} / "
                f"{c.get('kv_load_bytes', 0) / 2**20:.0f} / {c.get('kv_store_bytes', 0) / 2**20:.0f}"
                if "error" not in c else f"{role} {c['error'][:60]}"
                for role, c in sorted((x.get("per_replica") or {}).items()))
            w(f"| {x['tier']} | {x['phase']} | {x.get('call')} | {x.get('replicas')} | {stt} | "
              f"{per} |")
    peers = [r for r in rows if r["tier"] in ("T4",) + PEERS]
    if any(r["tier"] in PEERS for r in peers):
        w("\n## T4 beside its peers (T3: Mooncake Store, T5: LMCache with L1 in DRAM, "
          "T6: LMCache with a devdax L1)\n")
        if any(r["tier"] == "T3" for r in peers):
            w("T3 is Mooncake Store over TCP on loopback: Mooncake is deployed with RDMA "
              "between hosts (a one-sided NIC read into GPU memory), so every T3 load here "
              "crosses the kernel's TCP stack and its TTFT is an upper bound of Mooncake's cost "
              "on one host; its hit rates and eviction are its own. It stores one key per engine "
              "block (16 tokens on the GPU), so its hits may pass the 256-token alignment bound "
              "of T4 and T5.\n")
        w("| prefix | arm | tier | n | p50 ms | p90 ms | hit % | alignment bound % |")
        w("|---|---|---|---|---|---|---|---|")
        bound = {d["prefix"]: d["alignment_bound"] for d in s["derived"]}
        for r in sorted(peers, key=lambda r: (r["prefix"], r["arm"], r["tier"])):
            b = bound.get(r["prefix"])
            w(f"| {_plabel(r['prefix'])} | {r['arm']} | {r['tier']} | {r['n']} | "
              f"{_f(r['p50_ms'])} | {_f(r['p90_ms'])} | {_f(r['hit_rate'] * 100, 1)} | "
              f"{_f(b and b * 100, 1)} |")
    if s.get("integrity"):
        w("\n## Integrity: KV damaged between store and load, from outside\n")
        w("Stored bytes damaged in the tier's memory after req1 stored them and req2 loaded "
          "them once undamaged (`byte`: one byte in every 4 KiB flipped; `zero`: all zeroed); "
          "req2 then sent again to the replica that never stored the prompt.\n")
        w("| tier | session | damage | ranges | bytes | hit tokens undamaged → damaged | "
          "tier counted | output equal | verdict |\n|---|---|---|---|---|---|---|---|---|")
        for r in s["integrity"]:
            w(f"| {r['tier']} | {r['session']} | {r['damage']} | {r['damaged_ranges']} | "
              f"{r['damaged_bytes']} | {r['clean_hit_tokens']} → {r['damaged_hit_tokens']} | "
              f"{r['tier_load_fallbacks']} | {r['output_equal']} | {r['verdict']} |")
    for e in s["errors"]:
        w(f"\nError in {e['phase']} {e['tier']}: {e['error'][:300]}")
    for e in s["warnings"]:
        w(f"\nWarning ({e['tier']}): {e['warning']}")
    return "\n".join(L) + "\n"


_MGR = ("cxlkv_lookup_s", "cxlkv_prepare_load_s", "cxlkv_complete_load_s", "cxlkv_get_stats_s")


def _manager_ms(counters):
    return sum(counters.get(k, 0) for k in _MGR) * 1e3


def _failed_start(r):
    return {"tier": r["tier"], "phase": r["phase"], "error": r["error"], "call": r.get("call"),
            "cause": r.get("cause") or _cause(r.get("log_tail", ""))}


def _restarted(records, failed):
    """The call in which the failed start's (phase, rep, tier) later started, or None."""
    for r in records:
        if (r.get("kind") == "replica" and r.get("phase") == failed.get("phase")
                and r.get("tier") == failed.get("tier") and r.get("call", -1) > failed.get("call", -1)
                and r["name"].startswith(f"{failed.get('phase')}-r{failed.get('rep')}-")):
            return r["call"]
    return None


def _setup(x):
    """'registered ... 2.05 s' -> 'registered: 2050 ms' (the words around cxlkv's duration)."""
    line = x["line"].split("cxlkv:", 1)[-1].strip()
    if x.get("ms") is None:
        return line[:60]
    return f"{line[:60]}: {x['ms']:.0f} ms"


def _gib(b):
    return "—" if not b else f"{b / (1 << 30):.1f} GiB"


# ---------------- plots ----------------

def plots(s, out):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return [f"no plots: {e}"]
    made = []
    rows = s["rows"]
    # The peers beside T4 in the same plots (issue 28); T4pc for a load cell.
    colors = {"T0": "tab:gray", "T1": "tab:blue", "T2": "tab:orange", "T4": "tab:green",
              "T4pc": "tab:olive", "T3": "tab:brown", "T5": "tab:purple", "T6": "tab:pink"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, arm in zip(axes, ARMS):
        for t in TIERS + PEERS:
            pts = sorted((r["prefix"], r["p50_ms"]) for r in rows
                         if r["tier"] == t and r["arm"] == arm)
            if pts:
                ax.plot(*zip(*pts), "o-", color=colors[t], label=f"{t} ours")
            pp = paper.TABLE6.get((t, arm))
            if pp:
                ax.plot(paper.PREFIXES, [x[0] for x in pp], "x--", color=colors[t], alpha=0.5,
                        label=f"{t} paper")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{arm} arm: TTFT of the reusing request, p50")
        ax.set_xlabel("shared prefix (tokens)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("ms")
    axes[1].legend(fontsize=7, ncol=2)
    fig.suptitle(f"vLLM {s['vllm_version']}, {s['model']} ({s['load_format']} weights), "
                 f"{s['gpus']} GPU(s)", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "ttft.png"), dpi=120)
    plt.close(fig)
    made.append("ttft.png")
    d = [x for x in s["derived"] if x["effective_read_gbps"]]
    if d:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot([x["prefix"] for x in d], [x["effective_read_gbps"] for x in d], "o-",
                color="tab:green", label="T4 cross, ours (KV ÷ whole p50 TTFT)")
        ax.plot(paper.PREFIXES, [x[2] for x in paper.TABLE5], "x--", color="tab:green",
                alpha=0.5, label="paper")
        if s["h2d_ceiling_gbps"]:
            ax.axhline(s["h2d_ceiling_gbps"], color="k", label="pinned H2D ceiling (same run)")
        ax.axhline(paper.FABRIC_GBPS, color="tab:red", ls=":", label="paper's CXL fabric")
        ax.set_xscale("log")
        ax.set_xlabel("shared prefix (tokens)")
        ax.set_ylabel("GB/s")
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "read_rate.png"), dpi=120)
        plt.close(fig)
        made.append("read_rate.png")
    if s["load"]:
        fig, ax = plt.subplots(figsize=(6, 4))
        for (t, p) in sorted({(r["tier"], r["prefix"]) for r in s["load"]}):
            pts = sorted((r["concurrency"], r["p50_ms"]) for r in s["load"]
                         if (r["tier"], r["prefix"]) == (t, p))
            ax.plot(*zip(*pts), "o-", color=colors[t], alpha=1 if p > 10000 else 0.6,
                    label=f"{t} {_plabel(p)}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("closed-loop sessions per replica")
        ax.set_ylabel("req2 TTFT p50 (ms)")
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "load.png"), dpi=120)
        plt.close(fig)
        made.append("load.png")
    return made


def split_variants(records):
    """{variant: its records}: a variant is the model and API of a call
    ("qwen7b/server", "llama8b/offline"; logs from before variants: the
    call's model, server). Ceilings are the card's: every variant gets them."""
    of_call = {r["call"]: r.get("variant") or f"{r['grid_model']['name']}/server"
               for r in records if r.get("kind") == "call"}
    names = list(dict.fromkeys(of_call.values()))
    return {v: [r for r in records if r.get("kind") == "ceiling" or
                of_call.get(r.get("call")) == v] for v in names}


def main(run_dir, out):
    records, torn = read(os.path.join(run_dir, "log.jsonl"))
    if not records:
        print(f"report: {run_dir}/log.jsonl is missing or empty", file=sys.stderr)
        return 2
    parts = split_variants(records)
    if not parts:
        raise SystemExit("report: the log has no call record (not a ttft.py run log)")
    by = {v: build(recs) for v, recs in parts.items()}
    names = list(by)
    # The first variant at top level (as logs of one variant always were);
    # every variant, the first included, under by_variant.
    s = dict(by[names[0]], variant=names[0], variants=names, torn_lines=torn)
    if len(names) > 1:
        s["by_variant"] = by
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(s, f, indent=1)
    with open(os.path.join(out, "tables.md"), "w") as f:
        if len(names) == 1:
            f.write(tables(s))
        else:
            f.write("Variants (model/API) in this run: " + ", ".join(names) + ".\n\n")
            for v in names:
                f.write(tables(by[v]).replace("# TTFT:", f"# {v}: TTFT:", 1) + "\n")
    made = []
    for i, v in enumerate(names):
        sub = out if i == 0 else os.path.join(out, v.replace("/", "-"))
        os.makedirs(sub, exist_ok=True)
        made += [os.path.relpath(os.path.join(sub, m), out) for m in plots(by[v], sub)
                 if not m.startswith("no plots")]
    cells = sum(len(x["rows"]) for x in by.values())
    print(f"report: {len(names)} variant(s), {cells} cells, oracle "
          f"{'-' if not s['oracle'] else ('pass' if s['oracle']['pass'] else 'FAIL')}, "
          f"{len(s['load'])} load cells -> {out}/summary.json, tables.md, {', '.join(made)}")
    return 0
