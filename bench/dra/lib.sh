# What the DRA benches (dra-bench.sh, dra-tenants-bench.sh) share. Each sources
# it first thing: ROOT (the checkout, made the working directory) with
# scripts/lib/stage.sh and test/e2e/lib/dra-env.sh sourced, BIN, CLUSTER, PIDS
# (the bench's background processes; dra-env.sh's start adds to it) and E (its
# scratch directory, set by bench_world_up). Sourced, not run.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=scripts/lib/stage.sh
source "$ROOT/scripts/lib/stage.sh"
cd "$ROOT" || exit 1
BIN=$ROOT/build/bin
CLUSTER=$ROOT/test/e2e/cluster.sh
PIDS=()
E=""
# shellcheck source=test/e2e/lib/dra-env.sh
source "$ROOT/test/e2e/lib/dra-env.sh"

# bench_args <bench> <usage> <--flag=VAR>... -- <arguments...>: sets each VAR
# from "--flag value" among the arguments; any other argument, or a flag
# without its value, ends the bench with status 2 and the usage.
bench_args() {
  local bench=$1 usage=$2 v
  local -A var=()
  shift 2
  while [ "$1" != -- ]; do var[${1%%=*}]=${1#*=}; shift; done
  shift
  while [ $# -gt 0 ]; do
    v=""; [ -n "$1" ] && v=${var[$1]:-}
    [ -n "$v" ] || { echo "$bench: unknown argument $1 ($usage)" >&2; exit 2; }
    [ $# -ge 2 ] || { echo "$bench: $1 needs a value ($usage)" >&2; exit 2; }
    printf -v "$v" '%s' "$2"
    shift 2
  done
}

# bench_finish: the EXIT trap from bench_world_up on: stops the bench's
# processes, takes the control plane down, removes the scratch directory and
# the blade's backing files.
bench_finish() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "${CXLKV_E2E_DIR:-}" ] && { bash "$CLUSTER" down >/dev/null 2>&1 || true; }
  [ -n "$E" ] && rm -rf "$E" /dev/shm/"$(basename "$E")"
}

# bench_world_up <bench> <prepare retry> <node>...: the world both benches run
# in (their headers say what it holds): builds the driver, fabricd and hostd in
# build/ and the fake kubelet (FK), makes the scratch directory E
# (/tmp/cxlkv-<bench>.XXXXXX, with logs/) and the backing directory BACKING,
# starts the control plane with the nodes (NODES), fabricd with one blade
# cabled to them (F, HPORT), each node's hostd, plugin and fake kubelet
# (prepare retried every <prepare retry>), and the DeviceClass. Ends the bench
# (status 1) when a piece does not build or start.
bench_world_up() {
  local bench=$1 retry=$2 n
  shift 2
  trap bench_finish EXIT
  cxlkv_build_main cxlkv-dra-kubeletplugin cxlkv-dra-controller cxlkv-fabricd cxlkv-hostd >/dev/null ||
    exit 1
  FK=$(test/e2e/fakekubelet/build.sh) || exit 1
  E=$(mktemp -d "/tmp/cxlkv-$bench.XXXXXX")
  mkdir -p "$E/logs"
  BACKING=/dev/shm/$(basename "$E")
  NODES=("$@")
  dra_cluster_up "${#NODES[@]}" || exit 1
  dra_fabric_up 5000 "${NODES[@]}" || { echo "$bench: fabricd did not start"; exit 1; }
  for n in "${NODES[@]}"; do dra_node_up "$n" "$retry"; done
  dra_deviceclass
}

# slice_flow <1|0>: the blade's ResourceSlice carries binding conditions (1)
# or none (0), as the controller publishes it for its --flow.
slice_flow() {
  [ "$(kubectl get resourceslice cxlkv.dev-cma-0-blade-0 -o json 2>/dev/null |
    python3 -c 'import json,sys; print(int("bindingConditions" in json.load(sys.stdin)["spec"]["devices"][0]))')" = "$1" ]
}
