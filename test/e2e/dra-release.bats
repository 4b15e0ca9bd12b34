#!/usr/bin/env bats
# The controller and a node's release (the world: test/e2e/lib/dra.bash).
# Every controller running stops; this file's own, ctl-rel, resyncs every
# 300 s, so nothing here is mended by a resync pass (it keeps running after
# the file, and dra-release-epoch.bats uses it). fake-node-1's plugin runs as
# the rolling update's instance B (its pod UID) with hostd calls bounded at
# 30 s instead of 3 s: the slowed release below is then one call (a
# timed-out release would be retried, and a retry is not what this is about).
#  - race: a pod scheduled just before its node's release completes: the
#    claim's last pod on fake-node-1 has finished (so it left reservedFor)
#    and is deleted; its plugin's release (the fabric manager's unassign,
#    slowed to 8 s by the emulator's fault injection) is still on its way
#    when a new pod on fake-node-1 is reserved. The controller sees the host
#    still mapped, keeps re-reading the claim while that pod has not
#    started, and adds the host back once the release lands; the pod reads
#    the bytes the first pod wrote. No claim change follows the release, so
#    without that the pod waits for the next resync (300 s here);
#  - idle: a claim whose every host has released (its one pod gone; a
#    non-pod consumer in reservedFor, as a workload controller writes it,
#    keeps the allocation): the controller stops re-reading it (no region
#    read in 6 s, where a 500 ms loop would make about 12) and waits for an
#    event: a new pod's reservation gets its host added at once.
# A scenario's steps share the prefix of their names and run in order.
# Warm: about 45 s.
# bats file_tags=dra,release

load lib/dra

setup_file() {
  dra_setup_file
  dra_stop_controllers
  start ctl-rel "$BIN/cxlkv-dra-controller" --kubeconfig "$KCFG" --fabric "$F" \
    --identity ctl-rel --resync-period 300 --lease-duration 6 --metrics-listen "127.0.0.1:$CMP"
  wait_until 20 curl -sf "http://127.0.0.1:$CMP/healthz" || { echo "ctl-rel did not start"; return 1; }
  plugin_restart fake-node-1 -rel --pod-uid 22222222-bbbb-4bbb-8bbb-000000000002 --hostd-timeout-ms 30000 ||
    { echo "fake-node-1's plugin did not restart"; return 1; }
}

reserved() { cj "$1" '[.status.reservedFor[]?.name] | sort | join(" ")'; }

# bats test_tags=race
@test "race: a region on fake-node-0 and fake-node-1; ra-1 finished and left reservedFor (still prepared there)" {
  release_pair race ra cxlkv-release-race RR
}

# bats test_tags=race
@test "race: ra-2 reserved while fake-node-1's release is on its way (still mapped then); the host is added back after it lands; ra-2 runs and reads ra-0's bytes" {
  dra_need RR
  local n_add0 t0 mapped_then log=$E/fake-node-1/logs/default_ra-2_main.log
  # The next change of this region at the fabric manager (the release's
  # unassign of fake-node-1's port) takes 8 s: under hostd's 10 s timeout for
  # fabric calls (a request its caller gave up on is still applied when its
  # delay ends, and would unmap the host added back meanwhile).
  curl -sf -X PUT "$F/cxlkv/v1/faults" -d "{\"rules\": [{\"method\": \"PATCH\", \"path\": \"$DRA_MEMORY_URL_PATH/$RR\", \"delayMs\": 8000, \"count\": 1}]}" >/dev/null ||
    fail "could not set the unassign delay"
  n_add0=$(rel_adds race fake-node-1)
  kubectl delete pod ra-1 --wait=false >/dev/null
  # The release is on its way once hostd on fake-node-1 asked the manager:
  # the delayed PATCH has taken the fault rule (its count down to 0). Waited
  # for, not slept for: a loaded node's unprepare can take longer than a
  # fixed 2 s, and ra-2 would then come before the release, not during it.
  release_on_its_way() { [ "$(curl -s "$F/cxlkv/v1/faults" | jq '.rules[0].count')" = 0 ]; }
  wait_until 30 release_on_its_way || fail "fake-node-1's release never reached the fabric manager"
  pod_yaml ra-2 race fake-node-1 sh -c 'head -c 18 "$CXL_DAX_DEVICE"; echo; exec sleep 600' | kubectl apply -f - >/dev/null
  t0=$SECONDS
  reserved_2() { [ "$(reserved race)" = "ra-0 ra-2" ]; }
  wait_until 30 reserved_2 || fail "ra-2 never reserved the claim"
  mapped_then=$(fab_hosts "$RR")
  wait_until 60 running ra-2 && wait_until 10 grep -q cxlkv-release-race "$log" ||
    fail "ra-2 $(phase ra-2) after $((SECONDS - t0)) s, region mapped to '$(fab_hosts "$RR")', add-hosts $(rel_adds race fake-node-1) (the release landed after the controller's last read: no event until the 300 s resync)"
  curl -sf -X PUT "$F/cxlkv/v1/faults" -d '{"rules": []}' >/dev/null
  assert_eq "$mapped_then" "fake-node-0 fake-node-1" "hosts at ra-2's reservation"
  [ "$(rel_adds race fake-node-1)" -gt "$n_add0" ] || fail "add-hosts $n_add0 -> $(rel_adds race fake-node-1)"
  assert_eq "$(fab_hosts "$RR")" "fake-node-0 fake-node-1" "hosts now"
  note "ra-2 ran $((SECONDS - t0)) s after it was created"
  delete_pods ra-0 ra-2 || fail "ra-0/ra-2 not torn down"
  delete_claims race || fail "claim race stuck"
  wait_until 30 no_regions || fail "$(regions) regions left"
}

# bats test_tags=idle
@test "idle: every host released (the region mapped nowhere, the allocation kept): at most 1 region read in 6 s (no polling)" {
  claim_pod idle 1Gi id-0 fake-node-0 \
    sh -c 'printf cxlkv-idle-claim | dd of="$CXL_DAX_DEVICE" conv=notrunc 2>/dev/null && echo wrote && exec sleep 600'
  wait_until 90 running id-0 || fail "id-0: $(phase id-0)"
  wait_until 10 grep -q wrote "$E/fake-node-0/logs/default_id-0_main.log" || fail "id-0 did not write"
  RI=$(memory_id idle)
  dra_keep RI
  # A consumer that is no pod (a workload controller's object): the
  # resource claim controller keeps what it cannot check, so the allocation
  # outlives the pod.
  kubectl patch resourceclaim idle --subresource=status --type=json \
    -p '[{"op": "add", "path": "/status/reservedFor/-", "value": {"apiGroup": "example.cxlkv.dev", "resource": "workers", "name": "w0", "uid": "0d6f3c55-6c1e-4b8e-9d53-5f1f1c0de000"}}]' >/dev/null ||
    fail "could not add the non-pod consumer"
  delete_pods id-0 || fail "id-0 not torn down"
  all_released() { [ -z "$(fab_hosts "$RI")" ] && [ "$(cj idle '.status.reservedFor | length')" = 1 ]; }
  wait_until 30 all_released || fail "region mapped to '$(fab_hosts "$RI")', reservedFor $(reserved idle)"
  gets() { ctl_metric 'cxlkv_dra_operations_total{operation="get",result="ok"}'; }
  local g0 g1
  sleep 2  # the controller's reaction to the pod leaving reservedFor
  g0=$(gets); sleep 6; g1=$(gets)
  [ $((${g1:-0} - ${g0:-0})) -le 1 ] || fail "$((${g1:-0} - ${g0:-0})) region reads in 6 s (the claim is still polled)"
  note "$((${g1:-0} - ${g0:-0})) region reads in 6 s"
}

# bats test_tags=idle
@test "idle: a new consumer (its reservation the event): host fake-node-1 added, it runs on the same region and reads id-0's bytes" {
  dra_need RI
  local t0=$SECONDS
  pod_yaml id-1 idle fake-node-1 sh -c 'head -c 16 "$CXL_DAX_DEVICE"; echo; exec sleep 600' | kubectl apply -f - >/dev/null
  wait_until 60 running id-1 && wait_until 10 grep -q cxlkv-idle-claim "$E/fake-node-1/logs/default_id-1_main.log" ||
    fail "id-1: $(phase id-1), region mapped to '$(fab_hosts "$RI")'"
  assert_eq "$(fab_hosts "$RI")" fake-node-1 "hosts of region $RI"
  note "id-1 ran after $((SECONDS - t0)) s"
}

# bats test_tags=idle
@test "idle: the claim deleted, its region is freed" {
  delete_pods id-1 || fail "id-1 not torn down"
  # The workload is done with it: its consumer entry goes, then the claim.
  kubectl patch resourceclaim idle --subresource=status --type=json \
    -p '[{"op": "replace", "path": "/status/reservedFor", "value": []}]' >/dev/null
  delete_claims idle || fail "claim idle stuck"
  wait_until 30 no_regions || fail "$(regions) regions left"
}
