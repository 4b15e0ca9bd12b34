#!/usr/bin/env bash
# Stage: the kube room's e2e tests against a real control plane.
#
# Brings up test/e2e/cluster.sh (building Kubernetes on first use; cached
# outside the clone afterwards), runs the e2e-labelled kube tests, checks the
# test manifests and deployments/examples/vllm-*.yaml with
# `kubectl apply --dry-run=server`, tears the cluster
# down whatever happens, and prints "kube: N passed, N failed, N skipped".
# The e2e tests are ctest's label kube.e2e; it builds just those in build/.
# Warm (Kubernetes binaries cached in ~/.cache/cxlkv/k8s): about 80 s on 2 cores.
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
ROOT=$PWD
CLUSTER=$ROOT/test/e2e/cluster.sh

unset CXLKV_E2E_DIR
passed=0; failed=0; skipped=0
finish() {
  # Only this run's own cluster (never the per-clone default one).
  [ -n "${CXLKV_E2E_DIR:-}" ] && { bash "$CLUSTER" down || true; }
  echo "kube: $passed passed, $failed failed, $skipped skipped"
}
trap finish EXIT

echo "== kube: build (build/: the kube.e2e tests and their helper)"
cxlkv_build_main kube_e2e_test kube_lease_holder || { failed=1; exit 1; }

echo "== kube: control plane up"
# A state dir of this run's own: two runs at once (two people testing the
# same clone) then get two independent clusters instead of stopping each
# other's. The trap's `down` removes it.
CXLKV_E2E_DIR=$(mktemp -d /tmp/cxlkv-e2e.XXXXXX) || { failed=1; exit 1; }
export CXLKV_E2E_DIR
t0=$SECONDS
if ! bash "$CLUSTER" up; then
  failed=1
  exit 1
fi
echo "kube: control plane up in $((SECONDS - t0))s"
eval "$(bash "$CLUSTER" env)"

echo "== kube: server-side dry-run of test manifests and of the Kubernetes examples"
# deployments/examples/vllm-*.yaml: the vLLM replicas sharing one claim
# (the other files there are daemon configs, not Kubernetes objects).
for m in test/e2e/manifests/*.yaml deployments/examples/vllm-*.yaml; do
  [ -e "$m" ] || continue
  if kubectl apply --dry-run=server -f "$m"; then passed=$((passed + 1)); else
    echo "kube: dry-run FAILED for $m"; failed=$((failed + 1)); fi
done

echo "== kube: e2e tests (serially: one test restarts the apiserver; skips: a feature gate off)"
cxlkv_ctest build -L '^kube\.e2e$' -j 1 --timeout 300
[ "$failed" -eq 0 ]
