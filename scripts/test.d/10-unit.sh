#!/usr/bin/env bash
# Stage: every unit and multi-process test, all rooms (ctest label *.unit),
# plus the GPU tests, which report as skipped with the reason on a machine
# built without CUDA (*.gpu). Builds build/ with every room.
# Warm: about 25 s on 2 cores (build up to date); with a fresh build/ in a
# clean clone whose objects are in ccache (scripts/lib/stage.sh), the build
# is mostly linking: about 175 s on 2 quiet cores, 380 s on 2 busy ones
# (CHANGELOG.md has the measured runs).
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0
trap 'echo "unit: $passed passed, $failed failed, $skipped skipped"' EXIT

echo "== unit: build (build/, all rooms)"
cxlkv_build_main || { failed=$((failed + 1)); exit 1; }
cxlkv_ctest build -j "$JOBS" -L '\.(unit|gpu)$'
