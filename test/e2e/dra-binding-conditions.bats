#!/usr/bin/env bats
# Kubernetes' own no-kubelet binding-condition scenarios
# (test/integration/dra/binding_conditions.go in k8s.io/kubernetes v1.37.2),
# ported to the cxlkv driver: the conditions come from cxlkv-dra-controller
# (cxlkv.dev/composed once every host materialized the region), never from the
# test. The test only causes what a real fault would: a host agent that is
# down, a blade that refuses composes. Scenarios (steps share the prefix of
# their names and run in order; --filter 'TimeoutReached:' runs one):
#   BasicFlow       the allocation carries the blade device's binding
#                   conditions; the pod is bound only after our controller set
#                   cxlkv.dev/composed True
#   TimeoutReached  hostd of the pod's node down: the region never
#                   materializes there, the scheduler (bindingTimeout 8 s, as
#                   upstream's short timeouts) reports "binding timeout", no
#                   sooner than 8 s after the allocation (waited on, not timed:
#                   CI's load makes the scheduler late), the pod stays
#                   unbound, and the scheduler allocates again
#   TimeoutRecover  hostd back: the next allocation is composed anew (a new
#                   region, never the old one reused) and the pod is bound
#   FailureTaints   blade-0 refuses every compose (the emulator's fault
#                   injection plays the appliance), so our controller sets
#                   cxlkv.dev/compose-failed; the admin taints blade-0 (a
#                   DeviceTaintRule: our controller rewrites its own slices);
#                   blade-1 is taken into the fabric manager's management; the
#                   claim ends allocated on blade-1, composed, the pod bound,
#                   no compose-failed left, nothing composed on blade-0
#   FailureRemove   the same, but blade-0 leaves the fabric manager's
#                   management: our controller deletes its slice
# The world (lib/dra-own-world.bash): a control plane with 2 fake nodes and
# CXLKV_E2E_BINDING_TIMEOUT=8s, cxlkv-fabricd with two blades cabled to both
# (blade-1 unmanaged until the Failure scenarios take it in), one cxlkv-hostd
# per node and cxlkv-dra-controller; no kubelet (as upstream's scenarios).
# Run by test/e2e/dra-binding-conditions.sh (the dra stage's background);
# alone: `bats test/e2e/dra-binding-conditions.bats` after the dra stage built
# build/. About 100 s warm on 2 cores.
# bats file_tags=dra,binding-conditions

load lib/dra
load lib/dra-own-world

TIMEOUT_S=8

setup_file() {
  own_world_begin dra-binding
  CXLKV_E2E_BINDING_TIMEOUT=${TIMEOUT_S}s own_world_cluster 2 || return 1
  FABRICD_BLADES=2 dra_fabric_up 2000 fake-node-0 fake-node-1 || { echo "fabricd did not start"; return 1; }
  # blade-1 waits outside the manager's management until the Failure scenarios.
  blade remove blade-1 || { echo "could not unmanage blade-1"; return 1; }
  agent_start fake-node-0
  agent_start fake-node-1
  for n in fake-node-0 fake-node-1; do
    wait_until 20 curl -sf "http://127.0.0.1:${HPORT[$n]}/cxlkv/v1/regions" || { echo "hostd $n did not start"; return 1; }
  done
  start controller "$BIN/cxlkv-dra-controller" --kubeconfig "$KUBECONFIG" --fabric "$F" \
    --identity bc --slice-period 5
  own_world_keep
  wait_until 30 kubectl get resourceslice "$DRA_SLICE" || { echo "no ResourceSlice"; return 1; }
  dra_deviceclass
}
teardown_file() { own_world_down; }

blade() {  # blade <add|remove> <id>: take a blade into (or out of) the manager's management
  if [ "$1" = add ]; then
    curl -sf -X POST "$F/cfm/v1/appliances/cma-0/blades" -d "{\"username\": \"admin\", \"password\": \"x\",
      \"ipAddress\": \"127.0.0.1\", \"port\": 443, \"customId\": \"$2\"}" >/dev/null
  else curl -sf -X DELETE "$F/cfm/v1/appliances/cma-0/blades/$2" >/dev/null; fi
}
agent_start() {  # agent_start <node>: cxlkv-hostd (resync every 5 s); a restart appends to its log
  local n=$1 d=$E/$1
  mkdir -p "$d/cdi" "$d/dev" "$d/ctr"
  DRA_LOG_APPEND=1 start "hostd-$n" "$BIN/cxlkv-hostd" --host-id "$n" --listen "127.0.0.1:${HPORT[$n]}" \
    --fabric "$F" --cdi-dir "$d/cdi" --state-dir "$d/hostd" --dev-dir "$d/dev" --container-dir "$d/ctr" \
    --allowed-backing-dir "$BACKING" --resync-interval 5
}
agent_stop() {  # agent_stop <node>: its cxlkv-hostd SIGTERMed and gone (started in setup_file: no child to wait for)
  local p; p=$(dra_pid "hostd-$1") || return 1
  kill "$p" 2>/dev/null || true
  wait_until 15 dead "$p"
}
claim_and_pod() {  # claim_and_pod <name> <node>: a 1 GiB claim and one pod using it (no kubelet runs it)
  claim_yaml "$1" 1Gi | kubectl apply -f - >/dev/null
  jq -n --arg name "$1" --arg node "$2" '{apiVersion: "v1", kind: "Pod",
    metadata: {name: $name, namespace: "default"},
    spec: {nodeSelector: {"kubernetes.io/hostname": $node},
           resourceClaims: [{name: "kv", resourceClaimName: $name}],
           containers: [{name: "main", image: "none", resources: {claims: [{name: "kv"}]}}]}}' |
    kubectl apply -f - >/dev/null
}
node_of() { kubectl get pod "$1" -o jsonpath='{.spec.nodeName}' 2>/dev/null; }
bound() { [ -n "$(node_of "$1")" ]; }
alloc_ts() { kubectl get resourceclaim "$1" -o jsonpath='{.status.allocation.allocationTimestamp}' 2>/dev/null; }
allocated() { [ -n "$(alloc_ts "$1")" ]; }
timed_out() {
  [ "$(kubectl get pod "$1" -o jsonpath='{range .status.conditions[*]}{.message}{"\n"}{end}' | grep -ci "binding timeout")" -gt 0 ]
}
composes() { grep -c "claim default/$1: composed region" "$E/logs/controller.log"; }
regions_on() { curl -s "$F/cfm/v1/appliances/cma-0/blades/$1/memory" | jq '.members // [] | length'; }
delete_all() {  # delete_all <name>: pod, then claim; both must go
  # No kubelet confirms a bound pod's termination here: delete it at once.
  kubectl delete pod "$1" --wait=false --grace-period=0 --force >/dev/null 2>&1
  wait_until 60 gone pod "$1" || fail "pod $1 not deleted"
  delete_claims "$1" || fail "claim $1 stuck (finalizer)"
}

# ---- BasicFlow ------------------------------------------------------------------

# bats test_tags=BasicFlow
@test "BasicFlow: the allocation carries the blade device's binding and failure conditions" {
  claim_and_pod basic fake-node-0
  wait_until 60 allocated basic || fail "basic never allocated"
  cj basic '.status.allocation.devices.results' | jq -e 'length == 1 and .[0].driver == "cxlkv.dev"
    and .[0].pool == "cma-0/blade-0" and .[0].bindingConditions == ["cxlkv.dev/composed"]
    and .[0].bindingFailureConditions == ["cxlkv.dev/compose-failed"]' ||
    fail "allocation results: $(cj basic '.status.allocation.devices.results | tojson')"
}

# bats test_tags=BasicFlow
@test "BasicFlow: the pod is bound only after our controller set cxlkv.dev/composed True" {
  local composed_at sched_at
  wait_until 60 bound basic || fail "basic never bound: $(kubectl get pod basic -o jsonpath='{.status.conditions}')"
  composed_at=$(cj basic '[.status.devices[]? | select(.driver == "cxlkv.dev") | .conditions[]?
    | select(.type == "cxlkv.dev/composed" and .status == "True") | .lastTransitionTime][0] // empty')
  sched_at=$(kubectl get pod basic -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].lastTransitionTime}')
  [ -n "$composed_at" ] || fail "no cxlkv.dev/composed True on basic"
  # RFC 3339 with seconds: string order is time order.
  [[ ! "$sched_at" < "$composed_at" ]] || fail "pod bound at $sched_at, before composed at $composed_at"
  note "composed True at $composed_at, pod bound to $(node_of basic) at $sched_at"
}

# bats test_tags=BasicFlow
@test "BasicFlow: composed once" {
  assert_eq "$(composes basic)" 1 "composes of basic"
}

# bats test_tags=BasicFlow
@test "BasicFlow: region freed" {
  delete_all basic
  wait_until 20 no_regions || fail "BasicFlow left $(regions) regions"
}

# ---- TimeoutReached (hostd of fake-node-1 down, bindingTimeout 8 s) --------------

# Waits on the condition itself. Upstream's bound (1.9 x the timeout plus a
# PreBind poll: 20 s) is the scheduler's speed on a quiet machine; under CI's
# load (2 cores, lanes in parallel) its binding cycles are late by as much
# again, so a wall-clock bound failed with nothing wrong. The deadline only
# ends a hang. What load cannot make false is the lower bound: the timeout
# is seen no sooner than bindingTimeout after the claim's allocationTimestamp
# (load only delays what the test sees), so the timeout is the scheduler's
# bindingTimeout, not some earlier failure.
# bats test_tags=TimeoutReached
@test "TimeoutReached: the pod reports binding timeout, no sooner than the timeout after its allocation" {
  local seen alloc
  agent_stop fake-node-1
  claim_and_pod slow fake-node-1
  wait_until 60 allocated slow || fail "slow never allocated"
  FIRST_TS=$(alloc_ts slow)
  dra_keep FIRST_TS
  wait_until 180 timed_out slow ||
    fail "no binding timeout on the pod within 180 s (bindingTimeout ${TIMEOUT_S}s): $(kubectl get pod slow -o jsonpath='{.status.conditions}')"
  seen=$(date -u +%s)
  alloc=$(date -u -d "$FIRST_TS" +%s) || fail "allocationTimestamp $FIRST_TS does not parse"
  [ $((seen - alloc)) -ge $TIMEOUT_S ] ||
    fail "binding timeout seen $((seen - alloc)) s after the allocation ($FIRST_TS), before the ${TIMEOUT_S} s bindingTimeout"
  note "binding timeout seen $((seen - alloc)) s after the allocation (timeout ${TIMEOUT_S} s)"
}

# bats test_tags=TimeoutReached
@test "TimeoutReached: the pod stays unbound" {
  ! bound slow || fail "slow was bound to $(node_of slow) although its region never materialized on fake-node-1"
}

# bats test_tags=TimeoutReached
@test "TimeoutReached: our controller composed for it (the condition stayed False: fake-node-1 not materialized)" {
  grep -q "claim default/slow: composed region" "$E/logs/controller.log" || fail "the controller never composed for slow"
}

# The scheduler clears the timed-out allocation (the claim has no other
# consumer) and allocates again: a new allocation, still not materializable.
# bats test_tags=TimeoutReached
@test "TimeoutReached: the scheduler clears the timed-out allocation and allocates again" {
  dra_need FIRST_TS
  reallocated() { local ts; ts=$(alloc_ts slow); [ -n "$ts" ] && [ "$ts" != "$FIRST_TS" ]; }
  wait_until 40 reallocated || fail "no new allocation after the timeout: $(kubectl get resourceclaim slow -o jsonpath='{.status}')"
  note "allocated at $FIRST_TS, again at $(alloc_ts slow)"
}

# ---- TimeoutRecover (hostd of fake-node-1 back) -------------------------------

# bats test_tags=TimeoutRecover
@test "TimeoutRecover: after the agent came back the pod is bound" {
  agent_start fake-node-1
  wait_until 90 bound slow || fail "slow never bound after recovery: $(kubectl get pod slow -o jsonpath='{.status.conditions}')"
}

# bats test_tags=TimeoutRecover
@test "TimeoutRecover: each allocation composed anew (as many distinct regions as composes, at least 2)" {
  local n ids
  n=$(composes slow)
  ids=$(grep -o "claim default/slow: composed region [0-9a-f-]*" "$E/logs/controller.log" | awk '{print $5}' | sort -u | wc -l)
  [ "$n" -ge 2 ] || fail "$n composes of slow"
  assert_eq "$ids" "$n" "distinct regions of slow's composes"
}

# bats test_tags=TimeoutRecover
@test "TimeoutRecover: the timed-out allocations' regions were freed: 1 region left (the bound one)" {
  one_region() { [ "$(regions)" = 1 ]; }
  wait_until 15 one_region || fail "$(regions) regions while one claim is allocated"
}

# bats test_tags=TimeoutRecover
@test "TimeoutRecover: no region leaked" {
  delete_all slow
  wait_until 20 no_regions || fail "$(regions) regions leaked"
}

# ---- FailureTaints and FailureRemove ----------------------------------------------
# blade-0 refuses every compose, our controller fails the binding, blade-0 is
# made unselectable (tainted, or removed), blade-1 appears, and the scheduler
# allocates blade-1.

claim_pool() { cj "$1" '.status.allocation.devices.results[0].pool // empty'; }
refused() { [ "$(events_for "$1" | grep -c '^ComposeFailed .*blade-0')" -ge 1 ]; }
on_blade1_bound() { [ "$(claim_pool "$1")" = cma-0/blade-1 ] && bound "$1"; }
slice_has() { kubectl get resourceslice "cxlkv.dev-cma-0-$1" >/dev/null 2>&1; }
no_slice() { ! slice_has "$1"; }

failure_refused() {  # failure_refused <claim> <node>: blade-0 refuses composes; the claim's binding fails
  curl -sf -X PUT "$F/cxlkv/v1/faults" -d '{"rules": [{"method": "POST",
    "path": "/cfm/v1/appliances/cma-0/blades/blade-0/memory", "status": 409}]}' >/dev/null ||
    fail "could not inject the compose refusal"
  claim_and_pod "$1" "$2"
  wait_until 60 refused "$1" || fail "no ComposeFailed for $1: $(events_for "$1" | tail -3)"
  ! bound "$1" || fail "$1 bound although its compose was refused"
}
failure_rescheduled() {  # failure_rescheduled <claim>: blade-1 taken in; the claim ends there, composed
  blade add blade-1 || fail "could not take blade-1 into management"
  wait_until 30 slice_has blade-1 || fail "no slice for blade-1"
  wait_until 90 on_blade1_bound "$1" || fail "$1 on '$(claim_pool "$1")', bound: $(node_of "$1")"
  cj "$1" '.status' | jq -e '[.devices[]? | select(.driver == "cxlkv.dev")] as $d
    | ([$d[].conditions[]? | {(.type): .status}] | add // {}) as $c
    | ($d | length > 0) and all($d[]; .pool == "cma-0/blade-1")
      and $c["cxlkv.dev/composed"] == "True" and ($c | has("cxlkv.dev/compose-failed") | not)' ||
    fail "status after rescheduling: $(cj "$1" '.status.devices | tojson')"
}
failure_cleanup() {  # failure_cleanup <claim>: deleted, the fault cleared, blade-1 out again
  delete_all "$1"
  no_b1() { [ "$(regions_on blade-1)" = 0 ]; }
  wait_until 20 no_b1 || fail "$(regions_on blade-1) regions left on blade-1"
  curl -sf -X PUT "$F/cxlkv/v1/faults" -d '{}' >/dev/null
}
failure_blade1_out() {  # blade-1 leaves again; blade-0's slice is back
  blade remove blade-1 || fail "could not take blade-1 out again"
  wait_until 30 no_slice blade-1 || fail "blade-1's slice stayed after blade-1 left"
  wait_until 30 slice_has blade-0 || fail "no slice for blade-0"
}

# bats test_tags=FailureTaints
@test "FailureTaints: blade-0 refuses the compose; our controller fails the binding (ComposeFailed, compose-failed), pod unbound" {
  failure_refused ftaint fake-node-0
}

# bats test_tags=FailureTaints
@test "FailureTaints: blade-0 tainted, blade-1 appears: reallocated to blade-1, composed, pod bound; blade-0's status and compose-failed cleared" {
  kubectl apply -f - >/dev/null <<'YAML' || fail "could not create the DeviceTaintRule"
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {name: blade-0-refuses}
spec:
  deviceSelector: {driver: cxlkv.dev, pool: cma-0/blade-0, device: blade-0}
  taint: {key: cxlkv.dev/compose-refused, value: "true", effect: NoSchedule}
YAML
  failure_rescheduled ftaint
}

# bats test_tags=FailureTaints
@test "FailureTaints: one region, on blade-1" {
  assert_eq "$(regions_on blade-1)" 1 "regions on blade-1"
  failure_cleanup ftaint
  kubectl delete devicetaintrule blade-0-refuses >/dev/null
  failure_blade1_out
}

# bats test_tags=FailureRemove
@test "FailureRemove: blade-0 refuses the compose; our controller fails the binding (ComposeFailed, compose-failed), pod unbound" {
  failure_refused fremove fake-node-1
}

# bats test_tags=FailureRemove
@test "FailureRemove: blade-0 left the manager; our controller deleted its slice" {
  blade remove blade-0 || fail "could not take blade-0 out of management"
  wait_until 30 no_slice blade-0 || fail "blade-0's slice is still there"
}

# bats test_tags=FailureRemove
@test "FailureRemove: blade-1 appears: reallocated to blade-1, composed, pod bound; blade-0's status and compose-failed cleared" {
  failure_rescheduled fremove
}

# bats test_tags=FailureRemove
@test "FailureRemove: one region, on blade-1" {
  assert_eq "$(regions_on blade-1)" 1 "regions on blade-1"
  failure_cleanup fremove
  blade add blade-0 || fail "could not take blade-0 back"
  failure_blade1_out
}

# bats test_tags=FailureTaints,FailureRemove
@test "Failure: nothing was ever composed on blade-0 in the Failure scenarios" {
  assert_eq "$(regions_on blade-0)" 0 "regions on blade-0"
}
