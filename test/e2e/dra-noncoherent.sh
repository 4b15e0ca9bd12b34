#!/usr/bin/env bash
# A non-coherent blade end to end (issue 14, docs/dra.md "Non-coherent
# regions"), on a control plane of its own (test/e2e/cluster.sh, 2 fake
# nodes: the real kube-apiserver, kube-scheduler and kube-controller-manager),
# with cxlkv-fabricd (one 8 GiB blade cabled to both nodes), per node
# cxlkv-hostd run as `--coherence software --software-hosts
# fake-node-0,fake-node-1`, cxlkv-dra-kubeletplugin and the fake kubelet
# (kubelet's own plugin and DRA managers), and cxlkv-dra-controller
# `--coherence software`. Checks:
#   - the blade's ResourceSlice device carries the attribute
#     coherence=software;
#   - a 1 GiB claim of DeviceClass cxlkv.dev-software (a CEL selector on that
#     attribute) shared by two pods on the two nodes is composed once; each
#     node's CDI spec sets CXL_COHERENCE=software, CXL_SOFTWARE_PARTITIONS=2
#     and CXL_SOFTWARE_PARTITION=<the node's index in --software-hosts>;
#   - the containers are `cxlkv replay` workers (as in the dra stage's
#     scenario 1) that open the region from that environment alone, in
#     coherence=software, each as its node's write partition (replica 0 runs
#     on fake-node-1, so the partition is the host's, not the replica's):
#     cross-replica hits, zero wrong bytes, zero errors;
#   - two writers on one node: a replay worker holding fake-node-0's
#     partition of a second claim, and another pod on that node as a second
#     writer, which the node's partition lock (CXL_PARTITION_LOCK, a file
#     hostd's CDI spec bind-mounts into both) refuses before it attaches,
#     with a message naming the limit; the first stays attached;
#   - a claim of DeviceClass cxlkv.dev-hardware (coherence == "hardware")
#     is never allocated the software blade: it stays unallocated, its pod
#     unschedulable with the scheduler's reason, and nothing is composed;
#   - deleting pods and claims frees the regions and removes the CDI specs
#     and partition locks.
# Needs root (the fake kubelet's private mount namespaces), build/bin
# (cxlkv, cxlkv-fabricd, cxlkv-hostd, cxlkv-dra-kubeletplugin,
# cxlkv-dra-controller) and the cached fake kubelet (FK, else
# test/e2e/fakekubelet/build.sh). Prints "dra-noncoherent: ok|FAILED: ..."
# and closes with "dra-noncoherent: N passed, N failed, N skipped".
# Warm on 2 cores: about 45 s (the control plane's start about 15 s of it); measured 36 s at load
# average 9 before the two-writers case, 61 s with it at load average 15-18.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
source "$ROOT/test/e2e/lib/dra-env.sh"
dra_standalone dra-noncoherent
if [ "$(id -u)" != 0 ] || ! unshare --mount true 2>/dev/null; then
  echo "dra-noncoherent: the fake kubelet needs root for private mount namespaces; skipping"
  skipped=1; exit 0
fi
FK=${FK:-$(test/e2e/fakekubelet/build.sh)} || { bad "fake kubelet build"; exit 1; }
t_start=$SECONDS

dra_cluster_up 2 "$CXLKV_E2E_DIR" || { bad "control plane did not start"; exit 1; }
NODES=(fake-node-0 fake-node-1)
dra_fabric_up 5000 "${NODES[@]}" || { bad "fabricd did not start"; exit 1; }
HOSTD_ARGS=(--coherence software --software-hosts fake-node-0,fake-node-1)
for n in "${NODES[@]}"; do dra_node_up "$n" 1s --http-listen ""; done
start controller "$BIN/cxlkv-dra-controller" --kubeconfig "$KUBECONFIG" --fabric "$F" \
  --identity noncoherent --coherence software --resync-period 2 --lease-duration 6
SLICE=cxlkv.dev-cma-0-blade-0
wait_until 30 kubectl get resourceslice "$SLICE" || { bad "no ResourceSlice"; exit 1; }
kubectl get resourceslice "$SLICE" -o json | python3 -c '
import json, sys
d = json.load(sys.stdin)["spec"]["devices"][0]
assert d["attributes"]["coherence"] == {"string": "software"}, d["attributes"]
' && ok "the blade device carries the attribute coherence=software" ||
  bad "slice attributes: $(kubectl get resourceslice "$SLICE" -o jsonpath='{.spec.devices[0].attributes}')"

# The classes a cluster with both kinds of blade would offer: one per mode.
for mode in software hardware; do
  kubectl apply -f - >/dev/null <<YAML
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: cxlkv.dev-$mode}
spec:
  selectors:
    - cel: {expression: 'device.driver == "cxlkv.dev" && device.attributes["cxlkv.dev"].coherence == "$mode"'}
YAML
done

# claim_with_pods <claim> <class> <size> [<pod> <node> <cmd>]...: a claim of
# that class and pods that share it, applied as one List (<cmd> is one
# string, run by sh -c, so a pod's command can name its own environment).
claim_with_pods() {
  python3 - "$@" <<'PY' | kubectl apply -f - >/dev/null
import json, sys
claim, cls, size, rest = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
items = [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
          "metadata": {"name": claim, "namespace": "default"},
          "spec": {"devices": {"requests": [{"name": "kv", "exactly": {
              "deviceClassName": cls, "capacity": {"requests": {"memory": size}}}}]}}}]
for i in range(0, len(rest), 3):
    pod, node, cmd = rest[i:i + 3]
    items.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": "default"},
                  "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "restartPolicy": "Never",
                           "resourceClaims": [{"name": "kv", "resourceClaimName": claim}],
                           "containers": [{"name": "main", "image": "none", "command": ["sh", "-c", cmd],
                                           "resources": {"claims": [{"name": "kv"}]}}]}})
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
PY
}
phase() { kubectl get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }
succeeded() { [ "$(phase "$1")" = Succeeded ]; }
gone() { ! kubectl get "$@" >/dev/null 2>&1; }
regions() {
  curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("members", [])))'
}
no_regions() { [ "$(regions)" = 0 ]; }

echo "== dra-noncoherent: a software-coherence claim shared by replay pods on two nodes"
replay() {  # replay <pod> <replica index>: the container's command: its env noted, then the worker
  echo "env | grep -E '^CXL_(COHERENCE|SOFTWARE_PARTITIONS?)=' >$E/$1.env;" \
    "exec $BIN/cxlkv replay --trace $ROOT/data/traces/mooncake-conversation-trace.jsonl" \
    "--limit 400 --block-tokens 16 --kv-bytes-per-token 64 --replica-index $2 --replica-count 2" \
    "--control $E/replay-nc.ctl --json --quiet"
}
# Replica 0 on fake-node-1 (partition 1), replica 1 on fake-node-0 (partition 0).
claim_with_pods nc cxlkv.dev-software 1Gi nc-0 fake-node-1 "$(replay nc-0 0)" nc-1 fake-node-0 "$(replay nc-1 1)"
if wait_until 120 succeeded nc-0 && wait_until 60 succeeded nc-1; then
  ok "both replay pods ran to completion"
else bad "replay pods: $(phase nc-0) / $(phase nc-1)"; fi
n_comp=$(grep -c "claim default/nc: composed region" "$E/logs/controller.log")
MEM=$(grep -m1 "claim default/nc: composed region" "$E/logs/controller.log" |
  awk '{for (i = 1; i < NF; i++) if ($i == "region") { print $(i + 1); exit }}')
[ "$n_comp" = 1 ] && [ -n "$MEM" ] && ok "composed once ($MEM) for both pods" ||
  bad "composed $n_comp times"
# What each container got from its node's CDI spec (the spec itself is gone
# by now: the pods finished, so kubelet unprepared the claim).
env_ok=0
for p in nc-0:1 nc-1:0; do
  got=$(cat "$E/${p%:*}.env" 2>/dev/null | sort | xargs)
  want="CXL_COHERENCE=software CXL_SOFTWARE_PARTITION=${p#*:} CXL_SOFTWARE_PARTITIONS=2"
  [ "$got" = "$want" ] && env_ok=$((env_ok + 1)) || echo "  ${p%:*}: '$got', want '$want'"
done
[ "$env_ok" = 2 ] &&
  ok "each container's CDI env: CXL_COHERENCE=software, CXL_SOFTWARE_PARTITIONS=2, its node's CXL_SOFTWARE_PARTITION" ||
  bad "CDI env: $env_ok of 2 containers got the software-coherence environment"
if python3 - "$E/fake-node-1/logs/default_nc-0_main.log" 1 "$E/fake-node-0/logs/default_nc-1_main.log" 0 <<'PY'
import json, sys
cross = 0
for p, part in zip(sys.argv[1::2], sys.argv[2::2]):
    r = json.loads(open(p).read())
    assert r["coherence"] == "software" and r["software_partition"] == int(part), (p, r)
    assert r["errors"] == 0 and r["wrong_data"] == 0, r
    print(f"  {p.rsplit('/', 1)[1]}: partition {r['software_partition']}, "
          f"{r['cross_replica_hits']} cross-replica hits, {r['wrong_data']} wrong")
    cross += r["cross_replica_hits"]
assert cross > 0, "no cross-replica hits"
PY
then ok "the workers attached in coherence=software from the CDI env, each as its node's partition; cross-replica hits, 0 wrong bytes"
else bad "replay results"; for f in "$E"/fake-node-*/logs/default_nc-*_main.log; do tail -n 5 "$f"; done; fi

echo "== dra-noncoherent: two writers on one node (one CDI spec, one partition)"
# w-0 attaches as fake-node-0's partition and waits (its replica 1 never
# starts); w-1, on the same node with the same claim, is a second writer of
# that partition: the node's partition lock (CXL_PARTITION_LOCK) refuses it
# before it attaches, where it would have taken the partition over and
# fenced w-0.
worker() {  # worker <control file>: a replay worker, replica 0 of 2
  echo "exec $BIN/cxlkv replay --trace $ROOT/data/traces/mooncake-conversation-trace.jsonl" \
    "--limit 400 --block-tokens 16 --kv-bytes-per-token 64 --replica-index 0 --replica-count 2" \
    "--control $1 --json --quiet"
}
claim_with_pods two cxlkv.dev-software 1Gi w-0 fake-node-0 "$(worker "$E/w0.ctl")"
running() { [ "$(phase "$1")" = Running ]; }
holders() {  # participants of claim two's region as fake-node-0 maps it
  "$BIN/cxlkv" inspect --region "$E/fake-node-0/dev/$MEM2" --json 2>/dev/null |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["participants"]))'
}
attached() { [ "$(holders)" = 1 ]; }
MEM2=""
if wait_until 90 running w-0; then
  MEM2=$(grep -m1 "claim default/two: composed region" "$E/logs/controller.log" |
    awk '{for (i = 1; i < NF; i++) if ($i == "region") { print $(i + 1); exit }}')
fi
if [ -n "$MEM2" ] && wait_until 30 attached; then
  claim_with_pods two cxlkv.dev-software 1Gi w-1 fake-node-0 "$(worker "$E/w1.ctl")"
  failed_pod() { [ "$(phase w-1)" = Failed ]; }
  WLOG=$E/fake-node-0/logs/default_w-1_main.log
  if wait_until 90 failed_pod &&
     grep -q "another process on this node already writes as its write partition" "$WLOG"; then
    running w-0 && [ "$(holders)" = 1 ] &&
      ok "a second writer on the node refused by the partition lock: '$(grep -m1 -o 'another process on this node[^(]*' "$WLOG")'; the first still attached" ||
      bad "after the refusal: w-0 $(phase w-0), $(holders) holders"
  else bad "w-1: $(phase w-1), $(tail -n 2 "$WLOG" 2>/dev/null)"; fi
else bad "w-0 never attached: $(phase w-0), region '$MEM2', holders '$(holders)'"; fi
kubectl delete pod w-0 w-1 --wait=false >/dev/null 2>&1

echo "== dra-noncoherent: a claim that asks for hardware coherence"
claim_with_pods hw cxlkv.dev-hardware 1Gi hw-0 fake-node-0 "true"
unschedulable() {  # the pod's PodScheduled condition: False, Unschedulable
  kubectl get pod hw-0 -o json | python3 -c '
import json, sys
c = [c for c in json.load(sys.stdin)["status"].get("conditions", []) if c["type"] == "PodScheduled"]
assert c and c[0]["status"] == "False" and c[0]["reason"] == "Unschedulable", c
print(c[0]["message"])'
}
if wait_until 60 unschedulable; then
  why=$(unschedulable)
  alloc=$(kubectl get resourceclaim hw -o jsonpath='{.status.allocation}')
  if [ -z "$alloc" ] && ! grep -q "claim default/hw: composed" "$E/logs/controller.log" &&
     echo "$why" | grep -q "cannot allocate all claims"; then
    ok "never allocated the software blade: pending, '$why'"
  else bad "hardware claim: allocation '$alloc', reason '$why'"; fi
else bad "hardware claim's pod: $(phase hw-0), $(kubectl get pod hw-0 -o jsonpath='{.status.conditions}')"; fi

kubectl delete pod nc-0 nc-1 hw-0 --wait=false >/dev/null
for p in nc-0 nc-1 hw-0 w-0 w-1; do wait_until 60 gone pod "$p" || bad "pod $p not deleted"; done
kubectl delete resourceclaim nc hw two --wait=false >/dev/null
for c in nc hw two; do wait_until 60 gone resourceclaim "$c" || bad "claim $c stuck"; done
if wait_until 20 no_regions; then
  left=$(find "$E"/fake-node-*/cdi -name "$MEM.*" -o -name "${MEM2:-none}.*" | wc -l)
  [ "$left" = 0 ] && ok "claims deleted: regions freed at the fabric manager, CDI specs and partition locks removed" ||
    bad "$left CDI specs or locks left"
else bad "$(regions) regions left on the blade"; fi
echo "dra-noncoherent: $((SECONDS - t_start)) s"
