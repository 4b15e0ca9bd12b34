#!/usr/bin/env bash
# Stage: every C, C++ and CUDA file of the tree (third_party/ excepted) is
# formatted as clang-format-14 (Debian 12's) formats it with the root
# .clang-format. One test per file. To fix a file: clang-format-14 -i FILE.
# Warm: about 10 s on 2 cores.
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0
trap 'echo "format: $passed passed, $failed failed, $skipped skipped"' EXIT

CF=${CLANG_FORMAT:-clang-format-14}
if ! command -v "$CF" >/dev/null; then
  echo "format: $CF not found (scripts/setup.sh installs clang-format-14)"
  failed=1; exit 1
fi
# Tracked files plus new ones git does not ignore; outside git, every file.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  list() { git ls-files --cached --others --exclude-standard -- "$@"; }
else
  list() { find . -type f \( -name '*.c' -o -name '*.cc' -o -name '*.h' -o -name '*.cu' \) | sed 's#^\./##'; }
fi
mapfile -t files < <(list '*.c' '*.cc' '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh' |
                     grep -vE '^(third_party|build[^/]*)/' | sort -u)
for f in "${files[@]}"; do
  [ -f "$f" ] || continue  # deleted in the work tree, not yet in the index
  if "$CF" --style=file --dry-run -Werror "$f" 2>/dev/null; then
    passed=$((passed + 1))
  else
    echo "format: $f is not clang-format-14 clean (clang-format-14 -i $f):"
    "$CF" --style=file "$f" | diff -u "$f" - | head -20
    failed=$((failed + 1))
  fi
done
[ "$failed" -eq 0 ]
