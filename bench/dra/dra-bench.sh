#!/usr/bin/env bash
# dra-bench: how long a claim takes from allocated to usable, per flow, with
# the paper's flow run as the baseline in the same run.
#
#   bench/dra/dra-bench.sh [--claims N] [--json FILE]
#
# Real kube-apiserver + scheduler (test/e2e/cluster.sh, 2 fake nodes), the
# kubelet's own plugin and DRA managers per node (cxlkv-fakekubelet, prepare
# retried every 1.5 s), cxlkv-fabricd with one 8 GiB blade, cxlkv-hostd and
# cxlkv-dra-kubeletplugin per node, and cxlkv-dra-controller in each flow:
#   binding-conditions  the scheduler waits in PreBind for cxlkv.dev/composed
#                       (it polls every 5 s), the controller re-reads every
#                       500 ms;
#   paper (baseline)    no binding conditions: the pod binds at once, the
#                       controller waits for the consumer, composes, re-reads
#                       every 1.5 s; prepare answers "not ready yet" until the
#                       CDI ids are there (the flow of [Fan26] §2.3).
# For N claims per flow, one at a time (1 GiB, one pod on alternating nodes),
# it records from a watch on the claims: allocated (status.allocation seen)
# -> CDI ids in status (the pod's node Materialized with its cdiDevice), and
# -> container started (the time the container itself prints first).
# Prints a table and one JSON object; the ratio is paper / binding-conditions
# per percentile (>1: ours is faster). Needs root (private mount namespaces).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
N=10
JSON_OUT=""
bench_args dra-bench "--claims N, --json FILE" --claims=N --json=JSON_OUT -- "$@"
bench_world_up dra-bench 1.5s fake-node-0 fake-node-1
# Every claim change, stamped on arrival: first allocation, first time the
# pod's node is Materialized with a CDI device.
cat >"$E/stamp.py" <<'PY'
import json, os, sys, time
# kubectl prints one JSON document per change; stamp each on arrival.
dec, buf = json.JSONDecoder(), ""
out = open(sys.argv[1], "w", buffering=1)
while True:
    chunk = os.read(0, 1 << 16)
    if not chunk:
        break
    now = time.time()
    buf += chunk.decode()
    while True:
        buf = buf.lstrip()
        try:
            obj, end = dec.raw_decode(buf)
        except ValueError:
            break
        buf = buf[end:]
        st = obj.get("status", {})
        hosts = {}
        for d in st.get("devices", []):
            if d.get("driver") == "cxlkv.dev":
                hosts = d.get("data", {}).get("hosts", {})
        out.write(json.dumps({"t": now, "name": obj["metadata"]["name"],
                              "uid": obj["metadata"]["uid"],
                              "allocated": "allocation" in st,
                              "materialized": sorted(h for h, v in hosts.items()
                                                     if v.get("state") == "Materialized"
                                                     and v.get("cdiDevice"))}) + "\n")
PY
(kubectl get resourceclaims -w -o json 2>"$E/logs/watch.log" | python3 "$E/stamp.py" "$E/watch.jsonl") &
PIDS+=($!)

started() { [ -s "$1" ]; }
run_flow() {  # run_flow <flow>: N claims, one after the other
  local flow=$1
  start "ctl-$flow" "$BIN/cxlkv-dra-controller" --kubeconfig "$KUBECONFIG" --fabric "$F" \
    --identity "bench-$flow" --flow "$flow" --resync-period 5 --lease-duration 6
  # The slice must say which flow it is (binding conditions or none).
  local want=1; [ "$flow" = paper ] && want=0
  wait_until 40 slice_flow "$want" || { echo "dra-bench: the slice never matched flow $flow"; return 1; }
  for i in $(seq 1 "$N"); do
    local name="$flow-$i" node=fake-node-$((i % 2))
    { claim_yaml "$name" 1Gi; echo ---
      ns_pod_yaml default "$name" "$name" "$node" 'date +%s.%N; test -s "$CXL_DAX_DEVICE" && exec sleep 600'
    } | kubectl apply -f - >/dev/null
    local log=$E/$node/logs/default_${name}_main.log
    wait_until 120 started "$log" || echo "dra-bench: $name did not start"
    echo "$flow $name $node $(head -1 "$log" 2>/dev/null)" >>"$E/started.txt"
    kubectl delete pod "$name" --wait=false >/dev/null
    wait_until 60 gone pod "$name"
    kubectl delete resourceclaim "$name" --wait=false >/dev/null
    wait_until 60 gone resourceclaim "$name"
  done
  kill "$(eval echo "\$PID_ctl_${flow//-/_}")"
  wait "$(eval echo "\$PID_ctl_${flow//-/_}")" 2>/dev/null
}
run_flow binding-conditions || exit 1
run_flow paper || exit 1
sleep 1
PYTHONPATH=$ROOT/bench/dra python3 - "$E/watch.jsonl" "$E/started.txt" "$N" "$JSON_OUT" <<'PY'
import json, statistics, sys
from summary import emit, pct
watch, started, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
alloc, cdi = {}, {}
node_of, t_start = {}, {}
for line in open(started):
    f = line.split()
    if len(f) == 4:
        node_of[f[1]], t_start[f[1]] = f[2], float(f[3])
for line in open(watch):
    e = json.loads(line)
    name = e["name"]
    if e["allocated"] and name not in alloc:
        alloc[name] = e["t"]
    if name in node_of and node_of[name] in e["materialized"] and name not in cdi:
        cdi[name] = e["t"]

res = {"claims_per_flow": n, "flows": {}}
for flow in ("binding-conditions", "paper"):
    names = [f"{flow}-{i}" for i in range(1, n + 1)]
    to_cdi = [cdi[x] - alloc[x] for x in names if x in cdi and x in alloc]
    to_start = [t_start[x] - alloc[x] for x in names if x in t_start and x in alloc]
    res["flows"][flow] = {
        "samples_cdi": len(to_cdi), "samples_started": len(to_start),
        "alloc_to_cdi_p50_s": pct(to_cdi, 50), "alloc_to_cdi_p99_s": pct(to_cdi, 99),
        "alloc_to_started_p50_s": pct(to_start, 50), "alloc_to_started_p99_s": pct(to_start, 99)}
ours, base = res["flows"]["binding-conditions"], res["flows"]["paper"]
res["ratio_paper_over_ours"] = {
    k: (base[k] / ours[k]) if ours[k] and base[k] is not None else None
    for k in ("alloc_to_cdi_p50_s", "alloc_to_cdi_p99_s", "alloc_to_started_p50_s",
              "alloc_to_started_p99_s")}
fmt = lambda v: "-" if v is None else f"{v:.3f}"
print(f"{'flow':<20} {'n':>3} {'alloc->CDI p50':>15} {'p99':>8} {'alloc->started p50':>19} {'p99':>8}")
for flow, r in res["flows"].items():
    print(f"{flow:<20} {r['samples_cdi']:>3} {fmt(r['alloc_to_cdi_p50_s']):>15} "
          f"{fmt(r['alloc_to_cdi_p99_s']):>8} {fmt(r['alloc_to_started_p50_s']):>19} "
          f"{fmt(r['alloc_to_started_p99_s']):>8}")
r = res["ratio_paper_over_ours"]
print(f"{'ratio paper/ours':<20} {'':>3} {fmt(r['alloc_to_cdi_p50_s']):>15} "
      f"{fmt(r['alloc_to_cdi_p99_s']):>8} {fmt(r['alloc_to_started_p50_s']):>19} "
      f"{fmt(r['alloc_to_started_p99_s']):>8}")
emit(res, out)
ok = all(v["samples_cdi"] == n and v["samples_started"] == n for v in res["flows"].values())
sys.exit(0 if ok else 1)
PY
