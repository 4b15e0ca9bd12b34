#!/usr/bin/env bats
# A non-coherent blade end to end (issue 14, docs/dra.md "Non-coherent
# regions"), in a world of its own (lib/dra-own-world.bash): the test control
# plane with 2 fake nodes, cxlkv-fabricd (one 8 GiB blade cabled to both), per
# node cxlkv-hostd run as `--coherence software --software-hosts
# fake-node-0,fake-node-1`, cxlkv-dra-kubeletplugin and the fake kubelet, and
# cxlkv-dra-controller `--coherence software`; DeviceClasses cxlkv.dev-software
# and cxlkv.dev-hardware (a CEL selector on the coherence attribute each).
# Scenarios (steps share the prefix of their names, run in order):
#  - slice: the blade's device carries coherence=software;
#  - shared: a 1 GiB software claim shared by `cxlkv replay` pods on the two
#    nodes is composed once; each container's CDI env names its node's write
#    partition (replica 0 runs on fake-node-1: the partition is the host's, not
#    the replica's); the workers open the region from that env alone and see
#    each other's stores, no wrong byte;
#  - two writers: a second writer on one node is refused by the node's
#    partition lock (CXL_PARTITION_LOCK) before it attaches; the first stays;
#  - hardware: a claim of the hardware class is never allocated the blade;
#  - cleanup: regions freed, CDI specs and partition locks removed.
# Run by test/e2e/dra-noncoherent.sh (the dra stage's background); alone:
# `bats test/e2e/dra-noncoherent.bats` as root after the dra stage built
# build/. Warm on 2 cores: about 45 s (the control plane's start about 15 s).
# bats file_tags=dra,noncoherent

load lib/dra
load lib/dra-own-world

setup_file() {
  own_world_root
  FK=${FK:-$("$ROOT/test/e2e/fakekubelet/build.sh")} || return 1
  own_world_begin dra-noncoherent
  own_world_cluster 2 || return 1
  NODES=(fake-node-0 fake-node-1)
  dra_fabric_up 5000 "${NODES[@]}" || { echo "fabricd did not start"; return 1; }
  HOSTD_ARGS=(--coherence software --software-hosts fake-node-0,fake-node-1)
  for n in "${NODES[@]}"; do dra_node_up "$n" 1s --http-listen ""; done
  start controller "$BIN/cxlkv-dra-controller" --kubeconfig "$KUBECONFIG" --fabric "$F" \
    --identity noncoherent --coherence software --resync-period 2 --lease-duration 6
  own_world_keep
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
}
teardown_file() { own_world_down; }

# claim_with_pods <claim> <class> <size> [<pod> <node> <cmd>]...: a claim of
# that class and pods that share it, applied as one List (<cmd> is one string,
# run by sh -c, so a pod's command can name its own environment).
claim_with_pods() {
  local claim=$1 cls=$2 size=$3
  shift 3
  jq -n --arg claim "$claim" --arg cls "$cls" --arg size "$size" '
    [$ARGS.positional | range(0; length; 3) as $i | .[$i:$i + 3]] as $pods |
    {apiVersion: "v1", kind: "List", items: ([
      {apiVersion: "resource.k8s.io/v1", kind: "ResourceClaim",
       metadata: {name: $claim, namespace: "default"},
       spec: {devices: {requests: [{name: "kv", exactly: {deviceClassName: $cls,
         capacity: {requests: {memory: $size}}}}]}}}] +
      [$pods[] | {apiVersion: "v1", kind: "Pod", metadata: {name: .[0], namespace: "default"},
        spec: {nodeSelector: {"kubernetes.io/hostname": .[1]}, restartPolicy: "Never",
               resourceClaims: [{name: "kv", resourceClaimName: $claim}],
               containers: [{name: "main", image: "none", command: ["sh", "-c", .[2]],
                             resources: {claims: [{name: "kv"}]}}]}}])}' --args "$@" |
    kubectl apply -f - >/dev/null
}
# composed_region <claim>: the region the controller logged composing for it.
composed_region() {
  grep -m1 "claim default/$1: composed region" "$E/logs/controller.log" |
    awk '{for (i = 1; i < NF; i++) if ($i == "region") { print $(i + 1); exit }}'
}
# A replay worker: replica <index> of 2 with the control file <ctl>.
worker_cmd() {  # worker_cmd <replica index> <control file>
  echo "exec $BIN/cxlkv replay --trace $ROOT/data/traces/mooncake-conversation-trace.jsonl" \
    "--limit 400 --block-tokens 16 --kv-bytes-per-token 64 --replica-index $1 --replica-count 2" \
    "--control $2 --json --quiet"
}
# The replay pod of the shared scenario: its env noted first, then the worker.
replay_cmd() {  # replay_cmd <pod> <replica index>
  echo "env | grep -E '^CXL_(COHERENCE|SOFTWARE_PARTITIONS?)=' >$E/$1.env; $(worker_cmd "$2" "$E/replay-nc.ctl")"
}

# bats test_tags=slice
@test "slice: the blade device carries the attribute coherence=software" {
  wait_until 30 kubectl get resourceslice "$DRA_SLICE" || fail "no ResourceSlice"
  assert_eq "$(slice_json | jq -c '.spec.devices[0].attributes.coherence')" '{"string":"software"}' \
    "the device's coherence attribute"
}

# Replica 0 on fake-node-1 (partition 1), replica 1 on fake-node-0 (partition 0).
# bats test_tags=shared
@test "shared: both replay pods of a software-coherence claim run to completion" {
  claim_with_pods nc cxlkv.dev-software 1Gi nc-0 fake-node-1 "$(replay_cmd nc-0 0)" \
    nc-1 fake-node-0 "$(replay_cmd nc-1 1)"
  wait_until 120 succeeded nc-0 && wait_until 60 succeeded nc-1 ||
    fail "replay pods: $(phase nc-0) / $(phase nc-1)"
}

# bats test_tags=shared
@test "shared: the claim is composed once for both pods" {
  assert_eq "$(grep -c "claim default/nc: composed region" "$E/logs/controller.log")" 1 "composes of claim nc"
  MEM=$(composed_region nc)
  dra_keep MEM
  note "region $MEM"
}

# What each container got from its node's CDI spec (the spec itself is gone by
# now: the pods finished, so kubelet unprepared the claim).
# bats test_tags=shared
@test "shared: each container's CDI env: CXL_COHERENCE=software, CXL_SOFTWARE_PARTITIONS=2, its node's CXL_SOFTWARE_PARTITION" {
  local p
  for p in nc-0:1 nc-1:0; do
    assert_eq "$(sort "$E/${p%:*}.env" 2>/dev/null | xargs)" \
      "CXL_COHERENCE=software CXL_SOFTWARE_PARTITION=${p#*:} CXL_SOFTWARE_PARTITIONS=2" "${p%:*}'s CDI env"
  done
}

# bats test_tags=shared
@test "shared: the workers attach in coherence=software from the CDI env, each as its node's partition; cross-replica hits, 0 wrong bytes" {
  local a=$E/fake-node-1/logs/default_nc-0_main.log b=$E/fake-node-0/logs/default_nc-1_main.log
  jq -e '.coherence == "software" and .software_partition == 1 and .errors == 0 and .wrong_data == 0' "$a" ||
    fail "nc-0: $(head -c 400 "$a")"
  jq -e '.coherence == "software" and .software_partition == 0 and .errors == 0 and .wrong_data == 0' "$b" ||
    fail "nc-1: $(head -c 400 "$b")"
  assert_eq "$(jq -s 'map(.cross_replica_hits) | add > 0' "$a" "$b")" true "cross-replica hits"
  note "cross-replica hits: nc-0 $(jq .cross_replica_hits "$a"), nc-1 $(jq .cross_replica_hits "$b")"
}

# w-0 attaches as fake-node-0's partition and waits (its replica 1 never
# starts); w-1, on the same node with the same claim, is a second writer of
# that partition: the node's partition lock (CXL_PARTITION_LOCK) refuses it
# before it attaches, where it would have taken the partition over and fenced w-0.
holders() {  # participants of claim two's region as fake-node-0 maps it
  "$BIN/cxlkv" inspect --region "$E/fake-node-0/dev/$MEM2" --json 2>/dev/null | jq '.participants | length'
}
attached() { [ "$(holders)" = 1 ]; }
# bats test_tags=two-writers
@test "two writers: a second writer on the node is refused by the partition lock; the first stays attached" {
  local wlog=$E/fake-node-0/logs/default_w-1_main.log
  claim_with_pods two cxlkv.dev-software 1Gi w-0 fake-node-0 "$(worker_cmd 0 "$E/w0.ctl")"
  wait_until 90 running w-0 || fail "w-0: $(phase w-0)"
  MEM2=$(composed_region two)
  dra_keep MEM2
  wait_until 30 attached || fail "w-0 never attached: region '$MEM2', holders '$(holders)'"
  claim_with_pods two cxlkv.dev-software 1Gi w-1 fake-node-0 "$(worker_cmd 0 "$E/w1.ctl")"
  failed_pod() { [ "$(phase w-1)" = Failed ]; }
  wait_until 90 failed_pod || fail "w-1: $(phase w-1), $(tail -n 2 "$wlog" 2>/dev/null)"
  grep -q "another process on this node already writes as its write partition" "$wlog" ||
    fail "w-1's log: $(tail -n 2 "$wlog")"
  running w-0 || fail "after the refusal: w-0 $(phase w-0)"
  assert_eq "$(holders)" 1 "holders of region $MEM2 after the refusal"
  note "$(grep -m1 -o 'another process on this node[^(]*' "$wlog")"
  kubectl delete pod w-0 w-1 --wait=false >/dev/null 2>&1
}

# bats test_tags=hardware
@test "hardware: a claim of the hardware class is never allocated the software blade: its pod unschedulable" {
  local why
  claim_with_pods hw cxlkv.dev-hardware 1Gi hw-0 fake-node-0 "true"
  wait_until 60 unschedulable hw-0 ||
    fail "hw-0: $(phase hw-0), $(kubectl get pod hw-0 -o jsonpath='{.status.conditions}')"
  why=$(kubectl get pod hw-0 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
  [[ "$why" == *"cannot allocate all claims"* ]] || fail "hw-0's reason: $why"
  assert_eq "$(kubectl get resourceclaim hw -o jsonpath='{.status.allocation}')" "" "hw's allocation"
  ! grep -q "claim default/hw: composed" "$E/logs/controller.log" || fail "the controller composed for hw"
  note "pending: $why"
}

# bats test_tags=cleanup
@test "cleanup: claims deleted: regions freed at the fabric manager, CDI specs and partition locks removed" {
  local left
  delete_pods nc-0 nc-1 hw-0 w-0 w-1 || fail "pods not deleted: $(kubectl get pods -o name)"
  delete_claims nc hw two || fail "claims stuck: $(kubectl get resourceclaims -o name)"
  wait_until 20 no_regions || fail "$(regions) regions left on the blade"
  left=$(find "$E"/fake-node-*/cdi -name "${MEM:-none}.*" -o -name "${MEM2:-none}.*" | wc -l)
  assert_eq "$left" 0 "CDI specs and partition locks left"
}
