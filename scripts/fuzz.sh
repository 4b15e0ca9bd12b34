#!/usr/bin/env bash
# libFuzzer on attach/inspect of arbitrary region bytes (fuzz/region_fuzz.cc).
#   scripts/fuzz.sh [SECONDS]     default 600
# Builds build-fuzz/ with clang, ASan and UBSan; keeps the corpus in
# build-fuzz/corpus (seeded from fuzz/seeds/, one input per damage kind) and
# any crash input in build-fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-600}
bash scripts/setup.sh >/dev/null
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCXLKV_FUZZ=ON -DCXLKV_ENGINE_ONLY=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz --target region_fuzz
mkdir -p build-fuzz/corpus build-fuzz/artifacts
exec build-fuzz/bin/region_fuzz build-fuzz/corpus fuzz/seeds -max_len=262144 -max_total_time="$SECONDS_TO_RUN" \
  -timeout=10 -rss_limit_mb=4096 -artifact_prefix=build-fuzz/artifacts/ -print_final_stats=1
