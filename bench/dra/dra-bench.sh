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
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/lib/stage.sh"
cd "$ROOT"
N=10
JSON_OUT=""
while [ $# -gt 0 ]; do
  case $1 in
    --claims) N=$2; shift 2 ;;
    --json) JSON_OUT=$2; shift 2 ;;
    *) echo "dra-bench: unknown argument $1 (--claims N, --json FILE)" >&2; exit 2 ;;
  esac
done
BIN=$ROOT/build/bin
CLUSTER=$ROOT/test/e2e/cluster.sh
PIDS=()
E=""
finish() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "${CXLKV_E2E_DIR:-}" ] && { bash "$CLUSTER" down >/dev/null 2>&1 || true; }
  [ -n "$E" ] && rm -rf "$E" /dev/shm/"$(basename "$E")"
}
trap finish EXIT
cxlkv_build_main cxlkv-dra-kubeletplugin cxlkv-dra-controller cxlkv-fabricd cxlkv-hostd >/dev/null ||
  exit 1
FK=$(test/e2e/fakekubelet/build.sh) || exit 1
E=$(mktemp -d /tmp/cxlkv-dra-bench.XXXXXX)
mkdir -p "$E/logs"
BACKING=/dev/shm/$(basename "$E")
NODES=(fake-node-0 fake-node-1)
source "$ROOT/test/e2e/lib/dra-env.sh"
dra_cluster_up 2 || exit 1
dra_fabric_up 5000 "${NODES[@]}" || { echo "dra-bench: fabricd did not start"; exit 1; }
for n in "${NODES[@]}"; do dra_node_up "$n" 1.5s; done
dra_deviceclass
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

gone() { ! kubectl get "$@" >/dev/null 2>&1; }
started() { [ -s "$1" ]; }
run_flow() {  # run_flow <flow>: N claims, one after the other
  local flow=$1
  start "ctl-$flow" "$BIN/cxlkv-dra-controller" --kubeconfig "$KUBECONFIG" --fabric "$F" \
    --identity "bench-$flow" --flow "$flow" --resync-period 5 --lease-duration 6
  # The slice must say which flow it is (binding conditions or none).
  local want=1; [ "$flow" = paper ] && want=0
  slice_flow() {
    [ "$(kubectl get resourceslice cxlkv.dev-cma-0-blade-0 -o json 2>/dev/null |
      python3 -c 'import json,sys; print(int("bindingConditions" in json.load(sys.stdin)["spec"]["devices"][0]))')" = "$want" ]
  }
  wait_until 40 slice_flow || { echo "dra-bench: the slice never matched flow $flow"; return 1; }
  for i in $(seq 1 "$N"); do
    local name="$flow-$i" node=fake-node-$((i % 2))
    cat <<YAML | kubectl apply -f - >/dev/null
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: $name, namespace: default}
spec:
  devices:
    requests:
      - name: kv
        exactly: {deviceClassName: cxlkv.dev, capacity: {requests: {memory: 1Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: $name, namespace: default}
spec:
  nodeSelector: {kubernetes.io/hostname: $node}
  restartPolicy: Never
  resourceClaims: [{name: kv, resourceClaimName: $name}]
  containers:
    - name: main
      image: none
      command: [sh, -c, 'date +%s.%N; test -s "\$CXL_DAX_DEVICE" && exec sleep 600']
      resources: {claims: [{name: kv}]}
YAML
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
python3 - "$E/watch.jsonl" "$E/started.txt" "$N" "$JSON_OUT" <<'PY'
import json, statistics, sys
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

def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

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
text = json.dumps(res)
if out:
    open(out, "w").write(text + "\n")
print(text)
ok = all(v["samples_cdi"] == n and v["samples_started"] == n for v in res["flows"].values())
sys.exit(0 if ok else 1)
PY
