# The world and helpers of the feature-gate files (dra-gates-off.bats: both
# DRA gates off; dra-gates-capacity-off.bats: DRAConsumableCapacity off).
# Loaded after lib/dra and lib/dra-own-world.

# gates_world_up <name> <feature gates> <controller identity>: a control plane
# with those gates and 2 fake nodes, cxlkv-fabricd (one 8 GiB blade), per node
# cxlkv-hostd (resync 10 s), cxlkv-dra-kubeletplugin and the fake kubelet, one
# cxlkv-dra-controller with default flags (--flow auto, --capacity-mode auto),
# /metrics on CMP; the DeviceClass cxlkv.dev once the slice is there.
gates_world_up() {
  local n
  FK=${FK:-$("$ROOT/test/e2e/fakekubelet/build.sh")} || return 1
  own_world_begin "$1"
  CXLKV_E2E_GATES=$2 own_world_cluster 2 || { echo "the control plane did not start"; return 1; }
  dra_fabric_up 5000 fake-node-0 fake-node-1 || { echo "fabricd did not start"; return 1; }
  for n in fake-node-0 fake-node-1; do HOSTD_RESYNC=10 dra_node_up "$n" 1s --http-listen ""; done
  CMP=$(free_port)
  CLOG=$E/logs/controller.log
  start controller "$BIN/cxlkv-dra-controller" --kubeconfig "$KUBECONFIG" --fabric "$F" \
    --identity "$3" --resync-period 2 --lease-duration 6 --metrics-listen "127.0.0.1:$CMP"
  own_world_keep CMP CLOG
  wait_until 30 kubectl get resourceslice "$DRA_SLICE" || { echo "no ResourceSlice"; return 1; }
  dra_deviceclass
}

# annotated_claim_pod <name> <MiB> <node> <cmd...>: a claim sized by the
# annotation cxlkv.dev/capacity-mib (no capacity request) and its pod.
annotated_claim_pod() {
  local name=$1 mib=$2
  shift 2
  kubectl apply -f - >/dev/null <<YAML
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: $name
  namespace: default
  annotations: {cxlkv.dev/capacity-mib: "$mib"}
spec:
  devices:
    requests: [{name: kv, exactly: {deviceClassName: cxlkv.dev}}]
YAML
  pod_yaml "$name" "$name" "$@" | kubectl apply -f - >/dev/null
}
# slow_next_compose: the fabric manager takes 5 s over the next compose.
slow_next_compose() {
  curl -s -X PUT "$F/cxlkv/v1/faults" -d '{"rules": [{"method": "POST",
    "path": "/cfm/v1/appliances/cma-0/blades/blade-0/memory", "delayMs": 5000, "count": 1}]}' >/dev/null
}
bound() { [ -n "$(kubectl get pod "$1" -o jsonpath='{.spec.nodeName}' 2>/dev/null)" ]; }
allocated() { [ -n "$(cj "$1" '.status.allocation.allocationTimestamp // empty')" ]; }
cap_is() { [ "$(capacity)" = "$1" ]; }
# our_regions: the regions on the blade that claims of ours composed.
our_regions() { region_list | grep -c " cxlkv.dev/"; }

# full_only: skips a soak-length step unless CXLKV_FULL=1 (scripts/test.sh --full).
full_only() {
  [ "${CXLKV_FULL:-0}" = 1 ] || skip "soak-length: runs with scripts/test.sh --full (CXLKV_FULL=1)"
}

# The last-capacity race, in steps: a foreign 2 GiB region (FOREIGN) leaves
# 6 GiB; two 4 GiB claims race for it (WINNER runs, LOSER's compose fails);
# race_end deletes what is left and the foreign region and wants no region left.
race_foreign_region() {
  FOREIGN=$(curl -s -X POST "$F$DRA_MEMORY_URL_PATH" \
    -d '{"memorySizeMiB": 2048, "QoS": 4, "claimUid": "someone-else"}' | jq -r .id)
  dra_keep FOREIGN
  wait_until 20 cap_is $((6 << 30)) || fail "capacity $(capacity), want $((6 << 30))"
}
race_start() {  # race_start <claim a> <claim b>: 4 GiB each, on fake-node-0 and fake-node-1
  local a=$1 b=$2
  annotated_claim_pod "$a" 4096 fake-node-0 sh -c 'test -s "$CXL_DAX_DEVICE" && exec sleep 600'
  annotated_claim_pod "$b" 4096 fake-node-1 sh -c 'test -s "$CXL_DAX_DEVICE" && exec sleep 600'
  failed_event() { has_event "$a" ComposeFailed || has_event "$b" ComposeFailed; }
  either_running() { running "$a" || running "$b"; }
  wait_until 60 failed_event && wait_until 60 either_running ||
    fail "race: $(phase "$a")/$(phase "$b"), Events: $(events_for "$a" | head -2) / $(events_for "$b" | head -2)"
  WINNER=$a; LOSER=$b
  running "$a" || { WINNER=$b; LOSER=$a; }
  dra_keep WINNER LOSER
}
race_end() {  # race_end <claim>...: the race's claims (whatever is left of them) and the foreign region gone
  delete_pods "$@" && delete_claims "$@" || fail "the race's pods or claims not deleted"
  [ -n "${FOREIGN:-}" ] && curl -s -X DELETE "$F$DRA_MEMORY_URL_PATH/$FOREIGN" >/dev/null
  wait_until 20 no_regions || fail "$(regions) regions left"
}
