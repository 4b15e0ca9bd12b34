#!/usr/bin/env bash
# The DRA driver's scenario 1, from a clean state, as one command:
#
#   sudo test/e2e/dra-demo.sh        # from the repository root or anywhere
#
# Starts a real control plane (test/e2e/cluster.sh: kube-apiserver,
# kube-scheduler, kube-controller-manager, 2 fake nodes), cxlkv-fabricd with
# one 8 GiB blade cabled to both nodes, and per node cxlkv-hostd,
# cxlkv-dra-kubeletplugin and cxlkv-fakekubelet (kubelet's own plugin manager
# and DRA manager); then cxlkv-dra-controller. A 2 GiB ResourceClaim is shared
# by two pods on the two nodes; their containers are `cxlkv replay` workers
# that attach through CXL_DAX_DEVICE. Deleting the pods and the claim must free
# the region and drop the finalizer. Everything it started is stopped and its
# temporary state removed at the end.
#
# Progress goes to stderr; the last line on stdout is one JSON object:
#   claim_ready_s       claim created -> cxlkv.dev/composed True (seconds)
#   nodes               nodes the region was materialized on
#   cdi_device          the CDI device both nodes' kubelets got
#   cross_replica_hits  blocks one replica loaded that the other stored (sum)
#   region_freed        the fabric manager has no region left for the claim
#   finalizer_removed   the claim is gone (cxlkv.dev/free-memory was dropped)
#   leaked_regions      regions left at the fabric manager
# Exit status 0 only when every one of those is as scenario 1 requires.
# Needs root (the fake kubelet runs containers in private mount namespaces),
# build/ with the cxlkv binaries (built here if missing) and the cached
# Kubernetes build (test/e2e/k8s-build.sh). About 50 s warm on 2 cores (measured 47 s).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
CLUSTER=$ROOT/test/e2e/cluster.sh
BIN=$ROOT/build/bin
say() { echo "dra-demo: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] && unshare --mount true 2>/dev/null ||
  die "needs root with mount namespaces (the fake kubelet's containers)"
for b in cxlkv-dra-kubeletplugin cxlkv-dra-controller cxlkv-fabricd cxlkv-hostd cxlkv; do
  [ -x "$BIN/$b" ] && continue
  say "building $b (build/)"
  source "$ROOT/scripts/lib/stage.sh"
  cxlkv_build_main cxlkv-dra-kubeletplugin cxlkv-dra-controller cxlkv-fabricd cxlkv-hostd cxlkv_cli \
    >&2 || die "build failed"
  break
done
FK=$("$ROOT/test/e2e/fakekubelet/build.sh") || die "fake kubelet build failed"

E=$(mktemp -d /tmp/cxlkv-dra-demo.XXXXXX)
BACKING=/dev/shm/$(basename "$E")
mkdir -p "$E/logs" "$BACKING"
PIDS=()
CXLKV_E2E_DIR=$E/cluster; export CXLKV_E2E_DIR
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  bash "$CLUSTER" down >/dev/null 2>&1
  if [ -n "${KEEP:-}" ]; then say "state kept in $E"; else rm -rf "$E" "$BACKING"; fi
}
trap cleanup EXIT
source "$ROOT/test/e2e/lib/dra-env.sh"

say "control plane up (2 fake nodes)"
CXLKV_E2E_NODES=2 bash "$CLUSTER" up >&2 || die "control plane did not start"
eval "$(bash "$CLUSTER" env)"
NODES=(fake-node-0 fake-node-1)
F=http://127.0.0.1:$(port)
declare -A HPORT
for n in "${NODES[@]}"; do HPORT[$n]=$(port); done
fabricd_config 5000 "${NODES[@]}" >"$E/fabricd.yaml"
start fabricd "$BIN/cxlkv-fabricd" --config "$E/fabricd.yaml" --listen "${F#http://}"
wait_until 20 curl -sf "$F/cfm/v1/appliances" || die "fabricd did not start"
for n in "${NODES[@]}"; do
  d=$E/$n
  mkdir -p "$d/cdi" "$d/dev" "$d/ctr" "$d/logs"
  start "hostd-$n" "$BIN/cxlkv-hostd" --host-id "$n" --listen "127.0.0.1:${HPORT[$n]}" --fabric "$F" \
    --cdi-dir "$d/cdi" --state-dir "$d/hostd" --dev-dir "$d/dev" --container-dir "$d/ctr" \
    --allowed-backing-dir "$BACKING" --resync-interval 5
  start "plugin-$n" "$BIN/cxlkv-dra-kubeletplugin" --node-name "$n" --kubeconfig "$KUBECONFIG" \
    --kubelet-root-dir "$d/kubelet" --state-dir "$d/dra-plugin" --cdi-dir "$d/cdi" \
    --hostd-url "http://127.0.0.1:${HPORT[$n]}" --http-listen ""
  start "kubelet-$n" "$FK" --kubeconfig "$KUBECONFIG" --node-name "$n" --root-dir "$d/kubelet" \
    --cdi-dir "$d/cdi" --log-dir "$d/logs" --retry 1s
done
start controller "$BIN/cxlkv-dra-controller" --kubeconfig "$KUBECONFIG" --fabric "$F" \
  --identity demo --slice-period 5
wait_until 30 kubectl get resourceslice cxlkv.dev-cma-0-blade-0 || die "no ResourceSlice published"
say "ResourceSlice published; creating the DeviceClass, the 2 GiB claim and two pods"

kubectl apply -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: cxlkv.dev}
spec:
  selectors: [{cel: {expression: 'device.driver == "cxlkv.dev"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: kv, namespace: default}
spec:
  devices:
    requests:
      - name: kv
        exactly: {deviceClassName: cxlkv.dev, capacity: {requests: {memory: 2Gi}}}
YAML
t0=$(date +%s.%N)
for i in 0 1; do
  python3 - "$i" "$BIN/cxlkv" "$ROOT/data/traces/mooncake-conversation-trace.jsonl" "$E/replay.ctl" <<'PY' |
import json, sys
i, cxlkv, trace, ctl = sys.argv[1:]
cmd = [cxlkv, "replay", "--trace", trace, "--limit", "400", "--block-tokens", "16",
       "--kv-bytes-per-token", "64", "--replica-index", i, "--replica-count", "2",
       "--control", ctl, "--json", "--quiet"]
print(json.dumps({"apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": f"replay-{i}", "namespace": "default"},
  "spec": {"nodeSelector": {"kubernetes.io/hostname": f"fake-node-{i}"}, "restartPolicy": "Never",
           "resourceClaims": [{"name": "kv", "resourceClaimName": "kv"}],
           "containers": [{"name": "main", "image": "none", "command": cmd,
                           "resources": {"claims": [{"name": "kv"}]}}]}}))
PY
    kubectl apply -f - >/dev/null
done
composed() {
  kubectl get resourceclaim kv -o jsonpath='{.status.devices[0].conditions[?(@.type=="cxlkv.dev/composed")].status}' |
    grep -q True
}
ready_s=null
if wait_until 120 composed; then
  ready_s=$(python3 -c "import time; print(round(time.time() - $t0, 2))")
  say "claim composed (cxlkv.dev/composed True) after ${ready_s}s"
else say "the claim never became composed"; fi
CLAIM_JSON=$(kubectl get resourceclaim kv -o json 2>/dev/null || echo '{}')
phase() { kubectl get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }
done_ok() { [ "$(phase "$1")" = Succeeded ]; }
wait_until 180 done_ok replay-0 && wait_until 60 done_ok replay-1 ||
  say "replay pods: $(phase replay-0) / $(phase replay-1)"
# What each node's kubelet recorded in its DRA manager state, while the pods
# still hold the claim (unprepare drops it).
echo "$CLAIM_JSON" >"$E/claim.json"
MEM=$(python3 -c 'import json,sys; d=[x for x in json.load(open(sys.argv[1])).get("status",{}).get("devices",[]) if x.get("driver")=="cxlkv.dev"]; print(d[0].get("data",{}).get("memoryId","") if d else "")' "$E/claim.json")
kubelet_cdi=0
for n in "${NODES[@]}"; do
  [ -n "$MEM" ] && grep -q "cxlkv.dev/region=$MEM" "$E/$n/kubelet/dra/dra_manager_state" 2>/dev/null &&
    kubelet_cdi=$((kubelet_cdi + 1))
done
say "pods finished: $(phase replay-0) / $(phase replay-1); $kubelet_cdi kubelets hold cxlkv.dev/region=$MEM; deleting the pods and the claim"
kubectl delete pod replay-0 replay-1 --wait=false >/dev/null 2>&1
gone() { ! kubectl get "$@" >/dev/null 2>&1; }
wait_until 60 gone pod replay-0 && wait_until 60 gone pod replay-1
kubectl delete resourceclaim kv --wait=false >/dev/null 2>&1
wait_until 60 gone resourceclaim kv
regions() {
  curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("members", [])))'
}
no_regions() { [ "$(regions)" = 0 ]; }
wait_until 20 no_regions
leaked=$(regions)
claim_gone=false; kubectl get resourceclaim kv >/dev/null 2>&1 || claim_gone=true

python3 - "$ready_s" "$leaked" "$claim_gone" "$E" "$kubelet_cdi" <<'PY'
import json, sys
ready_s, leaked, claim_gone, e, kubelet_cdi = sys.argv[1:]
claim = json.load(open(f"{e}/claim.json"))
data = {}
for d in claim.get("status", {}).get("devices", []):
    if d.get("driver") == "cxlkv.dev":
        data = d.get("data", {})
mem = data.get("memoryId", "")
nodes = sorted(h for h, v in data.get("hosts", {}).items() if v.get("state") == "Materialized")
cdi = f"cxlkv.dev/region={mem}" if mem else None
# What the containers printed.
hits, wrong = 0, 0
for i in (0, 1):
    try:
        r = json.load(open(f"{e}/fake-node-{i}/logs/default_replay-{i}_main.log"))
        hits += r["cross_replica_hits"]
        wrong += r["errors"] + r["wrong_data"]
    except (OSError, ValueError, KeyError):
        wrong += 1
out = {
    "claim_ready_s": None if ready_s == "null" else float(ready_s),
    "nodes": nodes,
    "cdi_device": cdi if kubelet_cdi == "2" else None,
    "cross_replica_hits": hits,
    "region_freed": leaked == "0" and mem != "",
    "finalizer_removed": claim_gone == "true",
    "leaked_regions": int(leaked),
}
good = (out["claim_ready_s"] is not None and len(nodes) == 2 and out["cdi_device"] and hits > 0
        and wrong == 0 and out["region_freed"] and out["finalizer_removed"] and out["leaked_regions"] == 0)
if not good:
    print(f"dra-demo: FAILED (replay errors or wrong data: {wrong}); logs: KEEP=1 keeps {e}",
          file=sys.stderr)
print(json.dumps(out))
sys.exit(0 if good else 1)
PY
