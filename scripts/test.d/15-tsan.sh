#!/usr/bin/env bash
# Stage: the region engine built with ThreadSanitizer (clang, build-tsan/),
# running the engine's unit tests (label region.unit): threads sharing one
# Region, corruption and mapping tests (the fork-based multi-process tests
# report as skipped here: TSan cannot start threads after fork).
# Warm: about 25 s on 2 cores (build up to date).
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0
trap 'echo "tsan: $passed passed, $failed failed, $skipped skipped"' EXIT

echo "== tsan: build (build-tsan/, region engine only)"
cxlkv_build_dir build-tsan "-DCXLKV_TSAN=ON -DCXLKV_ENGINE_ONLY=ON \
-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++" || { failed=$((failed + 1)); exit 1; }
cxlkv_ctest build-tsan -j "$JOBS" -L '^region\.unit$'
