#!/usr/bin/env bats
# A node's release held past a new consumer (assignment epochs; the world:
# test/e2e/lib/dra.bash). The controller is dra-release.bats's ctl-rel
# (resync every 300 s; started here when it does not run). fake-node-1's
# plugin runs with its default 3 s bound on hostd calls, and its periodic
# release retry 60 s apart (--release-retry-ms), so that the new consumer's
# prepare, not the timer, meets the pending release. The claim's last pod
# there leaves; the plugin's release reaches the fabric manager, which holds
# that one unassign for 6 s (fault injection: hostd's own bound is 10 s, so
# the request is still applied when the hold ends), and the plugin gives up
# after 3 s (the release stays pending). A new pod lands on fake-node-1
# meanwhile: its prepare finishes the pending release first (a second
# unassign of the same epoch, which goes through; not ready yet), the
# controller adds the host back at a newer assignment epoch, the prepare then
# succeeds. When the held unassign resumes it names the old epoch and the
# manager refuses it (409, counted in /cxlkv/v1/stats): the host stays
# mapped, hostd keeps the device and CDI spec, and the pod's container,
# which attaches only after that, reads the bytes the first pod wrote.
# Without the epochs the plugin's retry went through, the controller re-added
# the host, and the held unassign unmapped fake-node-1 under the running pod.
# Warm: about 20 s.
# bats file_tags=dra,release,epoch

load lib/dra

setup_file() {
  dra_setup_file
  if ! alive ctl-rel; then
    dra_stop_controllers
    start ctl-rel "$BIN/cxlkv-dra-controller" --kubeconfig "$KCFG" --fabric "$F" \
      --identity ctl-rel --resync-period 300 --lease-duration 6 --metrics-listen "127.0.0.1:$CMP"
  fi
  plugin_restart fake-node-1 -ep --pod-uid 22222222-bbbb-4bbb-8bbb-000000000002 --release-retry-ms 60000 ||
    { echo "fake-node-1's plugin did not restart"; return 1; }
}

ep_stale() { curl -s "$F/cxlkv/v1/stats" | jq -r '.staleUnassignsRefused // "none"' 2>/dev/null || echo none; }
# The held unassign reached the manager: the fault rule's count is used up.
ep_held() { curl -s "$F/cxlkv/v1/faults" | jq -e '.rules | length > 0 and .[0].count == 0' >/dev/null; }

@test "epoch: a region on fake-node-0 and fake-node-1; ep-1 finished and left reservedFor" {
  release_pair epoch ep cxlkv-epoch-race RE
}

@test "epoch: fake-node-1's release held past ep-2's arrival is refused as stale; the host stays mapped, device and CDI spec kept, ep-2 reads ep-0's bytes" {
  dra_need RE
  local stale0 stale1 n_add0 t_held mapped has_dev spec read_ok first
  local go=$E/epoch-go log=$E/fake-node-1/logs/default_ep-2_main.log plog=$E/logs/plugin-fake-node-1-ep.log
  stale0=$(ep_stale)
  curl -sf -X PUT "$F/cxlkv/v1/faults" -d "{\"rules\": [{\"method\": \"PATCH\", \"path\": \"$DRA_MEMORY_URL_PATH/$RE\", \"delayMs\": 6000, \"count\": 1}]}" >/dev/null ||
    fail "could not set the unassign hold"
  n_add0=$(rel_adds epoch fake-node-1)
  kubectl delete pod ep-1 --wait=false >/dev/null
  wait_until 30 ep_held || fail "the release's unassign never reached the manager"
  t_held=$SECONDS
  pod_yaml ep-2 epoch fake-node-1 sh -c "while [ ! -e $go ]; do sleep 0.2; done; head -c 16 \"\$CXL_DAX_DEVICE\"; echo; exec sleep 600" |
    kubectl apply -f - >/dev/null
  wait_until 60 running ep-2 || fail "ep-2: $(phase ep-2) (region mapped to '$(fab_hosts "$RE")')"
  # Past the hold (6 s from its start, 1 s to spare): the held unassign has been answered.
  while [ $((SECONDS - t_held)) -lt 8 ]; do sleep 0.5; done
  mapped=$(fab_hosts "$RE")
  has_dev=$(curl -s "http://127.0.0.1:${HPORT[fake-node-1]}/cxlkv/v1/regions" | grep -c "$RE" || true)
  spec=no; [ -f "$E/fake-node-1/cdi/$RE.json" ] && spec=yes
  touch "$go"
  read_ok=no; wait_until 10 grep -q cxlkv-epoch-race "$log" && read_ok=yes
  stale1=$(ep_stale)
  curl -sf -X PUT "$F/cxlkv/v1/faults" -d '{"rules": []}' >/dev/null
  first=$(grep -c "prepare claim=epoch namespace=default .*: region $RE was being released here; released first" "$plog" || true)
  echo "region mapped to '$mapped', hostd device $has_dev, CDI spec $spec, ep-2 read $read_ok, prepare released first $first, add-hosts $n_add0 -> $(rel_adds epoch fake-node-1), stale unassigns refused $stale0 -> $stale1"
  [ "$first" -ge 1 ] || fail "ep-2's prepare did not finish the pending release first"
  assert_eq "$mapped" "fake-node-0 fake-node-1" "hosts after the held unassign"
  [ "$has_dev" -ge 1 ] || fail "fake-node-1's hostd lost the device"
  assert_eq "$spec" yes "fake-node-1's CDI spec kept"
  assert_eq "$read_ok" yes "ep-2 read ep-0's bytes"
  [ "$(rel_adds epoch fake-node-1)" -gt "$n_add0" ] || fail "the host was not added back"
  [ "$stale0" != none ] && [ "$stale1" != none ] && [ "$stale1" -gt "$stale0" ] ||
    fail "stale unassigns refused: $stale0 -> $stale1"
  note "held unassign refused ($stale0 -> $stale1 stale unassigns)"
}

@test "epoch: the pods and the claim deleted, no region is left" {
  delete_pods ep-0 ep-2 || fail "ep-0/ep-2 not torn down"
  delete_claims epoch || fail "claim epoch stuck"
  wait_until 30 no_regions || fail "$(regions) regions left"
}
