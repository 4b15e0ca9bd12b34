#!/usr/bin/env bash
# Stage: the DRA driver and its consumers in real containers under real
# kubelets (issue 30). test/e2e/cluster.sh with CXLKV_E2E_REAL_NODES=2: two
# kubelets (node-0, node-1), each with its own containerd 2.x (built from its
# module, test/e2e/containerd-build.sh) and Debian's runc, in one network
# namespace this stage makes (test/e2e/realnodes/nodes.sh says how two nodes
# share one machine); the images are the Dockerfile's runtime stage in a
# debootstrap tree with this build's binaries, imported without a registry
# (test/e2e/realnodes/image.sh). cxlkv-fabricd is the fabric manager. Then:
#   - helm install of the chart: the plugin and hostd DaemonSets' pods and the
#     controller's Deployment run as containers, Ready by their own probes;
#     each kubelet registers its node's plugin through the plugin watcher;
#   - DRA scenario 1: one claim, two pods of the project's image on the two
#     nodes; each container sees the region through the runtime's CDI edits
#     (CXL_DAX_* environment, the region bind-mounted at CXL_DAX_DEVICE) and
#     `cxlkv replay` workers in the two containers load blocks the other
#     stored, none wrong; claim deletion frees the region;
#   - faults: the kubelet restarted under a prepared claim (the pod keeps
#     running, the claim is unprepared once when it goes); containerd
#     restarted (a running pod stays, a new pod starts and sees its region);
#     the plugin pod deleted (its DaemonSet recreates it, the kubelet
#     registers the new one, which prepares a new claim); node-1 drained (its
#     pod evicted and unprepared, the region released on node-1 only);
#   - helm uninstall stops every chart pod.
# Fails when a container does not see its region.
# Behind --full (CXLKV_FULL=1), once per supported minor: Kubernetes 1.37.2
# and 1.36.3 (the chart's kubeVersion range; the 1.36 kubelet under the 1.36
# control plane). CXLKV_REALNODES_K8S="v1.37.2" runs the listed ones only.
# Needs root, mount and network namespaces, cgroup v1 (skipped otherwise).
# Warm (kubelet, containerd, Helm and the images cached, binaries built):
# about 160 s per Kubernetes version on 2 cores, 230 s on busy ones (23
# checks each; the cluster with two Ready nodes in about 36 s, teardown about
# 60 s); both versions about 320 s. Fresh, beyond the kube stage's 1.37
# build: containerd about 390 s, the 1.37 kubelet about 140 s (its packages
# beyond the control plane's), debootstrap about 110 s once per machine, the
# image about 60 s, and 1.36.3's control plane, etcd and kubelet about
# 2,130 s (GOFLAGS_EXTRA=-p=1, nice 10, on 2 cores other builds kept busy;
# its kubelet alone 52 s after the control plane): about 3,200 s with both
# runs. The fresh-machine default run is past 70 min without this stage
# (CHANGELOG.md), so it stays behind --full.
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
ROOT=$PWD
CHART=$ROOT/deployments/helm/cxlkv
BIN=$ROOT/build/bin
CLUSTER=$ROOT/test/e2e/cluster.sh
passed=0; failed=0; skipped=0
ok() { echo "realnodes: ok: $*"; passed=$((passed + 1)); }
bad() { echo "realnodes: FAILED: $*"; failed=$((failed + 1)); }

if [ "${1:-}" != --inside ]; then
  # ---- outside: builds (they need the registries), then the test in a
  # network namespace of its own.
  total() { echo "realnodes: $passed passed, $failed failed, $skipped skipped"; }
  if [ "$CXLKV_FULL" != 1 ]; then
    echo "realnodes: real kubelets and containers are behind --full; skipping"
    skipped=1; total; exit 0
  fi
  if ! { [ "$(id -u)" = 0 ] && unshare --net --mount true 2>/dev/null; }; then
    echo "realnodes: skipped: needs root with network and mount namespaces"
    skipped=1; total; exit 0
  fi
  if [ "$(stat -fc %T /sys/fs/cgroup)" != tmpfs ]; then
    echo "realnodes: skipped: the nodes' kubelet configuration is for cgroup v1 hierarchies"
    skipped=1; total; exit 0
  fi
  for c in runc /usr/lib/cni/bridge ip; do
    command -v "$c" >/dev/null || { echo "realnodes: $c missing (scripts/setup.sh installs it)"; failed=1; total; exit 1; }
  done
  source test/e2e/k8s-build.sh
  source test/e2e/containerd-build.sh
  # The chart's newest and lowest supported minors (Chart.yaml kubeVersion).
  VERSIONS=${CXLKV_REALNODES_K8S:-"$K8S_DEFAULT_VERSION v1.36.3"}
  t0=$SECONDS
  echo "== realnodes: build Helm, the binaries, containerd and the images (cached)"
  HELM=$(test/e2e/helm-build.sh) || { bad "helm build"; total; exit 1; }
  cxlkv_build_main cxlkv-dra-controller cxlkv-dra-kubeletplugin cxlkv-hostd cxlkv-fabricd cxlkv_cli ||
    { bad "binaries"; total; exit 1; }
  containerd_build >/dev/null || { bad "containerd build"; total; exit 1; }
  IMAGES=$(test/e2e/realnodes/image.sh "$BIN") || { bad "images"; total; exit 1; }
  echo "realnodes: builds and caches checked in $((SECONDS - t0)) s"
  COUNTS=$(mktemp)
  for K8S in $VERSIONS; do
    t0=$SECONDS
    echo "== realnodes: Kubernetes $K8S: control plane and kubelet (cached)"
    if ! k8s_build_kubelet "$K8S" >/dev/null; then bad "Kubernetes $K8S build"; continue; fi
    echo "realnodes: Kubernetes $K8S built or cached in $((SECONDS - t0)) s"
    echo "0 1 0" >"$COUNTS"  # what a run that never reached its own count adds
    HELM=$HELM K8S_VERSION=$K8S CXLKV_E2E_IMAGES="${IMAGES//$'\n'/ }" REALNODES_COUNTS=$COUNTS \
      unshare --net --fork bash "$0" --inside
    read -r p f s <"$COUNTS"
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  done
  rm -f "$COUNTS"
  total
  [ "$failed" -eq 0 ]
  exit
fi

# ---- inside the stage's network namespace ----
E=$(mktemp -d /tmp/cxr.XXXXXX)
BACKING=/dev/shm/$(basename "$E")
PIDS=()
unset CXLKV_E2E_DIR
finish() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  if [ "$failed" -gt 0 ] || [ -n "${KEEP:-}" ]; then
    # The nodes' logs (kubelet, containerd) go with the cluster's state dir.
    [ -n "${CXLKV_E2E_DIR:-}" ] && cp -r "$CXLKV_E2E_DIR/logs" "$E/cluster-logs" 2>/dev/null
  fi
  [ -n "${CXLKV_E2E_DIR:-}" ] && { bash "$CLUSTER" down >/dev/null 2>&1 || true; }
  if [ "$failed" -gt 0 ] || [ -n "${KEEP:-}" ]; then echo "realnodes: logs kept in $E/logs and $E/cluster-logs"
  else rm -rf "$E"; fi
  rm -rf "$BACKING"
  echo "realnodes ($K8S_VERSION): $passed passed, $failed failed, $skipped skipped"
  echo "$passed $failed $skipped" >"$REALNODES_COUNTS"
}
trap finish EXIT
mkdir -p "$E/logs" "$E/shared" "$BACKING"
source "$ROOT/test/e2e/lib/dra-env.sh"
ip link set lo up
# The fabric manager's address in this namespace (the nodes' are 10.201.0.1
# and .2, nodes.sh).
FAB_IP=10.201.0.100
ip addr add "$FAB_IP/32" dev lo

echo "== realnodes: control plane and two real nodes (Kubernetes $K8S_VERSION)"
t0=$SECONDS
CXLKV_E2E_DIR=$E/cluster; export CXLKV_E2E_DIR
if CXLKV_E2E_REAL_NODES=2 CXLKV_E2E_KUBELET_V=3 bash "$CLUSTER" up; then
  ok "control plane and 2 real nodes up in $((SECONDS - t0)) s"
else bad "cluster up with real nodes"; exit 1; fi
eval "$(bash "$CLUSTER" env)"
NODES=(node-0 node-1)
NODE_IP=(10.201.0.1 10.201.0.2)
nd() { echo "$CXLKV_E2E_DIR/nodes/$1"; }
info=$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}:{.status.addresses[?(@.type=="InternalIP")].address}:{.status.nodeInfo.kubeletVersion}:{.status.nodeInfo.containerRuntimeVersion} {end}')
if [[ $info =~ ^node-0:10\.201\.0\.1:$K8S_VERSION:containerd://v?2\.[0-9.]+\ node-1:10\.201\.0\.2:$K8S_VERSION:containerd://v?2\.[0-9.]+\ $ ]]; then
  ok "nodes registered by their kubelets: $info"
else bad "nodes: $info"; fi

HOSTD_PORT=8091; PLUGIN_PORT=9095; CTL_PORT=9096; FPORT=8080
F=http://$FAB_IP:$FPORT
cat >"$E/fabricd.yaml" <<YAML
stateDir: $E/fabricd
backingDir: $BACKING
agentTimeoutMs: 5000
appliances:
  - id: cma-0
    blades:
      - id: blade-0
        resourceBlockMiB: 256
        channels: 4
        blocksPerChannel: 8
        ports:
          - {id: P1, host: node-0, hostPort: port0}
          - {id: P2, host: node-1, hostPort: port0}
hosts:
  - {id: node-0, agent: "http://${NODE_IP[0]}:$HOSTD_PORT", localMemoryMiB: 65536}
  - {id: node-1, agent: "http://${NODE_IP[1]}:$HOSTD_PORT", localMemoryMiB: 65536}
YAML
start fabricd "$BIN/cxlkv-fabricd" --config "$E/fabricd.yaml" --listen "$FAB_IP:$FPORT"
wait_until 20 curl -sf "$F/cfm/v1/appliances" || { bad "fabricd did not start"; exit 1; }

NS=cxlkv-system
VALUES=(--set fabricManager.url="$F" --set hostd.port="$HOSTD_PORT" --set kubeletPlugin.httpPort="$PLUGIN_PORT"
  --set "hostd.allowedBackingDirs={$BACKING}" --set controller.slicePeriodSeconds=5
  --set hostd.resyncIntervalSeconds=5 --set controller.metricsPort="$CTL_PORT")
echo "== realnodes: helm install; the kubelets run the chart's pods in containers"
t0=$SECONDS
if "$HELM" install cxlkv "$CHART" --namespace "$NS" --create-namespace "${VALUES[@]}" >"$E/logs/install.log" 2>&1
then ok "helm install into $NS"; else cat "$E/logs/install.log"; bad "helm install"; exit 1; fi
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
if wait_until 180 all_ready; then
  ok "2 plugin, 2 hostd and 1 controller containers Running and Ready by their probes in $((SECONDS - t0)) s"
else
  bad "chart pods not ready: plugin $(ready_count kubeletplugin), hostd $(ready_count hostd), controller $(ready_count controller)"
  kubectl get pods -n "$NS" -o wide; kubectl get events -n "$NS" | tail -20; exit 1
fi
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
reg=0
for n in "${NODES[@]}"; do
  uid=$(kubectl get pod "$(plugin_pod "$n")" -n "$NS" -o jsonpath='{.metadata.uid}')
  wait_until 30 registered "$n" "$uid" && reg=$((reg + 1))
done
[ $reg = 2 ] && ok "each kubelet's plugin watcher registered its node's plugin container (dra-<pod uid>.sock)" ||
  bad "DRA plugin registrations: $reg of 2"
wait_until 60 kubectl get resourceslice cxlkv.dev-cma-0-blade-0 &&
  ok "the controller container (in-cluster config through the kubernetes Service) published the blade's ResourceSlice" ||
  bad "no ResourceSlice from the controller container"

# ---- workloads ----
kubectl create namespace team-a >/dev/null
wait_until 30 kubectl get serviceaccount default -n team-a || bad "no default ServiceAccount in team-a"
claim_yaml() {  # claim_yaml <name> <memory>
  cat <<YAML
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: $1, namespace: team-a}
spec:
  devices:
    requests: [{name: kv, exactly: {deviceClassName: cxl-shared-memory, capacity: {requests: {memory: $2}}}}]
YAML
}
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
gone() { ! kubectl get "$@" >/dev/null 2>&1; }
plog() { kubectl logs "$1" -n team-a 2>/dev/null; }
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
fab_hosts() {  # <memory id>: the hosts the fabric maps the region to
  curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory/$1" | python3 -c '
import json, sys
print(" ".join(sorted(m["hostId"] for m in json.load(sys.stdin).get("mappings", []) if m.get("hostId"))))'
}
# sees_region <pod> <memory id>: its log shows the CDI environment and the bind mount of that region.
sees_region() {
  local l; l=$(plog "$1")
  grep -q "^cdi-env: .*CXL_DAX_DEVICE=/dev/cxlkv/" <<<"$l" && grep -q "CXL_DAX_SIZE=" <<<"$l" &&
    grep -q "^cdi-mount: .* /dev/cxlkv/" <<<"$l" && { [ -z "${2:-}" ] || grep -q "$2" <<<"$l"; }
}
plugin_log() { kubectl logs -n "$NS" "$1" 2>/dev/null; }
REPLAY="/usr/bin/cxlkv replay --trace /traces/mooncake-conversation-trace.jsonl --block-tokens 16 --kv-bytes-per-token 64 --json --quiet"

echo "== realnodes: scenario 1: one claim, replay workers in containers on two nodes"
claim_yaml kv 2Gi | kubectl apply -f - >/dev/null
for i in 0 1; do
  pod "replay-$i" "node-$i" kv "exec $REPLAY --limit 400 --replica-index $i --replica-count 2 --control /shared/replay.ctl"
done
composed() {
  kubectl get resourceclaim "$1" -n team-a \
    -o jsonpath='{.status.devices[0].conditions[?(@.type=="cxlkv.dev/composed")].status}' | grep -q True
}
wait_until 120 composed kv || bad "claim kv never composed"
MEM=$(memory_id kv)
if wait_until 180 is_phase replay-0 Succeeded && wait_until 60 is_phase replay-1 Succeeded; then
  ok "replay containers on both nodes Succeeded"
else bad "replay pods: $(phase replay-0) / $(phase replay-1)"; kubectl describe pod replay-0 replay-1 -n team-a | tail -30; fi
seen=0
for i in 0 1; do
  plog "replay-$i" >"$E/logs/replay-$i.log"
  sees_region "replay-$i" && seen=$((seen + 1))
done
if [ $seen = 2 ]; then
  ok "both containers saw region $MEM through the runtime's CDI edits: $(grep -o 'CXL_DAX_DEVICE=[^ ]*' "$E/logs/replay-0.log"), bind-mounted"
else bad "containers that saw their region: $seen of 2 ($(grep -h '^cdi-\|no region' "$E"/logs/replay-*.log | tr '\n' ' '))"; fi
if python3 - "$E/logs/replay-0.log" "$E/logs/replay-1.log" <<'PY'
import json, sys
rs = []
for p in sys.argv[1:]:
    text = open(p).read()
    rs.append(json.loads(text[text.index("{"):]))
hits, wrong = sum(r["cross_replica_hits"] for r in rs), sum(r["errors"] + r["wrong_data"] for r in rs)
print("cross_replica_hits %d, errors+wrong_data %d" % (hits, wrong))
sys.exit(0 if hits > 0 and wrong == 0 else 1)
PY
then ok "blocks one container stored were loaded in the other container on the other node, none wrong"
else bad "shared bytes across the two containers"; fi
kubectl delete pod replay-0 replay-1 -n team-a --wait=false >/dev/null
wait_until 60 gone pod replay-0 -n team-a && wait_until 60 gone pod replay-1 -n team-a
kubectl delete resourceclaim kv -n team-a --wait=false >/dev/null
if wait_until 60 gone resourceclaim kv -n team-a && wait_until 30 no_regions; then
  ok "pods and claim deleted: the region is freed"
else bad "after delete: claim $(kubectl get resourceclaim kv -n team-a -o name 2>&1), regions $(regions)"; fi

echo "== realnodes: kubelet restart under a prepared claim"
claim_yaml kv2 1Gi | kubectl apply -f - >/dev/null
pod holder-0 node-0 kv2 "$REPLAY --limit 100 --replica-index 0 --replica-count 1 --control /shared/kv2.ctl >/shared/kv2.json && exec sleep 600"
pod holder-1 node-1 kv2 "exec sleep 600"
if wait_until 120 is_phase holder-0 Running && wait_until 60 is_phase holder-1 Running &&
   wait_until 30 test -s "$E/shared/kv2.json" && sees_region holder-1; then
  ok "holder pods run on both nodes and see claim kv2's region"
else bad "holders: $(phase holder-0) / $(phase holder-1)"; fi
MEM2=$(memory_id kv2)
# While its pods run, each kubelet's DRA checkpoint holds the claim's CDI
# device (a finished pod's claims are unprepared at once).
held=0
for n in "${NODES[@]}"; do
  [ -n "$MEM2" ] && grep -q "cxlkv.dev/region=$MEM2" "$(nd "$n")/mnt/kubelet/dra_manager_state" 2>/dev/null && held=$((held + 1))
done
[ $held = 2 ] && ok "both kubelets' DRA checkpoints hold CDI device cxlkv.dev/region=$MEM2" ||
  bad "CDI device of region '$MEM2' in $held of 2 kubelets' checkpoints"
cid() { kubectl get pod "$1" -n team-a -o jsonpath='{.status.containerStatuses[0].containerID}'; }
CID1=$(cid holder-1)
P1=$(plugin_pod node-1)
bash "$CLUSTER" restart-node node-1 kubelet >>"$E/logs/restarts.log" 2>&1 || bad "kubelet restart on node-1"
t0=$SECONDS
kubelet_back() { [ "$(kubectl get node node-1 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ] &&
  grep -c "Started kubelet" "$CXLKV_E2E_DIR/logs/node-1-kubelet.log" | grep -q '^2$'; }
wait_until 90 kubelet_back || bad "node-1's kubelet not back"
sleep 5  # a few of the restarted kubelet's pod syncs
if is_phase holder-1 Running && [ "$(cid holder-1)" = "$CID1" ] &&
   [ "$(kubectl get pod holder-1 -n team-a -o jsonpath='{.status.containerStatuses[0].restartCount}')" = 0 ]; then
  ok "kubelet on node-1 restarted ($((SECONDS - t0)) s to Ready): holder-1 keeps running, same container, no restart"
else bad "holder-1 after the kubelet restart: $(phase holder-1), container $(cid holder-1) (was $CID1)"; fi
kubectl delete pod holder-1 -n team-a --wait=false >/dev/null
wait_until 60 gone pod holder-1 -n team-a || bad "holder-1 not torn down after the kubelet restart"
released_on_1() { [ "$(fab_hosts "$MEM2")" = node-0 ]; }
wait_until 30 released_on_1 || true
unprep=$(plugin_log "$P1" | grep -c "unprepare claim=kv2 .*result=success")
if [ "$unprep" = 1 ] && released_on_1; then
  ok "holder-1 deleted after the restart: node-1's plugin unprepared kv2 once, the region mapped to node-0 only"
else bad "unprepare of kv2 on node-1: $unprep times, region mapped to '$(fab_hosts "$MEM2")'"; fi

echo "== realnodes: containerd restart with a running pod"
CID0=$(cid holder-0)
bash "$CLUSTER" restart-node node-0 containerd >>"$E/logs/restarts.log" 2>&1 || bad "containerd restart on node-0"
sleep 5
if is_phase holder-0 Running && [ "$(cid holder-0)" = "$CID0" ] &&
   [ "$(kubectl get pod holder-0 -n team-a -o jsonpath='{.status.containerStatuses[0].restartCount}')" = 0 ]; then
  ok "containerd on node-0 restarted: holder-0 keeps running in the same container"
else bad "holder-0 after the containerd restart: $(phase holder-0), container $(cid holder-0) (was $CID0)"; fi
pod reader-0 node-0 kv2 "exec /usr/bin/cxlkv inspect --json"
if wait_until 90 is_phase reader-0 Succeeded && sees_region reader-0 &&
   python3 - "$(plog reader-0 | sed -n '/^{/,$p')" "$E/shared/kv2.json" <<'PY'
import json, sys
ready = json.loads(sys.argv[1])["slots"]["ready"]
stored = json.load(open(sys.argv[2]))["distinct_blocks"]
print("reader-0 sees %d ready slots, holder-0 stored %d" % (ready, stored))
sys.exit(0 if ready == stored > 0 else 1)
PY
then ok "after the restart a new container on node-0 starts, sees the region and reads every block holder-0 stored"
else bad "reader-0 after the containerd restart: $(phase reader-0)"; fi
kubectl delete pod reader-0 -n team-a --wait=false >/dev/null

echo "== realnodes: the plugin pod on node-0 deleted; its DaemonSet recreates it"
P0=$(plugin_pod node-0)
kubectl delete pod "$P0" -n "$NS" --wait=false >/dev/null
new_plugin() { local p; p=$(plugin_pod node-0); [ -n "$p" ] && [ "$p" != "$P0" ] && [ "$(ready_count kubeletplugin)" = 2 ]; }
if wait_until 90 new_plugin; then
  NP0=$(plugin_pod node-0)
  uid=$(kubectl get pod "$NP0" -n "$NS" -o jsonpath='{.metadata.uid}')
  wait_until 30 registered node-0 "$uid" && ok "plugin pod $P0 deleted: the DaemonSet made $NP0, Ready, registered by node-0's kubelet" ||
    bad "new plugin pod $NP0 not registered"
else bad "no new plugin pod on node-0"; fi
claim_yaml kv3 1Gi | kubectl apply -f - >/dev/null
pod after-0 node-0 kv3 'test -s "$CXL_DAX_DEVICE"'
if wait_until 120 is_phase after-0 Succeeded && sees_region after-0 "$(memory_id kv3)"; then
  ok "a new claim on node-0 is prepared by the new plugin pod; its container sees the region"
else bad "pod of a claim after the plugin's replacement: $(phase after-0)"; fi
is_phase holder-0 Running && ok "holder-0 ran on through the plugin's replacement" || bad "holder-0: $(phase holder-0)"
kubectl delete pod after-0 -n team-a --wait=false >/dev/null

echo "== realnodes: node-1 drained"
pod holder-1b node-1 kv2 "exec sleep 600"
wait_until 90 is_phase holder-1b Running && sees_region holder-1b || bad "holder-1b: $(phase holder-1b)"
P1=$(plugin_pod node-1)
unprep0=$(plugin_log "$P1" | grep -c "unprepare claim=kv2 .*result=success")
if kubectl drain node-1 --ignore-daemonsets --force --grace-period=2 --timeout=120s >"$E/logs/drain.log" 2>&1; then
  if gone pod holder-1b -n team-a && wait_until 30 released_on_1 &&
     [ "$(plugin_log "$P1" | grep -c "unprepare claim=kv2 .*result=success")" = $((unprep0 + 1)) ]; then
    ok "node-1 drained: holder-1b evicted, kv2 unprepared on node-1 and released there (mapped to $(fab_hosts "$MEM2"))"
  else bad "after the drain: holder-1b $(phase holder-1b), region mapped to '$(fab_hosts "$MEM2")'"; fi
  [ "$(ready_count kubeletplugin)" = 2 ] && [ "$(ready_count hostd)" = 2 ] &&
    ok "the drain left the DaemonSets' pods on node-1" || bad "DaemonSet pods after the drain"
else cat "$E/logs/drain.log"; bad "kubectl drain node-1"; fi
kubectl uncordon node-1 >/dev/null || bad "uncordon node-1"
kubectl delete pod holder-0 -n team-a --wait=false >/dev/null
wait_until 60 gone pod holder-0 -n team-a || bad "holder-0 not torn down"
kubectl delete resourceclaim kv2 kv3 -n team-a --wait=false >/dev/null
if wait_until 60 gone resourceclaim kv2 -n team-a && wait_until 60 gone resourceclaim kv3 -n team-a &&
   wait_until 30 no_regions; then
  ok "claims kv2 and kv3 deleted: regions freed"
else bad "after deleting kv2/kv3: regions $(regions)"; fi

echo "== realnodes: helm uninstall"
"$HELM" uninstall cxlkv --namespace "$NS" >/dev/null 2>&1 || bad "helm uninstall"
no_pods() { [ -z "$(kubectl get pods -n "$NS" -o name 2>/dev/null)" ]; }
if wait_until 90 no_pods; then ok "helm uninstall: every chart pod stopped and removed"
else bad "after uninstall: $(kubectl get pods -n "$NS" -o name | tr '\n' ' ')"; fi
[ "$failed" -eq 0 ]
