#!/usr/bin/env bash
# Stage: the region engine built with ThreadSanitizer (clang, build-tsan/),
# which also checks the lock annotations of every room that has them (base,
# kube, fabric, fabricd, hostd: -Wthread-safety -Werror=thread-safety), then
# running the unit tests of the engine, base and kube (labels region.unit,
# base.unit, kube.unit): threads sharing one Region, the kube work queue,
# corruption and mapping tests (the fork-based multi-process tests report as
# skipped here: TSan cannot start threads after fork).
# Warm: about 25 s on 2 cores (build up to date).
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0
trap 'echo "tsan: $passed passed, $failed failed, $skipped skipped"' EXIT

# The rooms whose locks carry Clang annotations are built too: clang's
# -Wthread-safety -Werror=thread-safety (top-level CMakeLists) checks them.
echo "== tsan: build (build-tsan/: the engine, base, kube, fabric, fabricd, hostd)"
cxlkv_build_dir build-tsan "-DCXLKV_TSAN=ON -DCXLKV_FAILPOINTS=ON -DCXLKV_ENGINE_ONLY=OFF -DCXLKV_ROOMS=kube;fabric;fabricd;hostd \
-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++" || { failed=$((failed + 1)); exit 1; }
cxlkv_ctest build-tsan -j "$JOBS" -L '^(region|base|kube)\.unit$'
