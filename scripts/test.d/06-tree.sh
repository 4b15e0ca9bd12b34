#!/usr/bin/env bash
# Stage: checks of the tree itself, no build.
#  - every file that starts with "#!" is executable in git and on disk (the
#    docs tell users to run them as commands: `test/e2e/cluster.sh up`).
# Warm: about 2 s.
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0
trap 'echo "tree: $passed passed, $failed failed, $skipped skipped"' EXIT

if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "tree: not a git checkout; file modes are not checked"
  skipped=1; exit 0
fi
bad_modes=0
while read -r mode _ _ path; do
  [ -f "$path" ] && [ "$(head -c2 "$path")" = '#!' ] || continue
  if [ "$mode" != 100755 ] || [ ! -x "$path" ]; then
    echo "tree: $path starts with #! but is not executable (git update-index --chmod=+x $path)"
    bad_modes=$((bad_modes + 1))
  fi
done < <(git ls-files -s)
if [ "$bad_modes" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
[ "$failed" -eq 0 ]
