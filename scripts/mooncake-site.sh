#!/usr/bin/env bash
# Installs (once) and prints the path of a cached directory holding Mooncake
# 0.3.14 for the CPU tests of bench/ttft's T3 tier (issue 29): the wheel of
# the GPU bundle set (scripts/gpu-bundle.d/mooncake.sh, one list of versions)
# for this interpreter, no dependency resolved, and the set's Debian packages
# unpacked under it, with the libraries this machine lacks linked into
# <dir>/lib (scripts/lib/private-libs.sh). Put <dir> on PYTHONPATH and
# <dir>/lib on LD_LIBRARY_PATH:
#
#   SITE=$(scripts/mooncake-site.sh) && PYTHONPATH=$SITE LD_LIBRARY_PATH=$SITE/lib \
#     python -m mooncake.cli --rpc_port 50051        # mooncake_master
#
# On a machine without the NVIDIA driver mooncake_master runs (it links no
# CUDA library), but mooncake.store does not import: its extension links
# libcuda.so.1 (bench/ttft/mooncake_tier.py says what that means for T3 on
# CPU). Lives in $CXLKV_CACHE/mooncake-site/<key> (CXLKV_CACHE as for
# vllm-venv.sh), the key made of the set file's hash and the interpreter's
# version; a stamp marks a finished install, concurrent callers serialise on a
# flock. First run: about 60 MB from the registries, about a minute; later
# runs: instant. Progress goes to stderr.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
SET=$HERE/gpu-bundle.d/mooncake.sh
# shellcheck source=lib/private-libs.sh
. "$HERE/lib/private-libs.sh"

pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
key="mooncake-py${pyver}-$(sha256sum "$SET" | cut -c1-12)"
cache=${CXLKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cxlkv}/mooncake-site
dir=$cache/$key
mkdir -p "$cache"
exec 9> "$cache/$key.lock"
flock 9
if [ -f "$dir/.cxlkv-complete" ]; then
  echo "$dir"
  exit 0
fi
SET_TREE_WHEEL=""; SET_DEBS=(); SET_ELVES=()
# shellcheck disable=SC1090
. "$SET"
rm -rf "$dir"
echo "mooncake-site: installing $SET_TREE_WHEEL and ${#SET_DEBS[@]} Debian packages into $dir" >&2
"$PY" -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --target "$dir" "$SET_TREE_WHEEL" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
debs_fetch "$tmp/debs" "${SET_DEBS[@]}"
debs_unpack "$dir/sysroot" "$tmp"/debs/*.deb
elves=()
for g in "${SET_ELVES[@]}"; do
  for f in "$dir"/$g; do [ -f "$f" ] && elves+=("$f"); done
done
chmod +x "$dir/mooncake/mooncake_master"
left=$(expose_missing_libs "$dir/lib" "$dir/sysroot" -- "${elves[@]}")
[ -z "$left" ] || echo "mooncake-site: not on this machine: $(echo "$left" | tr '\n' ' ')" >&2
touch "$dir/.cxlkv-complete"
echo "$dir"
