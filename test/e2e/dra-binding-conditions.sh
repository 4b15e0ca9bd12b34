#!/usr/bin/env bash
# Kubernetes' own no-kubelet binding-condition scenarios
# (test/integration/dra/binding_conditions.go in k8s.io/kubernetes v1.37.2),
# ported to the cxlkv driver: the conditions come from cxlkv-dra-controller
# (cxlkv.dev/composed once every host materialized the region), never from
# the test. The test only causes what a real fault would: a host agent
# (cxlkv-hostd) that is down, so the fabric manager's materialization there
# fails and the condition stays False.
#
#   BasicFlow       the allocation carries the blade device's binding
#                   conditions; the pod is bound only after our controller
#                   set cxlkv.dev/composed True (PodScheduled's transition is
#                   not before the condition's)
#   TimeoutReached  hostd of the pod's node down: the region never
#                   materializes there, the scheduler (bindingTimeout 8 s, as
#                   upstream's short timeouts) reports "binding timeout" within
#                   1.9 x the timeout plus one 5 s PreBind poll, and the pod
#                   stays unbound; each timed-out allocation's region is freed
#   TimeoutRecover  hostd back: the next allocation is composed anew (a new
#                   region, never the old one reused), materialized, and the
#                   pod is bound
# Not ported here: FailureTaints and FailureRemove, which need the controller
# to set the failure condition cxlkv.dev/compose-failed (see docs/dra.md).
#
# Runs its own control plane (2 fake nodes, CXLKV_E2E_BINDING_TIMEOUT=8s),
# cxlkv-fabricd with one blade cabled to both, one cxlkv-hostd per node and
# cxlkv-dra-controller; no kubelet (as upstream's scenarios). Needs build/bin
# with cxlkv-dra-controller, cxlkv-fabricd, cxlkv-hostd. Prints
# "dra-binding: ok|FAILED: ..." per check and closes with
# "dra-binding: N passed, N failed, N skipped". About 70 s warm on 2 cores.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
CLUSTER=$ROOT/test/e2e/cluster.sh
BIN=$ROOT/build/bin
TIMEOUT_S=8
passed=0; failed=0; skipped=0
ok() { echo "dra-binding: ok: $*"; passed=$((passed + 1)); }
bad() { echo "dra-binding: FAILED: $*"; failed=$((failed + 1)); }
E=$(mktemp -d /tmp/cxlkv-dra-bc.XXXXXX)
BACKING=/dev/shm/$(basename "$E")
mkdir -p "$E/logs" "$BACKING"
PIDS=()
CXLKV_E2E_DIR=$E/cluster; export CXLKV_E2E_DIR
finish() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  if [ "$failed" -gt 0 ]; then
    for f in "$E"/logs/*.log "$E"/cluster/logs/kube-scheduler.log; do echo "--- $f"; tail -15 "$f"; done
  fi
  bash "$CLUSTER" down >/dev/null 2>&1
  rm -rf "$E" "$BACKING"
  echo "dra-binding: $passed passed, $failed failed, $skipped skipped"
}
trap finish EXIT
DRA_LOG_APPEND=1  # a restarted agent keeps its earlier log
source "$ROOT/test/e2e/lib/dra-env.sh"

CXLKV_E2E_NODES=2 CXLKV_E2E_BINDING_TIMEOUT=${TIMEOUT_S}s bash "$CLUSTER" up ||
  { bad "control plane did not start"; exit 1; }
eval "$(bash "$CLUSTER" env)"
NODES=(fake-node-0 fake-node-1)
F=http://127.0.0.1:$(port)
declare -A HPORT
for n in "${NODES[@]}"; do HPORT[$n]=$(port); done
fabricd_config 2000 "${NODES[@]}" >"$E/fabricd.yaml"
start fabricd "$BIN/cxlkv-fabricd" --config "$E/fabricd.yaml" --listen "${F#http://}"
wait_until 20 curl -sf "$F/cfm/v1/appliances" || { bad "fabricd did not start"; exit 1; }
hostd_start() {  # hostd_start <node>
  local n=$1 d=$E/$1
  mkdir -p "$d/cdi" "$d/dev" "$d/ctr"
  start "hostd-$n" "$BIN/cxlkv-hostd" --host-id "$n" --listen "127.0.0.1:${HPORT[$n]}" --fabric "$F" \
    --cdi-dir "$d/cdi" --state-dir "$d/hostd" --dev-dir "$d/dev" --container-dir "$d/ctr" \
    --allowed-backing-dir "$BACKING" --resync-interval 5
}
for n in "${NODES[@]}"; do hostd_start "$n"; done
for n in "${NODES[@]}"; do
  wait_until 20 curl -sf "http://127.0.0.1:${HPORT[$n]}/cxlkv/v1/regions" || bad "hostd $n did not start"
done
start controller "$BIN/cxlkv-dra-controller" --kubeconfig "$KUBECONFIG" --fabric "$F" \
  --identity bc --slice-period 5
wait_until 30 kubectl get resourceslice cxlkv.dev-cma-0-blade-0 || { bad "no ResourceSlice"; exit 1; }
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: cxlkv.dev}
spec:
  selectors: [{cel: {expression: 'device.driver == "cxlkv.dev"'}}]
YAML

claim_and_pod() {  # claim_and_pod <name> <node>: a 1 GiB claim and one pod using it
  python3 - "$1" "$2" <<'PY' | kubectl apply -f - >/dev/null
import json, sys
name, node = sys.argv[1:]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
   "metadata": {"name": name, "namespace": "default"},
   "spec": {"devices": {"requests": [{"name": "kv", "exactly": {
       "deviceClassName": "cxlkv.dev", "capacity": {"requests": {"memory": "1Gi"}}}}]}}},
  {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
   "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": "kv", "resourceClaimName": name}],
            "containers": [{"name": "main", "image": "none",
                            "resources": {"claims": [{"name": "kv"}]}}]}}]}))
PY
}
node_of() { kubectl get pod "$1" -o jsonpath='{.spec.nodeName}' 2>/dev/null; }
bound() { [ -n "$(node_of "$1")" ]; }
allocated() { [ -n "$(kubectl get resourceclaim "$1" -o jsonpath='{.status.allocation.allocationTimestamp}' 2>/dev/null)" ]; }
timed_out() {
  kubectl get pod "$1" -o jsonpath='{range .status.conditions[*]}{.message}{"\n"}{end}' | grep -qi "binding timeout"
}
regions() {
  curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("members", [])))'
}
no_regions() { [ "$(regions)" = 0 ]; }
composes() { grep -c "claim default/$1: composed region" "$E/logs/controller.log"; }
delete_all() {  # delete_all <name>: pod, then claim; both must go
  # No kubelet confirms a bound pod's termination here: delete it at once.
  kubectl delete pod "$1" --wait=false --grace-period=0 --force >/dev/null 2>&1
  wait_until 60 sh -c "! kubectl get pod $1" || bad "pod $1 not deleted"
  kubectl delete resourceclaim "$1" --wait=false >/dev/null 2>&1
  wait_until 60 sh -c "! kubectl get resourceclaim $1" || bad "claim $1 stuck (finalizer)"
}

echo "== dra-binding: BasicFlow"
claim_and_pod basic fake-node-0
wait_until 60 allocated basic || bad "basic never allocated"
kubectl get resourceclaim basic -o json | python3 -c '
import json, sys
r = json.load(sys.stdin)["status"]["allocation"]["devices"]["results"]
assert len(r) == 1 and r[0]["driver"] == "cxlkv.dev" and r[0]["pool"] == "cma-0/blade-0", r
assert r[0].get("bindingConditions") == ["cxlkv.dev/composed"], r
assert r[0].get("bindingFailureConditions") == ["cxlkv.dev/compose-failed"], r
' && ok "allocation carries the blade device's binding and failure conditions" ||
  bad "allocation results: $(kubectl get resourceclaim basic -o jsonpath='{.status.allocation.devices.results}')"
if wait_until 60 bound basic; then
  kubectl get resourceclaim basic -o json >"$E/basic-claim.json"
  kubectl get pod basic -o json >"$E/basic-pod.json"
  python3 - "$E/basic-claim.json" "$E/basic-pod.json" <<'PY' &&
import json, sys
claim, pod = (json.load(open(p)) for p in sys.argv[1:])
conds = [c for d in claim["status"].get("devices", []) if d.get("driver") == "cxlkv.dev"
         for c in d.get("conditions", []) if c["type"] == "cxlkv.dev/composed"]
assert conds and conds[0]["status"] == "True", conds
sched = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"][0]
assert sched["status"] == "True", sched
# RFC 3339 with seconds: string order is time order.
assert sched["lastTransitionTime"] >= conds[0]["lastTransitionTime"], (sched, conds)
print(f"  composed True at {conds[0]['lastTransitionTime']}, pod bound at {sched['lastTransitionTime']}")
PY
    ok "pod bound to $(node_of basic) only after our controller set cxlkv.dev/composed True" ||
    bad "binding order (see above)"
else bad "basic never bound: $(kubectl get pod basic -o jsonpath='{.status.conditions}')"; fi
[ "$(composes basic)" = 1 ] && ok "BasicFlow: composed once" || bad "basic composed $(composes basic) times"
delete_all basic
wait_until 20 no_regions && ok "BasicFlow: region freed" || bad "BasicFlow left $(regions) regions"

echo "== dra-binding: TimeoutReached (hostd of fake-node-1 down, bindingTimeout ${TIMEOUT_S}s)"
kill "$PID_hostd_fake_node_1"; wait "$PID_hostd_fake_node_1" 2>/dev/null
claim_and_pod slow fake-node-1
wait_until 60 allocated slow || bad "slow never allocated"
alloc_ts() { kubectl get resourceclaim "$1" -o jsonpath='{.status.allocation.allocationTimestamp}' 2>/dev/null; }
first_ts=$(alloc_ts slow)
t0=$SECONDS
# The deadline: 1.9 x the timeout (upstream's bound) plus one PreBind poll (5 s).
if wait_until $((TIMEOUT_S * 19 / 10 + 5)) timed_out slow; then
  ok "pod reports binding timeout after $((SECONDS - t0))s (timeout ${TIMEOUT_S}s)"
else bad "no binding timeout on the pod within $((TIMEOUT_S * 19 / 10 + 5))s"; fi
bound slow && bad "slow was bound although its region never materialized on fake-node-1" ||
  ok "pod stays unbound"
grep -q "claim default/slow: composed region" "$E/logs/controller.log" &&
  ok "our controller composed for it (the condition stayed False: fake-node-1 not materialized)" ||
  bad "the controller never composed for slow"

# The scheduler clears the timed-out allocation (the claim has no other
# consumer) and allocates again: a new allocation, still not materializable.
reallocated() { local ts; ts=$(alloc_ts slow); [ -n "$ts" ] && [ "$ts" != "$first_ts" ]; }
if wait_until 40 reallocated; then
  ok "the scheduler cleared the timed-out allocation ($first_ts) and allocated again ($(alloc_ts slow))"
else bad "no new allocation after the timeout: $(kubectl get resourceclaim slow -o jsonpath='{.status}')"; fi

echo "== dra-binding: TimeoutRecover (hostd of fake-node-1 back)"
hostd_start fake-node-1
if wait_until 90 bound slow; then
  ok "after the agent came back the pod was bound to $(node_of slow)"
else bad "slow never bound after recovery: $(kubectl get pod slow -o jsonpath='{.status.conditions}')"; fi
n=$(composes slow)
ids=$(grep -o "claim default/slow: composed region [0-9a-f-]*" "$E/logs/controller.log" | awk '{print $5}' | sort -u | wc -l)
[ "$n" -ge 2 ] && [ "$ids" = "$n" ] &&
  ok "each allocation composed anew: $n composes, $ids distinct regions" ||
  bad "recover: $n composes, $ids distinct regions"
one_region() { [ "$(regions)" = 1 ]; }
wait_until 15 one_region && ok "timed-out allocations' regions were freed: 1 region left (the bound one)" ||
  bad "$(regions) regions while one claim is allocated"
delete_all slow
wait_until 20 no_regions && ok "no region leaked" || bad "$(regions) regions leaked"
[ "$failed" -eq 0 ]
