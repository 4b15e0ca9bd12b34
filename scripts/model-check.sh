#!/usr/bin/env bash
# Model-checks the slot and participant protocol (model/, docs/model.md) with
# Spin: the names the model cites must exist in src/region/; the current
# protocol (layout 5: index entries naming data slots, each data word naming
# the lease that holds it) must satisfy every property, with the pause that
# found F1 (l5-f1), two writers, and Drop's take, restore and free beside a
# reader and an evictor (l5-drop-*), and its mutants must not; layout 5 as
# first landed (the data word naming a participant, -DPARTICIPANT_WORD)
# must show F1; format-or-attach must satisfy every property; the old
# protocol (layout v1) must show defect 1 (a paused writer's bytes served as
# a hit) and defect 3 (a slot that never settles); software mode (layout 6:
# entries apart from data slots, SW2b, the sweep's give-back) must satisfy
# every property, and its mutants (SW2b's flush, every other flush and
# invalidate site, the give-back, the sweep's tag line rewrite and payload
# check) must not (docs/model.md).
#
#   scripts/model-check.sh              # the default bounds (the test stage)
#   scripts/model-check.sh --full       # larger bounds as well (minutes, GBs)
#   scripts/model-check.sh --only NAME  # one case (see the table below)
#   scripts/model-check.sh --list
#
# Prints one table row per case (states stored, transitions, depth, memory,
# seconds), the counterexample summary of each expected violation, and the
# closing line `model: N passed, N failed, N skipped`. MODEL_MEMLIM_MB caps
# the memory of each default verifier (2048), MODEL_FULL_MEMLIM_MB of each
# --full one (6144).
set -uo pipefail
cd "$(dirname "$0")/.."

FULL=0; ONLY=""; LIST=0
while [ $# -gt 0 ]; do
  case "$1" in
    --full) FULL=1; shift ;;
    --only) ONLY=$2; shift 2 ;;
    --list) LIST=1; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "model-check: unknown argument $1"; exit 2 ;;
  esac
done
MEM=${MODEL_MEMLIM_MB:-2048}
FULL_MEM=${MODEL_FULL_MEMLIM_MB:-6144}

# name | tier (default/full) | expectation (pass, or violation:TEXT of the
# assertion that must fail) | spin -D flags (bounds: docs/model.md) | state
# storage (default -DCOLLAPSE, exact; the hardware-mode full cases use
# -DHC4, hash compaction: a hash collision can hide a state; so does sw-l6,
# whose exact search does not fit 6 GB).
# Cases named fmt-* check
# model/format.pml, sw-* model/coherence.pml (software mode), the others
# model/slot_protocol.pml. `violation:` with no text accepts any assertion
# (the mutants: one per flush and invalidate site of coherence.pml, each
# removed in turn with -DDROP=n, must each break some property).
L5="-DOPS=1 -DNSLOT=1 -DNK=2 -DNO_REGION_CRC"
L5_READ_EVICT="$L5 -DP0OP=2 -DP0KEY=2 -DP1OP=1 -DP1KEY=1"
L5_TWO_WRITERS="$L5 -DP0OP=1 -DP0KEY=1 -DP1OP=1 -DP1KEY=2"
# Drop (docs/model.md): P0 drops the preloaded key while P1 loads it, then
# stores key 1 (evicting it); steal: three workers, P0 drops it while P1's
# store evicts it and P2 loads (pins) it.
L5_DROP="$L5 -DOPS0=1 -DOPS=2 -DP0OP=3 -DP0KEY=2 -DP1OP=2 -DP1KEY=2 -DP1OP2=1 -DP1KEY2=1"
L5_DROP_STEAL="$L5 -DNP=3 -DP0OP=3 -DP0KEY=2 -DP1OP=1 -DP1KEY=1 -DP2OP=2 -DP2KEY=2"
# Software mode, layout 6 (model/coherence.pml): NE=2 index entries and
# ND=1 data slot, so every Store after the preloaded block reuses a data slot
# another entry named (SW2b). giveback: R stores while the paused old holder
# still runs, so the old holder's late lines (meta, tag, payload) land over
# R's READY entry.
SW6="-DNE=2 -DND=1 -DNK=2 -DOPS=1"
SW6_GIVEBACK="$SW6 -DCRASHES=0 -DRLOADS=0 -DRSTORES=1 -DOPS1=0"
CASES=(
  "l5-read-evict|default|pass|$L5_READ_EVICT -DCHECK_READS_ONLY"
  "l5-crash-read-evict|default|pass|$L5_READ_EVICT -DPAUSES=0 -DCRASHES=2"
  "l5-crash-two-writers|default|pass|$L5_TWO_WRITERS -DPAUSES=0 -DCRASHES=2"
  "l5-f1|default|pass|$L5_READ_EVICT"
  "l5-lease-two-writers|default|pass|$L5_TWO_WRITERS"
  "l5-participant-word|default|violation:dsst[mem|$L5_READ_EVICT -DPARTICIPANT_WORD"
  "l5-mut-any-lease|default|violation:dsst[mem|$L5_TWO_WRITERS -DMUT_ANY_LEASE"
  "l5-mut-entry-only|default|violation:dsst[mem|$L5_TWO_WRITERS -DMUT_ENTRY_ONLY"
  "l5-drop-restore|default|pass|$L5_DROP"
  "l5-mut-data-first|default|violation:dsst[mem|$L5_DROP -DMUT_DATA_FIRST"
  "l5-drop-steal|default|pass|$L5_DROP_STEAL -DCRASHES=0 -DPAUSES=0"
  "l5-drop-evicting|default|violation:(sst[s]==0)|$L5_DROP_STEAL -DCRASHES=0 -DPAUSES=0 -DDROP_TAKES_EVICTING"
  "l5-region-crc|default|violation:got==snap|-DOPS=1 -DNSLOT=1 -DNK=2 -DP0OP=1 -DP0KEY=1 -DP1OP=1 -DP1KEY=2 -DCRASHES=0 -DCHECK_READS_ONLY"
  "v1-defect1|default|violation:got==snap|-DOLD_PROTOCOL -DCHECK_READS_ONLY -DNO_REGION_CRC"
  "v1-defect3|default|violation:sst[s]|-DOLD_PROTOCOL -DCHECK_SETTLE_ONLY -DNO_REGION_CRC"
  "fmt-2openers|default|pass|-DNO=2 -DNCHUNK=2 -DCRASHES=1"
  "fmt-limit|default|violation:nattached==0|-DNO=2 -DNCHUNK=1 -DCRASHES=0 -DFORMAT_LIMIT"
  "sw-l6-nomove|default|pass|$SW6 -DCRASHES=0 -DPAUSES=0"
  "sw-l6-crash|default|pass|$SW6 -DPAUSES=0"
  "sw-l6-giveback|default|pass|$SW6_GIVEBACK"
  "sw-l6-no-giveback|default|violation:hq[|$SW6_GIVEBACK -DNO_VISIBLE -DNO_GIVEBACK"
  "sw-l6-no-repair|default|violation:hit|$SW6_GIVEBACK -DNO_REPAIR"
  "sw-v3|default|violation:legit[|$SW6 -DV3_PROTOCOL -DCHECK_READS_ONLY"
  "sw-hb-in-rec|default|violation:legit[|$SW6 -DHB_IN_REC -DCHECK_READS_ONLY -DCRASHES=0 -DRLOADS=0"
  "l5-two-writers|full|pass|$L5_TWO_WRITERS -DCHECK_READS_ONLY"
  "l5-drop-steal-crash|full|pass|$L5_DROP_STEAL -DPAUSES=0"
  "v2-region-crc|full|violation:got==snap|-DV2_PROTOCOL -DOPS=1 -DNSLOT=1 -DNK=2"
  "v2-1slot|full|pass|-DV2_PROTOCOL -DOPS=1 -DNSLOT=1 -DNK=2 -DNO_REGION_CRC"
  "v2-2slots|full|pass|-DV2_PROTOCOL -DOPS=1 -DNSLOT=2 -DNK=1 -DNO_REGION_CRC"
  "v2-unbound|full|violation:got==snap|-DV2_PROTOCOL -DUNBOUND_CRC -DCHECK_READS_ONLY -DNO_REGION_CRC"
  "v2-ops2|full|pass|-DV2_PROTOCOL -DOPS0=1 -DOPS=2 -DNSLOT=1 -DNK=2 -DNO_REGION_CRC|-DHC4"
  "v2-2slots-2keys|full|pass|-DV2_PROTOCOL -DOPS=1 -DNSLOT=2 -DNK=2 -DNO_REGION_CRC|-DHC4"
  "v2-rcrash|full|pass|-DV2_PROTOCOL -DOPS=1 -DNSLOT=2 -DNK=1 -DRCRASHES=1 -DCRASHES=2 -DNO_REGION_CRC|-DHC4"
  "fmt-3openers|full|pass|-DNO=3 -DNCHUNK=1 -DCRASHES=1|-DHC4"
  "sw-l6|full|pass|$SW6|-DHC4"
  "sw-l6-pause|full|pass|$SW6 -DCRASHES=0"
  "sw-l6-2data|full|pass|$SW6 -DND=2 -DCRASHES=0 -DPAUSES=0"
  "sw-l6-3entries|full|pass|$SW6 -DNE=3 -DCRASHES=0 -DPAUSES=0"
  "sw-l6-unbound-data|full|pass|$SW6_GIVEBACK -DNO_VISIBLE -DUNBOUND_DATA -DCHECK_READS_ONLY"
)
# The software-mode mutants: every flush/invalidate site of coherence.pml
# (its S_* numbers 1..15, 1 being SW2b's), each removed in turn, must be
# caught; site 9 (SR3's re-read) with the lease never moving, where the
# clean-reads property catches it at once (with every fault on, the search
# runs minutes before reaching it); sites 14 and 15 (the sweep's tag line
# flush, the payload check's invalidate) in the give-back case, where R
# stores while the paused old holder runs.
for n in $(seq 1 15); do
  flags="$SW6 -DDROP=$n"
  [ "$n" = 9 ] && flags="$flags -DCRASHES=0 -DPAUSES=0"
  [ "$n" -ge 14 ] && flags="$SW6_GIVEBACK -DDROP=$n"
  CASES+=("sw-drop-$n|default|violation:|$flags")
done

if [ $LIST = 1 ]; then
  printf '%s\n' "${CASES[@]}" | tr '|' '\t'
  exit 0
fi

passed=0; failed=0; skipped=0

# The names each variant that runs cites must exist in src/region/ (and the
# check must be able to fail: its self-test feeds it bogus names).
variants=()
for c in "${CASES[@]}"; do
  IFS='|' read -r name tier _ defs <<< "$c"
  [ -n "$ONLY" ] && [ "$name" != "$ONLY" ] && continue
  [ "$tier" = full ] && [ $FULL = 0 ] && [ -z "$ONLY" ] && continue
  v=default
  for flag in -DOLD_PROTOCOL -DV2_PROTOCOL -DV3_PROTOCOL -DHB_IN_REC -DPARTICIPANT_WORD; do
    [[ " $defs " == *" $flag "* ]] && v=$flag
  done
  variants+=("$v")
done
echo "== model names (scripts/check-model-names.sh)"
if scripts/check-model-names.sh --self-test; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
fi
for v in $(printf '%s\n' "${variants[@]}" | sort -u); do
  flag=()
  [ "$v" = default ] || flag=("$v")
  if scripts/check-model-names.sh "${flag[@]}"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done

if ! command -v spin > /dev/null 2>&1 || ! command -v gcc > /dev/null 2>&1; then
  echo "model-check: spin and gcc are needed (scripts/setup.sh installs them)"
  echo "model: $passed passed, $((failed + 1)) failed, $skipped skipped"
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
CC_LAUNCHER=()
command -v ccache > /dev/null 2>&1 && CC_LAUNCHER=(ccache)

# Reads pan's report: sets states, trans, depth, mem_mb, secs, errors, complete.
parse_pan() {  # parse_pan <log>
  local log=$1
  states=$(grep -oE '^ *[0-9.e+]+ states, stored' "$log" | grep -oE '[0-9.e+]+' | head -1)
  trans=$(grep -oE '^ *[0-9.e+]+ transitions' "$log" | grep -oE '[0-9.e+]+' | head -1)
  depth=$(grep -oE 'depth reached [0-9]+' "$log" | grep -oE '[0-9]+$' | head -1)
  errors=$(grep -oE 'errors: [0-9]+' "$log" | grep -oE '[0-9]+$' | head -1)
  mem_mb=$(grep -E 'total actual memory usage' "$log" | grep -oE '^ *[0-9.]+' | tr -d ' ' | head -1)
  secs=$(grep -oE 'elapsed time [0-9.e+]+' "$log" | grep -oE '[0-9.e+]+$' | tail -1)
  complete=1
  grep -qE 'Search not completed|max search depth too small|out of memory' "$log" && complete=0
  : "${states:=?}" "${trans:=?}" "${depth:=?}" "${errors:=?}" "${mem_mb:=?}" "${secs:=?}"
}

rows=()
summaries=()
for c in "${CASES[@]}"; do
  IFS='|' read -r name tier expect defs store <<< "$c"
  : "${store:=-DCOLLAPSE}"
  [ -n "$ONLY" ] && [ "$name" != "$ONLY" ] && continue
  if [ "$tier" = full ] && [ $FULL = 0 ] && [ -z "$ONLY" ]; then
    skipped=$((skipped + 1))
    rows+=("$(printf '%-16s %-22s %-8s %s' "$name" "${expect%%:*}" skipped '(--full)')")
    continue
  fi
  mem=$MEM
  pml=slot_protocol.pml
  [[ $name == fmt-* ]] && pml=format.pml
  [[ $name == sw-* ]] && pml=coherence.pml
  [ "$tier" = full ] && mem=$FULL_MEM
  echo "== case $name: spin $defs (verifier $store, memory cap $mem MB)"
  d=$work/$name
  mkdir -p "$d"
  cp model/*.pml "$d/"
  log=$d/pan.log
  # The verifier's compile (gcc -O2 of a ~400 KB pan.c, about 9 s of CPU)
  # is nearly all of a small case's time, so it goes through ccache where
  # there is one: pan.c is the model with these flags spelled out, so an
  # unchanged model and case hit the cache, and any change misses it. The
  # search itself always runs.
  # shellcheck disable=SC2086
  if ! (cd "$d" && spin $defs -a $pml > spin.log 2>&1 &&
        "${CC_LAUNCHER[@]}" gcc -O2 -DSAFETY $store -DMEMLIM="$mem" -c -o pan.o pan.c > gcc.log 2>&1 &&
        gcc -o pan pan.o >> gcc.log 2>&1); then
    cat "$d/spin.log" "$d/gcc.log" 2>/dev/null
    failed=$((failed + 1))
    rows+=("$(printf '%-16s %-22s %-8s %s' "$name" "${expect%%:*}" FAILED '(spin/gcc failed)')")
    continue
  fi
  wall0=$(date +%s%N)
  (cd "$d" && ./pan -m1000000 > pan.log 2>&1)
  wall_ms=$((($(date +%s%N) - wall0) / 1000000))
  wall=$((wall_ms / 1000)).$(printf '%03d' $((wall_ms % 1000)) | cut -c1)
  parse_pan "$log"
  verdict=FAILED
  case "$expect" in
    pass)
      if [ "$errors" = 0 ] && [ $complete = 1 ]; then verdict=ok; fi ;;
    violation:*)
      want=${expect#violation:}
      if [ "$errors" != 0 ] && grep -qF "assertion violated" "$log" &&
         grep "assertion violated" "$log" | grep -qF "$want"; then
        verdict=ok
        trail=$(cd "$d" && spin $defs -t $pml 2>&1 |
                sed -n 's/^ *MSC: /  /p; s/^spin: text of failed assertion: /  violated: /p')
        summaries+=("counterexample of $name (the expected violation):"$'\n'"$trail")
      fi ;;
  esac
  if [ $verdict = ok ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  rows+=("$(printf '%-16s %-22s %-8s %12s %12s %6s %9s %7s %7s' "$name" "${expect%%:*}" \
            "$verdict" "$states" "$trans" "$depth" "$mem_mb" "$secs" "$wall")")
  if [ $verdict != ok ]; then
    echo "model-check: case $name expected '$expect'; pan reported:"
    grep -E 'violated|errors:|Search not completed|max search depth|out of memory|invalid end state' "$log"
    [ "$expect" = pass ] && [ "$errors" != 0 ] &&
      (cd "$d" && spin $defs -t $pml 2>&1 |
       sed -n 's/^ *MSC: /  /p; s/^spin: text of failed assertion: /  violated: /p')
  fi
done

echo
printf '%-16s %-22s %-8s %12s %12s %6s %9s %7s %7s\n' case expect result states transitions \
  depth "mem(MB)" "pan(s)" "wall(s)"
printf '%s\n' "${rows[@]}"
for s in "${summaries[@]}"; do
  echo
  echo "$s"
done
echo
echo "model: $passed passed, $failed failed, $skipped skipped"
[ $failed = 0 ]
