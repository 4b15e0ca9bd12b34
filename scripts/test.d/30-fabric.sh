#!/usr/bin/env bash
# Stage: fabric manager emulator and host agent.
#  1. The fabric.e2e ctest tests (test/e2e/*.cc: cxlkv-fabricd and two
#     cxlkv-hostd per test).
#  2. The named bats tests of test/e2e/fabric.bats: schemathesis, cxlkv-fabricd
#     against cfm-openapi.yaml + our overlay; CDI specs written by cxlkv-hostd,
#     validated and injected into an OCI spec by the reference CDI Go module;
#     fabricd + two hostd + the cxlkv CLI on each host; a second daemon on a
#     taken port changing nothing (its header says each).
# Prints "fabric: N passed, N failed, N skipped" (ctest's tests and bats's);
# exits non-zero on any failure. One bats test by name:
# scripts/test.sh --stage fabric --filter 'two hosts'.
# Builds what it needs in build/ (CXLKV_BIN points at other binaries instead,
# and the ctest tests are skipped).
# Warm: about 55 s on 2 cores.
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
source "$(dirname "$0")/../lib/bats.sh"
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0

if [ -z "${CXLKV_BIN:-}" ]; then
  echo "== fabric: build (build/: the daemons, the CLI, the fabric.e2e and hostd tests)"
  # Every executable of the fabric.e2e label: gtest registers a test only after
  # its executable links, so one left out here would drop its tests, unseen,
  # whenever the stage runs without the unit stage's full build before it.
  cxlkv_build_main cxlkv-fabricd cxlkv-hostd cxlkv_cli hostd_unit_test fabric_scenario_test \
    daemon_stop_test ||
    { failed=1; cxlkv_bats_close fabric; exit 1; }
  echo "== fabric: fabric.e2e tests (cxlkv-fabricd and two cxlkv-hostd per test)"
  if [ -n "${CXLKV_TEST_FILTER:-}" ]; then
    echo "fabric: --filter selects bats tests; the fabric.e2e ctest tests are left out"
  else
    cxlkv_ctest build -L '^fabric\.e2e$' -j "$JOBS"
  fi
else
  echo "fabric: CXLKV_BIN is set; the fabric.e2e tests run from build/ only"; skipped=$((skipped + 1))
fi
cxlkv_bats fabric test/e2e/fabric.bats
cxlkv_bats_close fabric
