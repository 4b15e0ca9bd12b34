#!/usr/bin/env bats
# Scenario 1 with the local composer on one node, no fabric manager (the
# world: test/e2e/lib/dra.bash; fake-node-0's fake kubelet and plugin).
# fake-node-0's hostd restarts without a fabric manager (it would otherwise
# remove regions the manager does not list), the fabric blade's slice goes,
# and cxlkv-dra-controller runs with --local-pool-dir: a per-node slice
# (nodeName), a 2 GiB claim shared by two `cxlkv replay` pods on that node
# composed once from the /dev/shm pool, materialized by the node's hostd at
# the controller's request, the same CDI device for both, cross-replica hits;
# deleting the claim frees the region file and the spec. After the file,
# fake-node-0's fabric hostd and the world's two controllers run again.
# The steps run in order (--filter 'local:' runs them). Warm: about 25 s.
# bats file_tags=dra,local

load lib/dra

N0=fake-node-0
LSLICE=cxlkv.dev-local-fake-node-0

setup_file() {
  dra_setup_file
  local lpool=$BACKING-local d0=$E/$N0
  dra_stop_controllers
  kubectl delete resourceslice "$DRA_SLICE" >/dev/null 2>&1 || true
  mkdir -p "$lpool"
  dra_stop hostd-$N0
  start hostd-local "$BIN/cxlkv-hostd" --host-id "$N0" --listen "127.0.0.1:${HPORT[$N0]}" \
    --cdi-dir "$d0/cdi" --state-dir "$d0/hostd" --dev-dir "$d0/dev" --container-dir "$d0/ctr" \
    --allowed-backing-dir "$BACKING,$lpool" --resync-interval 0
  wait_until 20 curl -sf "http://127.0.0.1:${HPORT[$N0]}/cxlkv/v1/regions" ||
    { echo "the local hostd did not start"; return 1; }
  start ctl-local "$BIN/cxlkv-dra-controller" --kubeconfig "$KCFG" --identity ctl-local \
    --local-pool-dir "$lpool" --local-pool-mib 4096 --local-block-mib 256 --local-node "$N0" \
    --local-hostd "http://127.0.0.1:${HPORT[$N0]}" --local-state-dir "$E/local-composer" \
    --resync-period 2 --lease-duration 6
}
teardown_file() {
  if [ "${DRA_OWN_WORLD:-0}" = 0 ]; then
    dra_stop ctl-local hostd-local
    kubectl delete resourceslice "$LSLICE" >/dev/null 2>&1 || true
    hostd_start "$N0"
    racing_controllers_start l
  fi
  rm -rf "$BACKING-local"
  dra_teardown_file
}

@test "local: the local pool is published as a per-node slice (nodeName fake-node-0, 4 GiB)" {
  wait_until 30 kubectl get resourceslice "$LSLICE" || fail "no local slice"
  kubectl get resourceslice "$LSLICE" -o json |
    jq -e --arg mem $((4 << 30)) '.spec.nodeName == "fake-node-0" and (.spec | has("nodeSelector") | not)
      and .spec.devices[0].capacity.memory.value == $mem' >/dev/null ||
    fail "local slice shape: $(kubectl get resourceslice "$LSLICE" -o json | jq -c .spec)"
}

@test "local: a 2 GiB claim shared by two replay pods on fake-node-0: both run to completion" {
  replay_claim kvl local "$E/replay-local.ctl" "$N0" "$N0"
  wait_until 120 succeeded local-0 || fail "local-0: $(phase local-0)"
  wait_until 60 succeeded local-1 || fail "local-1: $(phase local-1)"
}

@test "local: the claim is composed once for both pods" {
  local log=$E/logs/ctl-local.log
  assert_eq "$(grep -c "claim default/kvl: composed region" "$log")" 1 "composes of claim kvl"
  ML=$(grep "claim default/kvl: composed region" "$log" | head -1 |
    awk '{for (i = 1; i < NF; i++) if ($i == "region") { print $(i + 1); exit }}')
  [ -n "$ML" ] || fail "no region named in the compose line"
  dra_keep ML
}

@test "local: fake-node-0's kubelet DRA manager holds the CDI device cxlkv.dev/region=<region>" {
  dra_need ML
  [ "$(grep -c "cxlkv.dev/region=$ML" "$E/$N0/kubelet/dra/dra_manager_state" 2>/dev/null)" -gt 0 ] ||
    fail "CDI id cxlkv.dev/region=$ML not in kubelet's DRA state"
}

@test "local: both containers attached to the one region and saw each other's stores" {
  run replay_ok "$E/$N0/logs/default_local-0_main.log" "$E/$N0/logs/default_local-1_main.log"
  [ "$status" -eq 0 ] || fail "replay results: $output"
  note "$(echo "$output" | xargs)"
}

@test "local: the claim deleted, the region file is freed from the pool and the CDI spec removed" {
  dra_need ML
  delete_pods local-0 local-1
  pool_empty() { [ -z "$(ls "$BACKING-local"/*.region 2>/dev/null)" ]; }
  delete_claims kvl || fail "claim kvl stuck"
  wait_until 20 pool_empty || fail "pool: $(ls "$BACKING-local")"
  [ ! -e "$E/$N0/cdi/$ML.json" ] || fail "CDI spec $ML.json left"
}
