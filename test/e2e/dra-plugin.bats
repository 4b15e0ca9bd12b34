#!/usr/bin/env bats
# The kubelet plugin through restarts and a faulty controller (the world:
# test/e2e/lib/dra.bash):
#  - reboot: a node's reboot (new boot id, CDI dir wiped) while a pod holds a
#    claim: prepare redoes the work; before it, health through kubelet's DRA
#    manager (the plugin's DRAResourceHealth stream): Healthy, Unhealthy
#    while the region is gone from the node (hostd resyncing only when told,
#    meanwhile), Healthy after hostd's resync;
#  - crash: the plugin SIGKILLed mid-prepare (failpoint
#    dra.prepare.after_started) and restarted;
#  - rolling update: two plugin processes on fake-node-1 with per-pod sockets
#    and one shared checkpoint; the second one (B, on a new /metrics port)
#    keeps running after this file; before B, a plugin with A's socket names
#    on A's /metrics port exits at the taken port without touching A;
#  - refusal: prepare refusing a region still prepared on the node for
#    another claim (the test plays a faulty controller; the world's two
#    controllers are stopped for it and restarted as controller-0r/1r).
# A scenario's steps share the prefix of their names and run in order
# (--filter 'reboot:' runs one scenario). Warm: about 75 s.
# bats file_tags=dra,plugin

load lib/dra

# A pod whose container says "attached" once its region is there, then sleeps.
attach_and_sleep=(sh -c 'test -s "$CXL_DAX_DEVICE" && echo attached && exec sleep 600')
attached() { [ "$(grep -c attached "$1" 2>/dev/null)" -ge "$2" ]; }

# bats test_tags=reboot
@test "reboot: a pod on fake-node-2 runs with its region" {
  claim_pod kv2 1Gi sleeper fake-node-2 "${attach_and_sleep[@]}"
  wait_until 90 running sleeper || fail "sleeper: $(phase sleeper)"
  wait_until 10 attached "$E/fake-node-2/logs/default_sleeper_main.log" 1 || fail "the container did not attach"
  MEM2=$(memory_id kv2)
  dra_keep MEM2
}

# bats test_tags=reboot,health
@test "reboot: kubelet records the blade device Healthy on fake-node-2 (the plugin's health stream)" {
  wait_until 20 is_health fake-node-2 Healthy || fail "health on fake-node-2: '$(health fake-node-2)'"
}

# bats test_tags=reboot,health
@test "reboot: the region gone from fake-node-2, kubelet records the device Unhealthy" {
  dra_need MEM2
  # hostd drops the region. Its resync would materialize it again whenever
  # the next one came (every 10 s in the world), and a delete just before it
  # left the 1 s health poll no window on a loaded machine: for this step
  # fake-node-2's hostd resyncs at its start only, so the region stays gone
  # until the next step asks for a resync, however late the poll runs.
  hostd_restart fake-node-2 0 || fail "fake-node-2's hostd did not restart"
  hostd_has fake-node-2 "$MEM2" || fail "fake-node-2's hostd does not list region $MEM2 after its restart"
  curl -sf -X DELETE "http://127.0.0.1:${HPORT[fake-node-2]}/cxlkv/v1/regions/$MEM2" >/dev/null ||
    fail "hostd refused to remove region $MEM2"
  ! hostd_has fake-node-2 "$MEM2" || fail "hostd still lists region $MEM2 after removing it"
  # Unhealthy for this reason, not for hostd's restart (hostd unreachable).
  region_gone() { is_health fake-node-2 Unhealthy && [[ $(health_message fake-node-2) == *"region $MEM2 "*"no longer materialized"* ]]; }
  wait_until 20 region_gone ||
    fail "after removing the region: health '$(health fake-node-2)', reason '$(health_message fake-node-2)'"
}

# bats test_tags=reboot,health
@test "reboot: hostd's resync restores the region: Healthy again" {
  dra_need MEM2
  local r back=no
  # A resync asked for (-d '': a POST without a Content-Length is refused
  # with 400); then fake-node-2's hostd as the world has it (its resync
  # every 10 s) before anything here can fail.
  r=$(curl -sf -X POST -d '' "http://127.0.0.1:${HPORT[fake-node-2]}/cxlkv/v1/resync") || r="refused"
  hostd_has fake-node-2 "$MEM2" && back=yes
  hostd_restart fake-node-2 || fail "fake-node-2's hostd did not restart"
  [ "$back" = yes ] || fail "the resync ($r) did not materialize region $MEM2 again"
  wait_until 30 is_health fake-node-2 Healthy ||
    fail "health did not recover: '$(health fake-node-2)', reason '$(health_message fake-node-2)'"
}

# bats test_tags=reboot
@test "reboot: the plugin notices the new boot id" {
  # The reboot: kubelet, plugin and containers stop; tmpfs state (the CDI
  # dir) is lost; the boot id changes. hostd keeps running: keeping its
  # devices is hostd's business (its own resync covers its restart).
  dra_stop kubelet-fake-node-2 "$(plugin_name fake-node-2)"
  rm -f "$E"/fake-node-2/cdi/*.json
  echo "rebooted-$(date +%s)" >"$E/fake-node-2/boot_id"
  plugin_start fake-node-2
  kubelet_start fake-node-2
  wait_until 20 grep -q "from boot" "$E/logs/plugin-fake-node-2.log" || fail "the plugin did not log the reboot"
}

# bats test_tags=reboot
@test "reboot: prepare redoes the work: the CDI spec rewritten, the container attached again" {
  # kubelet re-prepares the pod's claim after the reboot and restarts its container.
  wait_until 60 attached "$E/fake-node-2/logs/default_sleeper_main.log" 2 ||
    fail "sleeper $(phase sleeper), $(grep -c attached "$E/fake-node-2/logs/default_sleeper_main.log") attaches"
  ls "$E"/fake-node-2/cdi/*.json >/dev/null 2>&1 || fail "no CDI spec on fake-node-2"
}

# bats test_tags=reboot
@test "reboot: the pod and its claim are torn down" {
  delete_pods sleeper || fail "sleeper not torn down"
  delete_claims kv2 || fail "kv2 stuck: $(cj kv2 .metadata.finalizers)"
}

# bats test_tags=crash
@test "crash: the plugin dies by SIGKILL mid-prepare with the claim PrepareStarted in its checkpoint; the pod does not run" {
  local pid rc
  dra_stop "$(plugin_name fake-node-0)"
  CXLKV_FAILPOINT=dra.prepare.after_started plugin_start fake-node-0 -crash
  pid=$(dra_pid plugin-fake-node-0-crash)
  claim_pod kv3 1Gi crashy fake-node-0 "${attach_and_sleep[@]}"
  wait_until 90 dead "$pid" || fail "the failpoint never fired"
  rc=0; wait "$pid" || rc=$?
  rm -f "$E/pids/plugin-fake-node-0-crash"
  assert_eq "$rc" 137 "the plugin's exit status"
  assert_eq "$(ckpt_states fake-node-0)" PrepareStarted "fake-node-0's checkpoint"
  ! running crashy || fail "crashy runs although prepare never finished"
}

# bats test_tags=crash
@test "crash: the restarted plugin redoes the prepare: the container attaches" {
  plugin_name fake-node-0 >/dev/null || plugin_start fake-node-0
  wait_until 60 running crashy || fail "crashy: $(phase crashy)"
  wait_until 10 grep -q attached "$E/fake-node-0/logs/default_crashy_main.log" || fail "crashy did not attach"
  note "checkpoint of fake-node-0: $(ckpt_states fake-node-0)"
}

# bats test_tags=crash
@test "crash: the pod and its claim are torn down" {
  delete_pods crashy || fail "crashy not torn down"
  delete_claims kv3 || fail "kv3 stuck: $(cj kv3 .metadata.finalizers)"
}

# bats test_tags=rolling
@test "rolling update: plugin A (per-pod sockets) is registered and prepares roll-1" {
  dra_stop "$(plugin_name fake-node-1)"
  plugin_start fake-node-1 -a --pod-uid 11111111-aaaa-4aaa-8aaa-000000000001
  wait_until 20 grep -q "kubelet registered driver" "$E/logs/plugin-fake-node-1-a.log" ||
    fail "plugin A was not registered"
  claim_pod roll 1Gi roll-1 fake-node-1 "${attach_and_sleep[@]}"
  wait_until 90 running roll-1 || fail "roll-1: $(phase roll-1)"
  MPORT_A=${MPORT[fake-node-1]}
  dra_keep MPORT_A
}

# bats test_tags=rolling
@test "rolling update: a second plugin with A's socket names on A's taken /metrics port exits first: A keeps its sockets and /healthz, the checkpoint is not rewritten" {
  dra_need MPORT_A
  # What two plugins without per-pod names (--pod-uid), e.g. on the host
  # network with the default --http-listen, meet. The plugin binds its port
  # before it acts: taking the sockets over (a stale one is removed at
  # start, so a live one was too) and then removing them at exit left A
  # with none, and the kubelet deregistered the driver.
  local ck=$E/fake-node-1/dra-plugin/checkpoint.json log=$E/logs/plugin-fake-node-1-taken.log
  local inode pid
  inode=$(stat -c %i "$ck")
  plugin_start fake-node-1 -taken --pod-uid 11111111-aaaa-4aaa-8aaa-000000000001
  pid=$(cat "$E/pids/plugin-fake-node-1-taken")
  rm -f "$E/pids/plugin-fake-node-1-taken"
  wait_until 20 dead "$pid" || { kill "$pid"; fail "a plugin on a taken port kept running"; }
  grep -q "address already in use: port $MPORT_A" "$log" || fail "no taken-port error: $(cat "$log")"
  ! grep -q "registration socket" "$log" || fail "it started its driver first: $(cat "$log")"
  curl -sf "http://127.0.0.1:$MPORT_A/healthz" >/dev/null ||
    fail "plugin A: $(curl -s "http://127.0.0.1:$MPORT_A/healthz")"
  assert_eq "$(ls "$E"/fake-node-1/kubelet/plugins_registry/ | grep -c -- '-reg.sock$')" 1 \
    "registration sockets"
  assert_eq "$(stat -c %i "$ck")" "$inode" "the checkpoint's inode (a save renames a new file in)"
}

# bats test_tags=rolling
@test "rolling update: kubelet registers plugin B while A serves: 2 registration sockets" {
  dra_need MPORT_A
  # Plugin B starts beside A (maxSurge 1): other socket names, the same state dir.
  dra_keep_mport fake-node-1 "$(free_port)"
  plugin_start fake-node-1 -b --pod-uid 22222222-bbbb-4bbb-8bbb-000000000002
  wait_until 20 grep -q "kubelet registered driver" "$E/logs/plugin-fake-node-1-b.log" ||
    fail "kubelet did not register plugin B"
  assert_eq "$(ls "$E"/fake-node-1/kubelet/plugins_registry/ | grep -c -- '-reg.sock$')" 2 \
    "registration sockets while both run"
}

# bats test_tags=rolling
@test "rolling update: both instances are healthy side by side" {
  dra_need MPORT_A
  curl -sf "http://127.0.0.1:$MPORT_A/healthz" >/dev/null || fail "plugin A unhealthy"
  curl -sf "http://127.0.0.1:${MPORT[fake-node-1]}/healthz" >/dev/null || fail "plugin B unhealthy"
}

# bats test_tags=rolling
@test "rolling update: plugin A stops; roll-1 keeps running" {
  dra_stop plugin-fake-node-1-a
  running roll-1 || fail "roll-1 after A stopped: $(phase roll-1)"
}

# bats test_tags=rolling
@test "rolling update: plugin B unprepares the claim plugin A prepared (the shared checkpoint); the checkpoint is empty" {
  local log=$E/logs/plugin-fake-node-1-b.log
  delete_pods roll-1 || fail "roll-1 not torn down"
  wait_until 20 grep -q "unprepare claim=roll namespace=default .* result=success region=" "$log" ||
    fail "plugin B: $(grep -c "claim=roll" "$log") lines about claim roll"
  assert_eq "$(ckpt_entries fake-node-1)" 0 "fake-node-1's checkpoint entries"
  delete_claims roll || fail "roll stuck"
}

# bats test_tags=rolling
@test "rolling update: plugin B alone prepares new pods" {
  claim_pod roll2 1Gi roll-2 fake-node-1 sh -c 'test -s "$CXL_DAX_DEVICE"'
  wait_until 90 succeeded roll-2 || fail "roll-2 with plugin B: $(phase roll-2)"
  grep -q "prepare claim=roll2 namespace=default .* result=success" "$E/logs/plugin-fake-node-1-b.log" ||
    fail "plugin B did not log the prepare of roll2"
  delete_pods roll-2 || fail "roll-2 not torn down"
  delete_claims roll2 || fail "roll2 stuck"
}

# bats test_tags=refusal
@test "refusal: a pod holds claim own's region on fake-node-0" {
  claim_pod own 1Gi holder fake-node-0 sh -c 'test -s "$CXL_DAX_DEVICE" && exec sleep 600'
  wait_until 90 running holder || fail "holder: $(phase holder)"
  MEMO=$(memory_id own)
  dra_keep MEMO
}

# bats test_tags=refusal
@test "refusal: prepare refuses the region for claim thief: still prepared on the node for claim own" {
  dra_need MEMO
  # The controllers stop; the test plays a faulty one that hands claim thief
  # the region claim own holds on fake-node-0. The plugin is the last line
  # of defence.
  dra_stop_controllers
  claim_pod thief 1Gi thief fake-node-0 sh -c 'test -s "$CXL_DAX_DEVICE"'
  is_allocated() { [ -n "$(kubectl get resourceclaim "$1" -o jsonpath='{.status.allocation.allocationTimestamp}')" ]; }
  wait_until 60 is_allocated thief || fail "thief never allocated"
  kubectl get resourceclaim thief -o json | jq --arg mem "$MEMO" --arg now "$(date -u +%Y-%m-%dT%H:%M:%SZ)" '
    {status: {devices: [.status.allocation.devices.results[]
      | {driver, pool, device,
         conditions: [{type: "cxlkv.dev/composed", status: "True", reason: "Faulty",
                       message: "a faulty controller reused a region", lastTransitionTime: $now}],
         data: {memoryId: $mem, hosts: {"fake-node-0": {state: "Materialized"}}}}
        + (if .shareID then {shareID} else {} end)]}}' >"$E/thief-status.json"
  kubectl patch resourceclaim thief --subresource=status --type=merge -p "$(cat "$E/thief-status.json")" >/dev/null ||
    fail "could not write thief's status"
  local log=$E/logs/$(plugin_name fake-node-0).log
  wait_until 60 grep -q "prepare claim=thief namespace=default .* result=error: region $MEMO is still prepared on node fake-node-0 for claim default/own" "$log" ||
    fail "no refusal in the plugin log: $(grep "claim=thief" "$log" | tail -2)"
  ! running thief && ! succeeded thief || fail "thief ran on another claim's region"
}

# bats test_tags=refusal
@test "refusal: the controllers back, thief gets a region of its own and runs" {
  # The real controllers come back (restarted under new log names).
  racing_controllers_start r
  wait_until 90 succeeded thief || fail "thief after the controllers came back: $(phase thief)"
  delete_pods holder thief || fail "holder/thief not torn down"
  delete_claims own thief || fail "own/thief stuck"
}
