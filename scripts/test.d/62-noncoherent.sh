#!/usr/bin/env bash
# Stage: coherence=software under the non-coherence emulator
# (docs/coherence.md). The emulator's own tests and the multi-host suites
# (emulator_test, noncoherent_test) also run in the unit stage; this stage is
# the mutation test, test/coherence/mutants.sh: every vis_->Flush / Invalidate
# call site in src/region/*.cc is reached by the suites and, turned into a
# no-op in turn (the emulator drops that call site's calls), makes the suites
# fail. One pass/fail per site.
# `--full` only (CXLKV_FULL=1): one suite run per site, 215-280 s wall on 2
# busy cores for 30 sites (layout 4); the default run skips it (0 s).
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0
trap 'echo "noncoherent: $passed passed, $failed failed, $skipped skipped"' EXIT
if [ "$CXLKV_FULL" != 1 ]; then
  echo "noncoherent: the mutation test runs with --full (scripts/test.sh --full)"
  skipped=1
  exit 0
fi
if ! cxlkv_build_main noncoherent_test emulator_sites; then
  failed=$((failed + 1)); exit 1
fi
log=$(mktemp)
test/coherence/mutants.sh build | tee "$log"
rc=${PIPESTATUS[0]}
line=$(grep -E '^mutants: [0-9]+ caught, [0-9]+ survived, [0-9]+ not reached' "$log" | tail -1)
rm -f "$log"
if [ -z "$line" ]; then
  failed=$((failed + 1)); exit 1
fi
read -r c s u < <(echo "$line" | grep -oE '[0-9]+' | paste -sd' ')
passed=$((passed + c)); failed=$((failed + s + u))
[ "$rc" -eq 0 ] && [ "$failed" -eq 0 ]
