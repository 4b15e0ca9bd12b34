#!/usr/bin/env bats
# The DRA driver's scenario 1 (test/e2e/lib/dra.bash has the world): the
# blade's ResourceSlice, the plugins' /healthz, then a 2 GiB claim shared by
# two pods on two nodes, composed once (binding condition cxlkv.dev/composed
# set by our controller, not the test); both nodes' kubelets get the same
# CDI device; the containers are `cxlkv replay` workers that attach through
# CXL_DAX_DEVICE and see each other's stores; deleting the pods and the claim
# frees the region and removes the finalizer; the plugins' /metrics and logs
# show the operations. From a clean state, as one command (root; build/ built):
#
#   bats test/e2e/dra-shared-claim.bats
#
# Steps of one scenario share the prefix of their names ("scenario 1:") and
# run in order; --filter 'scenario 1:' runs the scenario. Warm: about 35 s.
# bats file_tags=dra,scenario1

load lib/dra

# bats test_tags=slice
@test "slice: the controller publishes the blade's ResourceSlice" {
  wait_until 30 kubectl get resourceslice "$DRA_SLICE" || fail "no ResourceSlice $DRA_SLICE"
}

# bats test_tags=slice
@test "slice: one blade device, its cabled hosts, consumable memory in 1 GiB steps, the binding condition, no bindsToNode" {
  wait_until 30 kubectl get resourceslice "$DRA_SLICE" || fail "no ResourceSlice $DRA_SLICE"
  slice_json | jq -e --arg mem $((8 << 30)) --arg step $((1 << 30)) '.spec as $s | $s.devices[0] as $d
    | $s.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].values == ["fake-node-0", "fake-node-1", "fake-node-2"]
      and $d.allowMultipleAllocations == true and $d.bindingConditions == ["cxlkv.dev/composed"]
      and $d.capacity.memory.value == $mem and $d.capacity.memory.requestPolicy.validRange.step == $step
      and ($d | has("bindsToNode") | not)' >/dev/null ||
    fail "slice shape: $(slice_json | jq -c .spec)"
}

# bats test_tags=plugin
@test "plugin: every plugin's /healthz answers 200 (both sockets accept)" {
  local n healthy=0
  for n in "${DRA_NODES[@]}"; do
    wait_until 20 curl -sf "http://127.0.0.1:${MPORT[$n]}/healthz" && healthy=$((healthy + 1))
  done
  assert_eq "$healthy" 3 "plugins whose /healthz answers"
}

@test "scenario 1: a 2 GiB claim shared by pods on two nodes becomes composed (cxlkv.dev/composed True)" {
  local t0=$SECONDS
  CTL=$E/replay.ctl
  replay_claim kv replay "$CTL" fake-node-0 fake-node-1
  wait_until 120 composed_true kv || fail "claim kv never became composed: $(cj kv .status)"
  CDI=$(memory_id kv)
  [ -n "$CDI" ] || fail "composed, but no memoryId in the claim's device data"
  dra_keep CDI
  note "composed in $((SECONDS - t0)) s: region $CDI on $(cj kv '.status.devices[0].data.hosts | keys | join(" ")')"
}

@test "scenario 1: both replay pods run to completion" {
  wait_until 120 succeeded replay-0 || fail "replay-0: $(phase replay-0)"
  wait_until 60 succeeded replay-1 || fail "replay-1: $(phase replay-1)"
}

@test "scenario 1: the claim is composed once for both pods" {
  # The pods ran to completion, so the claim may already be deallocated and
  # its region freed: count composes in the controllers' logs instead.
  assert_eq "$(cat "$E"/logs/controller-*.log | grep -c "claim default/kv: composed region")" 1 \
    "composes of claim kv"
}

@test "scenario 1: fake-node-0's kubelet DRA manager holds the CDI device cxlkv.dev/region=<region>" {
  dra_need CDI
  grep -q "cxlkv.dev/region=$CDI" "$E/fake-node-0/kubelet/dra/dra_manager_state" ||
    fail "cxlkv.dev/region=$CDI not in fake-node-0's DRA manager state"
}

@test "scenario 1: fake-node-1's kubelet DRA manager holds the same CDI device" {
  dra_need CDI
  grep -q "cxlkv.dev/region=$CDI" "$E/fake-node-1/kubelet/dra/dra_manager_state" ||
    fail "cxlkv.dev/region=$CDI not in fake-node-1's DRA manager state"
}

@test "scenario 1: the containers attached through CXL_DAX_DEVICE and saw each other's stores" {
  run replay_ok "$E/fake-node-0/logs/default_replay-0_main.log" "$E/fake-node-1/logs/default_replay-1_main.log"
  [ "$status" -eq 0 ] || fail "replay results: $output"
  note "$(echo "$output" | xargs)"
}

@test "scenario 1: deleting the pods and the claim removes the claim's finalizer" {
  delete_pods replay-0 replay-1 || fail "replay pods not torn down"
  delete_claims kv || fail "claim stuck: $(cj kv .metadata.finalizers)"
}

@test "scenario 1: the region is freed at the fabric manager" {
  wait_until 20 no_regions || fail "$(regions) regions left: $(region_list)"
}

@test "scenario 1: every node's CDI spec of the region is removed" {
  dra_need CDI
  local left
  left=$(find "$E"/fake-node-*/cdi -name "$CDI.json" | wc -l)
  assert_eq "$left" 0 "CDI specs of $CDI left"
}

@test "scenario 1: the plugins' /metrics counted the prepares and unprepares with latencies; no claim left prepared" {
  local i p u h g
  for i in 0 1; do
    p=$(metric "fake-node-$i" 'cxlkv_dra_plugin_operations_total{operation="prepare",result="success"}')
    u=$(metric "fake-node-$i" 'cxlkv_dra_plugin_operations_total{operation="unprepare",result="success"}')
    h=$(metric "fake-node-$i" 'cxlkv_dra_plugin_operation_duration_seconds_count{operation="prepare",result="success"}')
    g=$(metric "fake-node-$i" 'cxlkv_dra_plugin_prepared_claims')
    echo "fake-node-$i /metrics: prepare success $p (histogram count $h), unprepare success $u, prepared claims $g"
    [ "$p" -ge 1 ] || fail "fake-node-$i: no successful prepare counted"
    assert_eq "$h" "$p" "fake-node-$i: prepare latency histogram count"
    [ "$u" -ge 1 ] || fail "fake-node-$i: no successful unprepare counted"
    assert_eq "$g" 0 "fake-node-$i: claims still prepared"
  done
}

@test "scenario 1: the plugin's log names claim and namespace (claim=kv namespace=default uid=... result=success)" {
  grep -q 'prepare claim=kv namespace=default uid=.* result=success' "$E/logs/plugin-fake-node-0.log" ||
    fail "no structured prepare line in fake-node-0's plugin log"
}
