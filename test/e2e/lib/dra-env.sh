# Helpers shared by the DRA e2e tests and benches (test/e2e/lib/dra.bash and
# lib/dra-own-world.bash, which the dra-*.bats files load; bench/dra/dra-bench.sh,
# bench/dra/dra-tenants-bench.sh). Sourced, not run. Expects the caller to have set E (the
# run's scratch dir, with E/logs) and the array PIDS (what the caller's trap stops). Uses ROOT
# (the checkout); BIN and CLUSTER default from it.
BIN=${BIN:-$ROOT/build/bin}
CLUSTER=${CLUSTER:-$ROOT/test/e2e/cluster.sh}

# free_port (a free TCP port on 127.0.0.1) and the other world-free helpers.
# shellcheck source=test/e2e/lib/common.bash
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# start <name> <cmd...>: a background process logged to $E/logs/<name>.log, its pid in PIDS,
# in PID_<name> and, when the directory $E/pids exists (the bats tests', test/e2e/lib/dra.bash),
# in the file $E/pids/<name>. DRA_LOG_APPEND=1 appends (a restart under one name keeps the old
# log). Every descriptor above stderr is closed in it: bats reads its TAP stream and its own
# output through pipes there, and a daemon that kept one open would hold the run until it exits.
start() {
  local name=$1; shift
  if [ "${DRA_LOG_APPEND:-0}" = 1 ]; then start_closed "$@" >>"$E/logs/$name.log" 2>&1 &
  else start_closed "$@" >"$E/logs/$name.log" 2>&1 &
  fi
  PIDS+=($!)
  eval "PID_${name//-/_}=$!"
  if [ -d "$E/pids" ]; then echo $! >"$E/pids/$name"; fi
}

# start_closed <cmd...>: execs cmd with only stdin, stdout and stderr open (start's child).
start_closed() {
  local fd
  for fd in /proc/$BASHPID/fd/*; do
    fd=${fd##*/}
    [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-" 2>/dev/null
  done
  exec "$@"
}

# wait_until <seconds> <cmd...>: true once cmd succeeds, false after the deadline.
wait_until() {
  local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do [ $SECONDS -ge $end ] && return 1; sleep 0.3; done
}

# fabricd_config <agent timeout ms> <node[@host:port]...>: the emulator's config on stdout:
# one appliance, one blade of 8 GiB (4 channels x 8 blocks of 256 MiB) with one port cabled
# to each node, whose hostd listens on host:port, by default 127.0.0.1:${HPORT[node]} (the
# caller's associative array; the chart's worlds give each node's pod address instead). Uses
# $E and $BACKING. FABRICD_BLADES=N (default 1) gives blade-0 .. blade-(N-1), alike.
fabricd_config() {
  local timeout=$1; shift
  local i n b a
  cat <<YAML
stateDir: $E/fabricd
backingDir: $BACKING
agentTimeoutMs: $timeout
appliances:
  - id: cma-0
    blades:
YAML
  for b in $(seq 0 $((${FABRICD_BLADES:-1} - 1))); do
    printf '      - id: blade-%d\n        resourceBlockMiB: 256\n        channels: 4\n' "$b"
    printf '        blocksPerChannel: 8\n        ports:\n'
    i=0
    for n in "$@"; do
      i=$((i + 1)); printf '          - {id: P%d, host: %s, hostPort: port0}\n' "$i" "${n%%@*}"
    done
  done
  echo "hosts:"
  for n in "$@"; do
    if [ "$n" != "${n#*@}" ]; then a=${n#*@}; n=${n%%@*}; else a=127.0.0.1:${HPORT[$n]}; fi
    printf '  - {id: %s, agent: "http://%s", localMemoryMiB: 65536}\n' "$n" "$a"
  done
}

# dra_cluster_up <nodes> [dir]: the test control plane (test/e2e/cluster.sh) with
# fake-node-0 .. fake-node-<nodes - 1>, in dir (default: a new temporary dir), exported as
# CXLKV_E2E_DIR; KUBECONFIG and the cluster's environment exported here. Its own settings
# pass through: CXLKV_E2E_GATES, CXLKV_E2E_BINDING_TIMEOUT. Output in $E/logs/cluster.log,
# printed if it fails.
dra_cluster_up() {
  CXLKV_E2E_DIR=${2:-$(mktemp -d /tmp/cxlkv-e2e.XXXXXX)}
  export CXLKV_E2E_DIR
  CXLKV_E2E_NODES=$1 bash "$CLUSTER" up >"$E/logs/cluster.log" 2>&1 ||
    { cat "$E/logs/cluster.log"; return 1; }
  eval "$(bash "$CLUSTER" env)"
}

# dra_fabric_up <agent timeout ms> <node...>: a free hostd port per node in HPORT (global),
# F = the fabric manager's URL, and cxlkv-fabricd serving fabricd_config's appliance (so
# FABRICD_BLADES applies). False if it does not answer within 20 s.
dra_fabric_up() {
  local n
  declare -gA HPORT
  for n in "${@:2}"; do HPORT[$n]=$(free_port); done
  F=http://127.0.0.1:$(free_port)
  fabricd_config "$@" >"$E/fabricd.yaml"
  start fabricd "$BIN/cxlkv-fabricd" --config "$E/fabricd.yaml" --listen "${F#http://}"
  wait_until 20 curl -sf "$F/cfm/v1/appliances"
}

# dra_node_up <node> <kubelet retry> [plugin flags...]: on one fake node, cxlkv-hostd
# (resync every ${HOSTD_RESYNC:-5} s), cxlkv-dra-kubeletplugin (the flags added) and the
# fake kubelet (FK: kubelet's plugin and DRA managers; prepare retried every <retry>), their
# state under $E/<node>, the host's boot id in $E/<node>/boot_id. Uses F, HPORT, BACKING;
# the array HOSTD_ARGS, if set, adds flags to hostd (e.g. --coherence software ...).
dra_node_up() {
  local n=$1 retry=$2 d=$E/$1
  shift 2
  mkdir -p "$d/cdi" "$d/dev" "$d/ctr" "$d/logs"
  cat /proc/sys/kernel/random/boot_id >"$d/boot_id"
  start "hostd-$n" "$BIN/cxlkv-hostd" --host-id "$n" --listen "127.0.0.1:${HPORT[$n]}" --fabric "$F" \
    --cdi-dir "$d/cdi" --state-dir "$d/hostd" --dev-dir "$d/dev" --container-dir "$d/ctr" \
    --allowed-backing-dir "$BACKING" --resync-interval "${HOSTD_RESYNC:-5}" ${HOSTD_ARGS[@]+"${HOSTD_ARGS[@]}"}
  start "plugin-$n" "$BIN/cxlkv-dra-kubeletplugin" --node-name "$n" --kubeconfig "$KUBECONFIG" \
    --kubelet-root-dir "$d/kubelet" --state-dir "$d/dra-plugin" --cdi-dir "$d/cdi" \
    --hostd-url "http://127.0.0.1:${HPORT[$n]}" --boot-id-file "$d/boot_id" "$@"
  start "kubelet-$n" "$FK" --kubeconfig "$KUBECONFIG" --node-name "$n" --root-dir "$d/kubelet" \
    --cdi-dir "$d/cdi" --log-dir "$d/logs" --retry "$retry"
}

# dra_deviceclass: the DeviceClass cxlkv.dev (every device of the driver).
dra_deviceclass() {
  kubectl apply -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: cxlkv.dev}
spec:
  selectors: [{cel: {expression: 'device.driver == "cxlkv.dev"'}}]
YAML
}

# claim_yaml <name> <size> [namespace] [device class]: a ResourceClaim (YAML)
# for <size> of the class's consumable capacity (default: in default, of
# cxlkv.dev).
claim_yaml() {
  cat <<YAML
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: $1, namespace: ${3:-default}}
spec:
  devices:
    requests:
      - name: kv
        exactly: {deviceClassName: ${4:-cxlkv.dev}, capacity: {requests: {memory: $2}}}
YAML
}

# tenant_claim <name> <memory>: applies a claim of the chart's DeviceClass
# (cxl-shared-memory) in the tenants' namespace team-a: the chart's worlds
# (chartpods.bats, realnodes/realnodes.bats).
tenant_claim() { claim_yaml "$1" "$2" team-a cxl-shared-memory | kubectl apply -f - >/dev/null; }

# ns_pod_yaml <namespace> <name> <claim> <node> [shell command]: a pod (YAML)
# on <node> holding <claim>, whose one container runs the command (default:
# checks the region's device and holds it).
ns_pod_yaml() {
  local cmd=${5:-'test -s "$CXL_DAX_DEVICE" && exec sleep 600'}
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $2, namespace: $1}
spec:
  nodeSelector: {kubernetes.io/hostname: $4}
  restartPolicy: Never
  resourceClaims: [{name: kv, resourceClaimName: $3}]
  containers:
    - name: main
      image: none
      command: [sh, -c, '$cmd']
      resources: {claims: [{name: kv}]}
YAML
}
