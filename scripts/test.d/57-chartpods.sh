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
#     kubelet's readiness probe marks the pod unready, Ready again once the
#     test lets that record expire (about 12 s);
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
# The checks are the named bats tests of test/e2e/chartpods.bats (its header
# has the scenarios; setup_file starts the world); this file builds what they
# need and runs them (scripts/lib/bats.sh). One scenario or test by name:
# scripts/test.sh --stage chartpods --filter 'upgrade:'; a failing test
# prints the cluster state.
# Needs root with mount namespaces (skipped otherwise).
# Warm (Kubernetes, Helm and the fake kubelet cached, binaries built): about
# 95 s on 2 cores for 27 tests; the 2 tests of the released node after the
# upgrade add one release and one pod, about 10 s of it.
# In scripts/test.sh's background lane (after dra, beside vllm, model, ttft).
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
source "$(dirname "$0")/../lib/bats.sh"
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0
if ! { [ "$(id -u)" = 0 ] && unshare --mount true 2>/dev/null; }; then
  echo "chartpods: skipped: needs root with mount namespaces (the test kubelet's containers)"
  skipped=1; cxlkv_bats_close chartpods; exit 0
fi

echo "== chartpods: build Helm, the fake kubelet and the binaries (cached)"
HELM=$(test/e2e/helm-build.sh) && export HELM &&
  cxlkv_build_main cxlkv-dra-controller cxlkv-dra-kubeletplugin cxlkv-hostd cxlkv-fabricd cxlkv_cli &&
  FK=$(test/e2e/fakekubelet/build.sh) && export FK ||
  { failed=1; cxlkv_bats_close chartpods; exit 1; }
cxlkv_bats chartpods test/e2e/chartpods.bats
cxlkv_bats_close chartpods
