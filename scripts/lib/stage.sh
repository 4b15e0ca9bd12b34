# Helpers for the test stages in scripts/test.d/ (sourced, never run).
#
# A stage is scripts/test.d/NN-NAME.sh. scripts/test.sh runs every one in
# order (or the ones --stage names), from the repository root, with:
#   JOBS        parallel build and test jobs (default: nproc)
#   CXLKV_FULL  1 under `scripts/test.sh --full`: soak-length runs go behind it
# A stage builds what it needs (a fresh clone has no build/), prints a closing
# line "NAME: N passed, N failed, N skipped" and exits non-zero on failure.

CXLKV_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
JOBS=${JOBS:-$(nproc)}
CXLKV_FULL=${CXLKV_FULL:-0}

# ccache across clones. CI builds a fresh clone in a new directory each time, and
# CMake's Ninja generator passes absolute paths (sources, -I), so without a base
# directory every path differs and every object misses the cache. With
# CCACHE_BASEDIR set to the repository root, ccache rewrites the paths under it
# to relative ones before hashing. Builds with -g (RelWithDebInfo) also hash
# the working directory, because it is written into the debug info
# (DW_AT_comp_dir); -fdebug-prefix-map=ROOT=. writes it relative to the root,
# and ccache then hashes the mapped directory, so a second clone hits too and
# its debug info is still right (ccache(1), "Compiling in different
# directories"). The flags reach a build directory when it is first
# configured (CMake reads CFLAGS/CXXFLAGS then), which a fresh clone always is.
# The cache is the user's CCACHE_DIR, or else one of the project's own under
# $CXLKV_CACHE (so other projects' builds on the machine do not evict it).
export CCACHE_BASEDIR=$CXLKV_ROOT
export CCACHE_DIR=${CCACHE_DIR:-${CXLKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cxlkv}/ccache}
case " ${CFLAGS:-} " in
  *" -fdebug-prefix-map=$CXLKV_ROOT=. "*) ;;
  *) export CFLAGS="${CFLAGS:+$CFLAGS }-fdebug-prefix-map=$CXLKV_ROOT=." ;;
esac
case " ${CXXFLAGS:-} " in
  *" -fdebug-prefix-map=$CXLKV_ROOT=. "*) ;;
  *) export CXXFLAGS="${CXXFLAGS:+$CXXFLAGS }-fdebug-prefix-map=$CXLKV_ROOT=." ;;
esac

# ccache, where installed, for every configure the stages make.
cxlkv_launcher_args() {
  if command -v ccache >/dev/null 2>&1; then
    echo "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache"
  fi
}

# Configures <dir> with the given extra cmake arguments (quietly; the log is
# shown on failure) and builds the named targets, or everything when none are
# named. Returns non-zero on failure.
# One build at a time per directory: scripts/test.sh's background lane runs
# stages beside others, and two ninja runs in one build directory would
# clash (flock on <dir>/.cxlkv-build.lock; a second caller waits).
cxlkv_build_dir() {  # cxlkv_build_dir <dir> "<cmake args>" [targets...]
  local dir=$1 args=$2; shift 2
  mkdir -p "$CXLKV_ROOT/$dir"
  (
    flock 9
    log=$(mktemp)
    # shellcheck disable=SC2046,SC2086  # word splitting of the argument lists is intended
    if ! cmake -S "$CXLKV_ROOT" -B "$CXLKV_ROOT/$dir" -G Ninja $args $(cxlkv_launcher_args) \
        >"$log" 2>&1; then
      cat "$log"; rm -f "$log"; echo "configure $dir failed"; exit 1
    fi
    rm -f "$log"
    targets=()
    [ $# -gt 0 ] && targets=(--target "$@")
    cmake --build "$CXLKV_ROOT/$dir" -j "$JOBS" "${targets[@]}" || { echo "build $dir failed"; exit 1; }
  ) 9>"$CXLKV_ROOT/$dir/.cxlkv-build.lock"
}

# build/: every room, the configuration the default run and the docs use,
# with the test-only failpoints (src/region/failpoint.h) compiled in.
CXLKV_MAIN_ARGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCXLKV_ROOMS=all -DCXLKV_ENGINE_ONLY=OFF \
-DCXLKV_WITH_ENGINE=ON -DCXLKV_FAILPOINTS=ON"
cxlkv_build_main() {  # cxlkv_build_main [targets...]
  cxlkv_build_dir build "$CXLKV_MAIN_ARGS" "$@"
}

# A failing test's name on a line of its own, "failed test: <name>", printed
# by the helpers below at the end of what they ran: scripts/test.sh repeats
# these lines under the run's closing table, so the last lines of a run's
# log name every test that failed, whatever stage it was in.
cxlkv_failed_test() { printf 'failed test: %s\n' "$*"; }

# The tests pytest's short summary (-rfE) names as failed or in error in the
# log <file> of a pytest run, each as a "failed test:" line.
cxlkv_pytest_failed() {  # cxlkv_pytest_failed <log>
  local t
  sed -nE 's/^(FAILED|ERROR) ([^ ]+).*/\2/p' "$1" | while read -r t; do cxlkv_failed_test "$t"; done
}

# Runs ctest with the given arguments, teeing its output, and adds what it
# ran to the caller's passed/failed/skipped counters. No test run counts as
# one failure (a label that selects nothing is a broken stage, not a pass).
# Each failed test is named once more after ctest's output ("failed test:").
cxlkv_ctest() {  # cxlkv_ctest <build dir> [ctest args...]
  local dir=$1; shift
  local log; log=$(mktemp)
  ctest --test-dir "$CXLKV_ROOT/$dir" --output-on-failure "$@" 2>&1 | tee "$log"
  local total fail skip t
  total=$(grep -oE 'tests failed out of [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  fail=$(grep -oE '[0-9]+ tests failed out of' "$log" | grep -oE '^[0-9]+' | tail -1)
  skip=$(grep -cE 'Test +#[0-9]+: .*Skipped' "$log")
  # ctest's closing list: "The following tests FAILED:", then one
  # "<tab><number> - <name> (Failed|Timeout|...)" line per test (a
  # parameterized gtest's name ends in "  # GetParam() = <bytes>": cut).
  sed -n '/^The following tests FAILED:/,/^[^[:space:]]/s/^[[:space:]]*[0-9]* - \(.*\) ([A-Za-z ]*)$/\1/p' "$log" |
    sed 's/  # GetParam() = .*//' | while read -r t; do cxlkv_failed_test "$t ($dir)"; done
  rm -f "$log"
  if [ -z "$total" ] || [ "$total" -eq 0 ]; then
    echo "ctest in $dir ran no tests ($*)"
    failed=$((failed + 1))
    return 1
  fi
  passed=$((passed + total - fail - skip)); failed=$((failed + fail)); skipped=$((skipped + skip))
  [ "$fail" -eq 0 ]
}
