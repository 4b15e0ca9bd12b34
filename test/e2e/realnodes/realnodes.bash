# The real-node tests' world, helpers and failure hook (issue 30).
#
# test/e2e/realnodes/realnodes.bats loads it (`load realnodes`);
# scripts/test.d/56-realnodes.sh runs that file once per Kubernetes version,
# each run in a network namespace of its own (`unshare --net --fork`).
#
# The world (setup_file, rn_world_up): in this network namespace, the test
# control plane with two real nodes (test/e2e/cluster.sh with
# CXLKV_E2E_REAL_NODES=2: node-0 and node-1, each a kubelet with its own
# containerd 2.x and Debian's runc; test/e2e/realnodes/nodes.sh), the fabric
# manager cxlkv-fabricd on 10.201.0.100 with one blade cabled to both nodes,
# and the chart installed by helm into cxlkv-system (the plugin and hostd
# DaemonSets, the controller's Deployment). Whether each piece came up is
# what the first tests check (their names start with "nodes:" and "chart:").
# The facts the tests share (E, F, HELM, the seconds setup took, ...) are in
# the file $RN_STATE; a step that learns something a later step needs writes
# it there (rn_keep), and a later step skips, naming the scenario to run, when
# it is missing (rn_need).
#
# Alone, as root with mount and network namespaces, after one
# `scripts/test.sh --full --stage realnodes` has built and cached everything
# (it prints the HELM, IMAGES and K8S_VERSION it used):
#
#   HELM=... CXLKV_E2E_IMAGES="..." K8S_VERSION=v1.37.2 \
#     unshare --net --fork bats test/e2e/realnodes/realnodes.bats
#
# The failure hook (teardown): when a test did not complete, rn_dump_state
# prints the cluster state: nodes, pods and claims in every namespace, the
# ResourceSlices, the last Events, `kubectl describe` of up to five pods
# neither Running nor Succeeded, the last lines of every chart pod's log, the
# regions at the fabric manager, and the tails of the kubelet, containerd,
# fabricd and workload logs written during the test. If setup_file fails
# (no cluster or no fabric manager), it prints the tail of that log instead. KEEP=1 (or a failed
# test) keeps the scratch directory and the nodes' logs.

RN_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=${ROOT:-$(cd "$RN_LIB/../../.." && pwd)}
CHART=$ROOT/deployments/helm/cxlkv
# The generic helpers (fail, note, dead, gone, state_keep, state_need,
# dump_kube_state) are lib/common.bash's, shared with lib/dra.bash, which
# this file cannot load: loading it starts the DRA world of fake nodes.
# shellcheck source=test/e2e/lib/common.bash
source "$ROOT/test/e2e/lib/common.bash"
# shellcheck source=test/e2e/lib/dra-env.sh
source "$ROOT/test/e2e/lib/dra-env.sh"
NODES=(node-0 node-1)
NODE_IP=(10.201.0.1 10.201.0.2)
# The fabric manager's address in this namespace (the nodes' are 10.201.0.1
# and .2, nodes.sh).
FAB_IP=10.201.0.100
FPORT=8080
F=http://$FAB_IP:$FPORT
NS=cxlkv-system
HOSTD_PORT=8091; PLUGIN_PORT=9095; CTL_PORT=9096
REPLAY="/usr/bin/cxlkv replay --trace /traces/mooncake-conversation-trace.jsonl --block-tokens 16 --kv-bytes-per-token 64 --json --quiet"

# ---- assertions and shared state ---------------------------------------------

rn_keep() { state_keep "$RN_STATE" "$@"; }  # rn_keep <var>...: records the variables' values for the later tests
rn_need() {  # rn_need <var>...: skip, naming the scenario to run, when an earlier step did not record it
  state_need ": select its whole scenario (realnodes.bats says which go together)" "$@"
}

# rn_need_chart: the chart's pods Ready (a test selected without the
# "chart:" ones waits for them itself), or skip.
rn_need_chart() {
  [ -n "${CHART_READY:-}" ] && return 0
  rn_need INSTALLED_AT
  wait_until 180 all_ready || skip "the chart's pods are not Ready (see the \"chart:\" tests)"
}

# ---- the world -------------------------------------------------------------------

rn_world_up() {
  E=$(mktemp -d /tmp/cxr.XXXXXX)
  BACKING=/dev/shm/$(basename "$E")
  RN_STATE=$E/state.env
  mkdir -p "$E/logs" "$E/shared" "$E/pids" "$BACKING"
  export E BACKING RN_STATE
  CXLKV_E2E_DIR=$E/cluster; export CXLKV_E2E_DIR
  printf 'export %s=%q\n' E "$E" BACKING "$BACKING" RN_STATE "$RN_STATE" CXLKV_E2E_DIR "$CXLKV_E2E_DIR" >"$RN_STATE"
  ip link set lo up
  ip addr add "$FAB_IP/32" dev lo 2>/dev/null || true
  local t0=$SECONDS
  # fd 3 closed: bats reads its TAP stream there, and the nodes' daemons
  # would hold the run open until they exit. Without the cluster or the
  # fabric manager no test can run: setup_file fails, and cxlkv_bats counts
  # every test of the file as failed.
  if ! CXLKV_E2E_REAL_NODES=2 CXLKV_E2E_KUBELET_V=3 bash "$CLUSTER" up >"$E/logs/cluster.log" 2>&1 3>&-; then
    tail -30 "$E/logs/cluster.log"; touch "$E/.failed"; return 1
  fi
  UP_SECONDS=$((SECONDS - t0)); rn_keep UP_SECONDS
  bash "$CLUSTER" env >>"$RN_STATE"
  source "$RN_STATE"
  fabricd_config 5000 "node-0@${NODE_IP[0]}:$HOSTD_PORT" "node-1@${NODE_IP[1]}:$HOSTD_PORT" \
    >"$E/fabricd.yaml"
  "$BIN/cxlkv-fabricd" --config "$E/fabricd.yaml" --listen "$FAB_IP:$FPORT" >"$E/logs/fabricd.log" 2>&1 3>&- &
  echo $! >"$E/pids/fabricd"
  if ! wait_until 20 curl -sf "$F/cfm/v1/appliances"; then
    echo "cxlkv-fabricd did not answer on $F"; tail -20 "$E/logs/fabricd.log"; touch "$E/.failed"; return 1
  fi
  t0=$(date +%s)
  if "$HELM" install cxlkv "$CHART" --namespace "$NS" --create-namespace \
      --set fabricManager.url="$F" --set hostd.port="$HOSTD_PORT" --set kubeletPlugin.httpPort="$PLUGIN_PORT" \
      --set "hostd.allowedBackingDirs={$BACKING}" --set controller.slicePeriodSeconds=5 \
      --set hostd.resyncIntervalSeconds=5 --set controller.metricsPort="$CTL_PORT" \
      >"$E/logs/install.log" 2>&1 3>&-; then
    INSTALLED_AT=$t0; rn_keep INSTALLED_AT
  fi
  kubectl create namespace team-a >/dev/null
}

rn_world_down() {
  local p
  p=$(cat "$E/pids/fabricd" 2>/dev/null) && { kill "$p" 2>/dev/null; wait_until 15 dead "$p"; }
  if [ -e "$E/.failed" ] || [ -n "${KEEP:-}" ]; then
    cp -r "$CXLKV_E2E_DIR/logs" "$E/cluster-logs" 2>/dev/null
  fi
  bash "$CLUSTER" down >/dev/null 2>&1 3>&-
  if [ -e "$E/.failed" ] || [ -n "${KEEP:-}" ]; then echo "# realnodes: logs kept in $E/logs and $E/cluster-logs" >&3
  else rm -rf "$E"; fi
  rm -rf "$BACKING"
}

# ---- the bats hooks ----------------------------------------------------------------

setup_file() {
  if ! { [ "$(id -u)" = 0 ] && unshare --mount true 2>/dev/null; }; then
    skip "real nodes need root with mount namespaces"
  fi
  if [ "$(readlink /proc/self/ns/net)" = "$(readlink /proc/1/ns/net)" ]; then
    skip "real nodes need a network namespace of their own: run under 'unshare --net --fork'"
  fi
  for v in HELM CXLKV_E2E_IMAGES; do
    [ -n "${!v:-}" ] || skip "\$$v unset: scripts/test.d/56-realnodes.sh builds and sets it"
  done
  export K8S_VERSION=${K8S_VERSION:-$(source "$ROOT/test/e2e/k8s-build.sh"; echo "$K8S_DEFAULT_VERSION")}
  rn_world_up
}
teardown_file() { if [ -n "${E:-}" ]; then rn_world_down; fi; }
setup() {
  cd "$ROOT" || return 1
  source "$RN_STATE"
  touch "$E/.test-start"
}
teardown() {
  if [ -z "${BATS_TEST_COMPLETED:-}" ] && [ -z "${BATS_TEST_SKIPPED:-}" ]; then
    touch "$E/.failed"
    rn_dump_state || true
  fi
}

rn_dump_state() (
  set +e
  echo "=== cluster state after \"${BATS_TEST_DESCRIPTION:-?}\" failed (scratch: $E)"
  echo "--- nodes"
  kubectl get nodes -o wide 2>&1
  dump_kube_state
  local p
  for p in $(kubectl get pods -n "$NS" -o name 2>/dev/null); do
    echo "--- kubectl logs -n $NS $p (last ${RN_DUMP_LINES:-12} lines)"
    kubectl logs -n "$NS" "$p" --tail="${RN_DUMP_LINES:-12}" 2>&1
  done
  echo "--- regions at the fabric manager"
  curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory" 2>&1; echo
  local f
  for f in "$CXLKV_E2E_DIR"/logs/node-*-kubelet.log "$CXLKV_E2E_DIR"/logs/node-*-containerd.log "$E"/logs/*.log; do
    [ -e "$f" ] && [ "$f" -nt "$E/.test-start" ] || continue
    echo "--- $f (last ${RN_DUMP_LINES:-12} lines)"
    tail -n "${RN_DUMP_LINES:-12}" "$f"
  done
  echo "=== end of the cluster state"
)

# ---- the chart's pods ------------------------------------------------------------------

ready_count() {  # <component>: its pods Running and Ready
  kubectl get pods -n "$NS" -l app.kubernetes.io/component="$1" -o json | python3 -c '
import json, sys
n = 0
for p in json.load(sys.stdin)["items"]:
    if p["metadata"].get("deletionTimestamp"): continue
    c = {x["type"]: x["status"] for x in p["status"].get("conditions", [])}
    n += p["status"].get("phase") == "Running" and c.get("Ready") == "True"
print(n)'
}
all_ready() { [ "$(ready_count kubeletplugin)" = 2 ] && [ "$(ready_count hostd)" = 2 ] && [ "$(ready_count controller)" = 1 ]; }
plugin_pod() {  # <node>: its plugin pod that runs and is not being deleted
  kubectl get pods -n "$NS" -l app.kubernetes.io/component=kubeletplugin --field-selector "spec.nodeName=$1" \
    -o json | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"):
        print(p["metadata"]["name"]); break'
}
registered() {  # <node> <plugin pod uid>: that kubelet's DRA manager registered the pod's socket
  grep -q "Registered DRA plugin.*dra-$2.sock" "$CXLKV_E2E_DIR/logs/$1-kubelet.log"
}
plugin_log() { kubectl logs -n "$NS" "$1" 2>/dev/null; }
unprepared_kv2() { plugin_log "$1" | grep -c "unprepare claim=kv2 .*result=success" || true; }

# ---- workloads --------------------------------------------------------------------------

nd() { echo "$CXLKV_E2E_DIR/nodes/$1"; }
# What every workload container runs first: its CDI edits, seen from inside.
SEE='echo "cdi-env: $(env | grep "^CXL_" | sort | tr "\n" " ")"
test -n "$CXL_DAX_DEVICE" && test -e "$CXL_DAX_DEVICE" || { echo "no region at [$CXL_DAX_DEVICE]"; exit 3; }
grep " $CXL_DAX_DEVICE " /proc/self/mountinfo | sed "s/^/cdi-mount: /"'
# pod <name> <node> <claim> <shell command>: a pod of the project's image on <node> holding <claim>.
pod() {
  python3 - "$@" "$ROOT/data/traces" "$E/shared" "$SEE" <<'PY' | kubectl apply -f - >/dev/null
import json, sys
name, node, claim, cmd, traces, shared, see = sys.argv[1:]
print(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
  "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "restartPolicy": "Never",
           "terminationGracePeriodSeconds": 2,
           "resourceClaims": [{"name": "kv", "resourceClaimName": claim}],
           "volumes": [{"name": "traces", "hostPath": {"path": traces, "type": "Directory"}},
                       {"name": "shared", "hostPath": {"path": shared, "type": "Directory"}}],
           "containers": [{"name": "main", "image": "cxlkv/cxlkv-dra:0.1.0",
                           "command": ["/bin/sh", "-c", see + "\n" + cmd],
                           # The region file is the fabric's (root's, 0644).
                           "securityContext": {"runAsUser": 0},
                           "volumeMounts": [{"name": "traces", "mountPath": "/traces", "readOnly": True},
                                            {"name": "shared", "mountPath": "/shared"}],
                           "resources": {"claims": [{"name": "kv"}]}}]}}))
PY
}
phase() { kubectl get pod "$1" -n team-a -o jsonpath='{.status.phase}' 2>/dev/null; }
is_phase() { [ "$(phase "$1")" = "$2" ]; }
plog() { kubectl logs "$1" -n team-a 2>/dev/null; }
cid() { kubectl get pod "$1" -n team-a -o jsonpath='{.status.containerStatuses[0].containerID}'; }
restarts() { kubectl get pod "$1" -n team-a -o jsonpath='{.status.containerStatuses[0].restartCount}'; }
regions() {
  curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("members", [])))'
}
no_regions() { [ "$(regions)" = 0 ]; }
memory_id() {
  kubectl get resourceclaim "$1" -n team-a -o json | python3 -c '
import json, sys
for d in json.load(sys.stdin).get("status", {}).get("devices", []):
    if d.get("driver") == "cxlkv.dev": print(d.get("data", {}).get("memoryId", ""))'
}
composed() {
  kubectl get resourceclaim "$1" -n team-a \
    -o jsonpath='{.status.devices[0].conditions[?(@.type=="cxlkv.dev/composed")].status}' | grep -q True
}
fab_hosts() {  # <memory id>: the hosts the fabric maps the region to
  curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory/$1" | python3 -c '
import json, sys
print(" ".join(sorted(m["hostId"] for m in json.load(sys.stdin).get("mappings", []) if m.get("hostId"))))'
}
released_on_1() { [ "$(fab_hosts "$MEM2")" = node-0 ]; }
# sees_region <pod> [memory id]: its log shows the CDI environment and the bind mount of that region.
sees_region() {
  local l; l=$(plog "$1")
  grep -q "^cdi-env: .*CXL_DAX_DEVICE=/dev/cxlkv/" <<<"$l" && grep -q "CXL_DAX_SIZE=" <<<"$l" &&
    grep -q "^cdi-mount: .* /dev/cxlkv/" <<<"$l" && { [ -z "${2:-}" ] || grep -q "$2" <<<"$l"; }
}
node_ready() { [ "$(kubectl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
