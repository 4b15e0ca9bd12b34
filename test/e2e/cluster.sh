#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1 for cxlkv's e2e tests:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, and N fake
# Nodes (no kubelet) kept Ready so the scheduler binds pods to them; or, with
# CXLKV_E2E_REAL_NODES, real nodes: kubelets with containerd 2.x and runc
# (test/e2e/realnodes/nodes.sh says how two of them share one machine).
#
#   test/e2e/cluster.sh up        # build (first use) or reuse the cache, start, wait Ready
#   test/e2e/cluster.sh env       # print export lines (KUBECONFIG, PATH with kubectl)
#   test/e2e/cluster.sh restart-apiserver   # stop and start kube-apiserver (watch tests)
#   test/e2e/cluster.sh down      # stop everything, remove the state dir
#   test/e2e/cluster.sh build     # only build the binaries
#   test/e2e/cluster.sh restart-node <node-i> kubelet|containerd   # real nodes: TERM, start again
#   test/e2e/cluster.sh node-exec <node-i> <cmd...>   # real nodes: in the node's mount namespace
#
# Parameters (environment):
#   K8S_VERSION           Kubernetes release (default: see k8s-build.sh), e.g. v1.34.4
#   CXLKV_E2E_GATES       feature gates for apiserver/controller-manager/scheduler,
#                         default "DRAConsumableCapacity=true,DRADeviceBindingConditions=true"
#   CXLKV_E2E_NODES       number of fake nodes (default 2; 0 with real nodes), named fake-node-<i>
#   CXLKV_E2E_REAL_NODES  number of real nodes (default 0), named node-<i>; needs root
#                         in a network namespace of its own and CXLKV_E2E_IMAGES
#                         ("REF=ARCHIVE ..." OCI archives to import on each
#                         node: test/e2e/realnodes/image.sh). With real nodes
#                         the apiserver listens on port 443 of every address
#                         of that namespace (the kubernetes Service's 10.0.0.1
#                         is one of them), authorizes nodes (Node,RBAC) and
#                         admits with NodeRestriction.
#   CXLKV_E2E_BINDING_TIMEOUT  the scheduler's DynamicResources bindingTimeout
#                         (e.g. 8s; default: the scheduler's own, 600 s), set
#                         through a KubeSchedulerConfiguration file
#   CXLKV_E2E_DIR         state dir (certs, kubeconfigs, logs, pids, etcd data);
#                         default /tmp/cxlkv-e2e-<hash of this clone's path>
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=k8s-build.sh
source "$HERE/k8s-build.sh"

VERSION=${K8S_VERSION:-$K8S_DEFAULT_VERSION}
GATES=${CXLKV_E2E_GATES-DRAConsumableCapacity=true,DRADeviceBindingConditions=true}
REAL=${CXLKV_E2E_REAL_NODES:-0}
if [ "$REAL" -gt 0 ]; then NODES=${CXLKV_E2E_NODES:-0}; else NODES=${CXLKV_E2E_NODES:-2}; fi
DIR=${CXLKV_E2E_DIR:-/tmp/cxlkv-e2e-$(echo -n "$(cd "$HERE/../.." && pwd)" | sha256sum | cut -c1-10)}

log() { echo "cluster: $*" >&2; }
die() { log "$*"; exit 1; }

# free_port (only functions: sourcing it starts nothing)
# shellcheck source=test/e2e/lib/common.bash
source "$HERE/lib/common.bash"

# ---- certificates and kubeconfigs (openssl) --------------------------------
gen_pki() {
  local p=$DIR/pki
  mkdir -p "$p"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=cxlkv-e2e-ca" \
    -keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
  # Serving certificate: every name a client may dial, plus the service IP.
  cat >"$p/serving.ext" <<EOF
subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc
extendedKeyUsage=serverAuth
EOF
  issue "$p" apiserver "/CN=kube-apiserver" "$p/serving.ext"
  printf 'extendedKeyUsage=clientAuth\n' >"$p/client.ext"
  issue "$p" admin "/O=system:masters/CN=cxlkv-e2e-admin" "$p/client.ext"
  issue "$p" controller-manager "/CN=system:kube-controller-manager" "$p/client.ext"
  issue "$p" scheduler "/CN=system:kube-scheduler" "$p/client.ext"
  # Service-account token signing key (apiserver signs, everyone verifies).
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
}

issue() {  # <pki dir> <name> <subject> <extfile>
  openssl req -newkey rsa:2048 -nodes -subj "$3" -keyout "$1/$2.key" -out "$1/$2.csr" 2>/dev/null
  openssl x509 -req -in "$1/$2.csr" -CA "$1/ca.crt" -CAkey "$1/ca.key" -CAcreateserial \
    -days 2 -extfile "$4" -out "$1/$2.crt" 2>/dev/null
  rm -f "$1/$2.csr"
}

write_kubeconfig() {  # <name> -> $DIR/<name>.kubeconfig using client cert <name>
  local p=$DIR/pki
  cat >"$DIR/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cxlkv-e2e
  cluster:
    server: https://127.0.0.1:$(cat "$DIR/apiserver.port")
    certificate-authority: $p/ca.crt
users:
- name: $1
  user:
    client-certificate: $p/$1.crt
    client-key: $p/$1.key
contexts:
- name: $1@cxlkv-e2e
  context:
    cluster: cxlkv-e2e
    user: $1
    namespace: default
current-context: $1@cxlkv-e2e
EOF
}

# ---- processes ----------------------------------------------------------------
start_proc() {  # <name> <cmd...>: background, log to $DIR/logs/<name>.log, pid file
  local name=$1; shift
  "$@" >>"$DIR/logs/$name.log" 2>&1 &
  echo $! >"$DIR/pids/$name"
}

stop_proc() {  # <name>: TERM, wait up to 10 s, then KILL
  local f=$DIR/pids/$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$f"
}

stop_procs() {  # <name>...: stop_proc for each, all at once (each takes about 2 s to exit on TERM)
  local n pids=()
  for n in "$@"; do stop_proc "$n" & pids+=($!); done
  for n in "${pids[@]}"; do wait "$n"; done
}

alive() {  # <name>: true when its process runs
  [ -f "$DIR/pids/$1" ] && kill -0 "$(cat "$DIR/pids/$1")" 2>/dev/null
}

wait_for() {  # <process name> <seconds> <cmd...>: poll cmd; fail early if the process died
  local what=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { log "$what not ready after ${secs}s"; return 1; }
    if [ -e "$DIR/pids/$what" ] && ! alive "$what"; then log "$what exited"; return 1; fi
    sleep 0.5
  done
}

apiserver_healthy() {
  curl -sf --cacert "$DIR/pki/ca.crt" --cert "$DIR/pki/admin.crt" --key "$DIR/pki/admin.key" \
    "https://127.0.0.1:$(cat "$DIR/apiserver.port")/readyz" >/dev/null
}

start_apiserver() {
  local p=$DIR/pki bin; bin=$(cat "$DIR/bin.path")
  local bind=127.0.0.1 authz=(--authorization-mode=RBAC)
  if [ -f "$DIR/real" ]; then
    bind=0.0.0.0
    authz=(--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction
      # kubectl logs/exec: the apiserver calls each kubelet as a client the
      # kubelets' webhook authorization lets in.
      --kubelet-client-certificate="$p/apiserver-kubelet-client.crt"
      --kubelet-client-key="$p/apiserver-kubelet-client.key"
      # Node names resolve nowhere here: dial the InternalIP.
      --kubelet-preferred-address-types=InternalIP)
  fi
  start_proc kube-apiserver "$bin/kube-apiserver" \
    --bind-address="$bind" --advertise-address=127.0.0.1 \
    --secure-port="$(cat "$DIR/apiserver.port")" \
    --etcd-servers="http://127.0.0.1:$(cat "$DIR/etcd.port")" \
    --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --client-ca-file="$p/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    "${authz[@]}" --allow-privileged=true \
    --endpoint-reconciler-type=none \
    --feature-gates="$GATES" \
    --profiling=false --v=1
  wait_for kube-apiserver 120 apiserver_healthy || { tail -20 "$DIR/logs/kube-apiserver.log" >&2; return 1; }
}

cmd_up() {
  local t0=$SECONDS bin
  bin=$(k8s_build "$VERSION") || die "build of Kubernetes $VERSION failed"
  local tb=$SECONDS
  rm -rf "$DIR"
  mkdir -p "$DIR/logs" "$DIR/pids" "$DIR/etcd"
  echo "$bin" >"$DIR/bin.path"
  echo "$VERSION" >"$DIR/version"
  echo "$GATES" >"$DIR/gates"
  for n in etcd etcd-peer apiserver; do free_port >"$DIR/$n.port"; done
  if [ "$REAL" -gt 0 ]; then
    realnodes_check
    echo "$REAL" >"$DIR/real"
    echo 443 >"$DIR/apiserver.port"  # the kubernetes Service's port; this namespace is the test's own
    realnodes_network
  fi
  gen_pki
  for n in admin controller-manager scheduler; do write_kubeconfig "$n"; done
  [ "$REAL" -gt 0 ] && realnodes_pki
  # A kubeconfig may only be written once the port is known; the port is
  # picked before the server binds it, so a rare collision is retried by the user.

  log "starting etcd ($VERSION's pinned version) on 127.0.0.1:$(cat "$DIR/etcd.port")"
  start_proc etcd "$bin/cxlkv-etcd" --data-dir="$DIR/etcd" \
    --client-url="http://127.0.0.1:$(cat "$DIR/etcd.port")" \
    --peer-url="http://127.0.0.1:$(cat "$DIR/etcd-peer.port")"
  wait_for etcd 60 grep -q "etcd ready" "$DIR/logs/etcd.log" || { tail "$DIR/logs/etcd.log" >&2; return 1; }

  log "starting kube-apiserver on https://127.0.0.1:$(cat "$DIR/apiserver.port") (gates: ${GATES:-none})"
  start_apiserver

  log "starting kube-controller-manager and kube-scheduler"
  start_proc kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig="$DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$DIR/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=0 \
    --service-account-private-key-file="$DIR/pki/sa.key" \
    --root-ca-file="$DIR/pki/ca.crt" --use-service-account-credentials=true \
    --controllers='*' --leader-elect=false \
    --feature-gates="$GATES" --v=1
  local sched_cfg=()
  if [ -n "${CXLKV_E2E_BINDING_TIMEOUT:-}" ]; then
    # With --config the scheduler ignores --kubeconfig and --leader-elect:
    # the file carries them.
    cat >"$DIR/scheduler-config.yaml" <<YAML
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: "$DIR/scheduler.kubeconfig"}
leaderElection: {leaderElect: false}
profiles:
  - schedulerName: default-scheduler
    pluginConfig:
      - name: DynamicResources
        args: {bindingTimeout: $CXLKV_E2E_BINDING_TIMEOUT}
YAML
    sched_cfg=(--config="$DIR/scheduler-config.yaml")
  fi
  start_proc kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig="$DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig="$DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig="$DIR/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=0 --leader-elect=false \
    "${sched_cfg[@]}" --feature-gates="$GATES" --v=1

  if [ "$NODES" -gt 0 ]; then
    log "registering $NODES fake nodes"
    start_proc fakenodes "$bin/cxlkv-fakenodes" --kubeconfig="$DIR/admin.kubeconfig" \
      --count="$NODES" --heartbeat=10s --ready-file="$DIR/nodes.ready"
    wait_for fakenodes 120 test -f "$DIR/nodes.ready" || { tail "$DIR/logs/fakenodes.log" >&2; return 1; }
  fi
  local k="$bin/kubectl --kubeconfig=$DIR/admin.kubeconfig"
  wait_for kube-controller-manager 120 $k get serviceaccount default -n default ||
    { tail -20 "$DIR/logs/kube-controller-manager.log" >&2; return 1; }
  if [ "$REAL" -gt 0 ]; then
    log "starting $REAL real nodes (kubelet + containerd each)"
    realnodes_up || return 1
  fi
  log "up in $((SECONDS - t0))s (build/cache check $((tb - t0))s): Kubernetes $VERSION, state in $DIR"
}

cmd_down() {
  # Reverse start order, so clients stop before the servers they talk to:
  # real nodes (kubelets, runtimes, their containers), the three clients
  # together, then the apiserver, then etcd.
  realnodes_down
  stop_procs fakenodes kube-scheduler kube-controller-manager
  for n in kube-apiserver etcd; do stop_proc "$n"; done
  if [ -d "$DIR" ]; then
    # Any pid file left belongs to a process this script started.
    for f in "$DIR"/pids/*; do [ -e "$f" ] && stop_proc "$(basename "$f")"; done
    rm -rf "$DIR"
  fi
  log "down"
}

cmd_env() {
  [ -f "$DIR/admin.kubeconfig" ] || die "not up (no $DIR/admin.kubeconfig)"
  echo "export KUBECONFIG=$DIR/admin.kubeconfig"
  echo "export PATH=$(cat "$DIR/bin.path"):\$PATH"
  echo "export CXLKV_E2E_DIR=$DIR"
  echo "export CXLKV_E2E_CLUSTER=$HERE/cluster.sh"
  echo "export CXLKV_E2E_K8S_VERSION=$(cat "$DIR/version")"
  echo "export CXLKV_E2E_GATES=$(cat "$DIR/gates")"
  [ -f "$DIR/real" ] && echo "export CXLKV_E2E_REAL_NODES=$(cat "$DIR/real")"
  return 0
}

cmd_restart_apiserver() {
  [ -f "$DIR/pids/kube-apiserver" ] || die "not up"
  stop_proc kube-apiserver
  log "kube-apiserver stopped; starting it again"
  start_apiserver
  log "kube-apiserver back"
}

# shellcheck source=realnodes/nodes.sh
source "$HERE/realnodes/nodes.sh"

case "${1:-}" in
  up)
    if [ -f "$DIR/pids/kube-apiserver" ]; then die "already up (state in $DIR); run down first"; fi
    # A failed start leaves nothing behind: every started process is stopped.
    trap 'rc=$?; if [ $rc -ne 0 ]; then log "up failed (exit $rc); tearing down"; cmd_down; fi' EXIT
    cmd_up
    trap - EXIT ;;
  down) cmd_down ;;
  env) cmd_env ;;
  restart-apiserver) cmd_restart_apiserver ;;
  build) k8s_build "$VERSION" ;;
  restart-node) [ $# -eq 3 ] || die "usage: $0 restart-node <node> kubelet|containerd"
    realnode_restart "$2" "$3" ;;
  node-exec) [ $# -ge 3 ] || die "usage: $0 node-exec <node> <cmd...>"
    [ -f "$DIR/pids/$2-ns" ] || die "no real node $2"
    n=$2; shift 2; real_in_node "$n" "$@" ;;
  *) echo "usage: $0 up|down|env|restart-apiserver|build|restart-node|node-exec" >&2; exit 2 ;;
esac
