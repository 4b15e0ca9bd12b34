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
#   FailureTaints   upstream: a pod allocated to a device with binding
#                   conditions, the device tainted, a second device appears,
#                   the failure condition set: the scheduler clears the
#                   allocation and the device statuses and allocates the
#                   other device. Here: blade-0 refuses every compose (the
#                   emulator's fault injection plays the appliance), so our
#                   controller sets cxlkv.dev/compose-failed; the cluster
#                   admin taints blade-0 (a DeviceTaintRule: our controller
#                   rewrites its own slices, so a taint cannot be written
#                   into them as upstream's test does); blade-1 is taken
#                   into the fabric manager's management and our controller
#                   publishes its slice; the claim ends allocated on blade-1,
#                   composed, the pod bound, no compose-failed left in its
#                   status, nothing composed on blade-0
#   FailureRemove   the same, but blade-0 leaves the fabric manager's
#                   management instead of being tainted: our controller
#                   deletes its slice (the device is removed), and the claim
#                   ends on blade-1 as above
#
# Runs its own control plane (2 fake nodes, CXLKV_E2E_BINDING_TIMEOUT=8s),
# cxlkv-fabricd with two blades cabled to both (blade-1 unmanaged until the
# Failure scenarios take it in), one cxlkv-hostd per node and
# cxlkv-dra-controller; no kubelet (as upstream's scenarios). Needs build/bin
# with cxlkv-dra-controller, cxlkv-fabricd, cxlkv-hostd. Prints
# "dra-binding: ok|FAILED: ..." per check and closes with
# "dra-binding: N passed, N failed, N skipped". About 100 s warm on 2 cores.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
TIMEOUT_S=8
DRA_LOG_APPEND=1  # a restarted agent keeps its earlier log
source "$ROOT/test/e2e/lib/dra-env.sh"
dra_standalone dra-binding

CXLKV_E2E_BINDING_TIMEOUT=${TIMEOUT_S}s dra_cluster_up 2 "$CXLKV_E2E_DIR" ||
  { bad "control plane did not start"; exit 1; }
NODES=(fake-node-0 fake-node-1)
FABRICD_BLADES=2 dra_fabric_up 2000 "${NODES[@]}" || { bad "fabricd did not start"; exit 1; }
# blade-1 waits outside the manager's management until the Failure scenarios.
blade() {  # blade <add|remove> <id>: take a blade into (or out of) the manager's management
  if [ "$1" = add ]; then
    curl -sf -X POST "$F/cfm/v1/appliances/cma-0/blades" -d "{\"username\": \"admin\", \"password\": \"x\",
      \"ipAddress\": \"127.0.0.1\", \"port\": 443, \"customId\": \"$2\"}" >/dev/null
  else curl -sf -X DELETE "$F/cfm/v1/appliances/cma-0/blades/$2" >/dev/null; fi
}
blade remove blade-1 || { bad "could not unmanage blade-1"; exit 1; }
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
dra_deviceclass

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

# FailureTaints and FailureRemove: blade-0 refuses every compose, our
# controller fails the binding, blade-0 is made unselectable (tainted, or
# removed), blade-1 appears, and the scheduler allocates blade-1.
claim_pool() { kubectl get resourceclaim "$1" -o jsonpath='{.status.allocation.devices.results[0].pool}' 2>/dev/null; }
events_of() {  # events_of <claim>: "reason note" of each Event about it
  kubectl get events.events.k8s.io -o json | python3 -c '
import json, sys
for e in json.load(sys.stdin)["items"]:
    if e.get("regarding", {}).get("name") == sys.argv[1]:
        print(e.get("reason"), e.get("note", ""))' "$1"
}
refused() { [ "$(events_of "$1" | grep -c '^ComposeFailed .*blade-0')" -ge 1 ]; }
on_blade1_bound() { [ "$(claim_pool "$1")" = cma-0/blade-1 ] && bound "$1"; }
slice_has() { kubectl get resourceslice "cxlkv.dev-cma-0-$1" >/dev/null 2>&1; }
regions_on() {
  curl -s "$F/cfm/v1/appliances/cma-0/blades/$1/memory" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("members", [])))'
}
failure_case() {  # failure_case <Taints|Remove> <claim> <node>
  local how=$1 c=$2 node=$3
  echo "== dra-binding: Failure$how"
  curl -sf -X PUT "$F/cxlkv/v1/faults" -d '{"rules": [{"method": "POST",
    "path": "/cfm/v1/appliances/cma-0/blades/blade-0/memory", "status": 409}]}' >/dev/null ||
    bad "could not inject the compose refusal"
  claim_and_pod "$c" "$node"
  if wait_until 60 refused "$c"; then
    bound "$c" && bad "$c bound although its compose was refused" ||
      ok "Failure$how: blade-0 refused the compose; our controller failed the binding (ComposeFailed, cxlkv.dev/compose-failed), pod unbound"
  else bad "Failure$how: no ComposeFailed for $c: $(events_of "$c" | tail -3)"; fi
  if [ "$how" = Taints ]; then
    kubectl apply -f - >/dev/null <<'YAML' || bad "could not create the DeviceTaintRule"
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {name: blade-0-refuses}
spec:
  deviceSelector: {driver: cxlkv.dev, pool: cma-0/blade-0, device: blade-0}
  taint: {key: cxlkv.dev/compose-refused, value: "true", effect: NoSchedule}
YAML
  else
    blade remove blade-0 || bad "could not take blade-0 out of management"
    if wait_until 30 sh -c '! kubectl get resourceslice cxlkv.dev-cma-0-blade-0'; then
      ok "FailureRemove: blade-0 left the manager; our controller deleted its slice"
    else bad "FailureRemove: blade-0's slice is still there"; fi
  fi
  blade add blade-1 || bad "could not take blade-1 into management"
  wait_until 30 slice_has blade-1 || bad "no slice for blade-1"
  if wait_until 90 on_blade1_bound "$c"; then
    kubectl get resourceclaim "$c" -o json | python3 -c '
import json, sys
st = json.load(sys.stdin)["status"]
devs = [d for d in st.get("devices", []) if d.get("driver") == "cxlkv.dev"]
assert devs and all(d["pool"] == "cma-0/blade-1" for d in devs), devs
conds = {x["type"]: x["status"] for d in devs for x in d.get("conditions", [])}
assert conds.get("cxlkv.dev/composed") == "True", conds
assert "cxlkv.dev/compose-failed" not in conds, conds
' && ok "Failure$how: reallocated to blade-1, composed, pod bound; blade-0's status and its compose-failed condition cleared" ||
      bad "Failure$how: status after rescheduling: $(kubectl get resourceclaim "$c" -o jsonpath='{.status.devices}')"
  else bad "Failure$how: $c on '$(claim_pool "$c")', bound: $(node_of "$c")"; fi
  [ "$(regions_on blade-1)" = 1 ] && ok "Failure$how: one region, on blade-1" ||
    bad "Failure$how: $(regions_on blade-1) regions on blade-1"
  delete_all "$c"
  no_b1() { [ "$(regions_on blade-1)" = 0 ]; }
  wait_until 20 no_b1 || bad "Failure$how: $(regions_on blade-1) regions left on blade-1"
  curl -sf -X PUT "$F/cxlkv/v1/faults" -d '{}' >/dev/null
  if [ "$how" = Taints ]; then
    kubectl delete devicetaintrule blade-0-refuses >/dev/null
  else blade add blade-0 || bad "could not take blade-0 back"; fi
  blade remove blade-1 || bad "could not take blade-1 out again"
  wait_until 30 sh -c '! kubectl get resourceslice cxlkv.dev-cma-0-blade-1' ||
    bad "blade-1's slice stayed after blade-1 left"
  wait_until 30 slice_has blade-0 || bad "no slice for blade-0 after Failure$how"
}
t_fail=$SECONDS
failure_case Taints ftaint fake-node-0
failure_case Remove fremove fake-node-1
[ "$(regions_on blade-0)" = 0 ] && ok "nothing was ever composed on blade-0 in the Failure scenarios" ||
  bad "$(regions_on blade-0) regions on blade-0"
echo "dra-binding: the Failure scenarios took $((SECONDS - t_fail)) s"
[ "$failed" -eq 0 ]
