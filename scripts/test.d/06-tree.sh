#!/usr/bin/env bash
# Stage: checks of the tree itself, no build.
#  - every file that starts with "#!" is executable in git and on disk (the
#    docs tell users to run them as commands: `test/e2e/cluster.sh up`).
#  - the engine's doors: no C/C++/CUDA file outside src/region/ (the engine
#    and its tests) and fuzz/ (the fuzzer) includes region_impl.h, layout.h,
#    mapping.h or geometry.h; the rest of the tree reaches the engine through
#    include/cxlkv/ and src/region/region_internal.h. The check is first run
#    on a planted violation, so a check that matches nothing fails too.
#  - scripts/test.sh's background lane (test/scripts/lane-check.sh, stand-in
#    stages): a failing lane stage turns the run red and is named; SIGINT
#    leaves none of a lane stage's commands running.
#  - a repository that stands alone and reference docs without run history
#    (test/scripts/docs-check.sh, each check first proven on a planted
#    tree): no file points into the shared directory beside the clone; no
#    commit hash, load average, run date or work-period word in README.md,
#    test/README.md or docs/ outside docs/results/.
# Warm: about 7 s on 2 cores (the lane check about 5 s of it, mostly waits;
# the docs check under 1 s).
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0
trap 'echo "tree: $passed passed, $failed failed, $skipped skipped"' EXIT

in_git=0
git rev-parse --is-inside-work-tree >/dev/null 2>&1 && in_git=1

if [ "$in_git" -eq 0 ]; then
  echo "tree: not a git checkout; file modes are not checked"
  skipped=$((skipped + 1))
else
  bad_modes=0
  while read -r mode _ _ path; do
    [ -f "$path" ] && [ "$(head -c2 "$path" | tr -d '\0')" = '#!' ] || continue
    if [ "$mode" != 100755 ] || [ ! -x "$path" ]; then
      echo "tree: $path starts with #! but is not executable (git update-index --chmod=+x $path)"
      bad_modes=$((bad_modes + 1))
    fi
  done < <(git ls-files -s)
  if [ "$bad_modes" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
fi

# Prints "FILE:LINE: ..." for each include of an engine-private header in the
# named files (paths relative to the current directory) that lie outside
# src/region/ and fuzz/.
door_violations() {
  local f
  for f in "$@"; do
    case "$f" in src/region/* | fuzz/*) continue ;; esac
    [ -f "$f" ] || continue
    grep -nHE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]([^">]*/)?(region_impl|layout|mapping|geometry)\.h[">]' \
      "$f" || true
  done
}

planted=$(mktemp -d)
mkdir -p "$planted/tools/x" "$planted/src/region"
printf '#include "kv_layout.h"\n#include "region_internal.h"\n' >"$planted/tools/x/ok.cc"
printf '#include <cstdint>\n  #  include "../../src/region/layout.h"\n' >"$planted/tools/x/bad.cc"
printf '#include "region_impl.h"\n' >"$planted/src/region/inside.cc"
found=$(cd "$planted" && door_violations tools/x/ok.cc tools/x/bad.cc src/region/inside.cc)
rm -rf "$planted"
if [ "$found" = 'tools/x/bad.cc:2:  #  include "../../src/region/layout.h"' ]; then
  passed=$((passed + 1))
else
  echo "tree: the door check does not find exactly the planted violation; it found:"
  echo "${found:-(nothing)}"
  failed=$((failed + 1))
fi

if [ "$in_git" -eq 1 ]; then
  mapfile -t sources < <(git ls-files --cached --others --exclude-standard -- \
                           '*.c' '*.cc' '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh' |
                         grep -vE '^(third_party|build[^/]*)/' | sort -u)
else
  mapfile -t sources < <(find . -type f \( -name '*.c' -o -name '*.cc' -o -name '*.cpp' \
                           -o -name '*.h' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) |
                         sed 's#^\./##' | grep -vE '^(third_party|build[^/]*)/' | sort)
fi
violations=$(door_violations "${sources[@]}")
if [ -z "$violations" ]; then
  passed=$((passed + 1))
else
  echo "tree: engine-private headers included outside src/region/ and fuzz/ (use"
  echo "      include/cxlkv/ or src/region/region_internal.h):"
  echo "$violations"
  failed=$((failed + 1))
fi

if docs=$(test/scripts/docs-check.sh 2>&1); then
  passed=$((passed + 1))
else
  echo "$docs"
  failed=$((failed + 1))
fi

if lane=$(test/scripts/lane-check.sh 2>&1); then
  passed=$((passed + 1))
else
  echo "$lane"
  failed=$((failed + 1))
fi
[ "$failed" -eq 0 ]
