#!/usr/bin/env bash
# The mutation test of coherence=software (issue 14): every Flush and
# Invalidate call site of the engine's software mode, removed in turn, must
# be caught by the non-coherence emulator suites (src/region/noncoherent_test.cc).
#
#   test/coherence/mutants.sh [BUILD_DIR]      # default build/
#
# 1. Lists the sites in the source: every `vis_->Flush(` / `vis_->Invalidate(`
#    in src/region/*.cc (file:line).
# 2. Runs the suites once with the emulator recording the call sites it sees
#    (CXLKV_EMU_SITES): they must pass, and every source site must have been
#    called (a site no suite reaches is reported: its mutant cannot be caught).
# 3. For each source site, runs the suites with that site's calls turned into
#    no-ops (CXLKV_EMU_DROP_SITES: the return addresses that addr2line maps to
#    that file:line); the mutant is caught when the suites fail.
# Prints one line per site and `mutants: N caught, N survived, N not reached`;
# exits 1 unless every site was reached and caught. The mutant runs shorten
# the suites' phases (CXLKV_EMU_QUICK=1: one catch is enough) and turn the
# emulator's spontaneous write-backs off (CXLKV_EMU_WRITEBACK_EVERY=0), so an
# unflushed line stays in its host's cache.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
BIN=$BUILD/bin/noncoherent_test
SITES_TOOL=$BUILD/bin/emulator_sites
for f in "$BIN" "$SITES_TOOL"; do
  [ -x "$f" ] || { echo "mutants: $f not built (ninja -C $BUILD noncoherent_test emulator_sites)"; exit 1; }
done
command -v addr2line > /dev/null || { echo "mutants: addr2line (binutils) is needed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. The sites in the source.
grep -nE 'vis_->(Flush|Invalidate)\(' src/region/*.cc |
  sed -E 's/^([^:]+):([0-9]+):.*vis_->(Flush|Invalidate)\(.*/\1:\2 \3/' | sort -u > "$tmp/source"
nsrc=$(wc -l < "$tmp/source")
[ "$nsrc" -gt 0 ] || { echo "mutants: no vis_->Flush/Invalidate call in src/region/*.cc"; exit 1; }

# 2. The baseline runs: with spontaneous write-backs (recording the sites
# called), and without (as the mutants run: a line then reaches memory only
# when the engine flushes or invalidates it, so a missing flush shows).
for every in 8 0; do
  echo "== baseline: $BIN (spontaneous write-backs: one per $every calls; 0 = none)"
  rec=()
  [ $every = 8 ] && rec=(CXLKV_EMU_SITES="$tmp/sites")
  if ! env "${rec[@]}" CXLKV_EMU_WRITEBACK_EVERY=$every CXLKV_EMU_QUICK=1 "$BIN" \
       > "$tmp/baseline.log" 2>&1; then
    tail -40 "$tmp/baseline.log"
    echo "mutants: the suites fail without any mutant"
    echo "mutants: 0 caught, 0 survived, $nsrc not reached"
    exit 1
  fi
done
"$SITES_TOOL" "$tmp/sites" > "$tmp/called" || exit 1
# offset -> file:line of the call (addr2line of the return address - 1; -i
# lists the inline chain innermost first: the innermost is the call itself).
while read -r kind off calls object; do
  loc=$(addr2line -e "$object" -i $(printf '0x%x' $((off - 1))) | head -1 |
        sed -E 's/ \(discriminator [0-9]+\)//; s#.*/(src/region/)#\1#')
  echo "$loc $off $kind $calls"
done < "$tmp/called" > "$tmp/mapped"

caught=0; survived=0; unreached=0
printf '%-44s %-10s %8s %s\n' site kind calls result
while read -r loc kind; do
  offs=$(awk -v l="$loc" '$1 == l { print $2 }' "$tmp/mapped" | paste -sd, -)
  calls=$(awk -v l="$loc" '$1 == l { n += $4 } END { print n + 0 }' "$tmp/mapped")
  if [ -z "$offs" ]; then
    unreached=$((unreached + 1))
    printf '%-44s %-10s %8s %s\n' "$loc" "$kind" 0 "NOT REACHED by the suites"
    continue
  fi
  if CXLKV_EMU_DROP_SITES=$offs CXLKV_EMU_WRITEBACK_EVERY=0 CXLKV_EMU_QUICK=1 \
       timeout 120 "$BIN" --gtest_fail_fast \
       > "$tmp/mutant.log" 2>&1; then
    survived=$((survived + 1))
    printf '%-44s %-10s %8s %s\n' "$loc" "$kind" "$calls" "SURVIVED"
  else
    caught=$((caught + 1))
    why=$(grep -m1 -E '^\[  FAILED  \]' "$tmp/mutant.log" | sed 's/^\[  FAILED  \] //; s/ (.*//')
    printf '%-44s %-10s %8s %s\n' "$loc" "$kind" "$calls" "caught (${why:-exit status})"
  fi
done < "$tmp/source"
echo "mutants: $caught caught, $survived survived, $unreached not reached"
[ $survived = 0 ] && [ $unreached = 0 ]
