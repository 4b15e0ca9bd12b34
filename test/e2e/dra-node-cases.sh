# The kubelet plugin's node-side cases, sourced by scripts/test.d/55-dra.sh
# after its create/delete loop (never run alone): it reuses that stage's
# cluster, fake kubelets, fabricd, hostds, plugins, controllers and helpers
# (ok, bad, wait_until, claim_yaml, pod_yaml, phase, regions, ckpt_entries,
# $FK, ...). It checks:
#  1. a node's materialization released on its last unprepare: a claim
#     shared by pods on fake-node-0 and fake-node-1; the pod on fake-node-1
#     deleted: that node's plugin has the fabric manager unassign
#     fake-node-1's port (through its hostd), hostd there removes the device
#     and the CDI spec, and fake-node-0 keeps serving the region; a new pod
#     on fake-node-1: the controller adds the host again (add-host), prepare
#     waits for it, and the pod reads the bytes the first pod wrote (the
#     same region, never recomposed);
#  2. prepare's own checks, called as a misbehaving kubelet would (one
#     NodePrepareResources through kubelet's generated gRPC client,
#     `cxlkv-fakekubelet call`): a claim UID that is not the claim's, and a
#     node outside the allocation's node selector (an allocation the test
#     writes as a faulty scheduler would, k/k#140087): each refused with a
#     clear error and nothing materialized or checkpointed on that node (the
#     UID refusal on both the v1 and the v1beta1 service); the same call
#     with the right UID on the right node then succeeds (so the refusals
#     come from the checks, not from a broken setup);
#  3. a claim deleted while its node's kubelet and plugin were down (its
#     pod force-deleted): the entry stays in the checkpoint until the plugin
#     restarts, whose start-up cleanup drops it;
#  4. the node's hostd down, then back, while a claim is prepared there:
#     blade-0 UNHEALTHY, then HEALTHY, on both health services (v1 and
#     v1alpha1, read through kubelet's generated clients), and in kubelet's
#     DRA manager's health state.
# Warm: about 75 s.

echo "== dra: node release on the last unprepare, and re-materialization on reuse"
t_node=$SECONDS
node_cj() {  # node_cj <claim> <python expression over c>
  kubectl get resourceclaim "$1" -o json 2>/dev/null |
    python3 -c "import json,sys; c=json.load(sys.stdin); print($2)" 2>/dev/null
}
fab_hosts() {  # fab_hosts <memory id>: hosts the fabric manager maps the region to, sorted
  curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory/$1" | python3 -c '
import json, sys
print(" ".join(sorted(m["hostId"] for m in json.load(sys.stdin).get("mappings", []) if m.get("hostId"))))'
}
hostd_has() {  # hostd_has <node> <memory id>: hostd on that node lists the region
  curl -s "http://127.0.0.1:${HPORT[$1]}/cxlkv/v1/regions" | python3 -c '
import json, sys
sys.exit(0 if any(r["allocationId"] == sys.argv[1] for r in json.load(sys.stdin)["regions"]) else 1)' "$2"
}
released_on_1() {
  [ "$(fab_hosts "$RM")" = fake-node-0 ] && ! hostd_has fake-node-1 "$RM" &&
    [ ! -e "$E/fake-node-1/cdi/$RM.json" ]
}
claim_yaml rel 1Gi | kubectl apply -f - >/dev/null
pod_yaml rel-0 rel fake-node-0 sh -c 'printf cxlkv-kept-across-release | dd of="$CXL_DAX_DEVICE" conv=notrunc 2>/dev/null && echo wrote && exec sleep 600' |
  kubectl apply -f - >/dev/null
pod_yaml rel-1 rel fake-node-1 sh -c 'test -s "$CXL_DAX_DEVICE" && echo attached && exec sleep 600' |
  kubectl apply -f - >/dev/null
RM=none
if wait_until 90 running rel-0 && wait_until 60 running rel-1 &&
    wait_until 10 grep -q wrote "$E/fake-node-0/logs/default_rel-0_main.log"; then
  RM=$(node_cj rel 'c["status"]["devices"][0]["data"]["memoryId"]')
  [ "$(fab_hosts "$RM")" = "fake-node-0 fake-node-1" ] &&
    ok "region $RM mapped to fake-node-0 and fake-node-1, both pods running" ||
    bad "region $RM mapped to '$(fab_hosts "$RM")'"
else bad "rel pods: $(phase rel-0) / $(phase rel-1)"; fi
kubectl delete pod rel-1 --wait=false >/dev/null
wait_until 60 gone pod rel-1 || bad "rel-1 not torn down"
if wait_until 30 released_on_1; then
  ok "pod on fake-node-1 gone: its port unassigned at the fabric manager, device and CDI spec removed there"
else
  bad "after rel-1: fabric maps '$(fab_hosts "$RM")', hostd fake-node-1 has it: $(hostd_has fake-node-1 "$RM" && echo yes || echo no)"
fi
# fake-node-1's plugin is the rolling update's second instance by now.
P1LOGS=("$E"/logs/plugin-fake-node-1*.log)
[ "$(cat "${P1LOGS[@]}" | grep -c "unprepare claim=rel namespace=default .* result=success region=$RM released=yes")" -ge 1 ] &&
  ok "fake-node-1's plugin logged the release (released=yes)" ||
  bad "no release line: $(cat "${P1LOGS[@]}" | grep "claim=rel " | tail -2)"
# fake-node-0 still serves: its device, spec and running consumer are untouched.
hostd_has fake-node-0 "$RM" && [ -e "$E/fake-node-0/cdi/$RM.json" ] && running rel-0 &&
  ok "fake-node-0 still serves region $RM (device, CDI spec, pod running)" ||
  bad "fake-node-0 lost region $RM or its pod ($(phase rel-0))"
# hostd's own resync must not bring the released host back (it follows the manager).
curl -s -X POST "http://127.0.0.1:${HPORT[fake-node-1]}/cxlkv/v1/resync" >/dev/null
released_on_1 && ok "a resync of fake-node-1's hostd keeps it released" ||
  bad "fake-node-1's resync brought region $RM back"
adds() { cat "$E"/logs/controller-*.log | grep -c "claim default/rel: added host fake-node-1 to region $RM"; }
n_add0=$(adds)
pod_yaml rel-2 rel fake-node-1 sh -c 'head -c 25 "$CXL_DAX_DEVICE"; echo; exec sleep 600' |
  kubectl apply -f - >/dev/null
R2LOG=$E/fake-node-1/logs/default_rel-2_main.log
if wait_until 90 running rel-2 && wait_until 10 grep -q cxlkv-kept-across-release "$R2LOG"; then
  m=$(node_cj rel 'c["status"]["devices"][0]["data"]["memoryId"]')
  [ "$m" = "$RM" ] && [ "$(fab_hosts "$RM")" = "fake-node-0 fake-node-1" ] &&
    ok "new pod on fake-node-1: host added back to region $RM, re-materialized, it read the bytes rel-0 wrote" ||
    bad "rel-2 ran on region $m (want $RM), fabric maps '$(fab_hosts "$RM")'"
else bad "rel-2: $(phase rel-2), read '$(head -c 40 "$R2LOG" 2>/dev/null)', fabric maps '$(fab_hosts "$RM")'"; fi
[ "$(adds)" -gt "$n_add0" ] && ok "the controller's add-host mapped fake-node-1 again" ||
  bad "no new add-host of fake-node-1 in the controllers' logs ($(adds) before and after)"
kubectl delete pod rel-0 rel-2 --wait=false >/dev/null
wait_until 60 gone pod rel-0 && wait_until 60 gone pod rel-2 || bad "rel-0/rel-2 not torn down"
kubectl delete resourceclaim rel --wait=false >/dev/null
wait_until 60 gone resourceclaim rel || bad "claim rel stuck"
wait_until 20 no_regions && ok "claim deleted: region freed, nothing left on any node" ||
  bad "$(regions) regions left after rel"

echo "== dra: prepare's UID and node-selector checks, called directly through kubelet's gRPC client"
sock() { echo "$E/$1/kubelet/plugins/cxlkv.dev/dra.sock"; }
call_prepare() {  # call_prepare <node> <claim> <uid> [v1|v1beta1]: the plugin's per-claim error ("" = success)
  "$FK" call prepare --socket "$(sock "$1")" --namespace default --name "$2" --uid "$3" --api "${4:-v1}" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["claims"]; print(list(r.values())[0].get("error", ""))'
}
# A 1 GiB allocation on fake-node-0 only, written as a faulty scheduler would:
# the blade is cabled to all three nodes, but this allocation names one.
claim_yaml sel 1Gi | kubectl apply -f - >/dev/null
SUID=$(node_cj sel 'c["metadata"]["uid"]')
python3 - "$SUID" >"$E/sel-status.json" <<'PY'
import json, sys, time
now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
print(json.dumps({"status": {
    "allocation": {
        "devices": {"results": [{"request": "kv", "driver": "cxlkv.dev", "pool": "cma-0/blade-0",
                                 "device": "blade-0", "consumedCapacity": {"memory": "1Gi"}}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["fake-node-0"]}]}]},
        "allocationTimestamp": now}}}))
PY
kubectl patch resourceclaim sel --subresource=status --type=merge -p "$(cat "$E/sel-status.json")" >/dev/null ||
  bad "could not write sel's allocation"
sel_ready() { [ "$(node_cj sel 'c["status"]["devices"][0]["data"]["hosts"]["fake-node-0"]["state"]')" = Materialized ]; }
wait_until 60 sel_ready || bad "sel's region never materialized on fake-node-0"
SM=$(node_cj sel 'c["status"]["devices"][0]["data"]["memoryId"]')
before2=$(ckpt_entries fake-node-2)
err=$(call_prepare fake-node-2 sel "$SUID")
case "$err" in
  *"node fake-node-2 is not in the allocation's node selector"*)
    if ! hostd_has fake-node-2 "$SM" && [ ! -e "$E/fake-node-2/cdi/$SM.json" ] &&
        [ "$(ckpt_entries fake-node-2)" = "$before2" ] && [ "$(fab_hosts "$SM")" = fake-node-0 ]; then
      ok "prepare on fake-node-2 refused: \"$err\"; nothing materialized or checkpointed there"
    else bad "refused, but fake-node-2 has region $SM or a new checkpoint entry"; fi ;;
  *) bad "prepare on a node outside the node selector answered: '$err'" ;;
esac
WRONG=00000000-0000-4000-8000-00000000dead
before0=$(ckpt_entries fake-node-0)
for api in v1 v1beta1; do
  err=$(call_prepare fake-node-0 sel "$WRONG" "$api")
  case "$err" in
    *"has UID $SUID, the kubelet asked for $WRONG"*)
      [ "$(ckpt_entries fake-node-0)" = "$before0" ] &&
        ok "$api prepare with a UID that is not the claim's refused: \"$err\"; no checkpoint entry" ||
        bad "UID refused, but the checkpoint of fake-node-0 changed" ;;
    *) bad "$api prepare with a wrong UID answered: '$err'" ;;
  esac
done
# The positive control, through the v1beta1 service (kubelet's v1beta1 client).
err=$(call_prepare fake-node-0 sel "$SUID" v1beta1)
if [ -z "$err" ] && [ "$(ckpt_entries fake-node-0)" = $((before0 + 1)) ]; then
  ok "the same call (v1beta1) with the claim's UID on fake-node-0 succeeds (the checks, not the setup, refused)"
else bad "prepare of sel on fake-node-0 with its UID: '$err'"; fi
"$FK" call unprepare --socket "$(sock fake-node-0)" --namespace default --name sel --uid "$SUID" >/dev/null ||
  bad "unprepare of sel failed"
[ "$(ckpt_entries fake-node-0)" = "$before0" ] || bad "sel still in fake-node-0's checkpoint"
kubectl delete resourceclaim sel --wait=false >/dev/null
wait_until 60 gone resourceclaim sel || bad "claim sel stuck"
wait_until 20 no_regions || bad "$(regions) regions left after sel"

echo "== dra: a claim deleted while its node's kubelet and plugin were down is cleaned at start"
claim_yaml down 1Gi | kubectl apply -f - >/dev/null
pod_yaml down-1 down fake-node-2 sh -c 'test -s "$CXL_DAX_DEVICE" && echo attached && exec sleep 600' |
  kubectl apply -f - >/dev/null
wait_until 90 running down-1 || bad "down-1: $(phase down-1)"
DUID=$(node_cj down 'c["metadata"]["uid"]')
in_ckpt2() { python3 -c 'import json,sys; sys.exit(0 if sys.argv[2] in json.load(open(sys.argv[1]))["data"]["claims"] else 1)' \
  "$E/fake-node-2/dra-plugin/checkpoint.json" "$DUID"; }
in_ckpt2 || bad "claim down not in fake-node-2's checkpoint while its pod runs"
# The node goes down (kubelet and plugin stop, the container with them); the
# pod and the claim are deleted meanwhile, so nobody unprepares.
kill "$PID_kubelet_fake_node_2" "$PID_plugin_fake_node_2"
wait "$PID_kubelet_fake_node_2" "$PID_plugin_fake_node_2" 2>/dev/null
kubectl delete pod down-1 --grace-period=0 --force >/dev/null 2>&1
kubectl delete resourceclaim down --wait=false >/dev/null
wait_until 60 gone resourceclaim down || bad "claim down stuck"
in_ckpt2 && ok "claim deleted while fake-node-2 was down: its entry is still in the checkpoint" ||
  bad "the entry of claim down vanished while the plugin was down"
plugin_start fake-node-2
kubelet_start fake-node-2
if wait_until 30 sh -c "grep -q 'cleanup claim=down namespace=default uid=$DUID result=success' '$E/logs/plugin-fake-node-2.log'" &&
    ! in_ckpt2; then
  ok "the restarted plugin dropped the deleted claim's entry at start (cleanup)"
else bad "after the restart: entry still there: $(in_ckpt2 && echo yes || echo no)"; fi
wait_until 20 no_regions || bad "$(regions) regions left after claim down"

echo "== dra: the node's hostd down and back: health on both DRAResourceHealth versions"
stream_health() {  # stream_health <node> <v1|v1alpha1>: blade-0's health in the plugin's stream now
  "$FK" call health --socket "$(sock "$1")" --api "$2" --messages 2 2>/dev/null | tail -1 | python3 -c '
import json, sys
d = [x for x in json.loads(sys.stdin.read()).get("devices", []) if x["device"]["deviceName"] == "blade-0"]
print(d[0].get("health", "UNKNOWN") if d else "none")' 2>/dev/null
}
both_health() { [ "$(stream_health fake-node-0 v1)" = "$1" ] && [ "$(stream_health fake-node-0 v1alpha1)" = "$1" ]; }
hostd0_start() {
  local d=$E/fake-node-0
  start hostd-fake-node-0 "$BIN/cxlkv-hostd" --host-id fake-node-0 --listen "127.0.0.1:${HPORT[fake-node-0]}" \
    --fabric "$F" --cdi-dir "$d/cdi" --state-dir "$d/hostd" --dev-dir "$d/dev" --container-dir "$d/ctr" \
    --allowed-backing-dir "$BACKING" --resync-interval 10
}
claim_yaml hd 1Gi | kubectl apply -f - >/dev/null
pod_yaml hd-0 hd fake-node-0 sh -c 'exec sleep 600' | kubectl apply -f - >/dev/null
if wait_until 90 running hd-0 && wait_until 10 both_health HEALTHY; then
  ok "a claim prepared on fake-node-0: blade-0 HEALTHY on the v1 and v1alpha1 streams (kubelet's clients)"
else bad "hd-0 $(phase hd-0), health v1 '$(stream_health fake-node-0 v1)' v1alpha1 '$(stream_health fake-node-0 v1alpha1)'"; fi
kill "$PID_hostd_fake_node_0"; wait "$PID_hostd_fake_node_0" 2>/dev/null
if wait_until 20 both_health UNHEALTHY && wait_until 10 is_health fake-node-0 Unhealthy; then
  ok "hostd of fake-node-0 down: UNHEALTHY on both streams, and kubelet's DRA manager recorded it"
else bad "hostd down: v1 '$(stream_health fake-node-0 v1)', v1alpha1 '$(stream_health fake-node-0 v1alpha1)', kubelet '$(health fake-node-0)'"; fi
hostd0_start
if wait_until 30 both_health HEALTHY && wait_until 10 is_health fake-node-0 Healthy; then
  ok "hostd back: HEALTHY again on both streams and in kubelet's state"
else bad "hostd back: v1 '$(stream_health fake-node-0 v1)', kubelet '$(health fake-node-0)'"; fi
kubectl delete pod hd-0 --wait=false >/dev/null
wait_until 60 gone pod hd-0 || bad "hd-0 not torn down"
kubectl delete resourceclaim hd --wait=false >/dev/null
wait_until 60 gone resourceclaim hd || bad "claim hd stuck"
wait_until 20 no_regions || bad "$(regions) regions left after claim hd"
echo "dra: node cases took $((SECONDS - t_node)) s"
