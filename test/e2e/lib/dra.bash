# The DRA end-to-end tests' shared set-up, helpers and failure hook.
#
# Every test/e2e/dra-*.bats file loads it (`load lib/dra`);
# scripts/test.d/55-dra.sh sources it to start the one control plane that
# its files share. Shell starts the processes (test/e2e/cluster.sh and
# lib/dra-env.sh underneath); the checks are the files' @test cases.
#
# The world the files run in (dra_world_up): the test control plane with
# fake-node-0..2 (test/e2e/cluster.sh), cxlkv-fabricd with one 8 GiB blade
# cabled to the three nodes, per node cxlkv-hostd (resync every 10 s),
# cxlkv-dra-kubeletplugin (health polled every 1 s, /healthz and /metrics on
# MPORT[node]) and the fake kubelet (kubelet's plugin and DRA managers,
# prepare retried every 1 s), two racing cxlkv-dra-controller replicas
# (ctl-0 and ctl-1), and the DeviceClass cxlkv.dev. Its facts (E, F, the
# ports, KUBECONFIG, ...) are in the file $DRA_STATE, which every test
# sources first (dra_setup): a @test runs in a process of its own, so a step
# that learns something a later step needs writes it there (dra_keep).
#
# A file run alone (`bats test/e2e/dra-node.bats`, as root, after one
# `scripts/test.sh --stage dra` has built build/) brings its own world up in
# setup_file and down in teardown_file; run by scripts/test.d/55-dra.sh it
# finds DRA_STATE set and joins the stage's world. A file that changes the
# world (a plugin restarted with other flags, other controllers) says so in
# its header and sets what it needs in its own setup_file.
#
# The failure hook (teardown): when a test did not complete, dra_dump_state
# prints the cluster state: pods and claims in every namespace,
# ResourceSlices, the last Events of every namespace, `kubectl describe` of
# every pod neither Running nor Succeeded, the regions at the fabric manager,
# and the tails of the driver, hostd and kubelet logs written during the test.

DRA_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=${ROOT:-$(cd "$DRA_LIB/../../.." && pwd)}
# shellcheck source=test/e2e/lib/common.bash
source "$DRA_LIB/common.bash"
# shellcheck source=test/e2e/lib/dra-env.sh
source "$DRA_LIB/dra-env.sh"
DRA_NODES=(fake-node-0 fake-node-1 fake-node-2)
# The blade's slice, its pool and its device, as the controller publishes them.
DRA_SLICE=cxlkv.dev-cma-0-blade-0
DRA_MEMORY_URL_PATH=/cfm/v1/appliances/cma-0/blades/blade-0/memory

# ---- assertions (fail, note, dead, gone: lib/common.bash) ------------------

# assert_eq <actual> <expected> <what>
assert_eq() {
  [ "$1" = "$2" ] || fail "$3: got '$1', want '$2'"
}

# ---- state shared by a file's steps -----------------------------------------

# dra_keep <var>...: records the variables' values for the later tests.
dra_keep() { state_keep "$DRA_STATE" "$@"; }
# dra_keep_mport <node> <port>: the node's plugin now serves /metrics on <port>.
dra_keep_mport() {
  MPORT[$1]=$2
  printf 'MPORT[%s]=%q\n' "$1" "$2" >>"$DRA_STATE"
}
# dra_need <var>...: skips the test, naming the step to run first, when an
# earlier step of its scenario did not record the variable (it failed, or the
# test was selected alone).
dra_need() {
  state_need " of this scenario (run the scenario: --filter '${BATS_TEST_DESCRIPTION%%:*}:')" "$@"
}

# The tests run under `set -e`, and an assignment fails with its command
# substitution: helpers that count or read something print what they found
# (nothing, or 0) and succeed; the test's assertion then says what is wrong.

# ---- the world ---------------------------------------------------------------

# dra_world_up: starts the world described above and writes $E/state.env
# (exported as DRA_STATE). Needs build/bin and FK (built when unset).
dra_world_up() {
  local n b
  for b in cxlkv-dra-kubeletplugin cxlkv-dra-controller cxlkv-fabricd cxlkv-hostd cxlkv; do
    [ -x "$BIN/$b" ] ||
      { echo "no $BIN/$b: build it first (scripts/test.sh --stage dra builds build/)"; return 1; }
  done
  FK=${FK:-$("$ROOT/test/e2e/fakekubelet/build.sh")} || { echo "the fake kubelet did not build"; return 1; }
  E=$(mktemp -d /tmp/cxlkv-dra.XXXXXX)
  BACKING=/dev/shm/$(basename "$E")
  mkdir -p "$E/logs" "$E/pids" "$BACKING"
  PIDS=()
  DRA_STATE=$E/state.env
  export E DRA_STATE
  CXLKV_E2E_DIR=$E/cluster; export CXLKV_E2E_DIR
  # fd 3 closed: bats reads its TAP stream there, and a daemon that kept it
  # open would hold the run until it exits.
  CXLKV_E2E_NODES=3 bash "$CLUSTER" up >"$E/logs/cluster.log" 2>&1 3>&- ||
    { cat "$E/logs/cluster.log"; return 1; }
  bash "$CLUSTER" env >"$DRA_STATE" || return 1
  eval "$(cat "$DRA_STATE")"
  KCFG=$KUBECONFIG
  FPORT=$(free_port); F=http://127.0.0.1:$FPORT
  CMP=$(free_port)
  declare -gA HPORT MPORT
  for n in "${DRA_NODES[@]}"; do HPORT[$n]=$(free_port); MPORT[$n]=$(free_port); done
  {
    printf 'export %s=%q\n' ROOT "$ROOT" E "$E" BACKING "$BACKING" DRA_STATE "$DRA_STATE"
    printf '%s=%q\n' BIN "$BIN" FK "$FK" KCFG "$KCFG" F "$F" FPORT "$FPORT" CMP "$CMP"
    declare -p HPORT MPORT | sed 's/^declare -A /declare -gA /'
  } >>"$DRA_STATE"
  fabricd_config 5000 "${DRA_NODES[@]}" >"$E/fabricd.yaml"
  fabricd_start
  wait_until 20 curl -sf "$F/cfm/v1/appliances" || { echo "fabricd did not start"; return 1; }
  for n in "${DRA_NODES[@]}"; do
    mkdir -p "$E/$n/cdi" "$E/$n/dev" "$E/$n/ctr" "$E/$n/logs"
    cat /proc/sys/kernel/random/boot_id >"$E/$n/boot_id"
    hostd_start "$n"
    plugin_start "$n"
    kubelet_start "$n"
  done
  racing_controllers_start
  for n in "${DRA_NODES[@]}"; do
    # The plugin's own line once kubelet's plugin manager registered it
    # (kubelet logs "Registered DRA plugin" only at -v=3).
    wait_until 30 grep -q "kubelet registered driver" "$E/logs/plugin-$n.log" || true
  done
  dra_deviceclass
}

# dra_world_down: stops every process the world's tests started (their pid
# files in $E/pids), the control plane, and removes the scratch state.
dra_world_down() {
  local f p
  for f in "$E"/pids/*; do [ -e "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
  for f in "$E"/pids/*; do
    [ -e "$f" ] || continue
    p=$(cat "$f"); wait "$p" 2>/dev/null; wait_until 15 dead "$p"
  done
  bash "$CLUSTER" down >/dev/null 2>&1
  rm -rf "$E" "$BACKING" "$BACKING-local"
}

# ---- the bats hooks --------------------------------------------------------

# setup_file: root (the fake kubelet's mount namespaces), then the stage's
# world or one of the file's own.
dra_setup_file() {
  if [ "$(id -u)" != 0 ] || ! unshare --mount true 2>/dev/null; then
    skip "the fake kubelet needs root with mount namespaces"
  fi
  if [ -n "${DRA_STATE:-}" ] && [ -f "$DRA_STATE" ]; then
    export DRA_OWN_WORLD=0
  else
    export DRA_OWN_WORLD=1
    dra_world_up || return 1
  fi
  source "$DRA_STATE"
}
dra_teardown_file() {
  if [ "${DRA_OWN_WORLD:-0}" = 1 ] && [ -n "${E:-}" ]; then dra_world_down; fi
}
# setup: the world's facts and what earlier steps kept; the test's start
# time (the failure hook shows the logs written since).
dra_setup() {
  cd "$ROOT" || return 1
  source "$DRA_STATE"
  touch "$E/.test-start"
}
dra_teardown() {
  if [ -z "${BATS_TEST_COMPLETED:-}" ] && [ -z "${BATS_TEST_SKIPPED:-}" ]; then
    dra_dump_state || true
  fi
}
setup_file() { dra_setup_file; }
teardown_file() { dra_teardown_file; }
setup() { dra_setup; }
teardown() { dra_teardown; }

# dra_dump_state: the failure hook's print-out (see the header).
dra_dump_state() (
  set +e
  echo "=== cluster state after \"${BATS_TEST_DESCRIPTION:-?}\" failed (scratch: $E)"
  dump_kube_state
  echo "--- regions at the fabric manager (id, claim)"
  region_list 2>&1
  local f logs=()
  for f in "$E"/logs/plugin-*.log "$E"/logs/controller-*.log "$E"/logs/ctl-*.log \
      "$E"/logs/hostd-*.log "$E"/logs/kubelet-*.log "$E"/logs/fabricd.log; do
    [ -e "$f" ] && ! [ "$f" -ot "$E/.test-start" ] && logs+=("$f")
  done
  for f in "${logs[@]}"; do
    echo "--- $f (last ${DRA_DUMP_LINES:-12} lines)"
    tail -n "${DRA_DUMP_LINES:-12}" "$f"
  done
  echo "=== end of the cluster state"
)

# ---- processes -------------------------------------------------------------

proc_gone() { ! kill -0 "$1" 2>/dev/null; }
# dra_pid <name>: the pid of the process start() named so.
dra_pid() { cat "$E/pids/$1" 2>/dev/null; }
# dra_stop <name>...: SIGTERM, then waits until each has exited (15 s at most).
# (The tests run under `set -e`: a process this shell did not start cannot be
# waited for, and one that exited already cannot be signalled; neither is an error.)
dra_stop() {
  local n p
  for n in "$@"; do p=$(dra_pid "$n") && kill "$p" 2>/dev/null || true; done
  for n in "$@"; do
    p=$(dra_pid "$n") || continue
    wait "$p" 2>/dev/null || true
    wait_until 15 dead "$p" || echo "$n (pid $p) still runs 15 s after SIGTERM"
    rm -f "$E/pids/$n"
  done
}
# dra_stop_controllers: every controller replica running (SIGTERM: each
# releases the Lease it may hold).
dra_stop_controllers() {
  local f names=()
  for f in "$E"/pids/controller-* "$E"/pids/ctl-*; do [ -e "$f" ] && names+=("$(basename "$f")"); done
  [ ${#names[@]} -eq 0 ] || dra_stop "${names[@]}"
}

fabricd_start() {
  start fabricd "$BIN/cxlkv-fabricd" --config "$E/fabricd.yaml" --listen "127.0.0.1:$FPORT"
}
# hostd_start <node> [log name] [resync seconds]: cxlkv-hostd of the fabric,
# resync every 10 s unless told (0: at its start only).
hostd_start() {
  local n=$1 d=$E/$1
  start "${2:-hostd-$n}" "$BIN/cxlkv-hostd" --host-id "$n" --listen "127.0.0.1:${HPORT[$n]}" --fabric "$F" \
    --cdi-dir "$d/cdi" --state-dir "$d/hostd" --dev-dir "$d/dev" --container-dir "$d/ctr" \
    --allowed-backing-dir "$BACKING" --resync-interval "${3:-10}"
}
# hostd_restart <node> [resync seconds]: the node's hostd stopped and started
# again (its log appended to) with that resync interval (default the
# world's); true once it answers. Its first resync runs before it answers.
hostd_restart() {
  dra_stop "hostd-$1"
  DRA_LOG_APPEND=1 hostd_start "$1" "hostd-$1" "${2:-10}"
  wait_until 20 curl -sf "http://127.0.0.1:${HPORT[$1]}/cxlkv/v1/regions"
}
plugin_start() {  # plugin_start <node> [name suffix] [extra flags...]: /metrics on MPORT[node]
  local n=$1 sfx=${2:-} d=$E/$1
  shift; [ $# -gt 0 ] && shift
  start "plugin-$n$sfx" "$BIN/cxlkv-dra-kubeletplugin" --node-name "$n" --kubeconfig "$KCFG" \
    --kubelet-root-dir "$d/kubelet" --state-dir "$d/dra-plugin" --cdi-dir "$d/cdi" \
    --hostd-url "http://127.0.0.1:${HPORT[$n]}" --boot-id-file "$d/boot_id" --health-interval-ms 1000 \
    --http-listen "127.0.0.1:${MPORT[$n]}" "$@"
}
# plugin_name <node>: the name (log, pid file) of the node's running plugin.
plugin_name() {
  local f
  for f in "$E"/pids/plugin-"$1" "$E"/pids/plugin-"$1"-*; do
    [ -e "$f" ] || continue
    if dead "$(cat "$f")"; then rm -f "$f"; continue; fi
    basename "$f"; return 0
  done
  return 1
}
# plugin_restart <node> [name suffix] [extra flags...]: the node's plugin,
# whichever runs, replaced by one with these flags; true once it answers /healthz.
plugin_restart() {
  local old
  while old=$(plugin_name "$1"); do dra_stop "$old"; done
  plugin_start "$@"
  wait_until 20 curl -sf "http://127.0.0.1:${MPORT[$1]}/healthz"
}
kubelet_start() {  # kubelet_start <node>: kubelet's plugin and DRA managers for one node
  local n=$1 d=$E/$1
  start "kubelet-$n" "$FK" --kubeconfig "$KCFG" --node-name "$n" --root-dir "$d/kubelet" \
    --cdi-dir "$d/cdi" --log-dir "$d/logs" --retry 1s
}
# racing_controllers_start: the world's two replicas, which race for every
# claim (the owner compare-and-set lets exactly one compose each). Log names
# controller-0, controller-1 (controller-<n>r when restarted).
racing_controllers_start() {
  local c sfx=${1:-}
  for c in 0 1; do
    start "controller-$c$sfx" "$BIN/cxlkv-dra-controller" --kubeconfig "$KCFG" --fabric "$F" \
      --identity "ctl-$c" --slice-period 5
  done
}
# ctl_start <log name> <identity> [env...]: one controller with a 2 s resync,
# a 6 s Lease and /metrics on CMP.
ctl_start() {
  local log=$1 id=$2; shift 2
  start "$log" env "$@" "$BIN/cxlkv-dra-controller" --kubeconfig "$KCFG" --fabric "$F" \
    --identity "$id" --resync-period 2 --lease-duration 6 --metrics-listen "127.0.0.1:$CMP"
}
# alive <name>: the process start() named so runs.
alive() { local p; p=$(dra_pid "$1") && ! dead "$p"; }
# ctl_ensure: the controller cases' replica ctl-fp-2 (identity ctl-fp, as
# test/e2e/dra-controller.bats restarts it after its failpoint; /metrics on
# CMP) runs. When it does not (a file or a test selected alone), every other
# replica stops and it starts.
ctl_ensure() {
  alive ctl-fp-2 && return 0
  dra_stop_controllers
  ctl_start ctl-fp-2 ctl-fp
}

# ---- Kubernetes objects ----------------------------------------------------

# claim_yaml, ns_pod_yaml: lib/dra-env.sh.
# pod_yaml <name> <claim> <node> <cmd...>: a pod (JSON) in default whose one
# container runs cmd with the claim; kubectl apply reads it.
pod_yaml() {
  local name=$1 claim=$2 node=$3 cmd
  shift 3
  # The command as a JSON array, through NUL-separated input (jq would read
  # an argument such as --trace after --args as one of its own options; the
  # last field is a sentinel, as jq 1.6 drops a trailing NUL).
  cmd=$({ printf '%s\0' "$@"; printf end; } | jq -Rsc 'split("\u0000")[:-1]')
  jq -n --arg name "$name" --arg claim "$claim" --arg node "$node" --argjson cmd "$cmd" '{
    apiVersion: "v1", kind: "Pod", metadata: {name: $name, namespace: "default"},
    spec: {nodeSelector: {"kubernetes.io/hostname": $node}, restartPolicy: "Never",
           resourceClaims: [{name: "kv", resourceClaimName: $claim}],
           containers: [{name: "main", image: "none", command: $cmd,
                         resources: {claims: [{name: "kv"}]}}]}}'
}
# claim_pod <claim> <size> <pod> <node> <cmd...>: applies both.
claim_pod() {
  local claim=$1 size=$2
  shift 2
  claim_yaml "$claim" "$size" | kubectl apply -f - >/dev/null &&
    pod_yaml "$1" "$claim" "${@:2}" | kubectl apply -f - >/dev/null
}
# replay_claim <claim> <pod prefix> <control file> <node> <node>: a 2 GiB claim
# shared by two `cxlkv replay` pods, <prefix>-0 on the first node and
# <prefix>-1 on the second (replicas 0 and 1 of 2 over the first 400
# requests of the Mooncake conversation trace, one control file), applied.
replay_claim() {
  local claim=$1 prefix=$2 ctl=$3 i
  local nodes=("$4" "$5")
  claim_yaml "$claim" 2Gi | kubectl apply -f - >/dev/null
  for i in 0 1; do
    pod_yaml "$prefix-$i" "$claim" "${nodes[$i]}" "$BIN/cxlkv" replay \
      --trace "$ROOT/data/traces/mooncake-conversation-trace.jsonl" --limit 400 --block-tokens 16 \
      --kv-bytes-per-token 64 --replica-index "$i" --replica-count 2 --control "$ctl" --json --quiet |
      kubectl apply -f - >/dev/null
  done
}
phase() { kubectl get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null || true; }
running() { [ "$(phase "$1")" = Running ]; }
succeeded() { [ "$(phase "$1")" = Succeeded ]; }
# delete_pods <pod>...: deleted, and true once every one is gone (60 s).
delete_pods() {
  local p
  kubectl delete pod "$@" --wait=false >/dev/null 2>&1 || true
  for p in "$@"; do wait_until 60 gone pod "$p" || return 1; done
}
# delete_claims <claim>...: deleted, and true once every one is gone (its finalizer dropped).
delete_claims() {
  local c
  kubectl delete resourceclaim "$@" --wait=false >/dev/null 2>&1 || true
  for c in "$@"; do wait_until 60 gone resourceclaim "$c" || return 1; done
}
# cj <claim> <jq filter> [namespace]: the filter over the claim's JSON, raw.
cj() { kubectl get resourceclaim "$1" -n "${3:-default}" -o json 2>/dev/null | jq -r "$2" 2>/dev/null; }
memory_id() { cj "$1" '.status.devices[0].data.memoryId // empty' "${2:-default}"; }
claim_uid() { cj "$1" '.metadata.uid' "${2:-default}"; }
# condition <claim> <type>: that device condition's status on the claim ("" when none).
condition() {
  cj "$1" "[.status.devices[]?.conditions[]? | select(.type == \"$2\") | .status][0] // empty"
}
composed_true() { [ "$(condition "$1" cxlkv.dev/composed)" = True ]; }
unschedulable() {
  [ "$(kubectl get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}')" = Unschedulable ]
}
# events_for <name> [namespace]: "reason note" of the Events regarding that object.
events_for() {
  kubectl get events.events.k8s.io -n "${2:-default}" -o json |
    jq -r --arg n "$1" '.items[] | select(.regarding.name == $n) | "\(.reason) \(.note // "")"'
}
# Counting, not grep -q: under pipefail an early grep exit fails the writer.
has_event() { [ "$(events_for "$1" "${3:-default}" | grep -c "^$2")" -gt 0 ]; }
slice_json() { kubectl get resourceslice "$DRA_SLICE" -o json; }
capacity() { slice_json | jq -r '.spec.devices[0].capacity.memory.value'; }
tainted() {
  slice_json | jq -e '[.spec.devices[0].taints[]? | select(.key == "cxlkv.dev/fabric-unreachable" and .effect == "NoSchedule")] | length > 0' >/dev/null
}

# ---- the fabric, hostd, the plugins ----------------------------------------

regions() { curl -s "$F$DRA_MEMORY_URL_PATH" | jq '.members // [] | length'; }
no_regions() { [ "$(regions)" = 0 ]; }
# region_list: "id claimUid" of every region on the blade.
region_list() {
  local u
  for u in $(curl -s "$F$DRA_MEMORY_URL_PATH" | jq -r '.members[]?.uri'); do
    curl -s "$F$u" | jq -r '"\(.id) \(.claimUid // "")"'
  done
}
has_region() { [ "$(region_list | grep -c "^$1 ")" -gt 0 ]; }
# fab_hosts <memory id>: the hosts the fabric manager maps the region to, sorted.
fab_hosts() {
  curl -s "$F$DRA_MEMORY_URL_PATH/$1" |
    jq -r '[.mappings[]? | .hostId // empty] | sort | join(" ")'
}
# hostd_has <node> <memory id>: hostd on that node lists the region.
hostd_has() {
  curl -s "http://127.0.0.1:${HPORT[$1]}/cxlkv/v1/regions" |
    jq -e --arg m "$2" 'any(.regions[]; .allocationId == $m)' >/dev/null
}
# ckpt_entries <node>: claims in the node plugin's checkpoint.
ckpt_entries() { jq '.data.claims | length' "$E/$1/dra-plugin/checkpoint.json" || true; }
# ckpt_states <node>: their states, sorted, space separated.
ckpt_states() { jq -r '[.data.claims[].state] | sort | join(" ")' "$E/$1/dra-plugin/checkpoint.json" 2>/dev/null || true; }
# health <node>: the blade device's health as kubelet's DRA manager recorded it.
health() {
  jq -r '.["cxlkv.dev"].Devices["cma-0/blade-0/blade-0"].Health' "$E/$1/kubelet/dra/dra_health_state" 2>/dev/null
}
is_health() { [ "$(health "$1")" = "$2" ]; }
# health_message <node>: the reason kubelet recorded with it ("" when healthy).
health_message() {
  jq -r '.["cxlkv.dev"].Devices["cma-0/blade-0/blade-0"].Message // ""' "$E/$1/kubelet/dra/dra_health_state" 2>/dev/null
}
# metric <node> <series>: its value on that node's plugin, 0 when absent.
metric() {
  curl -s "http://127.0.0.1:${MPORT[$1]}/metrics" | awk -v k="$2" '$1 == k {print $2; f=1} END {if (!f) print 0}'
}
# ctl_metric <exact series>: its value on the controller serving CMP.
ctl_metric() { curl -s "http://127.0.0.1:$CMP/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
# replay_ok <container log>...: each is `cxlkv replay --json`'s result with no
# error, no wrong data and cross-replica hits; prints the hits.
replay_ok() {
  local f
  for f in "$@"; do
    jq -e '.errors == 0 and .wrong_data == 0 and .cross_replica_hits > 0' "$f" >/dev/null ||
      { echo "$f: $(head -c 300 "$f" 2>/dev/null)"; return 1; }
    echo "  $(basename "$f"): $(jq .cross_replica_hits "$f") cross-replica hits"
  done
}

# ---- the release scenarios (dra-release.bats, dra-release-epoch.bats) -------

# rel_adds <claim> <node>: how often the controller ctl-rel added <node> back
# to the claim's region (its log).
rel_adds() { grep -c "claim default/$1: added host $2 to region" "$E/logs/ctl-rel.log" || true; }
# release_pair <claim> <pod prefix> <word> <var>: the scenarios' first step.
# Claim <claim> (1 GiB) with pod <prefix>-0 on fake-node-0, which writes
# <word> at the region's start and stays, and <prefix>-1 on fake-node-1,
# which checks the device and exits; the region (mapped to both nodes) is
# kept as <var> (dra_keep). Returns once <prefix>-1 has left reservedFor,
# fake-node-1 still mapped and prepared.
release_pair() {
  local claim=$1 p0=$2-0 p1=$2-1 word=$3 var=$4
  claim_pod "$claim" 1Gi "$p0" fake-node-0 \
    sh -c "printf $word | dd of=\"\$CXL_DAX_DEVICE\" conv=notrunc 2>/dev/null && echo wrote && exec sleep 600"
  pod_yaml "$p1" "$claim" fake-node-1 sh -c 'test -s "$CXL_DAX_DEVICE"' | kubectl apply -f - >/dev/null
  wait_until 90 running "$p0" || fail "$p0: $(phase "$p0")"
  wait_until 60 succeeded "$p1" || fail "$p1: $(phase "$p1")"
  wait_until 10 grep -q wrote "$E/fake-node-0/logs/default_${p0}_main.log" || fail "$p0 did not write"
  printf -v "$var" '%s' "$(memory_id "$claim")"
  dra_keep "$var"
  assert_eq "$(fab_hosts "${!var}")" "fake-node-0 fake-node-1" "hosts of region ${!var}"
  one_left() { [ "$(cj "$claim" '.status.reservedFor | length')" = 1 ]; }
  wait_until 30 one_left || fail "reservedFor: $(cj "$claim" '[.status.reservedFor[]?.name] | sort | join(" ")')"
}
