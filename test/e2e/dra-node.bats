#!/usr/bin/env bats
# The kubelet plugin's node-side cases (the world: test/e2e/lib/dra.bash):
#  - release: a node's materialization released on its last unprepare: a
#    claim shared by pods on fake-node-0 and fake-node-1; the pod on
#    fake-node-1 deleted: that node's plugin has the fabric manager unassign
#    fake-node-1's port (through its hostd), hostd there removes the device
#    and the CDI spec, and fake-node-0 keeps serving the region; a new pod on
#    fake-node-1: the controller adds the host again (add-host), prepare
#    waits for it, and the pod reads the bytes the first pod wrote (the same
#    region, never recomposed);
#  - prepare checks: prepare called as a misbehaving kubelet would (one
#    NodePrepareResources through kubelet's generated gRPC client,
#    `cxlkv-fakekubelet call`): a claim UID that is not the claim's, and a
#    node outside the allocation's node selector (an allocation the test
#    writes as a faulty scheduler would, k/k#140087): each refused with a
#    clear error and nothing materialized or checkpointed on that node (the
#    UID refusal on both the v1 and the v1beta1 service); the same call with
#    the right UID on the right node then succeeds (so the refusals come
#    from the checks, not from a broken setup);
#  - cleanup: a claim deleted while its node's kubelet and plugin were down
#    (its pod force-deleted): the entry stays in the checkpoint until the
#    plugin restarts, whose start-up cleanup drops it (a plugin that fails
#    at its taken /metrics port first leaves it);
#  - hostd health: the node's hostd down, then back, while a claim is
#    prepared there: blade-0 UNHEALTHY, then HEALTHY, on both health
#    services (v1 and v1alpha1, read through kubelet's generated clients),
#    and in kubelet's DRA manager's health state.
# A scenario's steps share the prefix of their names and run in order.
# Warm: about 40 s.
# bats file_tags=dra,node

load lib/dra

sock() { echo "$E/$1/kubelet/plugins/cxlkv.dev/dra.sock"; }
# call_prepare <node> <claim> <uid> [v1|v1beta1]: the plugin's per-claim error ("" = success).
call_prepare() {
  "$FK" call prepare --socket "$(sock "$1")" --namespace default --name "$2" --uid "$3" --api "${4:-v1}" |
    jq -r '.claims | to_entries[0].value.error // ""'
}
# stream_health <node> <v1|v1alpha1>: blade-0's health in the plugin's stream now.
stream_health() {
  "$FK" call health --socket "$(sock "$1")" --api "$2" --messages 2 2>/dev/null | tail -1 |
    jq -r '[.devices[]? | select(.device.deviceName == "blade-0")]
           | if length > 0 then .[0].health // "UNKNOWN" else "none" end' 2>/dev/null
}
both_health() { [ "$(stream_health fake-node-0 v1)" = "$1" ] && [ "$(stream_health fake-node-0 v1alpha1)" = "$1" ]; }
released_on_1() {
  [ "$(fab_hosts "$RM")" = fake-node-0 ] && ! hostd_has fake-node-1 "$RM" &&
    [ ! -e "$E/fake-node-1/cdi/$RM.json" ]
}
rel_adds() { cat "$E"/logs/controller-*.log | grep -c "claim default/rel: added host fake-node-1 to region $RM" || true; }

# bats test_tags=release
@test "release: a claim shared by pods on fake-node-0 and fake-node-1 maps its region to both" {
  claim_pod rel 1Gi rel-0 fake-node-0 \
    sh -c 'printf cxlkv-kept-across-release | dd of="$CXL_DAX_DEVICE" conv=notrunc 2>/dev/null && echo wrote && exec sleep 600'
  pod_yaml rel-1 rel fake-node-1 sh -c 'test -s "$CXL_DAX_DEVICE" && echo attached && exec sleep 600' |
    kubectl apply -f - >/dev/null
  wait_until 90 running rel-0 || fail "rel-0: $(phase rel-0)"
  wait_until 60 running rel-1 || fail "rel-1: $(phase rel-1)"
  wait_until 10 grep -q wrote "$E/fake-node-0/logs/default_rel-0_main.log" || fail "rel-0 did not write"
  RM=$(memory_id rel)
  assert_eq "$(fab_hosts "$RM")" "fake-node-0 fake-node-1" "hosts of region $RM"
  dra_keep RM
}

# bats test_tags=release
@test "release: the pod on fake-node-1 gone, its port is unassigned at the fabric manager and the device and CDI spec removed there" {
  dra_need RM
  delete_pods rel-1 || fail "rel-1 not torn down"
  wait_until 30 released_on_1 ||
    fail "fabric maps '$(fab_hosts "$RM")', hostd fake-node-1 has it: $(hostd_has fake-node-1 "$RM" && echo yes || echo no)"
}

# bats test_tags=release
@test "release: fake-node-1's plugin logs the release (released=yes)" {
  dra_need RM
  # fake-node-1's plugin may be the rolling update's second instance by now.
  [ "$(cat "$E"/logs/plugin-fake-node-1*.log | grep -c "unprepare claim=rel namespace=default .* result=success region=$RM released=yes")" -ge 1 ] ||
    fail "no release line: $(cat "$E"/logs/plugin-fake-node-1*.log | grep "claim=rel " | tail -2)"
}

# bats test_tags=release
@test "release: fake-node-0 still serves the region (device, CDI spec, pod running)" {
  dra_need RM
  hostd_has fake-node-0 "$RM" || fail "fake-node-0's hostd lost region $RM"
  [ -e "$E/fake-node-0/cdi/$RM.json" ] || fail "fake-node-0's CDI spec of $RM is gone"
  running rel-0 || fail "rel-0: $(phase rel-0)"
}

# bats test_tags=release
@test "release: a resync of fake-node-1's hostd keeps it released (hostd follows the manager)" {
  dra_need RM
  local r
  # -d '': a POST without a Content-Length is refused with 400, and a
  # refused resync would leave nothing to check.
  r=$(curl -sf -X POST -d '' "http://127.0.0.1:${HPORT[fake-node-1]}/cxlkv/v1/resync") ||
    fail "fake-node-1's hostd refused the resync"
  note "resync: $r"
  released_on_1 || fail "fake-node-1's resync ($r) brought region $RM back"
  N_ADD0=$(rel_adds)
  dra_keep N_ADD0
}

# bats test_tags=release
@test "release: a new pod on fake-node-1: the host added back to the same region, re-materialized; it reads the bytes rel-0 wrote" {
  dra_need RM
  local log=$E/fake-node-1/logs/default_rel-2_main.log
  pod_yaml rel-2 rel fake-node-1 sh -c 'head -c 25 "$CXL_DAX_DEVICE"; echo; exec sleep 600' |
    kubectl apply -f - >/dev/null
  wait_until 90 running rel-2 || fail "rel-2: $(phase rel-2), fabric maps '$(fab_hosts "$RM")'"
  wait_until 10 grep -q cxlkv-kept-across-release "$log" || fail "rel-2 read '$(head -c 40 "$log" 2>/dev/null)'"
  assert_eq "$(memory_id rel)" "$RM" "rel-2's region"
  assert_eq "$(fab_hosts "$RM")" "fake-node-0 fake-node-1" "hosts of region $RM"
}

# bats test_tags=release
@test "release: the controller's add-host mapped fake-node-1 again" {
  dra_need RM N_ADD0
  [ "$(rel_adds)" -gt "$N_ADD0" ] ||
    fail "no new add-host of fake-node-1 in the controllers' logs ($(rel_adds) before and after)"
}

# bats test_tags=release
@test "release: the claim deleted, its region is freed and nothing is left on any node" {
  delete_pods rel-0 rel-2 || fail "rel-0/rel-2 not torn down"
  delete_claims rel || fail "claim rel stuck"
  wait_until 20 no_regions || fail "$(regions) regions left after rel"
}

# bats test_tags=prepare
@test "prepare checks: prepare on a node outside the allocation's node selector is refused; nothing materialized or checkpointed there" {
  # A 1 GiB allocation on fake-node-0 only, written as a faulty scheduler
  # would: the blade is cabled to all three nodes, but this allocation names one.
  claim_yaml sel 1Gi | kubectl apply -f - >/dev/null
  SUID=$(claim_uid sel)
  jq -n --arg now "$(date -u +%Y-%m-%dT%H:%M:%SZ)" '{status: {allocation: {
      devices: {results: [{request: "kv", driver: "cxlkv.dev", pool: "cma-0/blade-0",
                           device: "blade-0", consumedCapacity: {memory: "1Gi"}}]},
      nodeSelector: {nodeSelectorTerms: [{matchExpressions: [
        {key: "kubernetes.io/hostname", operator: "In", values: ["fake-node-0"]}]}]},
      allocationTimestamp: $now}}}' >"$E/sel-status.json"
  kubectl patch resourceclaim sel --subresource=status --type=merge -p "$(cat "$E/sel-status.json")" >/dev/null ||
    fail "could not write sel's allocation"
  sel_ready() { [ "$(cj sel '.status.devices[0].data.hosts["fake-node-0"].state')" = Materialized ]; }
  wait_until 60 sel_ready || fail "sel's region never materialized on fake-node-0"
  SM=$(memory_id sel)
  dra_keep SUID SM
  local before2 err
  before2=$(ckpt_entries fake-node-2)
  err=$(call_prepare fake-node-2 sel "$SUID")
  [[ "$err" == *"node fake-node-2 is not in the allocation's node selector"* ]] ||
    fail "prepare on a node outside the node selector answered: '$err'"
  ! hostd_has fake-node-2 "$SM" || fail "refused, but fake-node-2's hostd has region $SM"
  [ ! -e "$E/fake-node-2/cdi/$SM.json" ] || fail "refused, but fake-node-2 has a CDI spec of $SM"
  assert_eq "$(ckpt_entries fake-node-2)" "$before2" "fake-node-2's checkpoint entries"
  assert_eq "$(fab_hosts "$SM")" fake-node-0 "hosts of region $SM"
  note "refused: $err"
}

# wrong_uid_refused <API version>: that version's prepare of claim sel on
# fake-node-0 with a UID that is not the claim's is refused, naming both
# UIDs, and adds no checkpoint entry.
wrong_uid_refused() {
  local wrong=00000000-0000-4000-8000-00000000dead before0 err
  before0=$(ckpt_entries fake-node-0)
  err=$(call_prepare fake-node-0 sel "$wrong" "$1")
  [[ "$err" == *"has UID $SUID, the kubelet asked for $wrong"* ]] || fail "$1 prepare with a wrong UID answered: '$err'"
  assert_eq "$(ckpt_entries fake-node-0)" "$before0" "fake-node-0's checkpoint entries"
}

# bats test_tags=prepare
@test "prepare checks: v1 prepare with a UID that is not the claim's is refused; no checkpoint entry" {
  dra_need SUID
  wrong_uid_refused v1
}

# bats test_tags=prepare
@test "prepare checks: v1beta1 prepare with a UID that is not the claim's is refused; no checkpoint entry" {
  dra_need SUID
  wrong_uid_refused v1beta1
}

# bats test_tags=prepare
@test "prepare checks: the same call (v1beta1) with the claim's UID on fake-node-0 succeeds (the checks refused, not the setup)" {
  dra_need SUID
  local before0 err
  before0=$(ckpt_entries fake-node-0)
  err=$(call_prepare fake-node-0 sel "$SUID" v1beta1)
  assert_eq "$err" "" "prepare of sel on fake-node-0 with its UID"
  assert_eq "$(ckpt_entries fake-node-0)" $((before0 + 1)) "fake-node-0's checkpoint entries"
  "$FK" call unprepare --socket "$(sock fake-node-0)" --namespace default --name sel --uid "$SUID" >/dev/null ||
    fail "unprepare of sel failed"
  assert_eq "$(ckpt_entries fake-node-0)" "$before0" "fake-node-0's checkpoint entries after the unprepare"
  delete_claims sel || fail "claim sel stuck"
  wait_until 20 no_regions || fail "$(regions) regions left after sel"
}

# bats test_tags=cleanup
@test "cleanup: a claim deleted while fake-node-2 was down keeps its entry in the checkpoint" {
  claim_pod down 1Gi down-1 fake-node-2 sh -c 'test -s "$CXL_DAX_DEVICE" && echo attached && exec sleep 600'
  wait_until 90 running down-1 || fail "down-1: $(phase down-1)"
  DUID=$(claim_uid down)
  dra_keep DUID
  local ck=$E/fake-node-2/dra-plugin/checkpoint.json
  jq -e --arg u "$DUID" '.data.claims | has($u)' "$ck" >/dev/null ||
    fail "claim down not in fake-node-2's checkpoint while its pod runs"
  # The node goes down (kubelet and plugin stop, the container with them);
  # the pod and the claim are deleted meanwhile, so nobody unprepares.
  dra_stop kubelet-fake-node-2 "$(plugin_name fake-node-2)"
  kubectl delete pod down-1 --grace-period=0 --force >/dev/null 2>&1 || true
  delete_claims down || fail "claim down stuck"
  jq -e --arg u "$DUID" '.data.claims | has($u)' "$ck" >/dev/null ||
    fail "the entry of claim down vanished while the plugin was down"
}

# bats test_tags=cleanup
@test "cleanup: a plugin on a taken /metrics port exits before its start-up cleanup: the entry stays" {
  dra_need DUID
  # fake-node-0's plugin holds its port; this one is given it.
  MPORT[fake-node-2]=${MPORT[fake-node-0]}
  local log=$E/logs/plugin-fake-node-2-taken.log pid
  plugin_start fake-node-2 -taken
  pid=$(cat "$E/pids/plugin-fake-node-2-taken")
  rm -f "$E/pids/plugin-fake-node-2-taken"
  wait_until 20 dead "$pid" || { kill "$pid"; fail "a plugin on a taken port kept running"; }
  grep -q "address already in use: port ${MPORT[fake-node-0]}" "$log" ||
    fail "no taken-port error: $(cat "$log")"
  ! grep -q "cleanup claim=down" "$log" || fail "it cleaned up first: $(cat "$log")"
  jq -e --arg u "$DUID" '.data.claims | has($u)' "$E/fake-node-2/dra-plugin/checkpoint.json" >/dev/null ||
    fail "the entry of claim down was dropped by a plugin that then failed"
}

# bats test_tags=cleanup
@test "cleanup: the restarted plugin drops the deleted claim's entry at start" {
  dra_need DUID
  plugin_start fake-node-2
  kubelet_start fake-node-2
  wait_until 30 grep -q "cleanup claim=down namespace=default uid=$DUID result=success" "$E/logs/plugin-fake-node-2.log" ||
    fail "no cleanup line in fake-node-2's plugin log"
  ! jq -e --arg u "$DUID" '.data.claims | has($u)' "$E/fake-node-2/dra-plugin/checkpoint.json" >/dev/null ||
    fail "the entry is still in the checkpoint"
  wait_until 20 no_regions || fail "$(regions) regions left after claim down"
}

# bats test_tags=health
@test "hostd health: a claim prepared on fake-node-0: blade-0 HEALTHY on the v1 and v1alpha1 streams (kubelet's clients)" {
  claim_pod hd 1Gi hd-0 fake-node-0 sh -c 'exec sleep 600'
  wait_until 90 running hd-0 || fail "hd-0: $(phase hd-0)"
  wait_until 10 both_health HEALTHY ||
    fail "health v1 '$(stream_health fake-node-0 v1)' v1alpha1 '$(stream_health fake-node-0 v1alpha1)'"
}

# bats test_tags=health
@test "hostd health: fake-node-0's hostd down: UNHEALTHY on both streams, and kubelet's DRA manager records it" {
  dra_stop hostd-fake-node-0
  wait_until 20 both_health UNHEALTHY ||
    fail "hostd down: v1 '$(stream_health fake-node-0 v1)', v1alpha1 '$(stream_health fake-node-0 v1alpha1)'"
  wait_until 10 is_health fake-node-0 Unhealthy || fail "hostd down: kubelet '$(health fake-node-0)'"
}

# bats test_tags=health
@test "hostd health: hostd back: HEALTHY again on both streams and in kubelet's state" {
  [ -n "$(dra_pid hostd-fake-node-0)" ] || hostd_start fake-node-0
  wait_until 30 both_health HEALTHY || fail "hostd back: v1 '$(stream_health fake-node-0 v1)'"
  wait_until 10 is_health fake-node-0 Healthy || fail "hostd back: kubelet '$(health fake-node-0)'"
  delete_pods hd-0 || fail "hd-0 not torn down"
  delete_claims hd || fail "claim hd stuck"
  wait_until 20 no_regions || fail "$(regions) regions left after claim hd"
}
