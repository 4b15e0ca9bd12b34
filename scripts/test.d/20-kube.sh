#!/usr/bin/env bash
# Stage: the kube room's e2e tests against a real control plane.
#
# Brings up test/e2e/cluster.sh (building Kubernetes on first use; cached
# outside the clone afterwards), runs the e2e-labelled kube tests, checks the
# test manifests with `kubectl apply --dry-run=server`, tears the cluster
# down whatever happens, and prints "N passed, N failed".
#
# Uses build/ when scripts/test.sh built it (all rooms), else configures and
# builds build-kube/ itself.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CLUSTER=$ROOT/test/e2e/cluster.sh

unset CXLKV_E2E_DIR
passed=0; failed=0; skipped=0
finish() {
  # Only this run's own cluster (never the per-clone default one).
  [ -n "${CXLKV_E2E_DIR:-}" ] && { bash "$CLUSTER" down || true; }
  echo "kube: $passed passed, $failed failed ($skipped skipped: feature gate off)"
}
trap finish EXIT

BUILD=build
if [ ! -x "$BUILD/bin/kube_e2e_test" ]; then
  BUILD=build-kube
  echo "== kube: building $BUILD/"
  cmake -S . -B "$BUILD" -G Ninja -DCXLKV_WITH_ENGINE=OFF -DCXLKV_ROOMS=kube >/dev/null &&
    cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" || { failed=1; exit 1; }
fi

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

echo "== kube: server-side dry-run of test manifests"
for m in test/e2e/manifests/*.yaml; do
  [ -e "$m" ] || continue
  if kubectl apply --dry-run=server -f "$m"; then passed=$((passed + 1)); else
    echo "kube: dry-run FAILED for $m"; failed=$((failed + 1)); fi
done

echo "== kube: e2e tests (serially: one test restarts the apiserver)"
log=$(mktemp)
ctest --test-dir "$BUILD" -L e2e -R '^(ClientE2ETest|WatchE2ETest|InformerE2ETest|LeaderElectionE2ETest|EventRecorderE2ETest|DraSmokeE2ETest|DraGatesE2ETest|ConfigE2ETest)\.' \
  --output-on-failure -j 1 --timeout 300 2>&1 | tee "$log"
total=$(grep -oE 'tests failed out of [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
fail=$(grep -oE '[0-9]+ tests failed out of' "$log" | grep -oE '^[0-9]+' | tail -1)
skipped=$(grep -cE 'Test +#[0-9]+: .*Skipped' "$log")
rm -f "$log"
if [ -z "$total" ]; then
  failed=$((failed + 1))
else
  passed=$((passed + total - fail - skipped)); failed=$((failed + fail))
fi
[ "$failed" -eq 0 ]
