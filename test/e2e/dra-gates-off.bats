#!/usr/bin/env bats
# The driver against an apiserver, scheduler and controller-manager with
# DRAConsumableCapacity and DRADeviceBindingConditions off (both beta, on by
# default in 1.37; the driver must work there): the controller's start probe
# (a dry-run slice) sees both sets of fields dropped and falls back to the
# paper's design: annotation mode (paper §2.2: fixed devices per blade, sizes
# in cxlkv.dev/capacity-mib) and the paper's flow (§2.3: no binding
# conditions, the pod binds at once, the controller composes after its
# consumer appears, prepare answers "not ready yet" until the CDI ids are in
# the claim's status). Scenarios (steps share the prefix of their names):
#  - start: log line, metric annotation_mode 1, the slice's 8 fixed devices
#    (8 GiB blade / 1 GiB smallest region) without allowMultipleAllocations or
#    binding conditions, Event AnnotationMode on the slice;
#  - paper's flow: with the compose slowed to 5 s at the fabric manager, the
#    pod is bound while no region exists, prepare answers "not ready yet", then
#    the CDI id appears and the container attaches;
#  - race (CXLKV_FULL=1 only; skipped otherwise, each step named): two claims
#    for the last free capacity (6 GiB free, 4 GiB each): both admitted,
#    exactly one composed, the other fails at compose with a clear Event and
#    the compose-failed condition, the slice's capacity shows what is left,
#    and once the winner is deleted the loser's retried compose succeeds;
#  - switch: the apiserver restarted with DRAConsumableCapacity on: the
#    re-probe leaves annotation mode (log line, metric 0, Event
#    ConsumableCapacity, one shared device again), and a claim allocated in
#    annotation mode stays subtracted from the consumable capacity.
# test/e2e/dra-gates-capacity-off.bats has the other half (binding conditions
# on). The world (lib/dra-own-world.bash): 2 fake nodes, cxlkv-fabricd, per
# node cxlkv-hostd, cxlkv-dra-kubeletplugin and the fake kubelet, one
# cxlkv-dra-controller with default flags (flow and capacity mode auto).
# Run by test/e2e/dra-gates-off.sh (the dra stage's background); alone:
# `bats test/e2e/dra-gates-off.bats` as root after the dra stage built build/.
# Warm on 2 cores: about 85 s.
# bats file_tags=dra,gates-off

load lib/dra
load lib/dra-own-world
load lib/dra-gates

setup_file() {
  own_world_root
  gates_world_up gates-off DRAConsumableCapacity=false,DRADeviceBindingConditions=false gates-off
}
teardown_file() { own_world_down; }

# ---- start ------------------------------------------------------------------

# bats test_tags=start
@test "start: the start probe saw both gates off: the paper's flow and annotation mode (log line)" {
  grep -q "flow: paper (consumer wait, prepare polls); capacity: annotation mode" "$CLOG" &&
    grep -q "annotation mode: the dry-run slice came back without allowMultipleAllocations" "$CLOG" ||
    fail "controller start: $(grep -m2 'flow:\|annotation mode' "$CLOG")"
}

# bats test_tags=start
@test "start: metric cxlkv_dra_annotation_mode 1" {
  assert_eq "$(ctl_metric cxlkv_dra_annotation_mode)" 1 cxlkv_dra_annotation_mode
}

# bats test_tags=start
@test "start: slice of 8 fixed devices blade-0-0..7, no allowMultipleAllocations, no binding conditions, 8 GiB free" {
  slice_json | jq -e '.spec.devices | ([.[].name] == [range(8) | "blade-0-\(.)"]) and all(.[];
    (has("allowMultipleAllocations") | not) and (has("bindingConditions") | not)
    and .capacity.memory == {"value": "8589934592"})' || fail "slice shape: $(slice_json | head -c 600)"
}

# bats test_tags=start
@test "start: Event AnnotationMode on the slice" {
  wait_until 10 has_event "$DRA_SLICE" AnnotationMode || fail "no AnnotationMode Event on the slice"
  note "$(events_for "$DRA_SLICE" | grep -m1 '^AnnotationMode' | cut -c1-150)"
}

# ---- the paper's flow (compose slowed to 5 s at the fabric manager) ----------

# bats test_tags=paper-flow
@test "paper's flow: the pod is bound while no region exists yet (no binding conditions)" {
  slow_next_compose
  annotated_claim_pod pf 1024 fake-node-0 sh -c 'test -s "$CXL_DAX_DEVICE" && echo attached && exec sleep 600'
  wait_until 30 bound pf || fail "pf never bound: $(kubectl get pod pf -o jsonpath='{.status.conditions}')"
  assert_eq "$(regions)" 0 "regions when pf was bound (the compose was to take 5 s)"
}

# bats test_tags=paper-flow
@test "paper's flow: prepare answers 'not ready yet' before the CDI ids are in the claim's status" {
  local log=$E/logs/plugin-fake-node-0.log
  wait_until 20 grep -q "prepare claim=pf namespace=default .* result=not_ready" "$log" ||
    fail "no not_ready prepare for pf: $(grep -m2 'claim=pf' "$log")"
}

# bats test_tags=paper-flow
@test "paper's flow: then composed (size from cxlkv.dev/capacity-mib), prepared, the container attached" {
  wait_until 60 running pf || fail "pf: $(phase pf)"
  wait_until 10 grep -q attached "$E/fake-node-0/logs/default_pf_main.log" || fail "pf did not attach"
  assert_eq "$(cj pf '.status.devices[0].data.sizeBytes')" $((1 << 30)) "pf's region size"
  note "region $(cj pf '.status.devices[0].data.memoryId')"
}

# bats test_tags=paper-flow
@test "paper's flow: pf deleted: region freed" {
  delete_pods pf || fail "pf not deleted"
  delete_claims pf || fail "claim pf stuck"
  wait_until 20 no_regions || fail "pf left $(regions) regions"
}

# ---- two claims racing for the last free capacity (CXLKV_FULL=1) ---------------
# Soak-length for the default run, which keeps the start probe, annotation
# mode's slice and the paper's flow above, leaving annotation mode below (and
# the compose-failed path in dra-controller.bats); scripts/test.sh --full runs it.

# bats test_tags=race,full
@test "race: 2 GiB held outside any claim: slice capacity 6 GiB" {
  full_only
  race_foreign_region
}

# bats test_tags=race,full
@test "race: both claims admitted (the scheduler accounts nothing here); one runs" {
  full_only
  race_start race-a race-b
  note "devices $(cj race-a '.status.allocation.devices.results[0].device') and $(cj race-b '.status.allocation.devices.results[0].device'); $WINNER runs"
}

# bats test_tags=race,full
@test "race: the loser failed at compose with a clear Event (no space, annotation mode); the winner got none" {
  full_only; dra_need LOSER
  local note_=$(events_for "$LOSER" | grep -m1 '^ComposeFailed')
  [[ "$note_" =~ (no\ space|NoSpace|insufficient|not\ enough) ]] && [[ "$note_" == *"annotation mode"* ]] ||
    fail "loser's Event: $note_"
  ! has_event "$WINNER" ComposeFailed || fail "the winner $WINNER got a ComposeFailed Event too"
  note "$(echo "$note_" | cut -c1-220)"
}

# bats test_tags=race,full
@test "race: the loser's status: cxlkv.dev/compose-failed True; its pod does not run" {
  full_only; dra_need LOSER
  assert_eq "$(condition "$LOSER" cxlkv.dev/compose-failed)" True "$LOSER's compose-failed condition"
  ! running "$LOSER" || fail "$LOSER runs without a region"
}

# bats test_tags=race,full
@test "race: exactly one of the two composed (1 region of ours + the foreign one)" {
  full_only
  assert_eq "$(our_regions)" 1 "regions of ours for the two racing claims"
}

# bats test_tags=race,full
@test "race: annotation-mode accounting: the slice shows 2 GiB free (8 - 2 foreign - 4 composed)" {
  full_only
  wait_until 20 cap_is $((2 << 30)) || fail "capacity after the race: $(capacity), want $((2 << 30))"
}

# bats test_tags=race,full
@test "race: winner deleted: the loser's retried compose succeeds, its pod runs (nothing lost)" {
  full_only; dra_need WINNER LOSER
  delete_pods "$WINNER" && delete_claims "$WINNER" || fail "$WINNER not deleted"
  wait_until 60 running "$LOSER" || fail "$LOSER after the winner left: $(phase "$LOSER")"
  delete_pods "$LOSER" && delete_claims "$LOSER" || fail "$LOSER not deleted"
}

# bats test_tags=race,full
@test "race: no region leaked" {
  full_only
  race_end race-a race-b
}

# bats test_tags=race,full
@test "race: slice back to 8 GiB free" {
  full_only
  wait_until 20 cap_is $((8 << 30)) || fail "capacity $(capacity) at the end"
}

# ---- DRAConsumableCapacity turned on at the apiserver: annotation mode is left ----

# bats test_tags=switch
@test "switch: re-probe after the apiserver restart with the gate on: one shared device again (allowMultipleAllocations, requestPolicy; no binding conditions)" {
  # A claim allocated in annotation mode (a fixed device, no consumed
  # capacity the scheduler would count) stays through the switch.
  annotated_claim_pod keep 1024 fake-node-0 sh -c 'test -s "$CXL_DAX_DEVICE" && exec sleep 600'
  wait_until 60 running keep || fail "keep: $(phase keep)"
  CXLKV_E2E_GATES=DRAConsumableCapacity=true,DRADeviceBindingConditions=false \
    bash "$CLUSTER" restart-apiserver >"$E/logs/restart-apiserver.log" 2>&1 3>&- ||
    fail "apiserver restart: $(tail -5 "$E/logs/restart-apiserver.log")"
  consumable_slice() {
    slice_json | jq -e '.spec.devices | length == 1 and .[0].name == "blade-0" and .[0].allowMultipleAllocations
      and (.[0].capacity.memory | has("requestPolicy")) and (.[0] | has("bindingConditions") | not)' >/dev/null
  }
  wait_until 60 consumable_slice || fail "slice after the gate came on: $(slice_json | head -c 400)"
}

# bats test_tags=switch
@test "switch: log line 'annotation mode off'" {
  grep -q "annotation mode off: the dry-run slice kept allowMultipleAllocations/requestPolicy" "$CLOG" ||
    fail "no 'annotation mode off' log line"
  note "$(grep -m1 'annotation mode off' "$CLOG" | cut -c1-160)"
}

# bats test_tags=switch
@test "switch: metric cxlkv_dra_annotation_mode 0" {
  assert_eq "$(ctl_metric cxlkv_dra_annotation_mode)" 0 cxlkv_dra_annotation_mode
}

# bats test_tags=switch
@test "switch: Event ConsumableCapacity on the slice" {
  wait_until 20 has_event "$DRA_SLICE" ConsumableCapacity || fail "no ConsumableCapacity Event on the slice"
  note "$(events_for "$DRA_SLICE" | grep -m1 '^ConsumableCapacity' | cut -c1-150)"
}

# The scheduler does not count keep's fixed-device allocation, so the
# controller keeps its 1 GiB out of the consumable capacity.
# bats test_tags=switch
@test "switch: capacity 7 GiB: the claim allocated in annotation mode stays subtracted" {
  wait_until 20 cap_is $((7 << 30)) || fail "capacity $(capacity) after the switch, want $((7 << 30))"
}

# bats test_tags=switch
@test "switch: keep (allocated in annotation mode) still runs after the switch" {
  running keep || fail "keep: $(phase keep)"
}

# bats test_tags=switch
@test "switch: keep deleted: region freed, 8 GiB" {
  delete_pods keep || fail "keep not deleted"
  delete_claims keep || fail "claim keep stuck"
  wait_until 20 no_regions && wait_until 20 cap_is $((8 << 30)) ||
    fail "after keep: $(regions) regions, capacity $(capacity)"
}
