#!/usr/bin/env bats
# The driver against a control plane with only DRAConsumableCapacity off
# (binding conditions on): annotation mode with our binding conditions.
# Scenarios (steps share the prefix of their names):
#  - start: the start probe keeps the binding-conditions flow; /readyz 200;
#    the slice's 8 fixed devices carry cxlkv.dev/composed and the failure
#    condition cxlkv.dev/compose-failed, no bindsToNode;
#  - flow: with the compose slowed to 5 s, the claim is allocated and its pod
#    stays unbound until our controller sets composed (scheduled no earlier
#    than the condition), then the container attaches;
#  - race (CXLKV_FULL=1 only; skipped otherwise, each step named): two 4 GiB
#    claims for 6 GiB free: both allocated, one composed and running; the
#    other's compose fails (Event), the failure condition sends it back to
#    the scheduler and its pod stays unbound; once the winner is deleted it is
#    composed, bound and runs; no region leaked.
# test/e2e/dra-gates-off.bats has both gates off. The world: as there
# (lib/dra-gates.bash), on a control plane of its own.
# Run by test/e2e/dra-gates-off.sh (the dra stage's background) after
# dra-gates-off.bats; alone: `bats test/e2e/dra-gates-capacity-off.bats` as
# root after the dra stage built build/. Warm on 2 cores: about 40 s (75 s with
# CXLKV_FULL=1).
# bats file_tags=dra,gates-off,capacity-off

load lib/dra
load lib/dra-own-world
load lib/dra-gates

setup_file() {
  own_world_root
  gates_world_up gates-bc DRAConsumableCapacity=false,DRADeviceBindingConditions=true gates-bc
}
teardown_file() { own_world_down; }

# bats test_tags=start
@test "start: the start probe saw consumable capacity off, binding conditions kept: annotation mode with binding conditions" {
  grep -q "flow: binding conditions; capacity: annotation mode" "$CLOG" &&
    grep -q "annotation mode: the dry-run slice came back without allowMultipleAllocations" "$CLOG" ||
    fail "controller start: $(grep -m2 'flow:\|annotation mode\|bindingConditions' "$CLOG")"
  ! grep -q "drops bindingConditions" "$CLOG" || fail "the probe saw bindingConditions dropped: $(grep -m1 'drops bindingConditions' "$CLOG")"
}

# bats test_tags=start
@test "start: /readyz 200 (informer synced, owner Lease held)" {
  readyz() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$CMP/readyz"; }
  is_ready() { [ "$(readyz)" = 200 ]; }
  wait_until 20 is_ready || fail "/readyz $(readyz)"
}

# bats test_tags=start
@test "start: slice of 8 fixed devices, each with binding condition composed and failure condition compose-failed, no bindsToNode" {
  slice_json | jq -e '.spec.devices | ([.[].name] == [range(8) | "blade-0-\(.)"]) and all(.[];
    (has("allowMultipleAllocations") | not) and (has("bindsToNode") | not)
    and .bindingConditions == ["cxlkv.dev/composed"]
    and .bindingFailureConditions == ["cxlkv.dev/compose-failed"])' || fail "slice shape: $(slice_json | head -c 600)"
}

# bats test_tags=flow
@test "flow: bc allocated a device; its pod not bound while the compose runs" {
  slow_next_compose
  annotated_claim_pod bc 1024 fake-node-0 sh -c 'test -s "$CXL_DAX_DEVICE" && echo attached && exec sleep 600'
  wait_until 30 allocated bc || fail "bc never allocated"
  ! bound bc || fail "bc bound before its region was composed ($(regions) regions)"
  note "device $(cj bc '.status.allocation.devices.results[0].device'), binding conditions $(cj bc '.status.allocation.devices.results[0].bindingConditions | tojson')"
}

# bats test_tags=flow
@test "flow: composed, then the pod scheduled (not before), its size from cxlkv.dev/capacity-mib, the container attached" {
  local composed_at sched_at
  wait_until 60 running bc || fail "bc: $(phase bc)"
  wait_until 10 grep -q attached "$E/fake-node-0/logs/default_bc_main.log" || fail "bc did not attach"
  composed_at=$(cj bc '[.status.devices[]?.conditions[]? | select(.type == "cxlkv.dev/composed" and .status == "True")
    | .lastTransitionTime][0] // empty')
  sched_at=$(kubectl get pod bc -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].lastTransitionTime}')
  [ -n "$composed_at" ] || fail "no cxlkv.dev/composed True on bc"
  [[ ! "$sched_at" < "$composed_at" ]] || fail "bc scheduled at $sched_at, before composed at $composed_at"
  assert_eq "$(cj bc '.status.devices[0].data.sizeBytes')" $((1 << 30)) "bc's region size"
  note "composed at $composed_at, scheduled at $sched_at"
}

# bats test_tags=flow
@test "flow: bc deleted: region freed" {
  delete_pods bc && delete_claims bc || fail "bc not deleted"
  wait_until 20 no_regions || fail "bc left $(regions) regions"
}

# Two claims for the last free capacity: the scheduler accounts nothing, so
# both are allocated; one is composed, the other's compose fails, our
# controller sets the failure condition and the scheduler takes the allocation
# back: that pod stays unbound (never runs without a region) until the winner
# is gone. About 35 s: CXLKV_FULL=1 only (the default run's time budget).

# bats test_tags=race,full
@test "race: the winner runs; the loser failed at compose (its Event names annotation mode)" {
  full_only
  race_foreign_region
  race_start bc-a bc-b
  local note_=$(events_for "$LOSER" | grep -m1 '^ComposeFailed')
  [[ "$note_" == *"annotation mode"* ]] || fail "loser's Event: $note_"
  note "$WINNER runs; $LOSER: $(echo "$note_" | cut -c1-200)"
}

# bats test_tags=race,full
@test "race: the loser's pod stays unbound: the failure condition sent it back to the scheduler" {
  full_only; dra_need LOSER
  sleep 5
  ! bound "$LOSER" || fail "$LOSER was bound without a region"
  note "$(kubectl get pod "$LOSER" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}')"
}

# bats test_tags=race,full
@test "race: exactly one region of ours for the two claims" {
  full_only
  assert_eq "$(our_regions)" 1 "regions of ours"
}

# bats test_tags=race,full
@test "race: winner deleted: the loser composed, bound and running (nothing lost)" {
  full_only; dra_need WINNER LOSER
  delete_pods "$WINNER" && delete_claims "$WINNER" || fail "$WINNER not deleted"
  wait_until 90 running "$LOSER" ||
    fail "$LOSER after the winner left: $(phase "$LOSER"), Events: $(events_for "$LOSER" | tail -2)"
}

# bats test_tags=race,full
@test "race: no region leaked" {
  full_only
  race_end bc-a bc-b
}
