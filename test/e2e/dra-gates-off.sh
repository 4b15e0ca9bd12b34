#!/usr/bin/env bash
# The driver against an apiserver, scheduler and controller-manager with
# DRAConsumableCapacity and DRADeviceBindingConditions off (both beta, on by
# default in 1.37; the issue asks the driver to work there): the controller's
# start probe (a dry-run slice) sees both sets of fields dropped and falls
# back to the paper's design: annotation mode (paper §2.2: fixed devices per
# blade, sizes in cxlkv.dev/capacity-mib) and the paper's flow (§2.3: no
# binding conditions, the pod binds at once, the controller composes after
# its consumer appears, prepare answers "not ready yet" until the CDI ids
# are in the claim's status). Checks:
#   - log line, Event AnnotationMode on the slice, metric annotation_mode 1;
#     the slice offers 8 fixed devices (8 GiB blade / 1 GiB smallest
#     region), no allowMultipleAllocations, no binding conditions;
#   - the paper's flow with kubelet's own DRA manager (cxlkv-fakekubelet):
#     with the compose slowed to 5 s at the fabric manager, the pod is bound
#     while no region exists, prepare answers "not ready yet", then the CDI
#     id appears and the container attaches;
#   - two claims racing for the last free capacity (6 GiB free, 4 GiB each):
#     both admitted (the scheduler accounts nothing here), exactly one
#     composed, the other fails at compose with a clear Event and the
#     compose-failed condition; the slice's capacity then shows what is left;
#     once the winner is deleted the loser's retried compose succeeds and
#     its pod runs (nothing lost);
#   - the apiserver restarted with DRAConsumableCapacity on: the controller's
#     re-probe leaves annotation mode (log line, metric 0, Event
#     ConsumableCapacity, one shared device again), and a claim allocated
#     in annotation mode stays subtracted from the consumable capacity.
# Own control plane (2 fake nodes), cxlkv-fabricd, per node cxlkv-hostd,
# cxlkv-dra-kubeletplugin and the fake kubelet, one cxlkv-dra-controller
# with default flags (flow and capacity mode auto). Needs root (the fake
# kubelet's private mount namespaces), build/bin and the cached fake kubelet
# (FK, else test/e2e/fakekubelet/build.sh). Prints "dra-gates-off:
# ok|FAILED: ..." and closes with "dra-gates-off: N passed, N failed, N
# skipped". About 85 s warm on 2 cores.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
CLUSTER=$ROOT/test/e2e/cluster.sh
BIN=$ROOT/build/bin
passed=0; failed=0; skipped=0
ok() { echo "dra-gates-off: ok: $*"; passed=$((passed + 1)); }
bad() { echo "dra-gates-off: FAILED: $*"; failed=$((failed + 1)); }
E=$(mktemp -d /tmp/cxlkv-dra-go.XXXXXX)
BACKING=/dev/shm/$(basename "$E")
mkdir -p "$E/logs" "$BACKING"
PIDS=()
CXLKV_E2E_DIR=$E/cluster; export CXLKV_E2E_DIR
finish() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  if [ "$failed" -gt 0 ]; then
    for f in "$E"/logs/*.log "$E"/cluster/logs/kube-scheduler.log; do echo "--- $f"; tail -15 "$f"; done
  fi
  bash "$CLUSTER" down >/dev/null 2>&1
  rm -rf "$E" "$BACKING"
  echo "dra-gates-off: $passed passed, $failed failed, $skipped skipped"
}
trap finish EXIT
source "$ROOT/test/e2e/lib/dra-env.sh"
FK=${FK:-$(test/e2e/fakekubelet/build.sh)} || { bad "fake kubelet build"; exit 1; }

CXLKV_E2E_NODES=2 CXLKV_E2E_GATES=DRAConsumableCapacity=false,DRADeviceBindingConditions=false \
  bash "$CLUSTER" up || { bad "control plane did not start"; exit 1; }
eval "$(bash "$CLUSTER" env)"
NODES=(fake-node-0 fake-node-1)
F=http://127.0.0.1:$(port)
CMP=$(port)
declare -A HPORT
for n in "${NODES[@]}"; do HPORT[$n]=$(port); done
fabricd_config 5000 "${NODES[@]}" >"$E/fabricd.yaml"
start fabricd "$BIN/cxlkv-fabricd" --config "$E/fabricd.yaml" --listen "${F#http://}"
wait_until 20 curl -sf "$F/cfm/v1/appliances" || { bad "fabricd did not start"; exit 1; }
for n in "${NODES[@]}"; do
  d=$E/$n
  mkdir -p "$d/cdi" "$d/dev" "$d/ctr" "$d/logs"
  cat /proc/sys/kernel/random/boot_id >"$d/boot_id"
  start "hostd-$n" "$BIN/cxlkv-hostd" --host-id "$n" --listen "127.0.0.1:${HPORT[$n]}" --fabric "$F" \
    --cdi-dir "$d/cdi" --state-dir "$d/hostd" --dev-dir "$d/dev" --container-dir "$d/ctr" \
    --allowed-backing-dir "$BACKING" --resync-interval 10
  start "plugin-$n" "$BIN/cxlkv-dra-kubeletplugin" --node-name "$n" --kubeconfig "$KUBECONFIG" \
    --kubelet-root-dir "$d/kubelet" --state-dir "$d/dra-plugin" --cdi-dir "$d/cdi" \
    --hostd-url "http://127.0.0.1:${HPORT[$n]}" --boot-id-file "$d/boot_id" --http-listen ""
  start "kubelet-$n" "$FK" --kubeconfig "$KUBECONFIG" --node-name "$n" --root-dir "$d/kubelet" \
    --cdi-dir "$d/cdi" --log-dir "$d/logs" --retry 1s
done
# Default flags: --flow auto, --capacity-mode auto.
start controller "$BIN/cxlkv-dra-controller" --kubeconfig "$KUBECONFIG" --fabric "$F" \
  --identity gates-off --resync-period 2 --lease-duration 6 --metrics-listen "127.0.0.1:$CMP"
SLICE=cxlkv.dev-cma-0-blade-0
wait_until 30 kubectl get resourceslice "$SLICE" || { bad "no ResourceSlice"; exit 1; }
CLOG=$E/logs/controller.log
grep -q "flow: paper (consumer wait, prepare polls); capacity: annotation mode" "$CLOG" &&
  grep -q "annotation mode: the dry-run slice came back without allowMultipleAllocations" "$CLOG" &&
  ok "the start probe saw both gates off: the paper's flow and annotation mode (log line)" ||
  bad "controller start: $(grep -m2 'flow:\|annotation mode' "$CLOG")"
metric() { curl -s "http://127.0.0.1:$CMP/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
[ "$(metric cxlkv_dra_annotation_mode)" = 1 ] && ok "metric cxlkv_dra_annotation_mode 1" ||
  bad "cxlkv_dra_annotation_mode $(metric cxlkv_dra_annotation_mode)"
slice_json() { kubectl get resourceslice "$SLICE" -o json; }
slice_json | python3 -c '
import json, sys
d = json.load(sys.stdin)["spec"]["devices"]
assert [x["name"] for x in d] == [f"blade-0-{i}" for i in range(8)], [x["name"] for x in d]
for x in d:
    assert "allowMultipleAllocations" not in x and "bindingConditions" not in x, x
    assert x["capacity"]["memory"] == {"value": str(8 << 30)}, x
' && ok "slice: 8 fixed devices blade-0-0..7, no allowMultipleAllocations, no binding conditions, 8 GiB free" ||
  bad "slice shape: $(slice_json | head -c 600)"
events_for() {  # events_for <name>: "reason note" of Events regarding that object
  kubectl get events.events.k8s.io -o json | python3 -c '
import json, sys
for e in json.load(sys.stdin)["items"]:
    if e.get("regarding", {}).get("name") == sys.argv[1]:
        print(e.get("reason"), e.get("note", ""))' "$1"
}
has_event() { [ "$(events_for "$1" | grep -c "^$2")" -gt 0 ]; }
wait_until 10 has_event "$SLICE" AnnotationMode &&
  ok "Event on the slice: $(events_for "$SLICE" | grep -m1 '^AnnotationMode' | cut -c1-150)" ||
  bad "no AnnotationMode Event on the slice"

kubectl apply -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: cxlkv.dev}
spec:
  selectors: [{cel: {expression: 'device.driver == "cxlkv.dev"'}}]
YAML
claim_and_pod() {  # claim_and_pod <name> <MiB> <node> <cmd...>: an annotated claim and its pod
  python3 - "$@" <<'PY' | kubectl apply -f - >/dev/null
import json, sys
name, mib, node, cmd = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
   "metadata": {"name": name, "namespace": "default",
                "annotations": {"cxlkv.dev/capacity-mib": mib}},
   "spec": {"devices": {"requests": [{"name": "kv", "exactly": {"deviceClassName": "cxlkv.dev"}}]}}},
  {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
   "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "restartPolicy": "Never",
            "resourceClaims": [{"name": "kv", "resourceClaimName": name}],
            "containers": [{"name": "main", "image": "none", "command": cmd,
                            "resources": {"claims": [{"name": "kv"}]}}]}}]}))
PY
}
cj() { kubectl get resourceclaim "$1" -o json 2>/dev/null | python3 -c "import json,sys; c=json.load(sys.stdin); print($2)" 2>/dev/null; }
phase() { kubectl get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }
running() { [ "$(phase "$1")" = Running ]; }
bound() { [ -n "$(kubectl get pod "$1" -o jsonpath='{.spec.nodeName}' 2>/dev/null)" ]; }
gone() { ! kubectl get "$@" >/dev/null 2>&1; }
region_tags() {  # the claimUid of every region on the blade
  curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory" | python3 -c '
import json, subprocess, sys
for m in json.load(sys.stdin).get("members", []):
    r = json.loads(subprocess.run(["curl", "-s", sys.argv[1] + m["uri"]], capture_output=True).stdout)
    print(r.get("claimUid", ""))' "$F"
}
regions() { region_tags | grep -c .; }
no_regions() { [ "$(regions)" = 0 ]; }
delete_all() {  # delete_all <name...>: pods, then claims
  kubectl delete pod "$@" --wait=false >/dev/null 2>&1
  for n in "$@"; do wait_until 60 gone pod "$n" || bad "pod $n not deleted"; done
  kubectl delete resourceclaim "$@" --wait=false >/dev/null 2>&1
  for n in "$@"; do wait_until 60 gone resourceclaim "$n" || bad "claim $n stuck (finalizer)"; done
}

echo "== dra-gates-off: the paper's flow (compose slowed to 5 s at the fabric manager)"
curl -s -X PUT "$F/cxlkv/v1/faults" -d '{"rules": [{"method": "POST", "path": "/cfm/v1/appliances/cma-0/blades/blade-0/memory", "delayMs": 5000, "count": 1}]}' >/dev/null
claim_and_pod pf 1024 fake-node-0 sh -c 'test -s "$CXL_DAX_DEVICE" && echo attached && exec sleep 600'
if wait_until 30 bound pf; then
  n=$(regions)
  [ "$n" = 0 ] && ok "pod bound to $(kubectl get pod pf -o jsonpath='{.spec.nodeName}') while no region exists yet (no binding conditions)" ||
    bad "pod bound but $n regions exist already (the compose was to take 5 s)"
else bad "pf never bound: $(kubectl get pod pf -o jsonpath='{.status.conditions}')"; fi
PLOG=$E/logs/plugin-fake-node-0.log
wait_until 20 grep -q "prepare claim=pf namespace=default .* result=not_ready" "$PLOG" &&
  ok "prepare answered 'not ready yet' before the CDI ids were in the claim's status" ||
  bad "no not_ready prepare for pf: $(grep -m2 'claim=pf' "$PLOG")"
if wait_until 60 running pf && wait_until 10 grep -q attached "$E/fake-node-0/logs/default_pf_main.log"; then
  mem=$(cj pf 'c["status"]["devices"][0]["data"]["memoryId"]')
  sz=$(cj pf 'c["status"]["devices"][0]["data"]["sizeBytes"]')
  [ "$sz" = $((1 << 30)) ] && ok "then composed ($mem, $sz bytes from cxlkv.dev/capacity-mib), prepared, the container attached" ||
    bad "pf region size $sz"
else bad "pf: $(phase pf)"; fi
delete_all pf
wait_until 20 no_regions && ok "pf deleted: region freed" || bad "pf left $(regions) regions"

echo "== dra-gates-off: two claims racing for the last free capacity (annotation mode)"
FOREIGN=$(curl -s -X POST "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory" \
  -d '{"memorySizeMiB": 2048, "QoS": 4, "claimUid": "someone-else"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
capacity() { slice_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["spec"]["devices"][0]["capacity"]["memory"]["value"])'; }
cap_is() { [ "$(capacity)" = "$1" ]; }
wait_until 20 cap_is $((6 << 30)) && ok "slice capacity 6 GiB: 2 GiB held outside any claim" ||
  bad "capacity $(capacity), want $((6 << 30))"
claim_and_pod race-a 4096 fake-node-0 sh -c 'test -s "$CXL_DAX_DEVICE" && exec sleep 600'
claim_and_pod race-b 4096 fake-node-1 sh -c 'test -s "$CXL_DAX_DEVICE" && exec sleep 600'
failed_event() { has_event race-a ComposeFailed || has_event race-b ComposeFailed; }
either_running() { running race-a || running race-b; }
if wait_until 60 failed_event && wait_until 60 either_running; then
  winner=race-a; loser=race-b; running race-a || { winner=race-b; loser=race-a; }
  dev_a=$(cj race-a 'c["status"]["allocation"]["devices"]["results"][0]["device"]')
  dev_b=$(cj race-b 'c["status"]["allocation"]["devices"]["results"][0]["device"]')
  ok "both claims admitted (devices $dev_a, $dev_b: the scheduler accounts nothing here); $winner runs"
  note=$(events_for "$loser" | grep -m1 '^ComposeFailed')
  echo "$note" | grep -q "no space\|NoSpace\|insufficient\|not enough" && echo "$note" | grep -q "annotation mode" &&
    ok "$loser failed at compose with a clear Event: $(echo "$note" | cut -c1-220)" ||
    bad "loser's Event: $note"
  has_event "$winner" ComposeFailed && bad "the winner $winner got a ComposeFailed Event too"
  [ "$(cj "$loser" '[x["status"] for d in c["status"].get("devices",[]) for x in d.get("conditions",[]) if x["type"]=="cxlkv.dev/compose-failed"][0]')" = True ] &&
    ok "$loser's status: cxlkv.dev/compose-failed True (reason $(cj "$loser" '[x["reason"] for d in c["status"]["devices"] for x in d["conditions"] if x["type"]=="cxlkv.dev/compose-failed"][0]'))" ||
    bad "$loser has no compose-failed condition"
  running "$loser" && bad "$loser runs without a region"
  ours=$(region_tags | grep -c "^cxlkv.dev/")
  [ "$ours" = 1 ] && ok "exactly one of the two composed (1 region of ours + the foreign one)" ||
    bad "$ours regions of ours for the two racing claims"
  wait_until 20 cap_is $((2 << 30)) &&
    ok "annotation-mode accounting: the slice shows 2 GiB free (8 - 2 foreign - 4 composed)" ||
    bad "capacity after the race: $(capacity), want $((2 << 30))"
  delete_all "$winner"
  if wait_until 60 running "$loser"; then
    ok "winner deleted: $loser's retried compose succeeded, its pod runs (nothing lost)"
  else bad "$loser after the winner left: $(phase "$loser")"; fi
  delete_all "$loser"
else bad "race: $(phase race-a)/$(phase race-b), Events: $(events_for race-a | head -2) / $(events_for race-b | head -2)"
  delete_all race-a race-b
fi
curl -s -X DELETE "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory/$FOREIGN" >/dev/null
wait_until 20 no_regions && ok "no region leaked" || bad "$(regions) regions left"
wait_until 20 cap_is $((8 << 30)) && ok "slice back to 8 GiB free" || bad "capacity $(capacity) at the end"

echo "== dra-gates-off: DRAConsumableCapacity turned on at the apiserver: annotation mode is left"
# A claim allocated in annotation mode (a fixed device, no consumed
# capacity the scheduler would count) stays through the switch.
claim_and_pod keep 1024 fake-node-0 sh -c 'test -s "$CXL_DAX_DEVICE" && exec sleep 600'
wait_until 60 running keep || bad "keep: $(phase keep)"
CXLKV_E2E_GATES=DRAConsumableCapacity=true,DRADeviceBindingConditions=false \
  bash "$CLUSTER" restart-apiserver >"$E/logs/restart-apiserver.log" 2>&1 || bad "apiserver restart"
consumable_slice() {
  slice_json | python3 -c '
import json, sys
d = json.load(sys.stdin)["spec"]["devices"]
sys.exit(0 if len(d) == 1 and d[0]["name"] == "blade-0" and d[0].get("allowMultipleAllocations") and
         "requestPolicy" in d[0]["capacity"]["memory"] and "bindingConditions" not in d[0] else 1)'
}
if wait_until 60 consumable_slice; then
  ok "re-probe: the slice is one shared device again (allowMultipleAllocations, requestPolicy; still no binding conditions)"
else bad "slice after the gate came on: $(slice_json | head -c 400)"; fi
grep -q "annotation mode off: the dry-run slice kept allowMultipleAllocations/requestPolicy" "$CLOG" &&
  ok "log line: $(grep -m1 'annotation mode off' "$CLOG" | cut -c1-160)" || bad "no 'annotation mode off' log line"
[ "$(metric cxlkv_dra_annotation_mode)" = 0 ] && ok "metric cxlkv_dra_annotation_mode 0" ||
  bad "cxlkv_dra_annotation_mode $(metric cxlkv_dra_annotation_mode)"
wait_until 20 has_event "$SLICE" ConsumableCapacity &&
  ok "Event on the slice: $(events_for "$SLICE" | grep -m1 '^ConsumableCapacity' | cut -c1-150)" ||
  bad "no ConsumableCapacity Event on the slice"
# The scheduler does not count keep's fixed-device allocation, so the
# controller keeps its 1 GiB out of the consumable capacity.
wait_until 20 cap_is $((7 << 30)) &&
  ok "capacity 7 GiB: the claim allocated in annotation mode stays subtracted (the scheduler cannot count it)" ||
  bad "capacity $(capacity) after the switch, want $((7 << 30))"
running keep && ok "keep (allocated in annotation mode) still runs after the switch" || bad "keep: $(phase keep)"
delete_all keep
wait_until 20 no_regions && wait_until 20 cap_is $((8 << 30)) && ok "keep deleted: region freed, 8 GiB" ||
  bad "after keep: $(regions) regions, capacity $(capacity)"
[ "$failed" -eq 0 ]
