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
#
# A stage is any scripts/test.d/NN-NAME.sh (scripts/lib/stage.sh has the
# contract and helpers): a new file there is picked up without editing this
# script. Each prints a closing line "NAME: N passed, N failed, N skipped" and
# exits non-zero on failure; a stage that prints none counts as one test. This
# script keeps going past a failing stage, then prints one closing line.
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

SETUP=1; LIST=0; want=()
while [ $# -gt 0 ]; do
  case $1 in
    --stage) [ $# -ge 2 ] || { echo "--stage needs a name"; exit 2; }
             IFS=, read -ra names <<<"$2"; want+=("${names[@]}"); shift ;;
    --stage=*) IFS=, read -ra names <<<"${1#--stage=}"; want+=("${names[@]}") ;;
    --no-setup) SETUP=0 ;;
    --full) CXLKV_FULL=1 ;;
    --quick) want+=(unit) ;;
    --list) LIST=1 ;;
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

passed=0; failed=0; skipped=0; failures=(); rows=()
for stage in "${stages[@]}"; do
  name=$(stage_name "$stage")
  echo "== stage $name ($stage)"
  out=$(mktemp)
  t0=$SECONDS
  bash "$stage" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  secs=$((SECONDS - t0))
  # The stage's closing line; older stages may leave out their name.
  line=$(grep -E '^([A-Za-z0-9._-]+:)? ?[0-9]+ passed, [0-9]+ failed' "$out" | tail -1)
  rm -f "$out"
  p=0; f=0; s=0
  if [ -n "$line" ]; then
    p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
    f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+')
    s=$(echo "$line" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+'); s=${s:-0}
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
  elif [ "$rc" -eq 0 ]; then p=1
  else f=1; fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  result=ok; [ "$f" -gt 0 ] && { result=FAILED; failures+=("$name"); }
  rows+=("$(printf '%-12s %-7s %7s %7s %8s %8s' "$name" "$result" "$p" "$f" "$s" "$secs")")
done

echo
echo "== stage times"
printf '%-12s %-7s %7s %7s %8s %8s\n' stage result passed failed skipped seconds
[ $SETUP = 1 ] && printf '%-12s %-7s %7s %7s %8s %8s\n' setup ok - - - "$setup_s"
for r in "${rows[@]}"; do echo "$r"; done
printf '%-12s %-7s %7s %7s %8s %8s\n' total "" "$passed" "$failed" "$skipped" "$((SECONDS - t_all))"
read -r cc_hits1 cc_miss1 < <(ccache_counts)
cc_h=$((cc_hits1 - cc_hits0)); cc_m=$((cc_miss1 - cc_miss0))
[ $((cc_h + cc_m)) -gt 0 ] &&
  echo "ccache ($CCACHE_DIR): $cc_h of $((cc_h + cc_m)) compilations hit ($((100 * cc_h / (cc_h + cc_m)))%; any other build using the cache meanwhile counts too)"
[ "$CXLKV_FULL" = 1 ] && echo "(--full: soak-length runs included)"
echo
[ ${#failures[@]} -gt 0 ] && echo "failed stages: ${failures[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
