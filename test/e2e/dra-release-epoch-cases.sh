# A node's release held past a new consumer (assignment epochs), sourced by
# scripts/test.d/55-dra.sh after dra-release-cases.sh (never run alone: it
# reuses that file's controller ctl-rel, which resyncs every 300 s, and its
# helpers rel_hosts, rel_adds, and the stage's cluster, fake kubelets,
# fabricd, hostds and plugins).
# fake-node-1's plugin runs with its default 3 s bound on hostd calls, and
# its periodic release retry 60 s apart (--release-retry-ms), so that the
# new consumer's prepare, not the timer, meets the pending release. The
# claim's last pod there leaves; the plugin's release reaches the fabric
# manager, which holds that one unassign for 6 s (fault injection: hostd's
# own bound is 10 s, so the request is still applied when the hold ends),
# and the plugin gives up after 3 s (the release stays pending). A new pod
# lands on fake-node-1 meanwhile: its prepare finishes the pending release
# first (a second unassign of the same epoch, which goes through; not ready
# yet), the controller adds the host back at a newer assignment epoch, the
# prepare then succeeds. When the held unassign
# resumes it names the old epoch and the manager refuses it (409, counted
# in /cxlkv/v1/stats): the host stays mapped, hostd keeps the device and CDI
# spec, and the pod's container, which attaches only after that, reads the
# bytes the first pod wrote. Before the epochs (main at 9195e6a, with the
# plugin's fixed 5 s retry, which then went first) the retry went through,
# the controller re-added the host, and the held unassign unmapped
# fake-node-1 1.4 s later under the running pod (its prepare would instead
# have dropped the pending release and run on the device still there).
# Warm: about 25 s (measured 19 s at a load average of 9, 26 s at 20).

echo "== dra: a node's release held past a new consumer (assignment epochs)"
kill "$PID_plugin_fake_node_1_rel"; wait "$PID_plugin_fake_node_1_rel" 2>/dev/null
plugin_start fake-node-1 -ep --pod-uid 22222222-bbbb-4bbb-8bbb-000000000002 --release-retry-ms 60000
wait_until 20 curl -sf "http://127.0.0.1:${MPORT[fake-node-1]}/healthz" || bad "fake-node-1's plugin did not restart"
ep_stale() { curl -s "$F/cxlkv/v1/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("staleUnassignsRefused", "none"))' 2>/dev/null || echo none; }
ep_held() {  # the held unassign reached the manager: the fault rule's count is used up
  curl -s "$F/cxlkv/v1/faults" | python3 -c 'import json,sys; r=json.load(sys.stdin)["rules"]; sys.exit(0 if r and r[0]["count"] == 0 else 1)'
}
claim_yaml epoch 1Gi | kubectl apply -f - >/dev/null
pod_yaml ep-0 epoch fake-node-0 sh -c 'printf cxlkv-epoch-race | dd of="$CXL_DAX_DEVICE" conv=notrunc 2>/dev/null && echo wrote && exec sleep 600' |
  kubectl apply -f - >/dev/null
pod_yaml ep-1 epoch fake-node-1 sh -c 'test -s "$CXL_DAX_DEVICE"' | kubectl apply -f - >/dev/null
RE=none
if wait_until 90 running ep-0 && wait_until 60 succeeded ep-1 &&
    wait_until 10 grep -q wrote "$E/fake-node-0/logs/default_ep-0_main.log"; then
  RE=$(cj epoch 'c["status"]["devices"][0]["data"]["memoryId"]')
fi
ep_left() { [ "$(cj epoch 'len(c["status"]["reservedFor"])')" = 1 ]; }
if [ "$RE" != none ] && [ "$(rel_hosts "$RE")" = "fake-node-0 fake-node-1" ] && wait_until 30 ep_left; then
  stale0=$(ep_stale)
  curl -sf -X PUT "$F/cxlkv/v1/faults" -d "{\"rules\": [{\"method\": \"PATCH\", \"path\": \"/cfm/v1/appliances/cma-0/blades/blade-0/memory/$RE\", \"delayMs\": 6000, \"count\": 1}]}" >/dev/null ||
    bad "could not set the unassign hold"
  n_add0=$(rel_adds epoch fake-node-1)
  kubectl delete pod ep-1 --wait=false >/dev/null
  if wait_until 30 ep_held; then
    t_held=$SECONDS
    GO=$E/epoch-go
    pod_yaml ep-2 epoch fake-node-1 sh -c "while [ ! -e $GO ]; do sleep 0.2; done; head -c 16 \"\$CXL_DAX_DEVICE\"; echo; exec sleep 600" |
      kubectl apply -f - >/dev/null
    wait_until 60 running ep-2 || bad "ep-2: $(phase ep-2) (region mapped to '$(rel_hosts "$RE")')"
    # Past the hold (6 s from its start, 1 s to spare): the held unassign has been answered.
    while [ $((SECONDS - t_held)) -lt 8 ]; do sleep 0.5; done
    mapped=$(rel_hosts "$RE")
    has_dev=$(curl -s "http://127.0.0.1:${HPORT[fake-node-1]}/cxlkv/v1/regions" | grep -c "$RE")
    [ -f "$E/fake-node-1/cdi/$RE.json" ] && spec=yes || spec=no
    touch "$GO"
    EPLOG=$E/fake-node-1/logs/default_ep-2_main.log
    wait_until 10 grep -q cxlkv-epoch-race "$EPLOG" && read_ok=yes || read_ok=no
    stale1=$(ep_stale)
    EPPLOG=$E/logs/plugin-fake-node-1-ep.log
    first=$(grep -c "prepare claim=epoch namespace=default .*: region $RE was being released here; released first" "$EPPLOG")
    if [ "$first" -ge 1 ] && [ "$mapped" = "fake-node-0 fake-node-1" ] && [ "$has_dev" -ge 1 ] && [ "$spec" = yes ] &&
        [ "$read_ok" = yes ] && [ "$(rel_adds epoch fake-node-1)" -gt "$n_add0" ] &&
        [ "$stale1" != none ] && [ "$stale0" != none ] && [ "$stale1" -gt "$stale0" ]; then
      ok "epoch: fake-node-1's release held 6 s past ep-2's arrival; ep-2's prepare finished the pending release first, the host was added back at a newer epoch, the held unassign refused ($stale0 -> $stale1 stale unassigns); still mapped, device and CDI spec kept, ep-2 attached after the hold and read ep-0's bytes"
    else
      bad "epoch: after the held unassign: region mapped to '$mapped', hostd device $has_dev, CDI spec $spec, ep-2 read $read_ok, prepare released first $first, add-hosts $n_add0 -> $(rel_adds epoch fake-node-1), stale unassigns refused $stale0 -> $stale1"
    fi
  else bad "epoch: the release's unassign never reached the manager"; fi
else bad "epoch setup: region $RE mapped to '$(rel_hosts "$RE")', ep-0 $(phase ep-0), ep-1 $(phase ep-1)"; fi
curl -sf -X PUT "$F/cxlkv/v1/faults" -d '{"rules": []}' >/dev/null
kubectl delete pod ep-0 ep-2 --wait=false >/dev/null 2>&1
wait_until 60 gone pod ep-0 && wait_until 60 gone pod ep-2 || bad "ep-0/ep-2 not torn down"
kubectl delete resourceclaim epoch --wait=false >/dev/null
wait_until 60 gone resourceclaim epoch && wait_until 30 no_regions || bad "epoch: claim or $(regions) regions left"
