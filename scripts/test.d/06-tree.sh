#!/usr/bin/env bash
# Stage: checks of the tree itself, no build.
#  - every file that starts with "#!" is executable in git and on disk (the
#    docs tell users to run them as commands: `test/e2e/cluster.sh up`).
#  - every room's door (test/scripts/door_check.py): no C/C++/CUDA file
#    includes another room's private header: the engine's (region_impl.h,
#    layout.h, ... outside src/region/ and fuzz/; the rest of the tree
#    reaches it through include/cxlkv/ and src/region/region_internal.h),
#    the GPU path's, kube's, fabric's, fabricd's, hostd's (their src/), and
#    each DRA part's. The check is first run on a planted tree with one
#    violation per kind of door, so a check that matches nothing fails too.
#  - scripts/test.sh's background lane (test/scripts/lane-check.sh, stand-in
#    stages): a failing lane stage turns the run red and is named; SIGINT
#    leaves none of a lane stage's commands running.
#  - a repository that stands alone and reference docs without run history
#    (test/scripts/docs-check.sh, each check first proven on a planted
#    tree): no file points into the shared directory beside the clone; no
#    commit hash, load average, run date or work-period word in README.md,
#    test/README.md or docs/ outside docs/results/; every relative link of
#    the tree's Markdown files names a file that exists.
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

# Every room's door (test/scripts/door_check.py: the rooms, their doors and
# allowed outsiders): prints "FILE:LINE: ..." for each include of another
# room's private header in the named files (paths relative to ROOT).
door_violations() {  # door_violations ROOT FILE...
  python3 "$CXLKV_ROOT/test/scripts/door_check.py" "$@"
}

# The check proven on a planted tree: one violation per kind of door (the
# engine's by a relative path, a room's src/ by a bare name, a DRA part's
# header from the CLI, the GPU path's kernels from the binding), beside
# includes that are fine (a door header, a header beside the file with the
# same name as another room's private one, a room's own private header, a
# DRA part's header from its thin main).
planted=$(mktemp -d)
for h in src/region/layout.h src/region/region_impl.h src/region/region_internal.h \
         src/transfer/sm_copy.h src/transfer/region_gpu.h hostd/src/wire.h \
         hostd/include/cxlkv/hostd/client.h fabricd/src/state.h dra/kubeletplugin/state.h \
         dra/controller/controller.h dra/controller/controller_internal.h; do
  mkdir -p "$planted/$(dirname "$h")" && : >"$planted/$h"
done
mkdir -p "$planted/tools/x" "$planted/tools/cli" "$planted/python" "$planted/cmd/cxlkv-dra-controller"
printf '#include "kv_layout.h"\n#include "region_internal.h"\n' >"$planted/tools/x/ok.cc"
printf '#include <cstdint>\n  #  include "../../src/region/layout.h"\n' >"$planted/tools/x/bad.cc"
printf '#include "region_impl.h"\n' >"$planted/src/region/inside.cc"
printf '#include "cxlkv/hostd/client.h"\n#include "state.h"\n' >"$planted/dra/kubeletplugin/ok.cc"
printf '#include "state.h"\n#include "wire.h"\n' >"$planted/fabricd/src/bad.cc"
printf '#include "controller/controller_internal.h"\n' >"$planted/tools/cli/bad.cc"
printf '#include "region_gpu.h"\n#include <sm_copy.h>\n' >"$planted/python/bad.cc"
printf '#include "controller/controller.h"\n' >"$planted/cmd/cxlkv-dra-controller/main.cc"
found=$(cd "$planted" && door_violations . $(find . -name '*.h' | sed 's#^\./##' | sort) tools/x/ok.cc tools/x/bad.cc src/region/inside.cc \
          dra/kubeletplugin/ok.cc fabricd/src/bad.cc tools/cli/bad.cc python/bad.cc \
          cmd/cxlkv-dra-controller/main.cc)
rm -rf "$planted"
want='tools/x/bad.cc:2:   #  include "../../src/region/layout.h"
fabricd/src/bad.cc:2: #include "wire.h"
tools/cli/bad.cc:1: #include "controller/controller_internal.h"
python/bad.cc:2: #include <sm_copy.h>'
if [ "$found" = "$want" ]; then
  passed=$((passed + 1))
else
  echo "tree: the door check does not find exactly the planted violations; it found:"
  echo "${found:-(nothing)}"
  echo "tree: and should have found:"
  echo "$want"
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
violations=$(door_violations . "${sources[@]}")
if [ -z "$violations" ]; then
  passed=$((passed + 1))
else
  echo "tree: private headers of another room included (use the room's door: its include/,"
  echo "      or the door headers test/scripts/door_check.py lists):"
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
