# Real nodes for test/e2e/cluster.sh (sourced by it; CXLKV_E2E_REAL_NODES=N):
# N kubelets named node-0 .. node-<N-1>, each with its own containerd 2.x,
# joined to the test control plane. One machine, so each node is:
#
#   - a mount namespace (a holder process: `unshare --mount`) in which the
#     host paths a node's pods share with it are bind mounts of the node's
#     own directories under $DIR/nodes/<node>/mnt: /var/lib/kubelet,
#     /run/cdi (/var/run/cdi), /run/containerd, /var/lib/cxlkv-dra,
#     /var/lib/cxlkv-hostd, /run/cxlkv, /var/log/pods, /var/log/containers,
#     /etc/cni/net.d. kubelet and containerd run inside it (nsenter), so a
#     DaemonSet's hostPath /var/lib/kubelet/plugins_registry is that node's
#     and the runtime reads that node's CDI specs. Everything else (/dev/shm,
#     where the fabric emulator's blades live; the clone) is the machine's.
#   - an address of its own on the loopback interface of the test's network
#     namespace (10.201.0.<i+1>/32: kubelet refuses a 127/8 node IP), so two
#     hostNetwork hostd pods bind one port on two addresses.
#   - a pod network of its own: a bridge cxlkv-br<i> with host-local
#     addresses 10.200.<i>.0/24 (Debian's CNI plugins), gateway on the bridge.
#   - a cgroup root of its own (kubelet's cgroupRoot, cgroupfs driver, the
#     machine's cgroup v1 hierarchies) under this shell's own memory cgroup,
#     so the node's containers are counted where the test is.
#
# Pods reach the apiserver as in-cluster clients do: the kubernetes Service's
# ClusterIP 10.0.0.1 is an address of the test namespace's loopback and the
# apiserver listens on all of that namespace's addresses, port 443 (no
# kube-proxy: nothing else needs a Service). All addresses are inside the
# network namespace the caller made (cluster.sh refuses to start real nodes
# in the machine's own).
#
# kubelet on cgroup v1: Kubernetes 1.35+ defaults failCgroupV1 to true (the
# kubelet exits at start on a v1 host); 1.37 still has the v1 code and the
# option, so each node's KubeletConfiguration sets failCgroupV1: false
# (this machine kind has v1 only: one mount per controller, no cgroup2 root).
#
# The kubelet, at start, sets the sysctls it wants (vm.overcommit_memory=1,
# kernel.panic=10, kernel.panic_on_oops=1 among them) on the whole machine:
# realnodes_up saves their values and realnodes_down restores them.

REALNODES_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../containerd-build.sh
source "$REALNODES_HERE/../containerd-build.sh"

REAL_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
# host path in the node's mount namespace -> its directory under mnt/
REAL_MOUNTS=(/var/lib/kubelet:kubelet /run/cdi:cdi /run/containerd:containerd-run
  /var/lib/cxlkv-dra:cxlkv-dra /var/lib/cxlkv-hostd:cxlkv-hostd /run/cxlkv:cxlkv-run
  /var/log/pods:log-pods /var/log/containers:log-containers /etc/cni/net.d:cni-conf)

real_node_ip() { echo "10.201.0.$(($1 + 1))"; }
real_node_dir() { echo "$DIR/nodes/$1"; }

# The cgroup path (the same in every v1 hierarchy) under which the nodes'
# cgroup roots go: this shell's memory cgroup.
real_cgroup_base() {
  local p; p=$(sed -n 's/^[0-9]*:memory:\(.*\)$/\1/p' /proc/self/cgroup)
  [ "$p" = / ] && p=""
  echo "$p/cxlkv-e2e-$(basename "$DIR")"
}

real_cgroup_dirs() {  # every hierarchy's directory for cgroup path $1 (runc also uses the
  local h             # hybrid layout's cgroup2 "unified" one)
  for h in /sys/fs/cgroup/*/; do
    [ -e "$h/cgroup.procs" ] || continue
    case $(stat -fc %T "$h") in cgroupfs|cgroup2fs) echo "${h%/}$1" ;; esac
  done
}

realnodes_check() {  # the machine can run real nodes; die with what is missing otherwise
  [ "$(id -u)" = 0 ] || die "real nodes need root (mount namespaces, cgroups, containers)"
  if [ "$(readlink /proc/self/ns/net)" = "$(readlink /proc/1/ns/net)" ]; then
    die "real nodes need a network namespace of their own (their addresses and bridges go there): run under 'unshare --net --fork' (scripts/test.d/56-realnodes.sh does)"
  fi
  [ "$(stat -fc %T /sys/fs/cgroup)" = tmpfs ] ||
    log "warning: /sys/fs/cgroup is not a cgroup v1 tmpfs; the nodes' cgroup roots assume v1"
  local t
  for t in runc ip nsenter unshare; do command -v "$t" >/dev/null || die "real nodes need $t (scripts/setup.sh installs it)"; done
  for t in bridge host-local loopback; do
    [ -x "/usr/lib/cni/$t" ] || die "real nodes need the CNI plugin /usr/lib/cni/$t (package containernetworking-plugins)"
  done
  [ -n "${CXLKV_E2E_IMAGES:-}" ] || die "CXLKV_E2E_IMAGES: the OCI archives to import (test/e2e/realnodes/image.sh prints them)"
}

# Certificates: one client certificate per node (system:node:<name>, group
# system:nodes: the Node authorizer and NodeRestriction admission apply).
realnodes_pki() {
  local i n
  issue "$DIR/pki" apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$DIR/pki/client.ext"
  for ((i = 0; i < REAL; i++)); do
    n=node-$i
    issue "$DIR/pki" "$n" "/O=system:nodes/CN=system:node:$n" "$DIR/pki/client.ext"
    write_kubeconfig "$n"
  done
}

realnodes_network() {
  ip link set lo up
  ip addr add 10.0.0.1/32 dev lo 2>/dev/null || true
  local i
  for ((i = 0; i < REAL; i++)); do ip addr add "$(real_node_ip "$i")/32" dev lo 2>/dev/null || true; done
}

real_node_configs() {  # <index>: the node's directories and its containerd, CNI and kubelet files
  local i=$1 n=node-$1 nd; nd=$(real_node_dir "node-$1")
  local m
  for m in "${REAL_MOUNTS[@]}"; do mkdir -p "$nd/mnt/${m#*:}" "${m%%:*}"; done
  mkdir -p "$nd/containerd/root" "$nd/containerd/state" "$nd/cni-ipam"
  cat >"$nd/containerd.toml" <<TOML
# containerd for $n (test/e2e/realnodes/nodes.sh). CDI is on by default in 2.x.
version = 3
root = "$nd/containerd/root"
state = "$nd/containerd/state"
# NRI's socket path is fixed: two daemons on one machine cannot both serve it.
disabled_plugins = ["io.containerd.nri.v1.nri"]
[grpc]
  address = "/run/containerd/containerd.sock"
[ttrpc]
  address = "/run/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$nd/containerd/opt"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "cxlkv.local/e2e/pause:1"
[plugins."io.containerd.cri.v1.runtime"]
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  netns_mounts_under_state_dir = true
  # This machine's root lacks CAP_SYS_RESOURCE: no oom_score_adj below
  # containerd's own (runc fails "failed to update /proc/self/oom_score_adj").
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = "$(command -v runc)"
      SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "/etc/cni/net.d"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
TOML
  cat >"$nd/mnt/cni-conf/10-cxlkv.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "cxlkv-$n",
  "plugins": [{
    "type": "bridge", "bridge": "cxlkv-br$i", "isGateway": true, "ipMasq": false,
    "ipam": {"type": "host-local", "dataDir": "$nd/cni-ipam",
             "ranges": [[{"subnet": "10.200.$i.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}
JSON
  local cg; cg=$(real_cgroup_base)/$n
  cat >"$nd/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine has cgroup v1 only; 1.35+ refuse it unless told (nodes.sh header).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $cg
cgroupsPerQOS: true
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: $(real_node_ip "$i")
port: 10250
readOnlyPort: 0
healthzBindAddress: $(real_node_ip "$i")
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization: {mode: Webhook}
featureGates: {$(echo "$GATES" | sed 's/=/: /g; s/,/, /g')}
failSwapOn: false
protectKernelDefaults: false
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# The machine's disk is shared: never evict or collect images for disk.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
shutdownGracePeriod: 0s
maxPods: 40
# Lowering its own score needs CAP_SYS_RESOURCE, which this machine's root lacks.
oomScoreAdj: 0
YAML
}

real_node_cgroups() {  # <node>: its cgroup root in every hierarchy, cpuset filled in
  local d root; root=$(real_cgroup_base)/$1
  # Each directory made here is listed (outermost first) for realnodes_down,
  # which removes exactly those: the base path exists in the memory
  # hierarchy only, and the others get it from us.
  local h rel part
  for h in $(real_cgroup_dirs ""); do
    d=$h
    IFS=/ read -ra part <<<"${root#/}/system"
    for rel in "${part[@]}"; do
      d=$d/$rel
      [ -d "$d" ] && continue
      mkdir "$d" && echo "$d" >>"$DIR/cgroups.made"
    done
  done
  # A new cpuset cgroup is empty: copy cpus and mems down from the first
  # ancestor that has them.
  local p f
  h=/sys/fs/cgroup/cpuset
  [ -d "$h" ] || return 0
  IFS=/ read -ra part <<<"${root#/}/system"
  p=$h
  for rel in "${part[@]}"; do
    for f in cpuset.cpus cpuset.mems; do
      [ -n "$(cat "$p/$rel/$f" 2>/dev/null)" ] || cat "$p/$f" >"$p/$rel/$f"
    done
    p=$p/$rel
  done
}

real_node_holder() {  # <node>: start the process that holds its mount namespace
  local n=$1 nd; nd=$(real_node_dir "$1")
  local binds="" m
  for m in "${REAL_MOUNTS[@]}"; do binds+="mount --bind $nd/mnt/${m#*:} ${m%%:*} && "; done
  start_proc "$n-ns" unshare --mount --propagation private -- bash -c "${binds}exec sleep infinity"
  local pid; pid=$(cat "$DIR/pids/$n-ns")
  # Up once /var/lib/kubelet inside differs from outside.
  local end=$((SECONDS + 10))
  until [ "$(stat -c %i "/proc/$pid/root/var/lib/kubelet" 2>/dev/null)" = "$(stat -c %i "$nd/mnt/kubelet")" ]; do
    [ $SECONDS -lt $end ] && alive "$n-ns" || { tail "$DIR/logs/$n-ns.log" >&2; return 1; }
    sleep 0.2
  done
}

real_in_node() {  # <node> <cmd...>: run in the node's mount namespace
  local n=$1; shift
  nsenter --mount="/proc/$(cat "$DIR/pids/$n-ns")/ns/mnt" -- "$@"
}

real_cg_join() {  # <node> <pid>: the node's system cgroup in the pids hierarchy (teardown finds it)
  local d; d=/sys/fs/cgroup/pids$(real_cgroup_base)/$1/system
  [ -d "$d" ] && echo "$2" >"$d/cgroup.procs" 2>/dev/null || true
}

real_containerd_start() {  # <node>
  local n=$1 nd bin; nd=$(real_node_dir "$1"); bin=$(cat "$DIR/containerd.path")
  start_proc "$n-containerd" nsenter --mount="/proc/$(cat "$DIR/pids/$n-ns")/ns/mnt" -- \
    env PATH="$bin:$PATH" "$bin/containerd" --config "$nd/containerd.toml"
  real_cg_join "$n" "$(cat "$DIR/pids/$n-containerd")"
  wait_for "$n-containerd" 60 env "$bin/ctr" --address "$nd/mnt/containerd-run/containerd.sock" version ||
    { tail -20 "$DIR/logs/$n-containerd.log" >&2; return 1; }
}

real_kubelet_start() {  # <node>
  local n=$1 i=${1#node-} nd bin; nd=$(real_node_dir "$1"); bin=$(cat "$DIR/bin.path")
  start_proc "$n-kubelet" nsenter --mount="/proc/$(cat "$DIR/pids/$n-ns")/ns/mnt" -- \
    "$bin/kubelet" --config="$nd/kubelet.yaml" --kubeconfig="$DIR/$n.kubeconfig" \
    --hostname-override="$n" --node-ip="$(real_node_ip "$i")" --v="${CXLKV_E2E_KUBELET_V:-2}"
  real_cg_join "$n" "$(cat "$DIR/pids/$n-kubelet")"
}

real_import_images() {  # <node>: every archive of CXLKV_E2E_IMAGES (NAME=ARCHIVE ...) into k8s.io
  local n=$1 nd bin ref tar; nd=$(real_node_dir "$1"); bin=$(cat "$DIR/containerd.path")
  for ref in $CXLKV_E2E_IMAGES; do
    tar=${ref#*=}
    "$bin/ctr" --address "$nd/mnt/containerd-run/containerd.sock" -n k8s.io images import \
      --snapshotter overlayfs "$tar" >>"$DIR/logs/$n-import.log" 2>&1 ||
      { tail "$DIR/logs/$n-import.log" >&2; return 1; }
  done
}

node_ready() {  # <node>: its Ready condition is True
  [ "$("$(cat "$DIR/bin.path")/kubectl" --kubeconfig="$DIR/admin.kubeconfig" get node "$1" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

realnodes_up() {  # after the control plane is up
  local cbin kbin i n t0=$SECONDS
  cbin=$(containerd_build "${CONTAINERD_VERSION:-$CONTAINERD_DEFAULT_VERSION}") || die "containerd build failed"
  echo "$cbin" >"$DIR/containerd.path"
  kbin=$(k8s_build_kubelet "$VERSION") || die "kubelet build failed"
  [ "$kbin" = "$(cat "$DIR/bin.path")" ] || die "kubelet built into $kbin, not $(cat "$DIR/bin.path")"
  local s
  for s in "${REAL_SYSCTLS[@]}"; do echo "$s=$(sysctl -n "$s")"; done >"$DIR/sysctls.saved"
  for ((i = 0; i < REAL; i++)); do
    n=node-$i
    real_node_configs "$i"
    real_node_cgroups "$n"
    real_node_holder "$n"
    real_containerd_start "$n"
    real_import_images "$n" || return 1
    real_kubelet_start "$n"
  done
  for ((i = 0; i < REAL; i++)); do
    wait_for "node-$i-kubelet" 180 node_ready "node-$i" ||
      { tail -30 "$DIR/logs/node-$i-kubelet.log" >&2; return 1; }
  done
  log "$REAL real nodes Ready in $((SECONDS - t0))s (kubelet $VERSION, containerd $(basename "$(dirname "$cbin")"), runc $(runc --version | sed -n '1s/runc version //p'))"
}

real_kill_cgroup() {  # <cgroup path>: SIGKILL every process under it (pids hierarchy), until none
  local d=/sys/fs/cgroup/pids$1 end=$((SECONDS + 20)) pids
  [ -d "$d" ] || return 0
  while :; do
    pids=$(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
    [ -z "$pids" ] && break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    [ $SECONDS -lt $end ] || { log "processes left in $d: $pids"; break; }
    sleep 0.2
  done
}

real_rm_cgroups() {  # the cgroups the nodes made: their kubelets' and runtimes' children first
  local d
  for d in $(real_cgroup_dirs "$(real_cgroup_base)"); do
    [ -d "$d" ] && { find "$d" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null || true; }
  done
  [ -f "$DIR/cgroups.made" ] && tac "$DIR/cgroups.made" | while read -r d; do rmdir "$d" 2>/dev/null || true; done
  return 0
}

realnodes_down() {
  [ -f "$DIR/real" ] || return 0
  local n base; base=$(real_cgroup_base)
  for n in $(ls "$DIR/nodes" 2>/dev/null); do
    stop_procs "$n-kubelet" "$n-containerd"
    # The shims and containers (they outlive containerd by design).
    real_kill_cgroup "$base/$n"
    # Mounts the runtime made live in the node's namespace and go with it.
    stop_proc "$n-ns"
  done
  real_rm_cgroups
  if [ -f "$DIR/sysctls.saved" ]; then
    local kv
    while read -r kv; do sysctl -q -w "$kv" >/dev/null 2>&1 || log "could not restore $kv"; done <"$DIR/sysctls.saved"
  fi
  ip link show 2>/dev/null | sed -n 's/^[0-9]*: \(cxlkv-br[0-9]*\):.*/\1/p' | while read -r b; do ip link del "$b"; done
}

realnode_restart() {  # <node> kubelet|containerd: stop it (TERM) and start it again
  local n=$1 what=$2
  [ -f "$DIR/pids/$n-ns" ] || die "no real node $n"
  case $what in
    kubelet) stop_proc "$n-kubelet"; real_kubelet_start "$n" ;;
    containerd) stop_proc "$n-containerd"; real_containerd_start "$n" ;;
    *) die "restart-node: kubelet or containerd, not $what" ;;
  esac
}
