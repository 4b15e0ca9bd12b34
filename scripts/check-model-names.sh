#!/usr/bin/env bash
# Checks that every failpoint and C++ function the Spin model names still
# exists in the engine, so the model and the code cannot drift apart
# silently (docs/model.md).
#
#   scripts/check-model-names.sh                 # check model/*.pml against src/region/
#   scripts/check-model-names.sh --self-test     # prove the check fails on a bogus name
#   scripts/check-model-names.sh -D OLD_PROTOCOL # the names of one variant only
#   scripts/check-model-names.sh [--src DIR] [-D NAME]... FILE...
#
# A model file is read through the C preprocessor (as Spin reads it), with
# the -D flags given, so a step that only one variant has is checked only
# when that variant is.
# The model marks each step with `@fp NAME` (a CXLKV_FAILPOINT_HIT name) or
# `@fn NAME` (a function: `Class::Method` must be defined in a .cc file as
# `Class::Method(`; a plain name must appear as `NAME(` in a .h or .cc file).
# Exits 1 naming every missing one.
set -uo pipefail
cd "$(dirname "$0")/.."

src=src/region
files=()
self_test=0
defs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --src) src=$2; shift 2 ;;
    -D) defs+=("-D$2"); shift 2 ;;
    -D*) defs+=("$1"); shift ;;
    --self-test) self_test=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) files+=("$1"); shift ;;
  esac
done

if [ $self_test = 1 ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  printf '/* @fn RegionImpl::CommitWrite */\n/* @fp write.after_claim */\n' > "$tmp/good.pml"
  printf '/* @fn RegionImpl::CommitWrite */\n/* @fn RegionImpl::NoSuchStepForSelfTest */\n/* @fp no.such.failpoint */\n/* @fn NoSuchFreeFunction */\n' > "$tmp/bad.pml"
  ok=1
  if ! "$0" --src "$src" "$tmp/good.pml" > "$tmp/good.out" 2>&1; then
    echo "check-model-names self-test: a model naming only existing steps was refused:"
    cat "$tmp/good.out"; ok=0
  fi
  if "$0" --src "$src" "$tmp/bad.pml" > "$tmp/bad.out" 2>&1; then
    echo "check-model-names self-test: bogus names were accepted"; ok=0
  fi
  for name in RegionImpl::NoSuchStepForSelfTest no.such.failpoint NoSuchFreeFunction; do
    grep -qF "missing: $name " "$tmp/bad.out" || {
      echo "check-model-names self-test: '$name' was not reported missing"; ok=0
    }
  done
  if grep -qF "missing: RegionImpl::CommitWrite " "$tmp/bad.out"; then
    echo "check-model-names self-test: an existing name was reported missing"; ok=0
  fi
  [ $ok = 1 ] && echo "check-model-names self-test: ok (bogus names refused, real ones accepted)"
  [ $ok = 1 ]; exit $?
fi

[ ${#files[@]} -eq 0 ] && files=(model/*.pml)
[ -d "$src" ] || { echo "check-model-names: no source directory $src"; exit 1; }

missing=0; checked=0
while read -r kind name; do
  [ -n "$name" ] || continue
  checked=$((checked + 1))
  case "$kind" in
    @cpp-failed) echo "check-model-names: the preprocessor failed on $name"; missing=$((missing + 1)); continue ;;
    @fp) grep -rqF --include='*.cc' "CXLKV_FAILPOINT_HIT(\"$name\")" "$src" && continue ;;
    @fn)
      if [[ $name == *::* ]]; then
        grep -rqE --include='*.cc' "(^|[^A-Za-z0-9_:])${name}\(" "$src" && continue
      else
        grep -rqE --include='*.cc' --include='*.h' "(^|[^A-Za-z0-9_:])${name}\(" "$src" && continue
      fi ;;
  esac
  echo "missing: $name (the model names it as $kind; not found in $src)"
  missing=$((missing + 1))
done < <(for f in "${files[@]}"; do
           # Only the steps of the variant asked for (-D), as Spin sees it.
           cpp -C -P -I "$(dirname "$f")" "${defs[@]}" "$f" ||
             echo "@cpp-failed $f"
         done | grep -ohE '@(f[pn]|cpp-failed) [A-Za-z_./][A-Za-z0-9_./:-]*[A-Za-z0-9_]' | sort -u)

if [ $checked = 0 ]; then
  echo "check-model-names: no @fp/@fn names in ${files[*]}"; exit 1
fi
echo "check-model-names: $checked names checked (${defs[*]:-no -D flags}), $missing missing"
[ $missing = 0 ]
