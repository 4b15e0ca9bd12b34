#!/usr/bin/env bats
# The controller's failure cases (the world: test/e2e/lib/dra.bash). The
# world's controllers stop; this file's own replace them (identity ctl-fp,
# a 2 s resync, a 6 s Lease, /metrics on CMP), and the last of them
# (ctl-fp-2) keeps running after the file:
#  - failpoint: a controller SIGKILLed between compose and recording the
#    region (failpoint after-compose) and restarted: the region is adopted,
#    not composed twice, the claim becomes ready, nothing leaks;
#  - resync (the Lease holder): an orphaned region of ours is freed, a
#    foreign region stays and is subtracted from the slice's capacity, so of
#    two claims racing for the last 4 GiB the scheduler admits one and leaves
#    the other pending with its reason;
#  - later consumer: a pod on a third node: the region composed for pod 1's
#    node only is added to pod 2's node, pod 2 waits for it and reads the
#    bytes pod 1 wrote; freed on deallocation while the claim object lives on;
#  - power cycle of the appliance: the documented policy (RegionLost Event,
#    the claim recomposed under a new memory id, a new consumer attaches to
#    it; the old consumer's device reported Unhealthy by its node);
#  - fabric down: condition and Event on the claim, the blade device tainted
#    NoSchedule (a new pod is not admitted), and on recovery the taint gone,
#    the pod runs;
#  - frees failing 5 times: FreeRetrying Events, then FreeFailed, the
#    finalizer dropped; resync then frees the region (fault gone);
#  - compose refused (share count 0): compose-failed, the scheduler retries,
#    the pod is never bound;
#  - the controller's /metrics and /healthz.
# A scenario's steps share the prefix of their names and run in order.
# Warm: about 85 s.
# bats file_tags=dra,controller

load lib/dra

setup_file() {
  dra_setup_file
  dra_stop_controllers
}

# bats test_tags=failpoint
@test "failpoint: a controller SIGKILLed after compose leaves the region on the fabric, not yet recorded on the claim" {
  ctl_start ctl-fp ctl-fp CXLKV_DRA_FAILPOINT=after-compose
  claim_pod fp 1Gi fp fake-node-0 sh -c 'test -s "$CXL_DAX_DEVICE"'
  wait_until 60 proc_gone "$(dra_pid ctl-fp)" || fail "the failpoint did not fire"
  rm -f "$E/pids/ctl-fp"
  assert_eq "$(region_list | grep -c "$(claim_uid fp)")" 1 "regions for the claim"
  assert_eq "$(cj fp '.metadata.annotations["cxlkv.dev/region"] // "none"')" none "annotation cxlkv.dev/region"
}

# bats test_tags=failpoint
@test "failpoint: the restarted controller adopts the region (no second compose); the pod runs" {
  ctl_ensure
  wait_until 60 succeeded fp || fail "fp pod after the restart: $(phase fp)"
  # The pod may have finished and its region gone with the allocation:
  # count what the logs say instead (one compose, killed; one adoption).
  [ "$(region_list | grep -c "$(claim_uid fp)")" -le 1 ] || fail "more than one region for claim fp"
  assert_eq "$(grep -c "claim default/fp: adopted region" "$E/logs/ctl-fp-2.log")" 1 "adoptions"
  assert_eq "$(grep -c "failpoint after-compose" "$E/logs/ctl-fp.log")" 1 "failpoint kills"
}

# bats test_tags=failpoint
@test "failpoint: the claim deleted, zero regions are left" {
  delete_pods fp
  delete_claims fp || fail "claim fp stuck"
  wait_until 20 no_regions || fail "$(regions) regions left"
}

compose_raw() {  # compose_raw <MiB> <claimUid>: prints the memory id
  curl -s -X POST "$F$DRA_MEMORY_URL_PATH" -d "{\"memorySizeMiB\": $1, \"QoS\": 4, \"claimUid\": \"$2\"}" | jq -r .id
}
cap_is() { [ "$(capacity)" = "$1" ]; }

# bats test_tags=resync
@test "resync: an orphaned region of ours is freed" {
  ctl_ensure
  ORPHAN=$(compose_raw 1024 "cxlkv.dev/00000000-dead-beef-0000-000000000000@2026-01-01T00:00:00Z")
  FOREIGN=$(compose_raw 2048 "someone-else")
  dra_keep FOREIGN
  orphan_gone() { ! has_region "$ORPHAN"; }
  wait_until 20 orphan_gone || fail "orphan $ORPHAN still there"
}

# bats test_tags=resync
@test "resync: a foreign region is left alone" {
  dra_need FOREIGN
  has_region "$FOREIGN" || fail "foreign region $FOREIGN freed"
}

# bats test_tags=resync
@test "resync: the slice's capacity is 8 GiB less the 2 GiB held outside any claim" {
  dra_need FOREIGN
  wait_until 20 cap_is $((6 << 30)) || fail "capacity $(capacity), want $((6 << 30))"
}

# bats test_tags=resync
@test "resync: two claims race for the last 4 GiB: the scheduler admits one and leaves the other pending with its reason" {
  dra_need FOREIGN
  claim_pod race-a 4Gi race-a fake-node-0 sh -c 'exec sleep 600'
  claim_pod race-b 4Gi race-b fake-node-1 sh -c 'exec sleep 600'
  either_running() { running race-a || running race-b; }
  wait_until 60 either_running || fail "neither pod ran ($(phase race-a)/$(phase race-b))"
  local loser=race-b la lb why
  running race-b && loser=race-a
  # The loser's refusal by the scheduler, not a fixed wait: once it is
  # Unschedulable the winner's allocation holds the capacity.
  wait_until 30 unschedulable "$loser" || fail "$loser never marked Unschedulable"
  la=$(phase race-a); lb=$(phase race-b)
  why=$(kubectl get pod "$loser" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
  [ "$la/$lb" = Running/Pending ] || [ "$la/$lb" = Pending/Running ] || fail "race-a $la, race-b $lb"
  ! has_event "$loser" ComposeFailed || fail "$loser reached compose"
  note "$loser pending: $why"
  delete_pods race-a race-b
  delete_claims race-a race-b
}

# bats test_tags=resync
@test "resync: the foreign region freed, the capacity is back to 8 GiB" {
  dra_need FOREIGN
  curl -s -X DELETE "$F$DRA_MEMORY_URL_PATH/$FOREIGN" >/dev/null
  wait_until 20 cap_is $((8 << 30)) || fail "capacity $(capacity) after freeing the foreign region"
}

hosts_of() { cj "$1" '.status.devices[0].data.hosts | keys | sort | join(" ")'; }

# bats test_tags=consumer
@test "later consumer: a shared claim is composed for its first consumer's node only" {
  ctl_ensure
  claim_pod share 1Gi share-0 fake-node-0 \
    sh -c 'printf cxlkv-later-consumer | dd of="$CXL_DAX_DEVICE" conv=notrunc 2>/dev/null && echo wrote && exec sleep 600'
  wait_until 60 running share-0 || fail "share-0: $(phase share-0)"
  wait_until 10 grep -q wrote "$E/fake-node-0/logs/default_share-0_main.log" || fail "share-0 did not write"
  assert_eq "$(hosts_of share)" fake-node-0 "hosts of the claim (nominatedNodeName/nodeName)"
}

# bats test_tags=consumer
@test "later consumer: pod 2 on fake-node-2: its host added, prepare waited, it reads pod 1's bytes" {
  pod_yaml share-2 share fake-node-2 sh -c 'head -c 20 "$CXL_DAX_DEVICE"; echo; exec sleep 600' |
    kubectl apply -f - >/dev/null
  wait_until 60 running share-2 || fail "share-2: $(phase share-2), hosts $(hosts_of share)"
  wait_until 10 grep -q cxlkv-later-consumer "$E/fake-node-2/logs/default_share-2_main.log" ||
    fail "share-2 did not read pod 1's bytes; hosts $(hosts_of share)"
  note "hosts: $(hosts_of share)"
}

# bats test_tags=consumer
@test "later consumer: a HostAdded Event on the claim" {
  has_event share HostAdded || fail "no HostAdded Event: $(events_for share)"
}

# bats test_tags=consumer
@test "later consumer: the claim deallocated, its region is freed and its finalizer dropped while the claim lives on" {
  delete_pods share-0 share-2
  # The claim object stays; its allocation goes with its last consumer, and
  # so must the region (free on deallocation, not only on delete).
  unallocated() { [ "$(cj share '.status | has("allocation")')" = false ]; }
  wait_until 30 unallocated || fail "claim share still allocated"
  wait_until 20 no_regions || fail "$(regions) regions after the deallocation"
  assert_eq "$(cj share '.metadata.finalizers // [] | length')" 0 "finalizers of the deallocated claim"
  delete_claims share
}

# bats test_tags=powercycle
@test "power cycle: a RegionLost Event, the claim recomposed under a new memory id" {
  ctl_ensure
  claim_pod pc 1Gi pc-1 fake-node-1 sh -c 'exec sleep 600'
  wait_until 60 running pc-1 || fail "pc-1: $(phase pc-1)"
  M1=$(memory_id pc)
  curl -s -X POST "$F/cxlkv/v1/power-cycle" -d '{"applianceId": "cma-0", "bladeId": "blade-0"}' >/dev/null
  new_region() { local m; m=$(memory_id pc); [ -n "$m" ] && [ "$m" != "$M1" ] && composed_true pc; }
  wait_until 30 new_region || fail "claim not recomposed after the power cycle (memoryId $(memory_id pc))"
  M2=$(memory_id pc)
  dra_keep M2
  has_event pc RegionLost || fail "no RegionLost Event"
  note "recomposed: $M1 -> $M2"
}

# bats test_tags=powercycle
@test "power cycle: the old consumer's node reports the device Unhealthy (its bytes are gone)" {
  dra_need M2
  wait_until 20 is_health fake-node-1 Unhealthy || fail "fake-node-1's health after the power cycle: $(health fake-node-1)"
}

# bats test_tags=powercycle
@test "power cycle: a new consumer attaches to the recomposed region" {
  dra_need M2
  local log=$E/fake-node-2/logs/default_pc-2_main.log
  pod_yaml pc-2 pc fake-node-2 sh -c 'echo "$CXL_DAX_DEVICE"; exec sleep 600' | kubectl apply -f - >/dev/null
  wait_until 60 running pc-2 || fail "pc-2: $(phase pc-2)"
  wait_until 10 grep -q "$M2" "$log" || fail "pc-2 printed: $(cat "$log" 2>/dev/null)"
}

# Claim pc (pc-1 and pc-2) stays allocated through the fabric cases.
fabric_reachable() { condition pc cxlkv.dev/fabric-reachable; }

# bats test_tags=fabric
@test "fabric down: the blade device is tainted cxlkv.dev/fabric-unreachable:NoSchedule" {
  ctl_ensure
  dra_stop fabricd
  wait_until 20 tainted || fail "no taint while the fabric manager is down"
}

# bats test_tags=fabric
@test "fabric down: the claim's condition cxlkv.dev/fabric-reachable False and a FabricUnreachable Event" {
  fabric_false() { [ "$(fabric_reachable)" = False ]; }
  wait_until 20 fabric_false || fail "condition fabric-reachable: '$(fabric_reachable)'"
  has_event pc FabricUnreachable || fail "no FabricUnreachable Event on claim pc"
}

# bats test_tags=fabric
@test "fabric down: the controller's metric cxlkv_dra_fabric_reachable is 0" {
  assert_eq "$(ctl_metric cxlkv_dra_fabric_reachable)" 0 cxlkv_dra_fabric_reachable
}

# bats test_tags=fabric
@test "fabric down: a new claim on the tainted device is not allocated" {
  claim_pod fd 1Gi fd fake-node-0 sh -c 'test -s "$CXL_DAX_DEVICE"'
  # Until the scheduler has tried fd and found the tainted device unusable.
  wait_until 30 unschedulable fd || fail "fd never marked Unschedulable while the device is tainted"
  assert_eq "$(phase fd)" Pending "pod fd"
  assert_eq "$(cj fd '.status // {} | has("allocation")')" false "claim fd allocated"
  note "$(kubectl get pod fd -o jsonpath='{.status.conditions[0].message}' | cut -c1-100)"
}

# bats test_tags=fabric
@test "fabric back: the taint is removed" {
  [ -n "$(dra_pid fabricd)" ] || fabricd_start
  untainted() { ! tainted; }
  wait_until 30 untainted || fail "the taint stayed after recovery"
}

# bats test_tags=fabric
@test "fabric back: the pending pod is admitted and runs" {
  wait_until 90 succeeded fd || fail "fd after recovery: $(phase fd)"
}

# bats test_tags=fabric
@test "fabric back: claim pc's fabric-reachable is True again" {
  fabric_true() { [ "$(fabric_reachable)" = True ]; }
  wait_until 20 fabric_true || fail "condition fabric-reachable: '$(fabric_reachable)'"
  delete_pods pc-1 pc-2 fd
  delete_claims pc fd
  wait_until 20 no_regions || fail "after the fabric cases: $(regions) regions"
}

# bats test_tags=free
@test "failed frees: 5 failed frees give 4 FreeRetrying and 1 FreeFailed Events; the finalizer is dropped" {
  ctl_ensure
  claim_pod ff 1Gi ff fake-node-0 sh -c 'exec sleep 600'
  wait_until 60 running ff || fail "ff: $(phase ff)"
  MF=$(memory_id ff)
  dra_keep MF
  curl -s -X PUT "$F/cxlkv/v1/faults" -d "{\"rules\": [{\"method\": \"DELETE\", \"path\": \"$DRA_MEMORY_URL_PATH/$MF\", \"status\": 500, \"count\": 5}]}" >/dev/null
  delete_pods ff
  kubectl delete resourceclaim ff --wait=false >/dev/null
  wait_until 90 gone resourceclaim ff || fail "claim ff stuck with finalizers $(cj ff .metadata.finalizers)"
  assert_eq "$(events_for ff | grep -c "^FreeRetrying")" 4 "FreeRetrying Events"
  assert_eq "$(events_for ff | grep -c "^FreeFailed")" 1 "FreeFailed Events"
}

# bats test_tags=free
@test "failed frees: the resync frees the leaked region once the fabric accepts it" {
  dra_need MF
  wait_until 20 no_regions || fail "leaked region $MF still there"
}

# bats test_tags=compose
@test "compose refused: cxlkv.dev/compose-failed set, the scheduler retries (2 ComposeFailed Events or more), the pod is never bound" {
  ctl_ensure
  # A compose the allocation can never get (share count 0): the binding
  # failure condition cxlkv.dev/compose-failed, so the scheduler clears the
  # allocation and tries again instead of waiting out bindingTimeout.
  kubectl apply -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: bad, namespace: default, annotations: {cxlkv.dev/share-count: "0"}}
spec:
  devices:
    requests:
      - name: kv
        exactly: {deviceClassName: cxlkv.dev, capacity: {requests: {memory: 1Gi}}}
YAML
  pod_yaml bad bad fake-node-0 sh -c 'exit 0' | kubectl apply -f - >/dev/null
  twice_failed() { [ "$(events_for bad | grep -c "^ComposeFailed")" -ge 2 ]; }
  wait_until 60 twice_failed || fail "$(events_for bad | grep -c "^ComposeFailed") ComposeFailed Events"
  assert_eq "$(kubectl get pod bad -o jsonpath='{.spec.nodeName}')" "" "node of pod bad"
  delete_pods bad
  delete_claims bad || fail "claim bad stuck"
}

# bats test_tags=metrics
@test "controller: /healthz answers ok" {
  ctl_ensure
  wait_until 20 curl -sf "http://127.0.0.1:$CMP/healthz" || true
  curl -sf "http://127.0.0.1:$CMP/healthz" | grep -q '"ok":true' || fail "/healthz: $(curl -s "http://127.0.0.1:$CMP/healthz")"
}

# bats test_tags=metrics
@test "controller: /metrics counts composes (with their latency histogram), free retries, orphans freed; leader 1, fabric reachable 1" {
  local c_ok h_n fr of
  c_ok=$(ctl_metric 'cxlkv_dra_operations_total{operation="compose",result="ok"}')
  h_n=$(ctl_metric 'cxlkv_dra_operation_duration_seconds_count{operation="compose",result="ok"}')
  fr=$(ctl_metric cxlkv_dra_free_retries_total); of=$(ctl_metric cxlkv_dra_orphans_freed_total)
  note "/metrics: $c_ok composes (histogram count $h_n), $fr free retries, $of orphans freed"
  # What the scenarios above made this controller do (the later consumer,
  # the power cycle, the fabric and free cases: 5 composes or more).
  [ "${c_ok:-0}" -ge 5 ] || fail "composes $c_ok"
  assert_eq "$h_n" "$c_ok" "compose latency histogram count"
  [ "${fr:-0}" -ge 4 ] || fail "free retries $fr"
  [ "${of:-0}" -ge 1 ] || fail "orphans freed $of"
  assert_eq "$(ctl_metric cxlkv_dra_leader)" 1 cxlkv_dra_leader
  assert_eq "$(ctl_metric cxlkv_dra_fabric_reachable)" 1 cxlkv_dra_fabric_reachable
}
