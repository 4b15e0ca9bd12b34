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
# mooncake_master links no CUDA library. mooncake.store's extension links the
# CUDA runtime (libcudart.so.13) and the driver's libcuda.so.1; on a machine
# without the NVIDIA driver it does not import ("ImportError: libcuda.so.1:
# cannot open shared object file"). There, <dir>/lib gets the runtime from
# NVIDIA's nvidia-cuda-runtime wheel (the real one) and a no-device
# libcuda.so.1 built here from a generated C file: each driver entry point
# the wheel imports (nm -D) returns CUDA_ERROR_NO_DEVICE (100), what the
# driver answers on a host with no GPU, so nothing that needs a GPU can
# succeed; Mooncake's tcp transport of host memory, all that T3 uses with
# vLLM's CPU engine, never calls it (bench/ttft/mooncake_tier.py). Not done
# where a libcuda.so.1 is found. Lives in $CXLKV_CACHE/mooncake-site/<key> (CXLKV_CACHE as for
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
# shellcheck source=lib/cached-dir.sh
. "$HERE/lib/cached-dir.sh"

pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
key="mooncake-py${pyver}-$(cat "$SET" "$0" "$HERE/lib/private-libs.sh" | sha256sum | cut -c1-12)"
cached_dir_open mooncake-site "$key" || { echo "$CACHED_DIR"; exit 0; }
dir=$CACHED_DIR
SET_TREE_WHEEL=""; SET_DEBS=(); SET_ELVES=()
# shellcheck disable=SC1090
. "$SET"
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
if echo "$left" | grep -qx 'libcudart.so.13'; then
  # The CUDA runtime: NVIDIA's wheel, the version vLLM 0.26's torch pins.
  "$PY" -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --target "$tmp/rt" "nvidia-cuda-runtime==13.0.96" >&2
  cp "$tmp/rt/nvidia/cu13/lib/libcudart.so.13" "$dir/lib/"
fi
if echo "$left" | grep -qx 'libcuda.so.1'; then
  # No driver here: a libcuda.so.1 whose every entry point says "no device".
  {
    echo '/* mooncake-site.sh: the NVIDIA driver API as a host without a GPU answers it. */'
    nm -D --undefined-only "${elves[@]}" 2>/dev/null | awk '$2 ~ /^cu[A-Z]/ {print $2}' \
      | sort -u | while read -r sym; do echo "int $sym(void) { return 100; /* CUDA_ERROR_NO_DEVICE */ }"; done
  } > "$tmp/nodevice.c"
  cc -shared -fPIC -O1 -Wl,-soname,libcuda.so.1 -o "$dir/lib/libcuda.so.1" "$tmp/nodevice.c"
  echo "mooncake-site: no NVIDIA driver here: $dir/lib/libcuda.so.1 answers no device" >&2
fi
left=$(expose_missing_libs "$dir/lib" "$dir/sysroot" -- "${elves[@]}")
[ -z "$left" ] || echo "mooncake-site: not on this machine: $(echo "$left" | tr '\n' ' ')" >&2
cached_dir_done
