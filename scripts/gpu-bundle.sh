#!/usr/bin/env bash
# Python packages for the GPU machine, which has no package registry: built
# here into carry-sized parts, taken there one part per call, installed there.
#
#   scripts/gpu-bundle.sh SET [OUTDIR]        # here: build set SET into OUTDIR (default .bundle/SET)
#   scripts/gpu-bundle.sh take SET [DIR]      # there: keep the parts carried in DIR (default .bundle/SET)
#   eval "$(scripts/gpu-bundle.sh install SET)"   # there: once every part is kept; prints exports
#   scripts/gpu-bundle.sh list                # the sets this checkout knows
#
# A set is one file, scripts/gpu-bundle.d/SET.sh (vllm.sh is the model), that
# defines SET_WHEELS (pinned wheels to take as they are), optionally
# SET_TREE_WHEEL (one pinned wheel to unpack, trim with the function
# set_trim and pack as an xz tree: for wheels too big to carry whole),
# SET_ENV (NAME=value lines the installer exports; @DIR@ in a value is the
# set's install directory) and SET_NEEDS (sets whose install must come first;
# their exports are included). Wheels are fetched for CPython 3.12 on
# manylinux x86-64 with no dependencies resolved: a set names every package
# the image lacks. Shared libraries the image may lack: SET_DEBS (Debian
# packages, fetched here with `apt-get download` and unpacked into a private
# prefix, never into /) and SET_ELVES (globs, relative to the install
# directory, of the ELF files that need them): `install` links into
# @DIR@/lib only the libraries ldd says those files cannot find on the
# machine (scripts/lib/private-libs.sh), looking in the prefix and in the
# directories the optional function set_libdirs prints (e.g. the image's CUDA
# runtime), so the image's own libraries are never shadowed.
#
# OUTDIR gets p0, p1, ... : each holds one part (at most PART_MB MiB, default 39) of
# one tar stream and a copy of MANIFEST (part names, sizes, SHA-256). A call
# carries 64 MiB with the checkout (about 11 MiB) counted in, so carry one
# part per call, back to back so the machine stays warm (/tmp survives
# between calls on a warm machine, not a fresh one):
#   carry [".bundle/vllm/p0"]   command: scripts/gpu-bundle.sh take vllm
#   carry [".bundle/vllm/p1"]   command: scripts/gpu-bundle.sh take vllm
#   ...; the last call may also install and run:
#   command: scripts/gpu-bundle.sh take vllm && eval "$(scripts/gpu-bundle.sh install vllm)" && ...
# `take` says which parts are still missing. `install` checks every part's
# SHA-256, unpacks into /tmp/gpu-site/SET (once; a stamp marks it done) and
# prints `export PYTHONPATH=... NAME=value ...` for this set and its SET_NEEDS.
# .bundle/ is ignored by git. Never commit a bundle.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SETS=$HERE/gpu-bundle.d
STORE=${GPU_BUNDLE_STORE:-/tmp/gpu-bundle}   # kept parts, on the GPU machine
SITE=${GPU_BUNDLE_SITE:-/tmp/gpu-site}       # installed sets, on the GPU machine
PART_MB=${PART_MB:-39}
# shellcheck source=lib/private-libs.sh
. "$HERE/lib/private-libs.sh"

die() { echo "gpu-bundle: $*" >&2; exit 2; }
usage() { sed -n '2,8p' "$0" >&2; exit 2; }

load_set() {
  local s=$1
  [[ $s =~ ^[a-z0-9][a-z0-9_-]*$ ]] || die "bad set name '$s' (lower-case letters, digits, - and _)"
  [ -f "$SETS/$s.sh" ] || die "no set '$s': sets here are: $(list_sets | tr '\n' ' ')(add $SETS/$s.sh)"
  SET_WHEELS=(); SET_TREE_WHEEL=""; SET_ENV=(); SET_NEEDS=(); SET_DEBS=(); SET_ELVES=()
  unset -f set_trim set_libdirs
  # shellcheck disable=SC1090
  . "$SETS/$s.sh"
}

list_sets() { for f in "$SETS"/*.sh; do basename "$f" .sh; done; }

# ---- here: build ----
build() {
  local s=$1 out=${2:-}
  load_set "$s"
  [ -n "$out" ] || out=$(cd "$HERE/.." && pwd)/.bundle/$s
  case "$out" in /|"") die "refusing OUTDIR '$out'" ;; esac
  local plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform any
              --platform manylinux1_x86_64 --platform manylinux2014_x86_64)
  local n
  for n in 5 17 24 26 27 28 31 34 35; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
  local w
  w=$(mktemp -d)
  WORK=$w
  trap 'rm -rf "$WORK"' EXIT
  mkdir -p "$w/b/wheels" "$w/tree" "$w/tw"
  local t0=$SECONDS
  if [ ${#SET_WHEELS[@]} -gt 0 ]; then
    python3 -m pip download -q --no-deps "${plat[@]}" -d "$w/b/wheels" "${SET_WHEELS[@]}"
  fi
  if [ -n "$SET_TREE_WHEEL" ]; then
    python3 -m pip download -q --no-deps "${plat[@]}" -d "$w/tw" "$SET_TREE_WHEEL"
    python3 -m zipfile -e "$w"/tw/*.whl "$w/tree"
    if declare -F set_trim >/dev/null; then set_trim "$w/tree"; fi
    tar cf - -C "$w/tree" . | xz -T2 -6 > "$w/b/tree.tar.xz"
  fi
  if [ ${#SET_DEBS[@]} -gt 0 ]; then
    # Only the libraries of the packages (their lib directories), packed as
    # one xz tree; the packages' names and versions beside it.
    debs_fetch "$w/debs" "${SET_DEBS[@]}"
    debs_unpack "$w/sysroot" "$w"/debs/*.deb
    local dd
    for dd in "$w"/debs/*.deb; do dpkg-deb -f "$dd" Package Version | paste -sd' '; done \
      > "$w/b/debs.txt"
    (cd "$w/sysroot" && find . -path './usr/share' -prune -o -path './etc' -prune -o \
       \( -type f -o -type l \) -print | grep -E '/lib/' | tar cf - -T - | xz -T2 -6) \
      > "$w/b/debs.tar.xz"
  fi
  printf '%s\n' "${SET_ENV[@]}" > "$w/b/env"
  printf '%s\n' "${SET_NEEDS[@]}" > "$w/b/needs"
  echo "$s" > "$w/b/set"
  rm -rf "$out"
  mkdir -p "$out"
  # As few parts as PART_MB allows, of even size (3 x 39 MiB rather than
  # 3 x 38 + 3: each part is a call).
  tar cf "$w/all.tar" -C "$w/b" .
  local total per
  total=$(stat -c %s "$w/all.tar")
  n=$(( (total + PART_MB * 1048576 - 1) / (PART_MB * 1048576) ))
  per=$(( (total + n - 1) / n ))
  split -b "$per" -d -a 2 "$w/all.tar" "$w/$s.part"
  rm -f "$w/all.tar"
  local i=0 p
  : > "$w/MANIFEST"
  for p in "$w/$s".part*; do
    printf '%s %s %s\n' "$(basename "$p")" "$(stat -c %s "$p")" "$(sha256sum "$p" | cut -d' ' -f1)" >> "$w/MANIFEST"
  done
  for p in "$w/$s".part*; do
    mkdir -p "$out/p$i"; mv "$p" "$out/p$i/"; cp "$w/MANIFEST" "$out/p$i/"; i=$((i + 1))
  done
  du -sh "$out"/p* >&2
  echo "gpu-bundle: set $s: $i part(s) in $out, $((SECONDS - t0)) s; carry one per call:" >&2
  local rel=${out#"$(cd "$HERE/.." && pwd)"/}
  for ((p = 0; p < i; p++)); do echo "  carry [\"$rel/p$p\"]  command: scripts/gpu-bundle.sh take $s $rel" >&2; done
}

# ---- there: keep the carried parts ----
take() {
  # Two statements: in one `local`, $s is not yet set when the default is
  # expanded (set -u stopped every `take SET` without a DIR).
  local s=$1
  local dir=${2:-$(cd "$HERE/.." && pwd)/.bundle/$s}
  [[ $s =~ ^[a-z0-9][a-z0-9_-]*$ ]] || die "bad set name '$s'"
  mkdir -p "$STORE/$s"
  local m f found=0
  for m in "$dir"/p*/MANIFEST; do
    [ -f "$m" ] || continue
    cp "$m" "$STORE/$s/MANIFEST"
    for f in "$(dirname "$m")"/"$s".part*; do [ -f "$f" ] && cp "$f" "$STORE/$s/" && found=$((found + 1)); done
  done
  [ -f "$STORE/$s/MANIFEST" ] || die "no part of set '$s' under $dir (carry e.g. \"${dir#"$PWD"/}/p0\")"
  missing "$s"
}

# Prints what is still missing; status 0 when every part is kept and whole.
missing() {
  local s=$1 name size sum miss=()
  while read -r name size sum; do
    if [ ! -f "$STORE/$s/$name" ] || [ "$(stat -c %s "$STORE/$s/$name")" != "$size" ]; then
      miss+=("$name")
    fi
  done < "$STORE/$s/MANIFEST"
  if [ ${#miss[@]} -gt 0 ]; then
    echo "gpu-bundle: set $s: still missing ${miss[*]} (carry the p folder holding each, then take again)" >&2
    return 1
  fi
  echo "gpu-bundle: set $s: all $(wc -l < "$STORE/$s/MANIFEST") part(s) kept in $STORE/$s" >&2
}

# ---- there: install (prints the exports) ----
# Links into $d/lib the libraries that the set's ELF files (SET_ELVES) cannot
# find on this machine, from the unpacked packages ($d/sysroot) or the
# directories set_libdirs names; says which are still missing.
expose_set_libs() {
  local s=$1 d=$2 g f elves=() extra=() left
  [ -f "$SETS/$s.sh" ] || return 0
  load_set "$s"
  [ ${#SET_ELVES[@]} -gt 0 ] || return 0
  for g in "${SET_ELVES[@]}"; do
    for f in "$d"/$g; do [ -f "$f" ] && elves+=("$f"); done
  done
  [ ${#elves[@]} -gt 0 ] || die "set $s: none of its ELF files (${SET_ELVES[*]}) under $d"
  if declare -F set_libdirs >/dev/null; then mapfile -t extra < <(set_libdirs); fi
  left=$(expose_missing_libs "$d/lib" "$d/sysroot" "${extra[@]}" -- "${elves[@]}")
  echo "gpu-bundle: set $s: linked into $d/lib: $(ls "$d/lib" 2>/dev/null | tr '\n' ' ')" >&2
  if [ -n "$left" ]; then
    echo "gpu-bundle: set $s: still not found by ldd: $(echo "$left" | tr '\n' ' ')" >&2
    echo "$left" > "$d/missing-libs"
  fi
}

install_set() {
  local s=$1 d=$SITE/$1
  [[ $s =~ ^[a-z0-9][a-z0-9_-]*$ ]] || die "bad set name '$s'"
  if [ ! -f "$d/.done" ]; then
    [ -f "$STORE/$s/MANIFEST" ] || die "set $s: no part kept yet (carry its p folders and run take first)"
    missing "$s" || exit 2
    (cd "$STORE/$s" && awk '{print $3"  "$1}' MANIFEST | sha256sum -c --quiet -) >&2 \
      || die "set $s: a part's SHA-256 differs from MANIFEST: carry it again"
    rm -rf "$d" "$STORE/$s/x"
    mkdir -p "$d" "$STORE/$s/x"
    local t0=$SECONDS
    cat $(awk -v d="$STORE/$s" '{print d"/"$1}' "$STORE/$s/MANIFEST") | tar x -C "$STORE/$s/x"
    [ ! -f "$STORE/$s/x/tree.tar.xz" ] || xz -dc "$STORE/$s/x/tree.tar.xz" | tar x -C "$d"
    if compgen -G "$STORE/$s/x/wheels/*.whl" >/dev/null; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$d" \
        "$STORE/$s/x"/wheels/*.whl >&2
    fi
    cp "$STORE/$s/x/env" "$STORE/$s/x/needs" "$d/"
    if [ -f "$STORE/$s/x/debs.tar.xz" ]; then
      mkdir -p "$d/sysroot"
      xz -dc "$STORE/$s/x/debs.tar.xz" | tar x -C "$d/sysroot"
      cp "$STORE/$s/x/debs.txt" "$d/"
    fi
    expose_set_libs "$s" "$d"
    touch "$d/.done"
    echo "gpu-bundle: set $s installed in $d, $((SECONDS - t0)) s" >&2
  fi
  local n path=$d envs=() e
  while read -r n; do
    [ -n "$n" ] || continue
    [ -f "$SITE/$n/.done" ] || die "set $s needs set $n installed first: scripts/gpu-bundle.sh install $n"
    path=$path:$SITE/$n
    while IFS= read -r e; do [ -z "$e" ] || envs+=("${e//@DIR@/$SITE/$n}"); done < "$SITE/$n/env"
  done < "$d/needs"
  while IFS= read -r e; do [ -z "$e" ] || envs+=("${e//@DIR@/$d}"); done < "$d/env"
  local line="export PYTHONPATH=$path\${PYTHONPATH:+:\$PYTHONPATH}"
  for e in "${envs[@]}"; do line+=" $e"; done
  echo "$line"
}

[ $# -ge 1 ] || usage
case $1 in
  take) [ $# -ge 2 ] || usage; take "$2" "${3:-}" ;;
  install) [ $# -eq 2 ] || usage; install_set "$2" ;;
  list) list_sets ;;
  -h|--help) usage ;;
  *) build "$1" "${2:-}" ;;
esac
