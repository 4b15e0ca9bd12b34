#!/usr/bin/env bats
# The DRA driver and its consumers in real containers under real kubelets
# (issue 30); realnodes.bash has the world: two real nodes, the fabric
# manager and the chart installed by helm. In order:
#   nodes:   both kubelets registered their nodes (version, runtime, address);
#   chart:   the plugin and hostd DaemonSets' pods and the controller's
#            Deployment run as containers, Ready by their own probes; each
#            kubelet registers its node's plugin through the plugin watcher;
#   scenario 1: one claim, two pods of the project's image on the two nodes;
#            each container sees the region through the runtime's CDI edits
#            (CXL_DAX_* environment, the region bind-mounted at
#            CXL_DAX_DEVICE); `cxlkv replay` workers in the two containers
#            load blocks the other stored, none wrong; claim deletion frees it;
#   kubelet restart: under a prepared claim the pod keeps running, the claim
#            is unprepared once when it goes;
#   containerd restart: a running pod stays, a new pod starts and sees its region;
#   plugin replaced: its DaemonSet recreates the deleted plugin pod, the
#            kubelet registers the new one, which prepares a new claim;
#   drain:   node-1's pod evicted and unprepared, the region released on
#            node-1 only;
#   uninstall: helm uninstall stops every chart pod.
# A step that needs an earlier one's result skips when it is missing, so
# select whole scenarios: --filter 'scenario 1:' runs alone; 'containerd
# restart:', 'plugin replaced:' (its last step) and 'drain:' use the holder
# pods of 'kubelet restart:' (--filter 'kubelet restart:|drain:').
# Tags: nodes, chart, scenario1, kubelet-restart, containerd-restart,
# plugin-replaced, drain, uninstall (the scenarios), realnodes (the file).
# Warm: about 160 s per Kubernetes version on 2 cores (the world's start
# about 40 s of it, its teardown about 30 s), 200 s on busy ones.
# bats file_tags=realnodes

load realnodes

# bats test_tags=nodes
@test "nodes: the control plane and two real nodes come up, each Ready" {
  local n
  for n in "${NODES[@]}"; do node_ready "$n" || fail "$n not Ready"; done
  curl -sf "$F/cfm/v1/appliances" >/dev/null || fail "cxlkv-fabricd does not answer on $F"
  note "up in $UP_SECONDS s (kubelet $K8S_VERSION)"
}

# bats test_tags=nodes
@test "nodes: each node registered by its own kubelet: InternalIP 10.201.0.<i+1>, kubelet of this release, containerd 2.x" {
  local info
  info=$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}:{.status.addresses[?(@.type=="InternalIP")].address}:{.status.nodeInfo.kubeletVersion}:{.status.nodeInfo.containerRuntimeVersion} {end}')
  [[ $info =~ ^node-0:10\.201\.0\.1:$K8S_VERSION:containerd://v?2\.[0-9.]+\ node-1:10\.201\.0\.2:$K8S_VERSION:containerd://v?2\.[0-9.]+\ $ ]] ||
    fail "nodes: $info"
  note "$info"
}

# bats test_tags=chart
@test "chart: helm install puts the release into cxlkv-system" {
  [ -n "${INSTALLED_AT:-}" ] || { cat "$E/logs/install.log"; fail "helm install"; }
  "$HELM" status cxlkv --namespace "$NS" | grep -q '^STATUS: deployed' || fail "release not deployed"
}

# bats test_tags=chart
@test "chart: 2 plugin, 2 hostd and 1 controller containers Running and Ready by their probes" {
  rn_need INSTALLED_AT
  wait_until 180 all_ready ||
    fail "chart pods not ready: plugin $(ready_count kubeletplugin), hostd $(ready_count hostd), controller $(ready_count controller)"
  CHART_READY=1; rn_keep CHART_READY
  note "Ready $(($(date +%s) - INSTALLED_AT)) s after helm install began"
}

# bats test_tags=chart
@test "chart: each kubelet's plugin watcher registers its node's plugin container (dra-<pod uid>.sock)" {
  rn_need_chart
  local n uid reg=0
  for n in "${NODES[@]}"; do
    uid=$(kubectl get pod "$(plugin_pod "$n")" -n "$NS" -o jsonpath='{.metadata.uid}')
    wait_until 30 registered "$n" "$uid" && reg=$((reg + 1))
  done
  [ $reg = 2 ] || fail "DRA plugin registrations: $reg of 2"
}

# bats test_tags=chart
@test "chart: the controller container (in-cluster config through the kubernetes Service) publishes the blade's ResourceSlice" {
  rn_need_chart
  wait_until 60 kubectl get resourceslice cxlkv.dev-cma-0-blade-0 || fail "no ResourceSlice from the controller container"
}

# bats test_tags=scenario1
@test "scenario 1: replay containers on both nodes, sharing one claim, Succeed" {
  rn_need_chart
  wait_until 30 kubectl get serviceaccount default -n team-a || fail "no default ServiceAccount in team-a"
  tenant_claim kv 2Gi
  local i
  for i in 0 1; do
    pod "replay-$i" "node-$i" kv "exec $REPLAY --limit 400 --replica-index $i --replica-count 2 --control /shared/replay.ctl"
  done
  wait_until 120 composed kv || fail "claim kv never composed"
  MEM=$(memory_id kv); rn_keep MEM
  if ! { wait_until 180 is_phase replay-0 Succeeded && wait_until 60 is_phase replay-1 Succeeded; }; then
    kubectl describe pod replay-0 replay-1 -n team-a | tail -30
    fail "replay pods: $(phase replay-0) / $(phase replay-1)"
  fi
  for i in 0 1; do plog "replay-$i" >"$E/logs/replay-$i.log"; done
  REPLAYED=1; rn_keep REPLAYED
}

# bats test_tags=scenario1
@test "scenario 1: both containers see the region through the runtime's CDI edits (CXL_DAX_*, bind mount)" {
  rn_need REPLAYED
  local i seen=0
  for i in 0 1; do sees_region "replay-$i" && seen=$((seen + 1)); done
  [ $seen = 2 ] ||
    fail "containers that saw their region: $seen of 2 ($(grep -h '^cdi-\|no region' "$E"/logs/replay-*.log | tr '\n' ' '))"
  note "region $MEM: $(grep -o 'CXL_DAX_DEVICE=[^ ]*' "$E/logs/replay-0.log")"
}

# bats test_tags=scenario1
@test "scenario 1: blocks one container stored are loaded in the other container on the other node, none wrong" {
  rn_need REPLAYED
  run python3 - "$E/logs/replay-0.log" "$E/logs/replay-1.log" <<'PY'
import json, sys
rs = []
for p in sys.argv[1:]:
    text = open(p).read()
    rs.append(json.loads(text[text.index("{"):]))
hits, wrong = sum(r["cross_replica_hits"] for r in rs), sum(r["errors"] + r["wrong_data"] for r in rs)
print("cross_replica_hits %d, errors+wrong_data %d" % (hits, wrong))
sys.exit(0 if hits > 0 and wrong == 0 else 1)
PY
  [ "$status" = 0 ] || fail "shared bytes across the two containers: $output"
  note "$output"
}

# bats test_tags=scenario1
@test "scenario 1: deleting the pods and the claim frees the region" {
  rn_need REPLAYED
  kubectl delete pod replay-0 replay-1 -n team-a --wait=false >/dev/null
  wait_until 60 gone pod replay-0 -n team-a && wait_until 60 gone pod replay-1 -n team-a
  kubectl delete resourceclaim kv -n team-a --wait=false >/dev/null
  wait_until 60 gone resourceclaim kv -n team-a && wait_until 30 no_regions ||
    fail "after delete: claim $(kubectl get resourceclaim kv -n team-a -o name 2>&1), regions $(regions)"
}

# bats test_tags=kubelet-restart
@test "kubelet restart: holder pods run on both nodes and see claim kv2's region" {
  rn_need_chart
  tenant_claim kv2 1Gi
  pod holder-0 node-0 kv2 "$REPLAY --limit 100 --replica-index 0 --replica-count 1 --control /shared/kv2.ctl >/shared/kv2.json && exec sleep 600"
  pod holder-1 node-1 kv2 "exec sleep 600"
  wait_until 120 is_phase holder-0 Running && wait_until 60 is_phase holder-1 Running &&
    wait_until 30 test -s "$E/shared/kv2.json" && sees_region holder-1 ||
    fail "holders: $(phase holder-0) / $(phase holder-1)"
  MEM2=$(memory_id kv2); rn_keep MEM2
}

# bats test_tags=kubelet-restart
@test "kubelet restart: both kubelets' DRA checkpoints hold the claim's CDI device while its pods run" {
  rn_need MEM2
  local n held=0
  for n in "${NODES[@]}"; do
    grep -q "cxlkv.dev/region=$MEM2" "$(nd "$n")/mnt/kubelet/dra_manager_state" 2>/dev/null && held=$((held + 1))
  done
  [ $held = 2 ] || fail "CDI device of region '$MEM2' in $held of 2 kubelets' checkpoints"
}

# bats test_tags=kubelet-restart
@test "kubelet restart: node-1's kubelet restarted; holder-1 keeps running in the same container, no restart" {
  rn_need MEM2
  local cid1 t0
  cid1=$(cid holder-1)
  P1=$(plugin_pod node-1); rn_keep P1
  bash "$CLUSTER" restart-node node-1 kubelet >>"$E/logs/restarts.log" 2>&1 3>&- || fail "kubelet restart on node-1"
  t0=$SECONDS
  kubelet_back() { node_ready node-1 && grep -c "Started kubelet" "$CXLKV_E2E_DIR/logs/node-1-kubelet.log" | grep -q '^2$'; }
  wait_until 90 kubelet_back || fail "node-1's kubelet not back"
  sleep 5  # a few of the restarted kubelet's pod syncs
  is_phase holder-1 Running && [ "$(cid holder-1)" = "$cid1" ] && [ "$(restarts holder-1)" = 0 ] ||
    fail "holder-1 after the kubelet restart: $(phase holder-1), container $(cid holder-1) (was $cid1)"
  KUBELET_RESTARTED=1; rn_keep KUBELET_RESTARTED
  note "$((SECONDS - t0)) s to Ready"
}

# bats test_tags=kubelet-restart
@test "kubelet restart: holder-1 deleted afterwards: node-1's plugin unprepares kv2 once, the region stays mapped to node-0" {
  rn_need KUBELET_RESTARTED
  kubectl delete pod holder-1 -n team-a --wait=false >/dev/null
  wait_until 60 gone pod holder-1 -n team-a || fail "holder-1 not torn down after the kubelet restart"
  wait_until 30 released_on_1 || true
  local unprep; unprep=$(unprepared_kv2 "$P1")
  [ "$unprep" = 1 ] && released_on_1 ||
    fail "unprepare of kv2 on node-1: $unprep times, region mapped to '$(fab_hosts "$MEM2")'"
}

# bats test_tags=containerd-restart
@test "containerd restart: node-0's containerd restarted; holder-0 keeps running in the same container" {
  rn_need MEM2
  local cid0; cid0=$(cid holder-0)
  bash "$CLUSTER" restart-node node-0 containerd >>"$E/logs/restarts.log" 2>&1 3>&- || fail "containerd restart on node-0"
  sleep 5
  is_phase holder-0 Running && [ "$(cid holder-0)" = "$cid0" ] && [ "$(restarts holder-0)" = 0 ] ||
    fail "holder-0 after the containerd restart: $(phase holder-0), container $(cid holder-0) (was $cid0)"
}

# bats test_tags=containerd-restart
@test "containerd restart: a new container on node-0 starts, sees the region and reads every block holder-0 stored" {
  rn_need MEM2
  pod reader-0 node-0 kv2 "exec /usr/bin/cxlkv inspect --json"
  wait_until 90 is_phase reader-0 Succeeded && sees_region reader-0 || fail "reader-0: $(phase reader-0)"
  run python3 - "$(plog reader-0 | sed -n '/^{/,$p')" "$E/shared/kv2.json" <<'PY'
import json, sys
ready = json.loads(sys.argv[1])["slots"]["ready"]
stored = json.load(open(sys.argv[2]))["distinct_blocks"]
print("reader-0 sees %d ready slots, holder-0 stored %d" % (ready, stored))
sys.exit(0 if ready == stored > 0 else 1)
PY
  kubectl delete pod reader-0 -n team-a --wait=false >/dev/null
  [ "$status" = 0 ] || fail "$output"
  note "$output"
}

# bats test_tags=plugin-replaced
@test "plugin replaced: node-0's plugin pod deleted; its DaemonSet's new pod is Ready and registered by node-0's kubelet" {
  rn_need_chart
  local p0 np0 uid
  p0=$(plugin_pod node-0)
  kubectl delete pod "$p0" -n "$NS" --wait=false >/dev/null
  new_plugin() { local p; p=$(plugin_pod node-0); [ -n "$p" ] && [ "$p" != "$p0" ] && [ "$(ready_count kubeletplugin)" = 2 ]; }
  wait_until 90 new_plugin || fail "no new plugin pod on node-0"
  np0=$(plugin_pod node-0)
  uid=$(kubectl get pod "$np0" -n "$NS" -o jsonpath='{.metadata.uid}')
  wait_until 30 registered node-0 "$uid" || fail "new plugin pod $np0 not registered"
  PLUGIN_REPLACED=1; rn_keep PLUGIN_REPLACED
  note "$p0 -> $np0"
}

# bats test_tags=plugin-replaced
@test "plugin replaced: a new claim on node-0 is prepared by the new plugin pod; its container sees the region" {
  rn_need PLUGIN_REPLACED
  tenant_claim kv3 1Gi
  pod after-0 node-0 kv3 'test -s "$CXL_DAX_DEVICE"'
  wait_until 120 is_phase after-0 Succeeded && sees_region after-0 "$(memory_id kv3)" ||
    fail "pod of a claim after the plugin's replacement: $(phase after-0)"
  kubectl delete pod after-0 -n team-a --wait=false >/dev/null
}

# bats test_tags=plugin-replaced
@test "plugin replaced: holder-0 runs on through the replacement" {
  rn_need PLUGIN_REPLACED MEM2
  is_phase holder-0 Running || fail "holder-0: $(phase holder-0)"
}

# bats test_tags=drain
@test "drain: node-1 drained: holder-1b evicted, kv2 unprepared on node-1 and released there only" {
  rn_need MEM2
  pod holder-1b node-1 kv2 "exec sleep 600"
  wait_until 90 is_phase holder-1b Running && sees_region holder-1b || fail "holder-1b: $(phase holder-1b)"
  local p1 unprep0
  p1=$(plugin_pod node-1)
  unprep0=$(unprepared_kv2 "$p1")
  kubectl drain node-1 --ignore-daemonsets --force --grace-period=2 --timeout=120s >"$E/logs/drain.log" 2>&1 ||
    { cat "$E/logs/drain.log"; fail "kubectl drain node-1"; }
  DRAINED=1; rn_keep DRAINED
  gone pod holder-1b -n team-a && wait_until 30 released_on_1 && [ "$(unprepared_kv2 "$p1")" = $((unprep0 + 1)) ] ||
    fail "after the drain: holder-1b $(phase holder-1b), region mapped to '$(fab_hosts "$MEM2")'"
  note "kv2 mapped to $(fab_hosts "$MEM2")"
}

# bats test_tags=drain
@test "drain: the DaemonSets' pods stay on node-1" {
  rn_need DRAINED
  [ "$(ready_count kubeletplugin)" = 2 ] && [ "$(ready_count hostd)" = 2 ] ||
    fail "DaemonSet pods after the drain: plugin $(ready_count kubeletplugin), hostd $(ready_count hostd)"
}

# bats test_tags=drain
@test "drain: after uncordon, deleting holder-0 and claims kv2 and kv3 frees their regions" {
  rn_need MEM2
  kubectl uncordon node-1 >/dev/null || fail "uncordon node-1"
  kubectl delete pod holder-0 -n team-a --wait=false >/dev/null
  wait_until 60 gone pod holder-0 -n team-a || fail "holder-0 not torn down"
  kubectl delete resourceclaim kv2 kv3 -n team-a --wait=false >/dev/null
  wait_until 60 gone resourceclaim kv2 -n team-a && wait_until 60 gone resourceclaim kv3 -n team-a &&
    wait_until 30 no_regions || fail "after deleting kv2/kv3: regions $(regions)"
}

# bats test_tags=uninstall
@test "uninstall: helm uninstall stops and removes every chart pod" {
  rn_need INSTALLED_AT
  "$HELM" uninstall cxlkv --namespace "$NS" >/dev/null 2>&1 3>&- || fail "helm uninstall"
  no_pods() { [ -z "$(kubectl get pods -n "$NS" -o name 2>/dev/null)" ]; }
  wait_until 90 no_pods || fail "after uninstall: $(kubectl get pods -n "$NS" -o name | tr '\n' ' ')"
}
