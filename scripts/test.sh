#!/usr/bin/env bash
# The test command: set up (if needed), then run the test stages in
# scripts/test.d/, one after another, and print a table of their times.
#
#   scripts/test.sh                  # the default run (what CI runs)
#   scripts/test.sh --stage fabric   # only the named stages (repeat, or a,b), each
#                                    # building what it needs, so from a fresh clone too
#   scripts/test.sh --no-setup       # skip scripts/setup.sh (packages already there)
#   scripts/test.sh --full           # also the soak-length runs (CXLKV_FULL=1 to the stages)
#   scripts/test.sh --quick          # the unit stage only (--stage unit)
#   scripts/test.sh --list           # the stages, in the order they run
#   scripts/test.sh --serial         # no background lane: every stage in turn
#   scripts/test.sh --stage dra --filter REGEX
#                                    # only the bats tests whose name matches
#                                    # (CXLKV_TEST_FILTER to the stages; scripts/lib/bats.sh)
#   scripts/test.sh --stage dra --tags LIST
#                                    # only the bats tests with those tags (CXLKV_TEST_TAGS)
#
# A stage is any scripts/test.d/NN-NAME.sh (scripts/lib/stage.sh has the
# contract and helpers): a new file there is picked up without editing this
# script. Each prints a closing line "NAME: N passed, N failed, N skipped" and
# exits non-zero on failure; a stage that prints none counts as one test. This
# script keeps going past a failing stage, then prints the stage table, the
# failed stages and the tests they named as failed (each "failed test: NAME"
# line of a failed stage's output; the ctest, bats and pytest helpers of
# scripts/lib print them), and one closing line.
#
# The background lane: a stage whose header has the line
# "# test.sh: background lane" (dra, chartpods, helm: control planes whose
# tests mostly wait on controllers, not on the cores; model: no timed step)
# is not run in turn:
# at the first of them, or earlier at a stage whose header has
# "# test.sh: background lane starts here" (vllm), the lane starts, running
# them one after another in the background while the other stages go on
# (vllm, ttft); their output is
# printed whole at the end, each under its own "== stage" line, and counted
# as always. Builds of one build directory are serialized
# (scripts/lib/stage.sh). --serial runs every stage in turn instead.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export JOBS=${JOBS:-$(nproc)}
export CXLKV_FULL=${CXLKV_FULL:-0}
# The stages' environment (scripts/lib/stage.sh): ccache's base directory is
# this clone and its cache the project's, so the table below can say how
# many compilations of this run the cache answered.
source scripts/lib/stage.sh
ccache_counts() {  # "hits misses" of the cache (0 0 without ccache)
  command -v ccache >/dev/null 2>&1 || { echo "0 0"; return; }
  ccache --print-stats 2>/dev/null | awk '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" {h += $2}
    $1 == "cache_miss" {m += $2} END {print h + 0, m + 0}'
}
read -r cc_hits0 cc_miss0 < <(ccache_counts)

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
stage_name() { local b; b=$(basename "$1" .sh); echo "${b#[0-9]*-}"; }

SETUP=1; LIST=0; SERIAL=0; want=()
while [ $# -gt 0 ]; do
  case $1 in
    --stage) [ $# -ge 2 ] || { echo "--stage needs a name"; exit 2; }
             IFS=, read -ra names <<<"$2"; want+=("${names[@]}"); shift ;;
    --stage=*) IFS=, read -ra names <<<"${1#--stage=}"; want+=("${names[@]}") ;;
    --no-setup) SETUP=0 ;;
    --full) CXLKV_FULL=1 ;;
    --quick) want+=(unit) ;;
    --list) LIST=1 ;;
    --serial) SERIAL=1 ;;
    --filter) [ $# -ge 2 ] || { echo "--filter needs a regular expression"; exit 2; }
              export CXLKV_TEST_FILTER=$2; shift ;;
    --filter=*) export CXLKV_TEST_FILTER=${1#--filter=} ;;
    --tags) [ $# -ge 2 ] || { echo "--tags needs a list of tags"; exit 2; }
            export CXLKV_TEST_TAGS=$2; shift ;;
    --tags=*) export CXLKV_TEST_TAGS=${1#--tags=} ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument: $1"; usage; exit 2 ;;
  esac
  shift
done

all=()
for s in scripts/test.d/[0-9]*-*.sh; do [ -e "$s" ] && all+=("$s"); done
if [ $LIST = 1 ]; then
  for s in "${all[@]}"; do printf '%-12s %s\n' "$(stage_name "$s")" "$s"; done
  exit 0
fi
stages=()
if [ ${#want[@]} -eq 0 ]; then
  stages=("${all[@]}")
else
  for w in "${want[@]}"; do
    found=
    for s in "${all[@]}"; do
      if [ "$w" = "$(stage_name "$s")" ] || [ "$w" = "$(basename "$s" .sh)" ]; then
        found=$s
      fi
    done
    [ -n "$found" ] || { echo "no stage named '$w'; stages: $(for s in "${all[@]}"; do stage_name "$s"; done | xargs)"; exit 2; }
    stages+=("$found")
  done
fi

t_all=$SECONDS
if [ $SETUP = 1 ]; then
  t0=$SECONDS
  bash scripts/setup.sh || { echo "setup failed"; exit 1; }
  setup_s=$((SECONDS - t0))
fi

passed=0; failed=0; skipped=0; failures=(); failed_tests=(); declare -A rows
record() {  # record <name> <output file> <rc> <seconds>: counts the stage, keeps its table row
  local name=$1 out=$2 rc=$3 secs=$4 line p=0 f=0 s=0 result=ok
  # The stage's closing line; older stages may leave out their name.
  line=$(grep -E '^([A-Za-z0-9._-]+:)? ?[0-9]+ passed, [0-9]+ failed' "$out" | tail -1)
  if [ -n "$line" ]; then
    p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
    f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+')
    s=$(echo "$line" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+'); s=${s:-0}
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
  elif [ "$rc" -eq 0 ]; then p=1
  else f=1; fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  [ "$f" -gt 0 ] && { result=FAILED; failures+=("$name"); }
  # The failed tests the stage named (scripts/lib/stage.sh, "failed test:"),
  # repeated at the end so that a log's last lines name them.
  [ "$f" -gt 0 ] && while IFS= read -r line; do
    failed_tests+=("$name: $line")
  done < <(sed -n 's/^failed test: //p' "$out")
  rows[$name]=$(printf '%-12s %-7s %7s %7s %8s %8s' "$name" "$result" "$p" "$f" "$s" "$secs")
}
# A marker line in the first 80 lines of a stage file (awk, no pipe: under
# pipefail, grep -q exiting early made sed's SIGPIPE read as "no marker").
has_marker() {  # has_marker <file> <line>
  awk -v m="$2" 'NR > 80 {exit} $0 == m {f = 1; exit} END {exit !f}' "$1"
}
in_lane() { [ "$SERIAL" = 0 ] && has_marker "$1" '# test.sh: background lane'; }
lane_starts() { has_marker "$1" '# test.sh: background lane starts here'; }
lane=()
for stage in "${stages[@]}"; do in_lane "$stage" && lane+=("$stage"); done
LANE_DIR=$(mktemp -d); LANE_PID=""
start_lane() {  # the lane's stages, one after another, each into $LANE_DIR/<name>.*
  # Each stage in a session (so a process group) of its own, stopped as a
  # whole: a background job of a shell without job control ignores SIGINT,
  # and so does every command it runs, so a TERM to the stage's shell alone
  # ran its EXIT trap but left the command it was waiting on (an e2e script,
  # kubectl, a client of the control plane going down) running to its end.
  (
    child=""
    trap '[ -n "$child" ] && { kill -TERM -- "-$child" || kill "$child"; } 2>/dev/null; wait; exit 143' TERM INT
    for st in "${lane[@]}"; do
      n=$(stage_name "$st"); t0=$SECONDS
      setsid bash "$st" >"$LANE_DIR/$n.out" 2>&1 </dev/null &
      child=$!; wait "$child"; echo $? >"$LANE_DIR/$n.rc"; child=""
      echo $((SECONDS - t0)) >"$LANE_DIR/$n.secs"
    done
  ) &
  LANE_PID=$!
}
# Stopped early (^C, a kill): the lane's stage stops too (its own trap
# tears down what it started).
trap '[ -n "$LANE_PID" ] && kill "$LANE_PID" 2>/dev/null; wait; rm -rf "$LANE_DIR"; exit 130' INT TERM
for stage in "${stages[@]}"; do
  name=$(stage_name "$stage")
  if in_lane "$stage" || { lane_starts "$stage" && [ ${#lane[@]} -gt 0 ]; }; then
    if [ -z "$LANE_PID" ]; then
      echo "== background lane: $(for st in "${lane[@]}"; do stage_name "$st"; done | xargs) (output at the end)"
      start_lane
    fi
    in_lane "$stage" && continue
  fi
  echo "== stage $name ($stage)"
  out=$(mktemp)
  t0=$SECONDS
  bash "$stage" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  record "$name" "$out" "$rc" $((SECONDS - t0))
  rm -f "$out"
done
if [ -n "$LANE_PID" ]; then
  wait "$LANE_PID"
  for stage in "${lane[@]}"; do
    name=$(stage_name "$stage")
    echo "== stage $name ($stage, background lane: $(cat "$LANE_DIR/$name.secs" 2>/dev/null || echo '?') s)"
    cat "$LANE_DIR/$name.out" 2>/dev/null
    record "$name" "$LANE_DIR/$name.out" "$(cat "$LANE_DIR/$name.rc" 2>/dev/null || echo 1)" \
      "$(cat "$LANE_DIR/$name.secs" 2>/dev/null || echo 0)"
  done
fi
rm -rf "$LANE_DIR"
echo
echo "== stage times"
printf '%-12s %-7s %7s %7s %8s %8s\n' stage result passed failed skipped seconds
[ $SETUP = 1 ] && printf '%-12s %-7s %7s %7s %8s %8s\n' setup ok - - - "$setup_s"
for stage in "${stages[@]}"; do
  name=$(stage_name "$stage")
  if in_lane "$stage"; then echo "${rows[$name]} (lane)"; else echo "${rows[$name]}"; fi
done
printf '%-12s %-7s %7s %7s %8s %8s\n' total "" "$passed" "$failed" "$skipped" "$((SECONDS - t_all))"
read -r cc_hits1 cc_miss1 < <(ccache_counts)
cc_h=$((cc_hits1 - cc_hits0)); cc_m=$((cc_miss1 - cc_miss0))
[ $((cc_h + cc_m)) -gt 0 ] &&
  echo "ccache ($CCACHE_DIR): $cc_h of $((cc_h + cc_m)) compilations hit ($((100 * cc_h / (cc_h + cc_m)))%; any other build using the cache meanwhile counts too)"
[ "$CXLKV_FULL" = 1 ] && echo "(--full: soak-length runs included)"
echo
[ ${#failures[@]} -gt 0 ] && echo "failed stages: ${failures[*]}"
[ ${#failed_tests[@]} -gt 0 ] && { echo "failed tests:"; printf '  %s\n' "${failed_tests[@]}"; }
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
