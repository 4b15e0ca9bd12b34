# How a stage runs bats files (sourced, never run): every stage whose
# checks are bats tests runs them through cxlkv_bats, so each one counts
# them, filters them and closes its output the same way.
#
#   cxlkv_bats <stage name> <file.bats>...   # counts into the caller's passed/failed/skipped
#
# Each file runs in its own `bats --tap --timing` (its setup_file and
# teardown_file around its tests), in the order given; the TAP stream is
# printed as it comes, under a "== <file>" line. It is then counted:
# "ok N ... # skip" as skipped, other "ok" as passed, "not ok" as failed, and
# every test the plan ("1..N") announced that never reported (bats stopped)
# as failed; a bats run with no plan at all counts as one failure. Each
# failure gets a line "failed test: <file>: <test name>" (scripts/test.sh
# repeats those at the end of the run). With
# CXLKV_TEST_FILTER set (scripts/test.sh --filter REGEX) only the tests whose
# name matches run (`bats --filter`), with CXLKV_TEST_TAGS (scripts/test.sh
# --tags LIST) only those with the tags (`bats --filter-tags`, e.g. "health"
# or "dra,!controller"); a file with none to run reports 1..0.
# Returns non-zero when anything failed. The seconds of every file go to the
# caller's array BATS_SECONDS ("<seconds> <file>"), for its closing summary.
#
#   cxlkv_bats_close <stage name>            # "NAME: N passed, N failed, N skipped"; its status
#
# A --filter or --tags that selects no test of the stage counts as one
# failure (a typo in a name must not read as a pass).
cxlkv_bats() {  # cxlkv_bats <stage name> <file.bats>...
  local name=$1 f tap rc t0 plan p s fl n_all
  shift
  local args=(--tap --timing)
  [ -n "${CXLKV_TEST_FILTER:-}" ] && args+=(--filter "$CXLKV_TEST_FILTER")
  [ -n "${CXLKV_TEST_TAGS:-}" ] && args+=(--filter-tags "$CXLKV_TEST_TAGS")
  local bad=0
  [ -n "${BATS_SECONDS+x}" ] || BATS_SECONDS=()
  for f in "$@"; do
    echo "== $name: ${f#"${CXLKV_ROOT:-$PWD}/"}"
    tap=$(mktemp)
    t0=$SECONDS
    bats "${args[@]}" "$f" 2>&1 | tee "$tap"
    rc=${PIPESTATUS[0]}
    BATS_SECONDS+=("$(printf '%5d s  %s' $((SECONDS - t0)) "${f#"${CXLKV_ROOT:-$PWD}/"}")")
    plan=$(sed -n 's/^1\.\.\([0-9][0-9]*\)$/\1/p' "$tap" | head -1)
    s=$(grep -cE '^ok [0-9]+ .* # skip' "$tap")
    p=$(grep -cE '^ok [0-9]+' "$tap"); p=$((p - s))
    fl=$(grep -cE '^not ok [0-9]+' "$tap")
    rel=${f#"${CXLKV_ROOT:-$PWD}/"}
    # Each failed test by name (scripts/lib/stage.sh: test.sh repeats these
    # lines at the end of the run); --timing adds " in <N>ms" to the name.
    sed -nE 's/^not ok [0-9]+ (.*)$/\1/p' "$tap" | sed -E 's/ in [0-9]+ms$//' |
      while read -r t; do printf 'failed test: %s: %s\n' "$rel" "$t"; done
    rm -f "$tap"
    if [ -z "$plan" ]; then
      echo "$name: bats printed no plan for $f (exit status $rc): counted as one failure"
      printf 'failed test: %s: bats printed no plan (exit status %s)\n' "$rel" "$rc"
      fl=$((fl + 1))
    else
      n_all=$((p + s + fl))
      if [ "$n_all" -lt "$plan" ]; then
        echo "$name: $f planned $plan tests, $n_all reported: $((plan - n_all)) counted as failed"
        printf 'failed test: %s: %s planned tests never reported\n' "$rel" $((plan - n_all))
        fl=$((fl + plan - n_all))
      fi
      [ "$rc" -ne 0 ] && [ "$fl" -eq 0 ] && { echo "$name: bats exited $rc on $f";
        printf 'failed test: %s: bats exited %s\n' "$rel" "$rc"; fl=1; }
    fi
    passed=$((passed + p)); skipped=$((skipped + s)); failed=$((failed + fl))
    [ "$fl" -gt 0 ] && bad=1
  done
  return $bad
}

cxlkv_bats_close() {  # cxlkv_bats_close <stage name>: the closing line; false if anything failed
  if [ -n "${CXLKV_TEST_FILTER:-}${CXLKV_TEST_TAGS:-}" ] && [ $((passed + failed + skipped)) -eq 0 ]; then
    echo "$1: no test matches --filter '${CXLKV_TEST_FILTER:-}' --tags '${CXLKV_TEST_TAGS:-}'"
    failed=1
  fi
  if [ -n "${BATS_SECONDS+x}" ] && [ ${#BATS_SECONDS[@]} -gt 0 ]; then
    echo "$1: seconds per file:"
    printf '  %s\n' "${BATS_SECONDS[@]}"
  fi
  echo "$1: $passed passed, $failed failed, $skipped skipped"
  [ "$failed" -eq 0 ]
}
