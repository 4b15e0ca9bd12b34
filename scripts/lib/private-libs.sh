# shellcheck shell=bash
# Shared libraries from Debian packages, unpacked into a private prefix and
# exposed only where the machine lacks them (sourced by scripts/gpu-bundle.sh
# for sets with SET_DEBS, and by scripts/mooncake-site.sh).
#
#   debs_fetch OUTDIR PKG...      # apt-get download into OUTDIR (no root, no install)
#   debs_unpack SYSROOT DEB...    # dpkg-deb -x each into SYSROOT, never into /
#   expose_missing_libs LIBDIR SYSROOT [EXTRA_DIR...] -- ELF...
#
# expose_missing_libs asks ldd which libraries the ELF files cannot find with
# LIBDIR first on LD_LIBRARY_PATH, links each one found under SYSROOT (or in
# an EXTRA_DIR, e.g. the image's CUDA runtime) into LIBDIR, and repeats until
# nothing more resolves: a library the machine has is never shadowed by a
# bundled one (putting the whole prefix on LD_LIBRARY_PATH would override the
# image's own libssl, libzstd, ... for every process). Prints the names still
# missing on stdout, one a line (none: all resolved).

debs_fetch() {
  local out=$1; shift
  mkdir -p "$out"
  # apt-get download writes into the current directory.
  (cd "$out" && apt-get download -q=2 "$@") >&2
}

debs_unpack() {
  local root=$1 d; shift
  mkdir -p "$root"
  for d in "$@"; do dpkg-deb -x "$d" "$root"; done
}

_missing_of() {  # LIBDIR ELF... -> the sorted unique sonames ldd reports not found
  local libdir=$1 f; shift
  for f in "$@"; do
    LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ldd "$f" 2>/dev/null \
      | awk '/=> not found/ {print $1}'
  done | sort -u
}

expose_missing_libs() {
  local libdir=$1 root=$2; shift 2
  local extra=() elves=() m src round left
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do extra+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  elves=("$@")
  if ! command -v ldd >/dev/null; then
    echo "private-libs: ldd not found: cannot tell which libraries this machine lacks" >&2
    return 2
  fi
  mkdir -p "$libdir"
  for round in 1 2 3 4 5 6; do
    left=$(_missing_of "$libdir" "${elves[@]}")
    [ -n "$left" ] || return 0
    local added=0
    for m in $left; do
      src=$(find "$root" "${extra[@]}" -name "$m" \( -type f -o -type l \) 2>/dev/null | head -1)
      if [ -n "$src" ] && [ ! -e "$libdir/$m" ]; then
        ln -s "$(readlink -f "$src")" "$libdir/$m"
        added=$((added + 1))
      fi
    done
    [ "$added" -gt 0 ] || break
  done
  _missing_of "$libdir" "${elves[@]}"
}
