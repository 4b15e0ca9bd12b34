#!/usr/bin/env bash
# Stage: the DRA driver and its consumers in real containers under real
# kubelets (issue 30). test/e2e/cluster.sh with CXLKV_E2E_REAL_NODES=2: two
# kubelets (node-0, node-1), each with its own containerd 2.x (built from its
# module, test/e2e/containerd-build.sh) and Debian's runc, in one network
# namespace this stage makes (test/e2e/realnodes/nodes.sh says how two nodes
# share one machine); the images are the Dockerfile's runtime stage in a
# debootstrap tree with this build's binaries, imported without a registry
# (test/e2e/realnodes/image.sh). The builds run here; then, per Kubernetes
# version, in a network namespace of its own (`unshare --net --fork`), the
# named tests of test/e2e/realnodes/realnodes.bats through cxlkv_bats
# (scripts/lib/bats.sh; its world, helpers and failure hook in
# realnodes.bash): the cluster, cxlkv-fabricd as the fabric manager and
# `helm install` of the chart, then
#   - the chart's plugin and hostd DaemonSets' pods and the controller's
#     Deployment run as containers, Ready by their own probes; each kubelet
#     registers its node's plugin through the plugin watcher;
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
# `--filter REGEX` / `--tags LIST` (scripts/test.sh) select tests by name or
# tag in every version's run; the file's header says which scenarios go
# together. It prints the line that runs the file alone on one version.
# Fails when a container does not see its region.
# Behind --full (CXLKV_FULL=1), once per supported minor: Kubernetes 1.37.2
# and 1.36.3 (the chart's kubeVersion range; the 1.36 kubelet under the 1.36
# control plane). CXLKV_REALNODES_K8S="v1.37.2" runs the listed ones only.
# Needs root, mount and network namespaces, cgroup v1 (skipped otherwise).
# Warm (kubelet, containerd, Helm and the images cached, binaries built):
# about 160 s per Kubernetes version on 2 cores, 230 s on busy ones (23
# tests each; the cluster with two Ready nodes in about 36 s, teardown about
# 60 s); both versions 320 to 400 s. Fresh, beyond the kube stage's 1.37
# build: containerd about 390 s, the 1.37 kubelet about 140 s (its packages
# beyond the control plane's), debootstrap about 110 s once per machine, the
# image about 60 s, and 1.36.3's control plane, etcd and kubelet about
# 2,130 s (GOFLAGS_EXTRA=-p=1, nice 10, on 2 cores other builds kept busy;
# its kubelet alone 52 s after the control plane): about 3,200 s with both
# runs. The fresh-machine default run is past 70 min without this stage
# (CHANGELOG.md), so it stays behind --full.
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
source "$(dirname "$0")/../lib/bats.sh"
cd "$CXLKV_ROOT"
ROOT=$PWD
BIN=$ROOT/build/bin
passed=0; failed=0; skipped=0
bad() { echo "realnodes: FAILED: $*"; failed=$((failed + 1)); }

if [ "${1:-}" != --inside ]; then
  # ---- outside: builds (they need the registries), then the test in a
  # network namespace of its own.
  total() { cxlkv_bats_close realnodes; }
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
  BATS_SECONDS=()
  for K8S in $VERSIONS; do
    t0=$SECONDS
    echo "== realnodes: Kubernetes $K8S: control plane and kubelet (cached)"
    if ! k8s_build_kubelet "$K8S" >/dev/null; then bad "Kubernetes $K8S build"; continue; fi
    echo "realnodes: Kubernetes $K8S built or cached in $((SECONDS - t0)) s"
    echo "0 1 0" >"$COUNTS"  # what a run that never reached its own count adds
    # The tests alone, on this version: this line in a root shell.
    echo "realnodes: HELM=$HELM K8S_VERSION=$K8S CXLKV_E2E_IMAGES=\"${IMAGES//$'\n'/ }\" unshare --net --fork bats test/e2e/realnodes/realnodes.bats"
    HELM=$HELM K8S_VERSION=$K8S CXLKV_E2E_IMAGES="${IMAGES//$'\n'/ }" REALNODES_COUNTS=$COUNTS \
      unshare --net --fork bash "$0" --inside
    read -r p f s <"$COUNTS"
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    [ -f "$COUNTS.seconds" ] && while read -r l; do BATS_SECONDS+=("$l ($K8S)"); done <"$COUNTS.seconds"
    rm -f "$COUNTS.seconds"
  done
  rm -f "$COUNTS"
  total
  exit
fi

# ---- inside the stage's network namespace: the named tests ----
cxlkv_bats "realnodes ($K8S_VERSION)" "$ROOT/test/e2e/realnodes/realnodes.bats"
printf '%s\n' "${BATS_SECONDS[@]}" >"$REALNODES_COUNTS.seconds"
echo "$passed $failed $skipped" >"$REALNODES_COUNTS"
[ "$failed" -eq 0 ]
