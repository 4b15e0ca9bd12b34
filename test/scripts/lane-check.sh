#!/usr/bin/env bash
# scripts/test.sh's background lane, on a copy of test.sh with stand-in
# stages (named as such: the check is of test.sh itself, not of any stage):
#   - a lane stage that fails turns the run red and is named in
#     "failed stages:";
#   - SIGINT to test.sh's process group (Ctrl-C) while a lane stage runs a
#     command in the foreground and a daemon in the background: test.sh exits
#     130 within 10 s and neither that command nor the daemon is left running
#     (a lane stage's commands ignore SIGINT: they are background jobs of a
#     shell without job control, so only test.sh's TERM to the stage's whole
#     process group stops them).
# Prints "lane-check: ok: ..." / "lane-check: FAILED: ..." per check and exits
# non-zero if one failed. About 6 s. Usage: test/scripts/lane-check.sh [test.sh]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TESTSH=${1:-$ROOT/scripts/test.sh}
failed=0
ok() { echo "lane-check: ok: $*"; }
bad() { echo "lane-check: FAILED: $*"; failed=$((failed + 1)); }
S=$(mktemp -d /tmp/cxlkv-lane-check.XXXXXX)
PG=""
cleanup() {
  # Whatever the check left (the failure it reports): the pids it recorded.
  local f
  for f in "$S"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
  [ -n "$PG" ] && kill -KILL -- "-$PG" 2>/dev/null
  rm -rf "$S"
}
trap cleanup EXIT
mkdir -p "$S/scripts/lib" "$S/scripts/test.d"
cp "$TESTSH" "$S/scripts/test.sh"
cp "$ROOT/scripts/lib/stage.sh" "$S/scripts/lib/stage.sh"
stage() {  # stage <file> <marker line or ""> <body>: a stand-in stage
  printf '#!/usr/bin/env bash\n%s\n# Stage: a stand-in (test/scripts/lane-check.sh)\n%s\n' "$2" "$3" \
    >"$S/scripts/test.d/$1.sh"
}
stage 10-first "# test.sh: background lane starts here" \
  'sleep "${FIRST_S:-0}"; echo "first: 1 passed, 0 failed, 0 skipped"'
stage 55-hold "# test.sh: background lane" "
finish() { [ -n \"\${D:-}\" ] && kill \"\$D\"; echo \"hold: 1 passed, 0 failed, 0 skipped\"; }
trap finish EXIT
sleep 300 & D=\$!; echo \"\$D\" >'$S/daemon.pid'
bash -c 'echo \$\$ >\"$S/fg.pid\"; exec sleep 300'"
stage 58-fail "# test.sh: background lane" 'echo "fail: 0 passed, 1 failed, 0 skipped"; exit 1'

# 1. A failing lane stage: the run is red and names it.
out=$(cd "$S" && bash scripts/test.sh --no-setup --stage first,fail 2>&1); rc=$?
if [ "$rc" -ne 0 ] && grep -q '^failed stages: fail$' <<<"$out" &&
  grep -qE '^fail +FAILED .*\(lane\)$' <<<"$out"; then
  ok "a failing lane stage turns the run red and is named"
else
  bad "a failing lane stage (rc $rc):"; echo "$out"
fi

# 2. Ctrl-C while the lane's stage runs: test.sh in a session of its own with
# SIGINT at its default (as a terminal's foreground job has it; a caller in
# the background may have it ignored, which test.sh could not undo).
PG=$(cd "$S" && FIRST_S=60 python3 -c '
import os, signal, sys
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.setsid()
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1); os.dup2(fd, 2)
    os.execvp("bash", ["bash", "scripts/test.sh", "--no-setup", "--stage", "first,hold"])
print(pid)' "$S/run.log")
end=$((SECONDS + 30))
until [ -s "$S/fg.pid" ] && [ -s "$S/daemon.pid" ]; do
  [ $SECONDS -ge $end ] && break; sleep 0.2
done
if [ ! -s "$S/fg.pid" ]; then
  bad "the lane stage did not start its commands in 30 s"; cat "$S/run.log"
else
  kill -INT -- "-$PG"
  end=$((SECONDS + 10))
  while kill -0 "$PG" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.2; done
  if kill -0 "$PG" 2>/dev/null; then
    bad "test.sh still runs 10 s after SIGINT"
  else
    ok "test.sh exits after SIGINT"
  fi
  sleep 1  # the stage's EXIT trap, run on TERM
  left=""
  for f in fg daemon; do
    p=$(cat "$S/$f.pid"); kill -0 "$p" 2>/dev/null && left+=" $f ($p: $(ps -o args= -p "$p"))"
  done
  if [ -z "$left" ]; then
    ok "SIGINT stops the lane stage's foreground command and its daemon"
  else
    bad "left running after SIGINT:$left"
  fi
fi
[ "$failed" -eq 0 ]
