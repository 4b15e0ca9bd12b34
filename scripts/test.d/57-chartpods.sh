#!/usr/bin/env bash
# test.sh: background lane
# Stage: the Helm chart's own pods, run as processes (issue 13 items 2 and 8).
# helm install of deployments/helm/cxlkv on the real control plane (2 fake
# nodes); per node cxlkv-fakekubelet (kubelet's plugin and DRA managers)
# with --node-root runs the DaemonSets' and the Deployment's pods from what
# their rendered specs say: command, env (fieldRef spec.nodeName,
# status.hostIP, status.podIP, metadata.uid), hostPath volumes under a
# per-node root, the projected service-account token (a real TokenRequest,
# bound to the pod), the node's InternalIP, readiness from the pods' probes
# (test/e2e/fakekubelet/podspec.go and probes.go say what is and is not
# done). cxlkv-fabricd, the fabric manager the chart points at, runs beside.
# Then:
#   - the controller pod's probes: /healthz and /readyz answer on its pod
#     IP; its owner Lease taken by another holder makes /readyz 503 and the
#     kubelet's readiness probe marks the pod unready, Ready again once that
#     record expires (about 25 s);
#   - the DRA scenario 1 through the chart's DeviceClass: one 2 GiB claim,
#     two replay pods on two nodes, blocks stored by one loaded by the other,
#     the region freed and the finalizer gone after delete;
#   - helm upgrade in place (logLevel): every component rolls (the plugin by
#     surge: old and new plugin pod on one node at once, the old deleted)
#     while two pods hold a prepared claim: the claim keeps its region, the
#     new plugin unprepares what the old one prepared, a pod on the other
#     node reads the blocks stored before the upgrade, that node is released
#     on its last unprepare and a new pod there gets the host added back by
#     the new controller and reads them again, and a claim made after it is
#     composed and prepared;
#   - probes: an httpGet readiness probe makes a pod Ready, one on a closed
#     port leaves it Running and unready, a failing liveness probe stops it
#     (Failed, reason Unhealthy);
#   - helm uninstall stops every pod.
# Needs root with mount namespaces (skipped otherwise).
# Warm (Kubernetes, Helm and the fake kubelet cached, binaries built): about
# 95 s on 2 cores for 27 checks (92 s in the whole default run); the 2 checks
# of the released node after the upgrade add one release and one pod, about
# 10 s of it.
# In scripts/test.sh's background lane (after dra, beside vllm, model, ttft).
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
ROOT=$PWD
CLUSTER=$ROOT/test/e2e/cluster.sh
CHART=$ROOT/deployments/helm/cxlkv
BIN=$ROOT/build/bin
passed=0; failed=0; skipped=0
ok() { echo "chartpods: ok: $*"; passed=$((passed + 1)); }
bad() { echo "chartpods: FAILED: $*"; failed=$((failed + 1)); }
E=""; BACKING=""; PIDS=()
unset CXLKV_E2E_DIR
finish() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "${CXLKV_E2E_DIR:-}" ] && { bash "$CLUSTER" down >/dev/null 2>&1 || true; }
  if [ -n "$E" ]; then
    if [ "$failed" -gt 0 ] || [ -n "${KEEP:-}" ]; then echo "chartpods: logs kept in $E/logs and $E/fake-node-*/logs"
      rm -rf "$BACKING"
    else rm -rf "$E" "$BACKING"; fi
  fi
  echo "chartpods: $passed passed, $failed failed, $skipped skipped"
}
trap finish EXIT
if ! { [ "$(id -u)" = 0 ] && unshare --mount true 2>/dev/null; }; then
  echo "chartpods: skipped: needs root with mount namespaces (the test kubelet's containers)"
  skipped=1; exit 0
fi

echo "== chartpods: build Helm, the fake kubelet and the binaries (cached)"
HELM=$(test/e2e/helm-build.sh) || { failed=1; exit 1; }
cxlkv_build_main cxlkv-dra-controller cxlkv-dra-kubeletplugin cxlkv-hostd cxlkv-fabricd cxlkv_cli ||
  { failed=1; exit 1; }
FK=$(test/e2e/fakekubelet/build.sh) || { failed=1; exit 1; }
# Short: kubelet dials the plugins' sockets under a node's root, and a Unix
# socket path has at most 107 bytes (registration socket: 106 with these).
E=$(mktemp -d /tmp/cxp.XXXXXX)
BACKING=/dev/shm/$(basename "$E")
mkdir -p "$E/logs" "$BACKING"
source "$ROOT/test/e2e/lib/dra-env.sh"

echo "== chartpods: control plane up (2 fake nodes)"
CXLKV_E2E_DIR=$E/cluster; export CXLKV_E2E_DIR
CXLKV_E2E_NODES=2 bash "$CLUSTER" up || { failed=$((failed + 1)); exit 1; }
eval "$(bash "$CLUSTER" env)"
API=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
API=${API#https://}
NODES=(fake-node-0 fake-node-1)
# Node and pod addresses on the loopback (127/8 is all local): random second
# octet, so two runs of this stage on one machine do not collide.
O=$((RANDOM % 200 + 20))
declare -A NODE_IP POD_PREFIX
for i in 0 1; do NODE_IP[fake-node-$i]=127.$O.0.$((i + 1)); POD_PREFIX[fake-node-$i]=127.$O.$((i + 1)).; done
HOSTD_PORT=$(port); PLUGIN_PORT=$(port); CTL_PORT=$(port)
F=http://127.0.0.1:$(port)
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
          - {id: P1, host: fake-node-0, hostPort: port0}
          - {id: P2, host: fake-node-1, hostPort: port0}
hosts:
  - {id: fake-node-0, agent: "http://${NODE_IP[fake-node-0]}:$HOSTD_PORT", localMemoryMiB: 65536}
  - {id: fake-node-1, agent: "http://${NODE_IP[fake-node-1]}:$HOSTD_PORT", localMemoryMiB: 65536}
YAML
start fabricd "$BIN/cxlkv-fabricd" --config "$E/fabricd.yaml" --listen "${F#http://}"
wait_until 20 curl -sf "$F/cfm/v1/appliances" || { bad "fabricd did not start"; exit 1; }
noderoot() { echo "$E/${1#fake-node-}"; }
for n in "${NODES[@]}"; do
  r=$(noderoot "$n")
  mkdir -p "$r/var/lib/kubelet" "$r/var/run/cdi" "$E/$n/logs"
  start "kubelet-$n" "$FK" --kubeconfig "$KUBECONFIG" --node-name "$n" --node-root "$r" \
    --root-dir "$r/var/lib/kubelet" --cdi-dir "$r/var/run/cdi" --log-dir "$E/$n/logs" \
    --node-ip "${NODE_IP[$n]}" --pod-ip-prefix "${POD_PREFIX[$n]}" --apiserver-endpoint "$API" \
    --shared-host-path "$BACKING" --image "cxlkv/cxlkv-dra=$BIN" --retry 1s -v=3
done
for n in "${NODES[@]}"; do
  wait_until 30 test -f "$(noderoot "$n")/var/lib/kubelet/ready" || { bad "fake kubelet $n not ready"; exit 1; }
done
addrs=$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.status.addresses[?(@.type=="InternalIP")].address} {end}')
if [ "$addrs" = "fake-node-0=${NODE_IP[fake-node-0]} fake-node-1=${NODE_IP[fake-node-1]} " ]; then
  ok "each fake kubelet wrote its node's InternalIP ($addrs)"
else bad "node addresses: $addrs"; fi

NS=cxlkv-system
VALUES=(--set fabricManager.url="$F" --set hostd.port="$HOSTD_PORT" --set kubeletPlugin.httpPort="$PLUGIN_PORT"
  --set "hostd.allowedBackingDirs={$BACKING}" --set controller.slicePeriodSeconds=5
  --set hostd.resyncIntervalSeconds=5 --set controller.metricsPort="$CTL_PORT")
echo "== chartpods: helm install; the fake kubelets run the chart's pods"
if "$HELM" install cxlkv "$CHART" --namespace "$NS" --create-namespace "${VALUES[@]}" >"$E/logs/install.log" 2>&1
then ok "helm install into $NS"; else cat "$E/logs/install.log"; bad "helm install"; exit 1; fi
pods_json() { kubectl get pods -n "$NS" -o json; }
# ready_count <component>: pods of it Running with Ready=True.
ready_count() {
  pods_json | python3 -c '
import json, sys
n = 0
for p in json.load(sys.stdin)["items"]:
    if p["metadata"]["labels"].get("app.kubernetes.io/component") != sys.argv[1]: continue
    if p["metadata"].get("deletionTimestamp"): continue
    c = {x["type"]: x["status"] for x in p["status"].get("conditions", [])}
    n += p["status"].get("phase") == "Running" and c.get("Ready") == "True"
print(n)' "$1"
}
all_ready() { [ "$(ready_count kubeletplugin)" = 2 ] && [ "$(ready_count hostd)" = 2 ] && [ "$(ready_count controller)" = 1 ]; }
if wait_until 90 all_ready; then
  ok "2 plugin, 2 hostd and 1 controller pod Running and Ready (plugin readiness from its /healthz probe)"
else
  bad "chart pods not ready: plugin $(ready_count kubeletplugin), hostd $(ready_count hostd), controller $(ready_count controller)"
  kubectl get pods -n "$NS" -o wide; tail -5 "$E"/fake-node-*/logs/*.log; exit 1
fi
# What the pods got, from their status and their containers' files.
pods_json >"$E/pods.json"
if python3 - "${NODE_IP[fake-node-0]}" "${NODE_IP[fake-node-1]}" "$O" "$E" <<'PY'
import base64, glob, json, sys
ip0, ip1, octet, e = sys.argv[1:]
node_ip = {"fake-node-0": ip0, "fake-node-1": ip1}
bad = []
for p in json.load(open(e + "/pods.json"))["items"]:
    comp = p["metadata"]["labels"]["app.kubernetes.io/component"]
    node, st, uid = p["spec"]["nodeName"], p["status"], p["metadata"]["uid"]
    if st.get("hostIP") != node_ip[node]:
        bad.append("%s hostIP %s" % (p["metadata"]["name"], st.get("hostIP")))
    want_prefix = node_ip[node] if comp == "hostd" else "127.%s.%d." % (octet, 1 + int(node[-1]))
    if not st.get("podIP", "").startswith(want_prefix):
        bad.append("%s podIP %s" % (p["metadata"]["name"], st.get("podIP")))
    if comp == "hostd":
        continue
    # The projected token kubelet would write: bound to this pod and node.
    tok = glob.glob(f"{e}/{node[-1]}/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~projected/*/token")
    if not tok:
        bad.append("%s: no token file" % p["metadata"]["name"]); continue
    body = open(tok[0]).read().split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    k = claims.get("kubernetes.io", {})
    if k.get("pod", {}).get("uid") != uid or k.get("node", {}).get("name") != node or \
       k.get("serviceaccount", {}).get("name") != p["spec"]["serviceAccountName"]:
        bad.append("%s token claims %s" % (p["metadata"]["name"], k))
if bad:
    sys.exit("; ".join(bad))
PY
then ok "status.hostIP is the node's InternalIP, podIPs per node (hostd: the node's), tokens bound to pod, node and ServiceAccount"
else bad "pod addresses or tokens"; fi
# The plugin reached the apiserver in-cluster (its token) and registered with kubelet's DRA manager.
reg=0
for n in "${NODES[@]}"; do
  uid=$(kubectl get pods -n "$NS" -l app.kubernetes.io/component=kubeletplugin \
    -o jsonpath="{.items[?(@.spec.nodeName==\"$n\")].metadata.uid}")
  grep -q "Registered DRA plugin.*dra-$uid.sock" "$E/logs/kubelet-$n.log" && reg=$((reg + 1))
done
[ $reg = 2 ] && ok "kubelet's DRA manager on each node registered its plugin pod's socket (dra-<pod uid>.sock)" ||
  bad "DRA plugin registrations: $reg of 2"
wait_until 30 kubectl get resourceslice cxlkv.dev-cma-0-blade-0 &&
  ok "the controller pod (in-cluster config, its token) published the blade's ResourceSlice" ||
  bad "no ResourceSlice from the controller pod"

echo "== chartpods: the controller's probes (liveness /healthz, readiness /readyz)"
# ctl_ready: the controller pod's Ready condition, as the kubelet's probe set it.
ctl_ready() {
  kubectl get pods -n "$NS" -l app.kubernetes.io/component=controller \
    -o jsonpath='{.items[0].status.conditions[?(@.type=="Ready")].status}'
}
is_ctl_ready() { [ "$(ctl_ready)" = "$1" ]; }
CTL_IP=$(kubectl get pods -n "$NS" -l app.kubernetes.io/component=controller -o jsonpath='{.items[0].status.podIP}')
readyz() { curl -s "http://$CTL_IP:$CTL_PORT/readyz"; }
if curl -sf "http://$CTL_IP:$CTL_PORT/healthz" >/dev/null &&
   readyz | python3 -c 'import json,sys; j=json.load(sys.stdin); sys.exit(0 if j=={"ready":True,"informerSynced":True,"ownerLease":True} else 1)'; then
  ok "controller pod on $CTL_IP:$CTL_PORT: /healthz 200, /readyz $(readyz)"
else bad "controller probes' endpoints: /readyz $(readyz)"; fi
# Another holder takes the controller's owner Lease (as a second replica of
# the same name would): /readyz turns 503, the kubelet's readiness probe marks
# the pod unready; once that record expires (15 s, its own duration) the
# controller renews its Lease again and is Ready again.
OWNER_LEASE=$(kubectl get leases -n "$NS" -o json | python3 -c '
import json, sys
for l in json.load(sys.stdin)["items"]:
    if "-owner-" in l["metadata"]["name"] and l["spec"].get("holderIdentity") == "cxlkv-controller":
        print(l["metadata"]["name"])')
now=$(date -u +%Y-%m-%dT%H:%M:%S.000000Z)
if [ -n "$OWNER_LEASE" ] && kubectl patch lease "$OWNER_LEASE" -n "$NS" --type=merge \
    -p "{\"spec\": {\"holderIdentity\": \"intruder\", \"leaseDurationSeconds\": 15, \"renewTime\": \"$now\", \"acquireTime\": \"$now\"}}" >/dev/null; then
  if wait_until 30 is_ctl_ready False; then
    ok "owner Lease $OWNER_LEASE taken by another holder: /readyz $(readyz), the pod Ready False"
  else bad "controller still Ready $(ctl_ready) with its owner Lease held by another (/readyz $(readyz))"; fi
  wait_until 60 is_ctl_ready True && ok "the foreign record expired: the controller renews its Lease, Ready True again" ||
    bad "controller not Ready again: $(ctl_ready), /readyz $(readyz)"
else bad "no owner Lease of cxlkv-controller in $NS"; fi

# pod_json <name> <node> <claim> <shell command>: a pod on <node> holding <claim>.
pod_json() {
  python3 - "$@" <<'PY'
import json, sys
name, node, claim, cmd = sys.argv[1:]
print(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
  "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "restartPolicy": "Never",
           "terminationGracePeriodSeconds": 5,
           "resourceClaims": [{"name": "kv", "resourceClaimName": claim}],
           "containers": [{"name": "main", "image": "none", "command": ["/bin/sh", "-c", cmd],
                           "resources": {"claims": [{"name": "kv"}]}}]}}))
PY
}
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
phase() { kubectl get pod "$1" -n team-a -o jsonpath='{.status.phase}' 2>/dev/null; }
is_phase() { [ "$(phase "$1")" = "$2" ]; }
gone() { ! kubectl get "$@" >/dev/null 2>&1; }
regions() {
  curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("members", [])))'
}
memory_id() {
  kubectl get resourceclaim "$1" -n team-a -o json | python3 -c '
import json, sys
for d in json.load(sys.stdin).get("status", {}).get("devices", []):
    if d.get("driver") == "cxlkv.dev": print(d.get("data", {}).get("memoryId", ""))'
}
plog() { echo "$E/$2/logs/team-a_$1_main.log"; }
TRACE=$ROOT/data/traces/mooncake-conversation-trace.jsonl
REPLAY="$BIN/cxlkv replay --trace $TRACE --block-tokens 16 --kv-bytes-per-token 64 --json --quiet"
kubectl create namespace team-a >/dev/null
wait_until 30 kubectl get serviceaccount default -n team-a || bad "no default ServiceAccount in team-a"

echo "== chartpods: scenario 1 through the chart's DeviceClass"
claim_yaml kv 2Gi | kubectl apply -f - >/dev/null
for i in 0 1; do
  pod_json "replay-$i" "fake-node-$i" kv \
    "exec $REPLAY --limit 400 --replica-index $i --replica-count 2 --control $E/replay.ctl" |
    kubectl apply -f - >/dev/null
done
composed() {
  kubectl get resourceclaim kv -n team-a \
    -o jsonpath='{.status.devices[0].conditions[?(@.type=="cxlkv.dev/composed")].status}' | grep -q True
}
wait_until 120 composed || bad "claim kv never composed"
MEM=$(memory_id kv)
if wait_until 120 is_phase replay-0 Succeeded && wait_until 60 is_phase replay-1 Succeeded; then
  ok "replay pods on both nodes Succeeded"
else bad "replay pods: $(phase replay-0) / $(phase replay-1)"; fi
held=0
for n in "${NODES[@]}"; do
  [ -n "$MEM" ] && grep -q "cxlkv.dev/region=$MEM" "$(noderoot "$n")/var/lib/kubelet/dra/dra_manager_state" 2>/dev/null &&
    held=$((held + 1))
done
[ $held = 2 ] && ok "both nodes' kubelet DRA state holds CDI device cxlkv.dev/region=$MEM (one region, two nodes)" ||
  bad "CDI device of region '$MEM' in $held of 2 kubelets' DRA state"
if python3 - "$(plog replay-0 fake-node-0)" "$(plog replay-1 fake-node-1)" <<'PY'
import json, sys
rs = [json.load(open(p)) for p in sys.argv[1:]]
hits, wrong = sum(r["cross_replica_hits"] for r in rs), sum(r["errors"] + r["wrong_data"] for r in rs)
print("cross_replica_hits %d, errors+wrong_data %d" % (hits, wrong))
sys.exit(0 if hits > 0 and wrong == 0 else 1)
PY
then ok "blocks one node stored were loaded on the other, none wrong"; else bad "shared bytes across nodes"; fi
kubectl delete pod replay-0 replay-1 -n team-a --wait=false >/dev/null
wait_until 60 gone pod replay-0 -n team-a && wait_until 60 gone pod replay-1 -n team-a
kubectl delete resourceclaim kv -n team-a --wait=false >/dev/null
no_regions() { [ "$(regions)" = 0 ]; }
if wait_until 60 gone resourceclaim kv -n team-a && wait_until 30 no_regions; then
  ok "pods and claim deleted: the region is freed and the claim's finalizer dropped"
else bad "after delete: claim $(kubectl get resourceclaim kv -n team-a -o name 2>&1), regions $(regions)"; fi

echo "== chartpods: helm upgrade in place (every component rolls) while a claim stays prepared"
claim_yaml kv2 1Gi | kubectl apply -f - >/dev/null
pod_json holder-0 fake-node-0 kv2 \
  "$REPLAY --limit 100 --replica-index 0 --replica-count 1 --control $E/kv2.ctl && exec sleep 600" |
  kubectl apply -f - >/dev/null
pod_json holder-1 fake-node-1 kv2 "exec sleep 600" | kubectl apply -f - >/dev/null
stored() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["distinct_blocks"])' "$(plog holder-0 fake-node-0)" 2>/dev/null; }
if wait_until 60 is_phase holder-0 Running && wait_until 60 is_phase holder-1 Running && wait_until 30 stored; then
  ok "holder pods run on both nodes; holder-0 stored $(stored) blocks in claim kv2"
else bad "holders: $(phase holder-0) / $(phase holder-1)"; fi
MEM=$(memory_id kv2)
plugin_uids() { kubectl get pods -n "$NS" -l app.kubernetes.io/component="$1" -o jsonpath='{.items[*].metadata.uid}'; }
OLD_PLUGIN=$(plugin_uids kubeletplugin); OLD_HOSTD=$(plugin_uids hostd); OLD_CTL=$(plugin_uids controller)
"$HELM" upgrade cxlkv "$CHART" --namespace "$NS" "${VALUES[@]}" --set logLevel=debug >"$E/logs/upgrade.log" 2>&1 ||
  { cat "$E/logs/upgrade.log"; bad "helm upgrade"; }
# Watch the plugin's surge: an old and a new plugin pod on one node at once.
surge=""
rolled() {  # no pod of before the upgrade is left, and all are Ready
  local now u; now=$(kubectl get pods -n "$NS" -o jsonpath='{.items[*].metadata.uid}')
  for u in $OLD_PLUGIN $OLD_HOSTD $OLD_CTL; do grep -q "$u" <<<"$now" && return 1; done
  all_ready
}
end=$((SECONDS + 120))
while [ $SECONDS -lt $end ]; do
  if [ -z "$surge" ]; then
    surge=$(pods_json | python3 -c '
import json, sys
old = set(sys.argv[1].split())
by = {}
for p in json.load(sys.stdin)["items"]:
    if p["metadata"]["labels"].get("app.kubernetes.io/component") == "kubeletplugin":
        by.setdefault(p["spec"].get("nodeName"), []).append(p["metadata"]["uid"] in old)
print(" ".join(n for n, v in by.items() if True in v and False in v))' "$OLD_PLUGIN")
  fi
  rolled && break
  sleep 0.5
done
if rolled; then ok "upgrade rolled every pod (2 plugin, 2 hostd, 1 controller replaced; all Ready)"
else bad "rollout incomplete"; kubectl get pods -n "$NS" -o wide; fi
[ -n "$surge" ] && ok "plugin surge: an old and a new plugin pod on $surge at once (maxSurge 1, maxUnavailable 0)" ||
  bad "no moment with two plugin pods on one node"
if [ -n "$MEM" ] && [ "$(memory_id kv2)" = "$MEM" ] && [ "$(regions)" = 1 ] &&
   is_phase holder-0 Running && is_phase holder-1 Running; then
  ok "after the upgrade claim kv2 keeps region $MEM (one region at the fabric manager), holders still Running"
else bad "after the upgrade: memoryId '$(memory_id kv2)' (was '$MEM'), regions $(regions), holders $(phase holder-0)/$(phase holder-1)"; fi
# A reader on fake-node-1 while holder-1 still holds the claim there:
# kubelet starts it on the preparation the old plugin made.
pod_json reader fake-node-1 kv2 "exec $BIN/cxlkv inspect --json" | kubectl apply -f - >/dev/null
if wait_until 60 is_phase reader Succeeded &&
   python3 - "$(plog reader fake-node-1)" "$(stored)" <<'PY'
import json, sys
ready = json.load(open(sys.argv[1]))["slots"]["ready"]
print("reader on fake-node-1 sees %d ready slots, holder-0 stored %s" % (ready, sys.argv[2]))
sys.exit(0 if str(ready) == sys.argv[2] else 1)
PY
then ok "after the upgrade a pod on fake-node-1 reads every block holder-0 stored before it"
else bad "reader after the upgrade: $(phase reader)"; fi
# The new plugin on fake-node-1 unprepares what the old one prepared.
kubectl delete pod holder-1 reader -n team-a --wait=false >/dev/null
if wait_until 60 gone pod holder-1 -n team-a && wait_until 30 gone pod reader -n team-a; then
  ok "holder-1 and reader deleted: the new plugin on fake-node-1 unprepared the claim the old one prepared"
else bad "holder-1/reader not torn down (unprepare by the new plugin)"; fi
# fake-node-1 no longer uses kv2: its new plugin released the node's view
# (the fabric manager maps the region to fake-node-0 only). A new pod there
# needs the new controller to add the host back (issue 11: after an upgrade
# it stayed Pending, "not materialized on node fake-node-1").
fab_hosts() {
  curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory/$MEM" | python3 -c '
import json, sys
print(" ".join(sorted(m["hostId"] for m in json.load(sys.stdin).get("mappings", []) if m.get("hostId"))))'
}
released_on_1() { [ "$(fab_hosts)" = fake-node-0 ]; }
wait_until 30 released_on_1 && ok "fake-node-1 released region $MEM after its last unprepare (mapped to fake-node-0 only)" ||
  bad "after holder-1: region $MEM mapped to '$(fab_hosts)'"
pod_json reader2 fake-node-1 kv2 "exec $BIN/cxlkv inspect --json" | kubectl apply -f - >/dev/null
if wait_until 60 is_phase reader2 Succeeded &&
   python3 - "$(plog reader2 fake-node-1)" "$(stored)" <<'PY'
import json, sys
ready = json.load(open(sys.argv[1]))["slots"]["ready"]
print("reader2 on fake-node-1 sees %d ready slots, holder-0 stored %s" % (ready, sys.argv[2]))
sys.exit(0 if str(ready) == sys.argv[2] else 1)
PY
then ok "after the upgrade and the release, a new pod on fake-node-1: host added back to region $MEM ($(fab_hosts)), every block read"
else bad "reader2 on the released node after the upgrade: $(phase reader2), region mapped to '$(fab_hosts)'"; fi
kubectl delete pod reader2 -n team-a --wait=false >/dev/null
wait_until 60 gone pod reader2 -n team-a || bad "reader2 not torn down"
# The new plugins prepare: a claim made after the upgrade, on fake-node-1.
claim_yaml kv3 1Gi | kubectl apply -f - >/dev/null
pod_json after fake-node-1 kv3 'test -s "$CXL_DAX_DEVICE"' | kubectl apply -f - >/dev/null
if wait_until 90 is_phase after Succeeded; then ok "a claim made after the upgrade is composed and prepared by the new pods"
else bad "pod of a claim made after the upgrade: $(phase after)"; fi
kubectl delete pod holder-0 after -n team-a --wait=false >/dev/null
wait_until 60 gone pod holder-0 -n team-a && wait_until 30 gone pod after -n team-a ||
  bad "holder-0/after not torn down"
kubectl delete resourceclaim kv3 -n team-a --wait=false >/dev/null
kubectl delete resourceclaim kv2 -n team-a --wait=false >/dev/null
if wait_until 60 gone resourceclaim kv2 -n team-a && wait_until 30 no_regions; then
  ok "claim kv2 deleted after the upgrade: region freed by the new controller, no leak"
else bad "kv2 after delete: regions $(regions)"; fi

echo "== chartpods: probes decide readiness (pods of their own, no claim)"
# probe_pod <name> <probe yaml (flow style)>: an HTTP server on its pod IP.
WPORT=$(port)
probe_pod() {
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: team-a}
spec:
  nodeSelector: {kubernetes.io/hostname: fake-node-1}
  restartPolicy: Never
  containers:
  - name: web
    image: none
    command: [/usr/bin/python3, -m, http.server, "$WPORT", --bind, "\$(POD_IP)"]
    env: [{name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]
    ports: [{name: web, containerPort: $WPORT}]
    $2
YAML
}
probe_pod ready-web "readinessProbe: {httpGet: {path: /, port: web}, periodSeconds: 1}" | kubectl apply -f - >/dev/null
probe_pod unready-web "readinessProbe: {tcpSocket: {port: $(port)}, periodSeconds: 1}" | kubectl apply -f - >/dev/null
probe_pod unlive-web "livenessProbe: {httpGet: {path: /, port: $(port)}, periodSeconds: 1, failureThreshold: 2}" |
  kubectl apply -f - >/dev/null
pod_ready() { [ "$(kubectl get pod "$1" -n team-a -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = "$2" ]; }
if wait_until 30 pod_ready ready-web True; then ok "httpGet readiness probe on the pod's port: Ready True"
else bad "ready-web not Ready"; fi
reason() { kubectl get pod unlive-web -n team-a -o jsonpath='{.status.containerStatuses[0].state.terminated.reason}'; }
if wait_until 30 is_phase unlive-web Failed && [ "$(reason)" = Unhealthy ]; then
  ok "a failing liveness probe stops the container: Failed, reason Unhealthy (no restart: out of scope)"
else bad "unlive-web: $(phase unlive-web), reason '$(reason)'"; fi
# unlive-web, started with it, has failed two 1 s probes on a closed port by
# now (instead of a fixed 4 s wait): unready-web's probes, on the same
# period, have had as long to (wrongly) make it Ready.
if is_phase unready-web Running && pod_ready unready-web False; then
  ok "a readiness probe on a closed port: Running, Ready False"
else bad "unready-web: $(phase unready-web), Ready $(kubectl get pod unready-web -n team-a -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')"; fi
kubectl delete pod ready-web unready-web unlive-web -n team-a --wait=false >/dev/null

echo "== chartpods: helm uninstall"
procs_left() {
  for n in "${NODES[@]}"; do ls "$(noderoot "$n")/var/lib/kubelet/plugins_registry" 2>/dev/null; done
  kubectl get pods -n "$NS" -o name 2>/dev/null
}
"$HELM" uninstall cxlkv --namespace "$NS" >/dev/null 2>&1 || bad "helm uninstall"
no_procs() { [ -z "$(procs_left)" ]; }
if wait_until 60 no_procs; then
  ok "helm uninstall: every chart pod stopped and removed, no registration socket left"
else bad "after uninstall: $(procs_left | tr '\n' ' ')"; fi
[ "$failed" -eq 0 ]
