#!/usr/bin/env bash
# Mutation check of the DRA controller's unit test (dra/controller/
# controller_test.cc): one deliberate bug per concept of dra/controller/,
# applied one at a time to the work tree, controller_test rebuilt in build/
# and run; the file is restored after each. Prints one line per mutant
# (caught: the test failed; MISSED: it passed) and the totals; exits non-zero
# when fewer than 8 are caught or a mutant no longer applies (the code moved:
# update its pattern). Not a test stage: run it by hand after changing the
# controller or its test (about 1 min per mutant on 2 cores).
#   test/scripts/dra-controller-mutants.sh [NAME...]   (default: all)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/lib/stage.sh"
cd "$ROOT"
JOBS=${JOBS:-2}

# name | file | perl substitution (applied once, with -0: patterns may span lines)
MUTANTS=(
  'claim-json|dra/controller/claim_json.cc|s/  if \(tag\.rfind\(prefix, 0\) != 0\) return false;\n//'
  'slices|dra/controller/slices.cc|s/if \(fixed_devices && lb != live\.end\(\)\)/if (lb != live.end())/'
  'feature-probe|dra/controller/feature_probe.cc|s/d\["capacity"\]\["memory"\]\.contains\("requestPolicy"\)/true/'
  'resync|dra/controller/resync.cc|s/it != live\.end\(\) && it->second == ts/it != live.end()/'
  'reconcile|dra/controller/reconcile.cc|s/  if \(deleting\) return SyncStep::kIdle;[^\n]*\n//'
  'reconcile-watch|dra/controller/reconcile.cc|s/std::chrono::milliseconds\(2000\)\);/std::chrono::milliseconds(20000));/'
  'ownership|dra/controller/ownership.cc|s/    seen->since = now;\n//'
  'compose|dra/controller/compose.cc|s/\(bytes \+ kMiB - 1\) \/ kMiB/bytes \/ kMiB/'
  'compose-watch|dra/controller/compose.cc|s/      if \(starting\.count\(n\)\) \*watch = true;\n//'
  'conditions|dra/controller/conditions.cc|s/== "True" &&(\s*)same_region\)/== "True" \&\&${1}true)/'
  'release|dra/controller/release.cc|s/for \(size_t i = fins\.size\(\); i-- > 0;\)/for (size_t i = 0; i < fins.size(); ++i)/'
  'release-attempts|dra/controller/release.cc|s/if \(n < opt\.max_free_attempts\)/if (n <= opt.max_free_attempts)/'
  'lifecycle|dra/controller/controller.cc|s/  if \(opt->flow == "paper"\) opt->flow = "prepare-wait";\n//'
  'hostd-client|hostd/src/wire.cc|s/,\s*\{"assignEpoch", req\.assign_epoch\}//'
)

want=("$@")
saved=""
restore() { [ -n "$saved" ] && cp "$saved" "$file" && rm -f "$saved"; saved=""; }
trap restore EXIT INT TERM

echo "== mutants: build controller_test once unmutated"
cxlkv_build_main controller_test >/dev/null || { echo "build failed"; exit 1; }
build/bin/controller_test >/dev/null 2>&1 || { echo "controller_test fails unmutated"; exit 1; }

caught=0; missed=0; stale=0
for m in "${MUTANTS[@]}"; do
  IFS='|' read -r name file expr <<<"$m"
  if [ ${#want[@]} -gt 0 ] && ! printf '%s\n' "${want[@]}" | grep -qx "$name"; then continue; fi
  saved=$(mktemp)
  cp "$file" "$saved"
  perl -0pi -e "$expr" "$file"
  if cmp -s "$file" "$saved"; then
    echo "STALE  $name: the pattern no longer matches $file"
    stale=$((stale + 1)); restore; continue
  fi
  if ! cxlkv_build_main controller_test >/dev/null 2>&1; then
    echo "caught $name ($file): does not compile"
    caught=$((caught + 1)); restore; continue
  fi
  out=$(build/bin/controller_test 2>&1)
  if [ $? -ne 0 ]; then
    failing=$(grep -E '^\[  FAILED  \] [A-Za-z]+\.[A-Za-z]+' <<<"$out" | awk '{print $4}' | sort -u |
              paste -sd, -)
    echo "caught $name ($file): $failing"
    caught=$((caught + 1))
  else
    echo "MISSED $name ($file)"
    missed=$((missed + 1))
  fi
  restore
done
cxlkv_build_main controller_test >/dev/null 2>&1  # the unmutated objects again
echo "mutants: $caught caught, $missed missed, $stale stale"
[ "$stale" -eq 0 ] && [ "$caught" -ge 8 ]
