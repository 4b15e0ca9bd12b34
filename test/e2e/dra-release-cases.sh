# The controller and a node's release, sourced by scripts/test.d/55-dra.sh
# after dra-takeover-cases.sh (never run alone: it reuses that stage's
# cluster, fake kubelets, fabricd, hostds, plugins and the cases' helpers
# ctl_start, cj, ctl_metric, events_for, ...). Its own controller, ctl-rel,
# resyncs every 300 s, so nothing here is mended by a resync pass:
#  1. a pod scheduled just before its node's release completes: the claim's
#     last pod on fake-node-1 has finished (so it left reservedFor) and is
#     deleted; its plugin's release (the fabric manager's unassign, slowed
#     to 8 s by the emulator's fault injection) is still on its way when a
#     new pod on fake-node-1 is reserved. The controller sees the host still
#     mapped, keeps re-reading the claim while that pod has not started, and
#     adds the host back once the release lands; the pod reads the bytes
#     the first pod wrote. No claim change follows the release, so without
#     that the pod waits for the next resync (300 s here);
#  2. a claim whose every host has released (its one pod gone; a non-pod
#     consumer in reservedFor, as a workload controller writes it, keeps
#     the allocation): the controller stops re-reading it (no region read
#     in 6 s, where the old 500 ms loop made about 12) and waits for an
#     event: a new pod's reservation gets its host added at once.
# Warm: about 50 s.

echo "== dra: the controller and a node's release (no resync to help: --resync-period 300)"
for v in ${!PID_ctl_@}; do kill "${!v}" 2>/dev/null; done
for v in ${!PID_ctl_@}; do wait "${!v}" 2>/dev/null; done
start ctl-rel "$BIN/cxlkv-dra-controller" --kubeconfig "$KCFG" --fabric "$F" \
  --identity ctl-rel --resync-period 300 --lease-duration 6 --metrics-listen "127.0.0.1:$CMP"
wait_until 20 curl -sf "http://127.0.0.1:$CMP/healthz" || bad "ctl-rel did not start"
rel_hosts() {  # rel_hosts <memory id>: hosts the fabric manager maps the region to, sorted
  curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory/$1" | python3 -c '
import json, sys
print(" ".join(sorted(m["hostId"] for m in json.load(sys.stdin).get("mappings", []) if m.get("hostId"))))'
}
rel_adds() { grep -c "claim default/$1: added host $2 to region" "$E/logs/ctl-rel.log"; }
# fake-node-1's plugin (the rolling update's instance B) again under B's pod
# UID, with hostd calls bounded at 30 s instead of 3 s: the slowed release
# below is then one call (a timed-out release would be retried, and a retry
# is not what this case is about).
kill "$PID_plugin_fake_node_1_b"; wait "$PID_plugin_fake_node_1_b" 2>/dev/null
plugin_start fake-node-1 -rel --pod-uid 22222222-bbbb-4bbb-8bbb-000000000002 --hostd-timeout-ms 30000
wait_until 20 curl -sf "http://127.0.0.1:${MPORT[fake-node-1]}/healthz" || bad "fake-node-1's plugin did not restart"

# 1. The release race.
claim_yaml race 1Gi | kubectl apply -f - >/dev/null
pod_yaml ra-0 race fake-node-0 sh -c 'printf cxlkv-release-race | dd of="$CXL_DAX_DEVICE" conv=notrunc 2>/dev/null && echo wrote && exec sleep 600' |
  kubectl apply -f - >/dev/null
pod_yaml ra-1 race fake-node-1 sh -c 'test -s "$CXL_DAX_DEVICE"' | kubectl apply -f - >/dev/null
RR=none
if wait_until 90 running ra-0 && wait_until 60 succeeded ra-1 &&
    wait_until 10 grep -q wrote "$E/fake-node-0/logs/default_ra-0_main.log"; then
  RR=$(cj race 'c["status"]["devices"][0]["data"]["memoryId"]')
fi
left_1() { [ "$(cj race 'len(c["status"]["reservedFor"])')" = 1 ]; }
if [ "$RR" != none ] && [ "$(rel_hosts "$RR")" = "fake-node-0 fake-node-1" ] && wait_until 30 left_1; then
  ok "race: region $RR on fake-node-0 and fake-node-1; ra-1 finished and left reservedFor (still prepared there)"
else bad "race setup: region $RR mapped to '$(rel_hosts "$RR")', ra-0 $(phase ra-0), ra-1 $(phase ra-1)"; fi
# The next change of this region at the fabric manager (the release's
# unassign of fake-node-1's port) takes 8 s: under hostd's 10 s timeout for
# fabric calls (a request its caller gave up on is still applied when its
# delay ends, and would unmap the host added back meanwhile).
curl -sf -X PUT "$F/cxlkv/v1/faults" -d "{\"rules\": [{\"method\": \"PATCH\", \"path\": \"/cfm/v1/appliances/cma-0/blades/blade-0/memory/$RR\", \"delayMs\": 8000, \"count\": 1}]}" >/dev/null ||
  bad "could not set the unassign delay"
n_add0=$(rel_adds race fake-node-1)
kubectl delete pod ra-1 --wait=false >/dev/null
# The release is on its way once hostd on fake-node-1 asked the manager.
sleep 2
pod_yaml ra-2 race fake-node-1 sh -c 'head -c 18 "$CXL_DAX_DEVICE"; echo; exec sleep 600' | kubectl apply -f - >/dev/null
t0=$SECONDS
reserved_2() { [ "$(cj race '" ".join(sorted(r["name"] for r in c["status"]["reservedFor"]))')" = "ra-0 ra-2" ]; }
wait_until 30 reserved_2 || bad "ra-2 never reserved the claim"
mapped_then=$(rel_hosts "$RR")
R2LOG=$E/fake-node-1/logs/default_ra-2_main.log
if wait_until 60 running ra-2 && wait_until 10 grep -q cxlkv-release-race "$R2LOG"; then
  [ "$mapped_then" = "fake-node-0 fake-node-1" ] && [ "$(rel_adds race fake-node-1)" -gt "$n_add0" ] &&
    [ "$(rel_hosts "$RR")" = "fake-node-0 fake-node-1" ] &&
    ok "race: ra-2 reserved while fake-node-1's release was on its way (still mapped then); host added back after it landed, ra-2 ran $((SECONDS - t0)) s after it was created and read ra-0's bytes" ||
    bad "race: mapped at ra-2's reservation '$mapped_then', add-hosts $n_add0 -> $(rel_adds race fake-node-1), now '$(rel_hosts "$RR")'"
else
  bad "race: ra-2 $(phase ra-2) after $((SECONDS - t0)) s, region mapped to '$(rel_hosts "$RR")', add-hosts $(rel_adds race fake-node-1) (the release landed after the controller's last read: no event until the 300 s resync)"
fi
curl -sf -X PUT "$F/cxlkv/v1/faults" -d '{"rules": []}' >/dev/null
kubectl delete pod ra-0 ra-2 --wait=false >/dev/null
wait_until 60 gone pod ra-0 && wait_until 60 gone pod ra-2 || bad "ra-0/ra-2 not torn down"
kubectl delete resourceclaim race --wait=false >/dev/null
wait_until 60 gone resourceclaim race && wait_until 30 no_regions || bad "race: claim or $(regions) regions left"

# 2. Every host released: no polling, an event brings the claim back.
claim_yaml idle 1Gi | kubectl apply -f - >/dev/null
pod_yaml id-0 idle fake-node-0 sh -c 'printf cxlkv-idle-claim | dd of="$CXL_DAX_DEVICE" conv=notrunc 2>/dev/null && echo wrote && exec sleep 600' |
  kubectl apply -f - >/dev/null
wait_until 90 running id-0 && wait_until 10 grep -q wrote "$E/fake-node-0/logs/default_id-0_main.log" ||
  bad "id-0: $(phase id-0)"
RI=$(cj idle 'c["status"]["devices"][0]["data"]["memoryId"]')
# A consumer that is no pod (a workload controller's object): the
# resource claim controller keeps what it cannot check, so the allocation
# outlives the pod.
kubectl patch resourceclaim idle --subresource=status --type=json \
  -p '[{"op": "add", "path": "/status/reservedFor/-", "value": {"apiGroup": "example.cxlkv.dev", "resource": "workers", "name": "w0", "uid": "0d6f3c55-6c1e-4b8e-9d53-5f1f1c0de000"}}]' >/dev/null ||
  bad "could not add the non-pod consumer"
kubectl delete pod id-0 --wait=false >/dev/null
wait_until 60 gone pod id-0 || bad "id-0 not torn down"
all_released() { [ -z "$(rel_hosts "$RI")" ] && [ "$(cj idle 'len(c["status"]["reservedFor"])')" = 1 ]; }
gets() { ctl_metric 'cxlkv_dra_operations_total{operation="get",result="ok"}'; }
if wait_until 30 all_released; then
  sleep 2  # the controller's reaction to the pod leaving reservedFor
  g0=$(gets); sleep 6; g1=$(gets)
  [ $((${g1:-0} - ${g0:-0})) -le 1 ] &&
    ok "every host released (region $RI mapped nowhere, allocation kept): $((${g1:-0} - ${g0:-0})) region reads in 6 s (no 500 ms loop)" ||
    bad "every host released: $((${g1:-0} - ${g0:-0})) region reads in 6 s (the claim is still polled)"
else bad "idle: region mapped to '$(rel_hosts "$RI")', reservedFor $(cj idle 'c["status"]["reservedFor"]')"; fi
pod_yaml id-1 idle fake-node-1 sh -c 'head -c 16 "$CXL_DAX_DEVICE"; echo; exec sleep 600' | kubectl apply -f - >/dev/null
t0=$SECONDS
if wait_until 60 running id-1 && wait_until 10 grep -q cxlkv-idle-claim "$E/fake-node-1/logs/default_id-1_main.log"; then
  [ "$(rel_hosts "$RI")" = fake-node-1 ] &&
    ok "a new consumer (its reservation the event): host fake-node-1 added, it ran after $((SECONDS - t0)) s on the same region and read id-0's bytes" ||
    bad "id-1 ran, region mapped to '$(rel_hosts "$RI")'"
else bad "id-1 after every host released: $(phase id-1), region mapped to '$(rel_hosts "$RI")'"; fi
kubectl delete pod id-1 --wait=false >/dev/null
wait_until 60 gone pod id-1 || bad "id-1 not torn down"
# The workload is done with it: its consumer entry goes, then the claim.
kubectl patch resourceclaim idle --subresource=status --type=json \
  -p '[{"op": "replace", "path": "/status/reservedFor", "value": []}]' >/dev/null
kubectl delete resourceclaim idle --wait=false >/dev/null
wait_until 60 gone resourceclaim idle && wait_until 30 no_regions && ok "idle: claim deleted, region freed" ||
  bad "idle: claim or $(regions) regions left"
