"""Checks a report of the CPU stage's run (scripts/test.d/70-ttft.sh): the
output's shape and what the run must show. Prints one PASS/FAIL line per
check; exit status 1 if any failed.

    check_report.py REPORT_DIR
    check_report.py --peer TIER REPORT_DIR   # a peer's own two-replica run

--peer checks a run of one shared peer tier alone (the stage's --full T6 run):
fairness at one session per replica (both arms at the alignment bound, both
ordered pairs), req1 and never-stored prompts hitting nothing, and a verdict
for both kinds of damage.
"""

import json
import os
import sys

TIERS = ("T0", "T1", "T4")
ARMS = ("same", "cross")
ROW_FIELDS = {"tier", "arm", "prefix", "p50_ms", "p90_ms", "p99_ms", "hit_rate", "n"}
DECISION_FIELDS = {"decided_load", "decided_recompute"}  # T4 cells: the manager's choices
TOP_FIELDS = {"replicas", "gpus", "vllm_version", "h2d_ceiling_gbps", "kv_bytes_per_token"}


def main(out):
    results = []

    def check(name, ok, detail=""):
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + str(detail) if detail else ''}")

    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    rows = {(r["tier"], r["arm"], r["prefix"]): r for r in s["rows"]}
    prefixes = sorted({r["prefix"] for r in s["rows"]})
    check("summary.json top-level fields", TOP_FIELDS <= set(s), sorted(TOP_FIELDS - set(s)))
    check("every row has exactly the issue's fields",
          all(ROW_FIELDS <= set(r) <= ROW_FIELDS | DECISION_FIELDS for r in s["rows"])
          and s["rows"], len(s["rows"]))
    check("no session's req2 raced an unfinished store", not s["store_incomplete"],
          s["store_incomplete"])
    want = {(t, a, p) for t in TIERS for a in ARMS for p in prefixes}
    check("a row per tier x arm x prefix (T0/T1/T4)", len(prefixes) == 2 and want <= set(rows),
          sorted(want - set(rows)))
    check("two replicas, vLLM 0.32 on CPU", s["replicas"] == 2 and
          str(s["vllm_version"]).startswith("0.32") and s["gpus"] == 0)
    check("p99 only where n >= 50", all(r["p99_ms"] is None for r in s["rows"] if r["n"] < 50))
    check("T2 skipped with vLLM's reason", any(
        x["tier"] == "T2" and "CUDA-alike" in x["reason"] for x in s["skipped"]), s["skipped"])
    check("no engine failed to start, no request failed",
          not s["start_failures"] and not s["errors"], (s["start_failures"], s["errors"]))
    check("req1 hit rate ~ 0 in every cell (no prompt leakage)",
          all(r["hit_rate"] <= 0.05 for r in s["req1"]) and s["req1"],
          [r for r in s["req1"] if r["hit_rate"] > 0.05])
    bound = {d["prefix"]: d["alignment_bound"] for d in s["derived"]}
    for (t, a), lo, hi in ((("T0", "same"), 0, 0), (("T0", "cross"), 0, 0),
                           (("T1", "cross"), 0, 0)):
        check(f"{t} {a}: no hits", all(rows[(t, a, p)]["hit_rate"] <= hi for p in prefixes),
              [rows[(t, a, p)]["hit_rate"] for p in prefixes])
    check("T1 same: GPU prefix-cache hits on the shared prefix",
          all(rows[("T1", "same", p)]["hit_rate"] >= bound[p] - 0.01 for p in prefixes),
          [(rows[("T1", "same", p)]["hit_rate"], bound[p]) for p in prefixes])
    for a in ARMS:
        check(f"T4 {a}: hit rate at the 256-token alignment bound",
              all(abs(rows[("T4", a, p)]["hit_rate"] - bound[p]) <= 0.005 for p in prefixes),
              [(rows[("T4", a, p)]["hit_rate"], bound[p]) for p in prefixes])
    check("first read of each T4 replica reported separately",
          {(f["tier"], f["replica"]) for f in s["first_reads"]} >= {("T4", "A"), ("T4", "B")},
          s["first_reads"])
    lt = {(x["tier"], x["arm"]) for x in s.get("load_time", []) if x["load_p50_ms"]}
    check("the worker's load time is read per T4 request (where the time went)",
          {("T4", "same"), ("T4", "cross")} <= lt, s.get("load_time"))
    t4 = [r for r in s["replica_setup"] if r["tier"] == "T4"]
    check("every T4 engine logged its region attach time (cxlkv's lines reach vLLM's log)",
          t4 and all(any("attached region" in x["line"] and x["ms"] is not None
                         for x in r["setup_lines"]) for r in t4),
          [(r["name"], [x["line"][-80:] for x in r["setup_lines"]]) for r in t4])
    check("cxlkv's manager time is read per T4 request (cxlkv:manager_seconds)",
          all(x.get("manager_p50_ms") is not None and x["manager_p50_ms"] >= 0
              for x in s.get("load_time", []) if x["tier"] == "T4") and
          any(x["tier"] == "T4" for x in s.get("load_time", [])), s.get("load_time"))
    pc = (s.get("pairs_complete") or {}).get("T4", {})
    check("replica pairs: T4's cross arm over both ordered pairs (A>B, B>A), each at the bound",
          all(pc.get(str(p), {}).get("complete") for p in prefixes), pc)
    rc = [x for x in s.get("region_counters", []) if x["tier"] == "T4" and x["phase"] == "grid"]
    check("region-wide counters logged per T4 run: the region's stores, each replica's hits",
          rc and all((x["store"] or {}).get("stores", 0) > 0 and
                     set(x["per_replica"]) == {"A", "B"} for x in rc),
          [(x["store"], sorted(x["per_replica"])) for x in rc])
    c = s["control"]
    check("never-stored control: queried, zero hits",
          c["requests"] > 0 and c["queried_tokens"] > 0 and c["hit_tokens"] == 0, c)
    # LMCache (T5, issue 28) beside T4: the same checks, and the integrity step.
    for a in ARMS:
        check(f"T5 (LMCache) {a}: hit rate at the 256-token alignment bound",
              all(abs(rows[("T5", a, p)]["hit_rate"] - bound[p]) <= 0.005 for p in prefixes)
              if all(("T5", a, p) in rows for p in prefixes) else False,
              [(rows.get(("T5", a, p), {}).get("hit_rate"), bound[p]) for p in prefixes])
    ct = c.get("by_tier", {})
    check("never-stored control on T4 and T5: queried, zero hits",
          all(ct.get(t, {}).get("requests", 0) > 0 and ct[t]["queried_tokens"] > 0 and
              ct[t]["hit_tokens"] == 0 for t in ("T4", "T5")), ct)
    integ = s.get("integrity") or []
    t4i = [r for r in integ if r["tier"] == "T4"]
    check("integrity: T4 refused every damaged chunk and recomputed (byte and zero damage)",
          {r["damage"] for r in t4i} == {"byte", "zero"} and
          all(r["verdict"] == "detected, recomputed" and r["damaged_bytes"] > 0 for r in t4i),
          t4i)
    t5i = [r for r in integ if r["tier"] == "T5"]
    check("integrity: T5 damaged after a load and a verdict recorded for each mode",
          {r["damage"] for r in t5i} == {"byte", "zero"} and
          all(r["damaged_bytes"] > 0 and r["clean_hit_tokens"] > 0 and
              r["verdict"] not in ("request failed", "no load to damage") for r in t5i), t5i)
    o = s["oracle"] or {}
    check("oracle: >= 10 prompts of >= 32 greedy tokens",
          o.get("prompts", 0) >= 10 and (o.get("tokens") or 0) >= 32,
          (o.get("prompts"), o.get("tokens")))
    check("oracle: KV bytes loaded == stored for every prompt",
          o.get("kv_compared", 0) >= 10 and o.get("kv_equal") == o.get("kv_compared"),
          (o.get("kv_equal"), o.get("kv_compared")))
    check("oracle: the poisoned-KV control zeroed blocks and changed every output",
          o.get("zeroed_blocks", 0) > 0 and o.get("poisoned_compared", 0) >= 10 and
          o.get("poisoned_changed") == o.get("poisoned_compared"),
          (o.get("zeroed_blocks"), o.get("poisoned_changed"), o.get("poisoned_compared")))
    check("oracle: identical counts and logprob differences reported",
          {"T4_cross_vs_T1_same", "T4_cross_vs_T0"} <= set(o.get("identical", {})),
          (o.get("identical"), o.get("max_logprob_diff")))
    check("oracle: passes", bool(o.get("pass")))
    # Issue 23's scenarios, run as a second variant of the same directory:
    # the offline API, T4 with prefix caching on, B joining after the store.
    v = (s.get("by_variant") or {}).get("small/offline")
    check("scenarios: an offline-API variant beside the server's", v is not None,
          s.get("variants"))
    if v:
        vr = {(r["tier"], r["arm"]): r for r in v["rows"]}
        for arm in ("late", "restarted"):
            r = vr.get(("T4pc", arm))
            check(f"scenarios: T4pc {arm}: B hits what was stored before it started",
                  r is not None and r["hit_rate"] > 0.8 and r["p50_ms"] > 0, r)
        check("scenarios: T4pc same and cross rows", ("T4pc", "same") in vr, sorted(vr))
        check("scenarios: join restarts logged", any(
            x.get("ready_s") for x in v["replica_setup"]), len(v["replica_setup"]))
    with open(os.path.join(out, "tables.md")) as f:
        md = f.read()
    check("tables.md has the paper's Tables 3-7 and the flags",
          all(f"## Table {i}" in md for i in range(3, 8)) and "--no-enable-prefix-caching" in md)
    check("ttft.png written", os.path.getsize(os.path.join(out, "ttft.png")) > 1000)
    return 0 if all(results) else 1


def peer(out, tier):
    results = []

    def check(name, ok, detail=""):
        results.append(bool(ok))
        print(f"{'PASS' if ok else 'FAIL'} {tier}: {name}{': ' + str(detail) if detail else ''}")

    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    rows = {(r["arm"], r["prefix"]): r for r in s["rows"] if r["tier"] == tier}
    prefixes = sorted({p for _, p in rows})
    bound = {d["prefix"]: d["alignment_bound"] for d in s["derived"]}
    check("started, no request failed, no req2 raced its store",
          not s["start_failures"] and not s["errors"] and not s["store_incomplete"],
          (s["start_failures"], s["errors"], s["store_incomplete"]))
    for a in ARMS:
        check(f"{a}: hit rate at the 256-token alignment bound",
              prefixes and all((a, p) in rows and abs(rows[(a, p)]["hit_rate"] - bound[p]) <= 0.005
                               for p in prefixes),
              [(rows.get((a, p), {}).get("hit_rate"), bound[p]) for p in prefixes])
    pc = (s.get("pairs_complete") or {}).get(tier, {})
    check("cross arm: both ordered pairs (A>B, B>A), each at the bound",
          prefixes and all(pc.get(str(p), {}).get("complete") for p in prefixes), pc)
    req1 = [r for r in s["req1"] if r["tier"] == tier]
    check("req1 hit rate ~ 0 in every cell", req1 and all(r["hit_rate"] <= 0.05 for r in req1),
          [r for r in req1 if r["hit_rate"] > 0.05])
    ct = (s["control"].get("by_tier") or {}).get(tier, {})
    check("never-stored control: queried, zero hits",
          ct.get("requests", 0) > 0 and ct.get("queried_tokens", 0) > 0 and
          ct.get("hit_tokens") == 0, ct)
    integ = [r for r in s.get("integrity") or [] if r["tier"] == tier]
    check("integrity: damaged after a load, a verdict for each mode (byte, zero)",
          {r["damage"] for r in integ} == {"byte", "zero"} and
          all(r["damaged_bytes"] > 0 and r["clean_hit_tokens"] > 0 and
              r["verdict"] not in ("request failed", "no load to damage") for r in integ),
          [(r["damage"], r["verdict"]) for r in integ])
    check("no warning (e.g. an L1 that could not be pinned)", not s["warnings"], s["warnings"])
    return 0 if all(results) else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--peer":
        sys.exit(peer(sys.argv[3], sys.argv[2]))
    if len(sys.argv) != 2:
        sys.exit("usage: check_report.py [--peer TIER] REPORT_DIR")
    sys.exit(main(sys.argv[1]))
