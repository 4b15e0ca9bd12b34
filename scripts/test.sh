#!/usr/bin/env bash
# The test command: set up (if needed), build, run every test suite.
#
#   scripts/test.sh            # everything CI runs (~15 min on 2 cores)
#   scripts/test.sh --quick    # unit tests only, no TSan build, no e2e stages
#
# Stages beyond the main ctest run live in scripts/test.d/NN-<room>.sh, one per
# room (e2e control plane, fabric API fuzzing, ...). Each stage exits non-zero
# on failure; this script keeps going, then prints one closing line.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
QUICK=0; [ "${1:-}" = "--quick" ] && QUICK=1
JOBS=${JOBS:-$(nproc)}

bash scripts/setup.sh || { echo "setup failed"; exit 1; }

passed=0; failed=0; skipped=0; failures=()
record() {  # record <stage> <passed> <failed>
  passed=$((passed + $2)); failed=$((failed + $3))
  [ "$3" -gt 0 ] && failures+=("$1")
}
# Runs ctest and records the counts it reports.
run_ctest() {  # run_ctest <stage> <build dir> [ctest args...]
  local stage=$1 dir=$2; shift 2
  local log; log=$(mktemp)
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS" "$@" 2>&1 | tee "$log"
  local total fail
  total=$(grep -oE 'tests failed out of [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  fail=$(grep -oE '[0-9]+ tests failed out of' "$log" | grep -oE '^[0-9]+' | tail -1)
  if [ -z "$total" ]; then record "$stage" 0 1; rm -f "$log"; return; fi
  record "$stage" $((total - fail)) "$fail"
  rm -f "$log"
}

echo "== build (build/)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCXLKV_ROOMS=all \
  -DCXLKV_ENGINE_ONLY=OFF -DCXLKV_WITH_ENGINE=ON >/dev/null || exit 1
cmake --build build -j "$JOBS" || { echo "build failed"; exit 1; }

echo "== unit and multi-process tests"
run_ctest unit build -LE 'e2e'

if [ $QUICK = 0 ]; then
  echo "== ThreadSanitizer build of the region engine (build-tsan/)"
  cmake -S . -B build-tsan -G Ninja -DCXLKV_TSAN=ON -DCXLKV_ENGINE_ONLY=ON >/dev/null || exit 1
  if cmake --build build-tsan -j "$JOBS"; then
    # The in-process concurrency tests (threads sharing one Region).
    run_ctest tsan build-tsan -R '^RegionTest\.' 
  else
    record tsan-build 0 1
  fi
  for stage in scripts/test.d/*.sh; do
    [ -e "$stage" ] || continue
    echo "== stage $(basename "$stage")"
    out=$(mktemp)
    ( cd "$ROOT" && bash "$stage" ) 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    # A stage may print its own "N passed, N failed" line; else it counts as one.
    line=$(grep -E '^[A-Za-z-]*:? ?[0-9]+ passed, [0-9]+ failed' "$out" | tail -1)
    sk=$(echo "$line" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+')
    skipped=$((skipped + ${sk:-0}))
    if [ -n "$line" ]; then
      p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
      f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+')
      [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
      record "$(basename "$stage")" "$p" "$f"
    elif [ "$rc" -eq 0 ]; then record "$(basename "$stage")" 1 0
    else record "$(basename "$stage")" 0 1; fi
    rm -f "$out"
  done
fi

echo
[ ${#failures[@]} -gt 0 ] && echo "failed stages: ${failures[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
