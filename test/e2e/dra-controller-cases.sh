# The controller's failure cases, sourced by scripts/test.d/55-dra.sh after
# its own scenarios (never run alone): it reuses that stage's cluster, fake
# kubelets, fabricd, hostds and helpers (ok, bad, start, wait_until,
# claim_yaml, pod_yaml, phase, regions, health, ...). It replaces the
# stage's two controllers with its own, as named below, and checks:
#  1. a controller SIGKILLed between compose and recording the region
#     (failpoint after-compose) and restarted: the region is adopted, not
#     composed twice, the claim becomes ready, nothing leaks;
#  2. the resync (Lease holder): an orphaned region of ours is freed, a
#     foreign region stays and is subtracted from the slice's capacity, so
#     of two claims racing for the last 4 GiB the scheduler admits one and
#     leaves the other pending with its reason;
#  3. a later consumer on a third node: the region composed for pod 1's node
#     only is added to pod 2's node, pod 2 waits for it and reads the bytes
#     pod 1 wrote; freed on deallocation while the claim object lives on;
#  4. appliance power cycle: the documented policy (RegionLost Event, the
#     claim recomposed under a new memory id, a new consumer attaches to it;
#     the old consumer's device reported Unhealthy by its node);
#  5. fabric manager down: condition and Event on the claim, the blade
#     device tainted NoSchedule (a new pod is not admitted), and on recovery
#     the taint gone, the pod runs;
#  6. frees failing 5 times: FreeRetrying Events, then FreeFailed, the
#     finalizer dropped; resync then frees the region (fault gone);
#  6b. a compose refused (share count 0): compose-failed, the scheduler
#     retries, the pod is never bound;
#  7. /metrics and /healthz.
# Warm: about 100 s.

echo "== dra: controller cases (failpoint, resync, later consumer, power cycle, fabric down)"
CMP=$(port)
ctl_start() {  # ctl_start <log name> <identity> [env...]: one controller, 2 s resync, 6 s Lease
  local log=$1 id=$2; shift 2
  start "$log" env "$@" "$BIN/cxlkv-dra-controller" --kubeconfig "$KCFG" --fabric "$F" \
    --identity "$id" --resync-period 2 --lease-duration 6 --metrics-listen "127.0.0.1:$CMP"
}
# Every replica the stage started stops (controller-0, controller-1, and any
# restarted ones such as controller-0r; SIGTERM: each releases the Lease it
# may hold), so the Lease goes to the controllers below.
for v in ${!PID_controller_@}; do kill "${!v}" 2>/dev/null; done
for v in ${!PID_controller_@}; do wait "${!v}" 2>/dev/null; done
claim_json() { kubectl get resourceclaim "$1" -o json 2>/dev/null; }
cj() {  # cj <claim> <python expression over c>: prints it
  claim_json "$1" | python3 -c "import json,sys; c=json.load(sys.stdin); print($2)" 2>/dev/null
}
composed_true() {
  [ "$(cj "$1" '[x["status"] for d in c["status"].get("devices",[]) for x in d.get("conditions",[]) if x["type"]=="cxlkv.dev/composed"][0]')" = True ]
}
region_list() {  # id:claimUid of every region on the blade
  curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory" | python3 -c '
import json, subprocess, sys
base = sys.argv[1]
for m in json.load(sys.stdin).get("members", []):
    r = json.loads(subprocess.run(["curl", "-s", base + m["uri"]], capture_output=True).stdout)
    print(r["id"] + " " + r.get("claimUid", ""))' "$F"
}
events_for() {  # events_for <name>: reasons of Events regarding that object
  kubectl get events.events.k8s.io -o json | python3 -c '
import json, sys
for e in json.load(sys.stdin)["items"]:
    if e.get("regarding", {}).get("name") == sys.argv[1]:
        print(e.get("reason"), e.get("note", ""))' "$1"
}
# Counting, not grep -q: under pipefail an early grep exit fails the writer.
has_event() { [ "$(events_for "$1" | grep -c "^$2")" -gt 0 ]; }
has_region() { [ "$(region_list | grep -c "^$1 ")" -gt 0 ]; }
slice_json() { kubectl get resourceslice cxlkv.dev-cma-0-blade-0 -o json; }
capacity() { slice_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["spec"]["devices"][0]["capacity"]["memory"]["value"])'; }
tainted() { slice_json | python3 -c 'import json,sys; d=json.load(sys.stdin)["spec"]["devices"][0]; sys.exit(0 if any(t["key"]=="cxlkv.dev/fabric-unreachable" and t["effect"]=="NoSchedule" for t in d.get("taints",[])) else 1)'; }
ctl_metric() {  # ctl_metric <exact series>: its value on our controller
  curl -s "http://127.0.0.1:$CMP/metrics" | awk -v k="$1" '$1 == k {print $2}'
}
proc_gone() { ! kill -0 "$1" 2>/dev/null; }

# 1. SIGKILL between compose and the annotation, then restart.
ctl_start ctl-fp ctl-fp CXLKV_DRA_FAILPOINT=after-compose
claim_yaml fp 1Gi | kubectl apply -f - >/dev/null
pod_yaml fp fp fake-node-0 sh -c 'test -s "$CXL_DAX_DEVICE"' | kubectl apply -f - >/dev/null
if wait_until 60 proc_gone "$PID_ctl_fp"; then
  n=$(region_list | grep -c "$(cj fp 'c["metadata"]["uid"]')")
  ann=$(cj fp 'c["metadata"].get("annotations",{}).get("cxlkv.dev/region","none")')
  [ "$n" = 1 ] && [ "$ann" = none ] &&
    ok "failpoint: controller SIGKILLed after compose, region on the fabric, no annotation yet" ||
    bad "failpoint state: $n regions for the claim, annotation $ann"
  # A container restart keeps the pod's name, so the same identity returns
  # (its log goes to ctl-fp-2.log).
  ctl_start ctl-fp-2 ctl-fp
  if wait_until 60 succeeded fp; then
    nreg=$(region_list | grep -c "$(cj fp 'c["metadata"]["uid"]')")
    # The pod may have finished and its region gone with the allocation:
    # count what the logs say instead (one compose, killed; one adoption).
    na=$(grep -c "claim default/fp: adopted region" "$E/logs/ctl-fp-2.log")
    nk=$(grep -c "failpoint after-compose" "$E/logs/ctl-fp.log")
    [ "$na" = 1 ] && [ "$nk" = 1 ] && [ "$nreg" -le 1 ] &&
      ok "restarted controller adopted the region (no second compose), the pod ran" ||
      bad "after restart: $nreg regions, $na adoptions, $nk failpoint kills"
  else bad "fp pod after restart: $(phase fp)"; fi
else bad "failpoint did not fire"; fi
kubectl delete pod fp --wait=false >/dev/null; wait_until 60 gone pod fp
kubectl delete resourceclaim fp --wait=false >/dev/null
wait_until 60 gone resourceclaim fp && wait_until 20 no_regions &&
  ok "failpoint claim deleted: zero regions left" || bad "after failpoint: $(regions) regions"

# 2. Orphan sweep, foreign regions subtracted from capacity, last-capacity race.
compose_raw() {  # compose_raw <MiB> <claimUid>: prints the memory id
  curl -s -X POST "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory" \
    -d "{\"memorySizeMiB\": $1, \"QoS\": 4, \"claimUid\": \"$2\"}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}
ORPHAN=$(compose_raw 1024 "cxlkv.dev/00000000-dead-beef-0000-000000000000@2026-01-01T00:00:00Z")
FOREIGN=$(compose_raw 2048 "someone-else")
orphan_gone() { ! has_region "$ORPHAN"; }
cap_is() { [ "$(capacity)" = "$1" ]; }
if wait_until 20 orphan_gone; then ok "resync freed an orphaned region of ours ($ORPHAN)"; else
  bad "orphan $ORPHAN still there"; fi
has_region "$FOREIGN" && ok "resync left the foreign region alone" ||
  bad "foreign region freed"
if wait_until 20 cap_is $((6 << 30)); then
  ok "slice capacity = 8 GiB - 2 GiB held outside any claim"
else bad "capacity $(capacity), want $((6 << 30))"; fi
claim_yaml race-a 4Gi | kubectl apply -f - >/dev/null
claim_yaml race-b 4Gi | kubectl apply -f - >/dev/null
pod_yaml race-a race-a fake-node-0 sh -c 'exec sleep 600' | kubectl apply -f - >/dev/null
pod_yaml race-b race-b fake-node-1 sh -c 'exec sleep 600' | kubectl apply -f - >/dev/null
either_running() { running race-a || running race-b; }
# The scheduler has tried a pod and found no device for it (PodScheduled
# False, reason Unschedulable): the moment to check it was not admitted.
unschedulable() {
  [ "$(kubectl get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}')" = Unschedulable ]
}
if wait_until 60 either_running; then
  loser=race-b; running race-b && loser=race-a
  # The loser's refusal by the scheduler, not a fixed wait: once it is
  # Unschedulable the winner's allocation holds the capacity.
  wait_until 30 unschedulable "$loser" || bad "race: $loser never marked Unschedulable"
  la=$(phase race-a); lb=$(phase race-b)
  why=$(kubectl get pod "$loser" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
  if { [ "$la" = Running ] && [ "$lb" = Pending ]; } || { [ "$la" = Pending ] && [ "$lb" = Running ]; }; then
    ok "last-capacity race: one claim admitted, $loser pending: $why"
  else bad "race: race-a $la, race-b $lb"; fi
  has_event "$loser" ComposeFailed && bad "$loser reached compose"
else bad "race: neither pod ran ($(phase race-a)/$(phase race-b))"; fi
kubectl delete pod race-a race-b --wait=false >/dev/null
wait_until 60 gone pod race-a; wait_until 60 gone pod race-b
kubectl delete resourceclaim race-a race-b --wait=false >/dev/null
wait_until 60 gone resourceclaim race-a; wait_until 60 gone resourceclaim race-b
curl -s -X DELETE "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory/$FOREIGN" >/dev/null
wait_until 20 cap_is $((8 << 30)) && ok "foreign region freed: capacity back to 8 GiB" ||
  bad "capacity $(capacity) after freeing the foreign region"

# 3. A later consumer on a third node.
claim_yaml share 1Gi | kubectl apply -f - >/dev/null
pod_yaml share-0 share fake-node-0 sh -c 'printf cxlkv-later-consumer | dd of="$CXL_DAX_DEVICE" conv=notrunc 2>/dev/null && echo wrote && exec sleep 600' |
  kubectl apply -f - >/dev/null
hosts_of() { cj "$1" '" ".join(sorted(c["status"]["devices"][0]["data"]["hosts"]))'; }
if wait_until 60 running share-0 && wait_until 10 grep -q wrote "$E/fake-node-0/logs/default_share-0_main.log"; then
  h=$(hosts_of share)
  [ "$h" = fake-node-0 ] && ok "shared claim composed for its consumer's node only ($h)" ||
    bad "composed for '$h', want fake-node-0 (nominatedNodeName/nodeName)"
else bad "share-0: $(phase share-0)"; fi
pod_yaml share-2 share fake-node-2 sh -c 'head -c 20 "$CXL_DAX_DEVICE"; echo; exec sleep 600' |
  kubectl apply -f - >/dev/null
if wait_until 60 running share-2 && wait_until 10 grep -q cxlkv-later-consumer "$E/fake-node-2/logs/default_share-2_main.log"; then
  ok "pod 2 on fake-node-2: host added ($(hosts_of share)), prepare waited, it read pod 1's bytes"
else bad "share-2: $(phase share-2), hosts $(hosts_of share)"; fi
has_event share HostAdded && ok "HostAdded Event on the claim" || bad "no HostAdded Event"
kubectl delete pod share-0 share-2 --wait=false >/dev/null
wait_until 60 gone pod share-0; wait_until 60 gone pod share-2
# The claim object stays; its allocation goes with its last consumer, and
# so must the region (free on deallocation, not only on delete).
unallocated() { [ "$(cj share '"allocation" in c["status"]')" = False ]; }
if wait_until 30 unallocated && wait_until 20 no_regions; then
  fins=$(cj share 'c["metadata"].get("finalizers",[])')
  [ "$fins" = "[]" ] && ok "deallocated claim: region freed and finalizer dropped while the claim lives on" ||
    bad "deallocated claim keeps finalizers $fins"
else bad "after deallocation: $(regions) regions"; fi
kubectl delete resourceclaim share --wait=false >/dev/null; wait_until 30 gone resourceclaim share

# 4. Appliance power cycle.
claim_yaml pc 1Gi | kubectl apply -f - >/dev/null
pod_yaml pc-1 pc fake-node-1 sh -c 'exec sleep 600' | kubectl apply -f - >/dev/null
if wait_until 60 running pc-1; then
  M1=$(cj pc 'c["status"]["devices"][0]["data"]["memoryId"]')
  curl -s -X POST "$F/cxlkv/v1/power-cycle" -d '{"applianceId": "cma-0", "bladeId": "blade-0"}' >/dev/null
  new_region() { m=$(cj pc 'c["status"]["devices"][0]["data"]["memoryId"]'); [ -n "$m" ] && [ "$m" != "$M1" ] && composed_true pc; }
  if wait_until 30 new_region; then
    M2=$(cj pc 'c["status"]["devices"][0]["data"]["memoryId"]')
    has_event pc RegionLost && ok "power cycle: RegionLost Event, claim recomposed ($M1 -> $M2) and composed again" ||
      bad "no RegionLost Event"
    wait_until 20 is_health fake-node-1 Unhealthy &&
      ok "the old consumer's node reports the device Unhealthy (its bytes are gone)" ||
      bad "fake-node-1 health after power cycle: $(health fake-node-1)"
    pod_yaml pc-2 pc fake-node-2 sh -c 'echo "$CXL_DAX_DEVICE"; exec sleep 600' | kubectl apply -f - >/dev/null
    if wait_until 60 running pc-2 && wait_until 10 grep -q "$M2" "$E/fake-node-2/logs/default_pc-2_main.log"; then
      ok "a new consumer attaches to the recomposed region"
    else bad "pc-2: $(phase pc-2): $(cat "$E/fake-node-2/logs/default_pc-2_main.log" 2>/dev/null)"; fi
  else bad "claim not recomposed after power cycle (memoryId $(cj pc 'c["status"]["devices"][0]["data"]["memoryId"]'))"; fi
else bad "pc-1: $(phase pc-1)"; fi

# 5. Fabric manager down (pc-1/pc-2 keep claim pc allocated meanwhile).
kill "$PID_fabricd"; wait "$PID_fabricd" 2>/dev/null
fabric_false() { [ "$(cj pc '[x["status"] for d in c["status"]["devices"] for x in d["conditions"] if x["type"]=="cxlkv.dev/fabric-reachable"][0]')" = False ]; }
wait_until 20 tainted && ok "fabric down: blade device tainted cxlkv.dev/fabric-unreachable:NoSchedule" ||
  bad "no taint while the fabric manager is down"
wait_until 20 fabric_false && has_event pc FabricUnreachable &&
  ok "fabric down: claim condition cxlkv.dev/fabric-reachable False and a FabricUnreachable Event" ||
  bad "fabric down: no condition/Event on claim pc"
[ "$(ctl_metric cxlkv_dra_fabric_reachable)" = 0 ] && ok "metric cxlkv_dra_fabric_reachable 0" ||
  bad "cxlkv_dra_fabric_reachable $(ctl_metric cxlkv_dra_fabric_reachable)"
claim_yaml fd 1Gi | kubectl apply -f - >/dev/null
pod_yaml fd fd fake-node-0 sh -c 'test -s "$CXL_DAX_DEVICE"' | kubectl apply -f - >/dev/null
# Until the scheduler has tried fd and found the tainted device unusable.
wait_until 30 unschedulable fd || bad "fd never marked Unschedulable while the device is tainted"
[ "$(phase fd)" = Pending ] && [ "$(cj fd '"allocation" in c.get("status",{})')" = False ] &&
  ok "tainted: a new claim is not allocated ($(kubectl get pod fd -o jsonpath='{.status.conditions[0].message}' | cut -c1-100))" ||
  bad "new pod while the fabric is down: $(phase fd)"
start fabricd "$BIN/cxlkv-fabricd" --config "$E/fabricd.yaml" --listen "127.0.0.1:$FPORT"
untainted() { ! tainted; }
wait_until 30 untainted && ok "fabric back: taint removed" || bad "taint stayed after recovery"
wait_until 90 succeeded fd && ok "fabric back: the pending pod was admitted and ran" ||
  bad "fd after recovery: $(phase fd)"
fabric_true() { [ "$(cj pc '[x["status"] for d in c["status"]["devices"] for x in d["conditions"] if x["type"]=="cxlkv.dev/fabric-reachable"][0]')" = True ]; }
wait_until 20 fabric_true && ok "claim pc: fabric-reachable True again" || bad "pc condition not restored"
kubectl delete pod pc-1 pc-2 fd --wait=false >/dev/null
for p in pc-1 pc-2 fd; do wait_until 60 gone pod "$p"; done
kubectl delete resourceclaim pc fd --wait=false >/dev/null
wait_until 30 gone resourceclaim pc; wait_until 30 gone resourceclaim fd
wait_until 20 no_regions || bad "after the fabric case: $(regions) regions"

# 6. Five failed frees.
claim_yaml ff 1Gi | kubectl apply -f - >/dev/null
pod_yaml ff ff fake-node-0 sh -c 'exec sleep 600' | kubectl apply -f - >/dev/null
if wait_until 60 running ff; then
  MF=$(cj ff 'c["status"]["devices"][0]["data"]["memoryId"]')
  curl -s -X PUT "$F/cxlkv/v1/faults" -d "{\"rules\": [{\"method\": \"DELETE\", \"path\": \"/cfm/v1/appliances/cma-0/blades/blade-0/memory/$MF\", \"status\": 500, \"count\": 5}]}" >/dev/null
  kubectl delete pod ff --wait=false >/dev/null; wait_until 60 gone pod ff
  kubectl delete resourceclaim ff --wait=false >/dev/null
  if wait_until 90 gone resourceclaim ff; then
    nr=$(events_for ff | grep -c "^FreeRetrying"); nf=$(events_for ff | grep -c "^FreeFailed")
    [ "$nr" = 4 ] && [ "$nf" = 1 ] &&
      ok "5 failed frees: 4 FreeRetrying + 1 FreeFailed Events, finalizer dropped" ||
      bad "free failures: $nr FreeRetrying, $nf FreeFailed"
    wait_until 20 no_regions && ok "resync freed the leaked region once the fabric accepted it" ||
      bad "leaked region $MF still there"
  else bad "claim ff stuck with finalizers $(cj ff 'c["metadata"].get("finalizers")')"; fi
else bad "ff: $(phase ff)"; fi

# 6b. A compose the allocation can never get (share count 0): the binding
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
if wait_until 60 twice_failed; then
  node=$(kubectl get pod bad -o jsonpath='{.spec.nodeName}')
  [ -z "$node" ] &&
    ok "compose refused: cxlkv.dev/compose-failed set, the scheduler retried (>= 2 ComposeFailed Events), pod never bound" ||
    bad "pod bad bound to '$node' despite compose-failed"
else bad "compose-failed: $(events_for bad | grep -c "^ComposeFailed") ComposeFailed Events"; fi
kubectl delete pod bad --wait=false >/dev/null; wait_until 60 gone pod bad
kubectl delete resourceclaim bad --wait=false >/dev/null; wait_until 30 gone resourceclaim bad ||
  bad "claim bad stuck"

# 7. /metrics and /healthz of the controller that did all this.
curl -sf "http://127.0.0.1:$CMP/healthz" | grep -q '"ok":true' && ok "/healthz answers ok" ||
  bad "/healthz: $(curl -s "http://127.0.0.1:$CMP/healthz")"
c_ok=$(ctl_metric 'cxlkv_dra_operations_total{operation="compose",result="ok"}')
h_n=$(ctl_metric 'cxlkv_dra_operation_duration_seconds_count{operation="compose",result="ok"}')
fr=$(ctl_metric cxlkv_dra_free_retries_total); of=$(ctl_metric cxlkv_dra_orphans_freed_total)
[ "${c_ok:-0}" -ge 5 ] && [ "$h_n" = "$c_ok" ] && [ "${fr:-0}" -ge 4 ] && [ "${of:-0}" -ge 1 ] &&
  [ "$(ctl_metric cxlkv_dra_leader)" = 1 ] && [ "$(ctl_metric cxlkv_dra_fabric_reachable)" = 1 ] &&
  ok "/metrics: $c_ok composes (histogram count $h_n), $fr free retries, $of orphans freed, leader 1" ||
  bad "/metrics: composes $c_ok, histogram $h_n, free retries $fr, orphans $of, leader $(ctl_metric cxlkv_dra_leader)"
