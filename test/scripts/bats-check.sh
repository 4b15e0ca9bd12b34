#!/usr/bin/env bash
# Checks how the stages run bats files, on planted files in a temporary
# directory: scripts/lib/bats.sh's cxlkv_bats counts a passing, a failing and
# a skipped test as such and names the failing one; a file whose setup_file fails and a file whose bats
# run dies midway count as failed, never as passed; CXLKV_TEST_FILTER runs
# only the named test; and test/e2e/lib/dra.bash's failure hook prints the
# cluster state after a failing test and only then (a stand-in kubectl that
# echoes its arguments and a state file of its own play the world, so no
# control plane is needed; the hook needs root, as the DRA tests do, and is
# skipped without it). Prints one line per check; exit 0 when all hold.
# Run first by the dra stage (scripts/test.d/55-dra.sh), which runs its checks
# through cxlkv_bats. About 6 s on 2 busy cores.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CXLKV_ROOT=$ROOT
source "$ROOT/scripts/lib/bats.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
bad=0
check() {  # check <what> <shell condition>
  if eval "$2"; then echo "bats-check: ok: $1"; else echo "bats-check: FAILED: $1"; bad=1; fi
}
# counts <file>... : "passed failed skipped status" of cxlkv_bats over them
counts() {
  local passed=0 failed=0 skipped=0 rc
  cxlkv_bats planted "$@" >"$T/out" 2>&1; rc=$?
  echo "$passed $failed $skipped $rc"
}

cat >"$T/mixed.bats" <<'EOF'
@test "passes" { true; }
@test "fails" { [ 1 = 2 ]; }
@test "skips" { skip "on purpose"; }
EOF
cat >"$T/setup-fails.bats" <<'EOF'
setup_file() { return 1; }
@test "one" { true; }
@test "two" { true; }
EOF
# The second test kills the file's bats process: the third never reports.
cat >"$T/dies.bats" <<'EOF'
@test "first" { true; }
@test "second kills bats" { kill -9 "$PPID"; }
@test "third" { true; }
EOF

read -r p f s rc < <(counts "$T/mixed.bats")
check "a passing, a failing and a skipped test count 1 passed, 1 failed, 1 skipped, status non-zero ($p $f $s $rc)" \
  '[ "$p $f $s" = "1 1 1" ] && [ "$rc" != 0 ]'
check "the failing test, and only it, is named on a line \"failed test: <file>: <name>\" (scripts/test.sh repeats those at the end)" \
  '[ "$(grep "^failed test: " "$T/out")" = "failed test: $T/mixed.bats: fails" ]'
read -r p f s rc < <(counts "$T/setup-fails.bats")
check "a file whose setup_file fails counts no test passed, both failed ($p $f $s $rc)" \
  '[ "$p $f $s" = "0 2 0" ] && [ "$rc" != 0 ]'
read -r p f s rc < <(counts "$T/dies.bats")
check "a bats run that dies midway counts the test that never reported as failed ($p $f $s $rc)" \
  '[ "$f" -ge 1 ] && [ $((p + f + s)) = 3 ] && [ "$rc" != 0 ]'
read -r p f s rc < <(CXLKV_TEST_FILTER='^passes$' counts "$T/mixed.bats")
check "CXLKV_TEST_FILTER runs only the matching test ($p $f $s $rc)" '[ "$p $f $s $rc" = "1 0 0 0" ]'

if [ "$(id -u)" = 0 ] && unshare --mount true 2>/dev/null; then
  mkdir -p "$T/bin" "$T/e/logs"
  printf '#!/bin/sh\necho "STAND-IN kubectl $*"\n' >"$T/bin/kubectl"
  chmod +x "$T/bin/kubectl"
  printf 'export E=%q\nexport PATH=%q:$PATH\n' "$T/e" "$T/bin" >"$T/e/state.env"
  cat >"$T/hook.bats" <<EOF
load "$ROOT/test/e2e/lib/dra"
@test "hook: passes" { echo written-by-the-passing-test >"\$E/logs/plugin-x.log"; }
@test "hook: fails" { echo written-by-the-failing-test >"\$E/logs/plugin-y.log"; [ 1 = 2 ]; }
EOF
  DRA_STATE=$T/e/state.env bats --tap "$T/hook.bats" >"$T/hook.out" 2>&1
  n_dumps=$(grep -c '^# === cluster state after "hook: fails" failed' "$T/hook.out")
  check "the failure hook prints the cluster state once, after the failing test" \
    '[ "$n_dumps" = 1 ] && [ "$(grep -c "=== cluster state after" "$T/hook.out")" = 1 ]'
  check "the hook's print-out lists pods and claims of every namespace, ResourceSlices, Events" \
    'grep -q "^# STAND-IN kubectl get pods,resourceclaims -A -o wide" "$T/hook.out" &&
     grep -q "^# STAND-IN kubectl get resourceslices" "$T/hook.out" &&
     grep -q "^# STAND-IN kubectl get events -A" "$T/hook.out"'
  check "the hook's print-out shows the logs written during the failing test, not before" \
    'grep -q "^# written-by-the-failing-test" "$T/hook.out" && ! grep -q "^# written-by-the-passing" "$T/hook.out"'
  [ "$bad" = 0 ] || cat "$T/hook.out"
else
  echo "bats-check: skipped: the failure hook (needs root, as the DRA tests do)"
fi
[ "$bad" = 0 ] || { echo "--- the last cxlkv_bats output"; cat "$T/out"; }
exit "$bad"
