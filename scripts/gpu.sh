#!/usr/bin/env bash
# The GPU data path on a GPU machine, from a clean copy of the repository:
# builds src/transfer, the Python binding and the bench, runs the GPU tests
# (C++ and Python) and cxlkv-bench-gpu (CXLKV_GPU_BENCH=0: not the bench).
# One command:
#
#   scripts/gpu.sh
#
# Needs CUDA (nvcc, driver), CMake >= 3.25, a C++20 compiler, python3 with
# pybind11 and pytest (torch for the tensor tests). What the machine lacks of
# GoogleTest / nlohmann_json / pkg-config is taken from .deps/ (made by
# scripts/gpu-deps.sh on a dev machine and copied along). Logs and test
# reports go to build-gpu/logs; the bench's table and JSON and a tarball of
# the logs are also copied to $OUT when it is set.
# CXLKV_REQUIRE_GPU=1 is set: a missing GPU fails the tests instead of
# skipping them. Ends with "gpu: N passed, N failed"; exit status non-zero
# if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
B=$ROOT/build-gpu
LOGS=$B/logs
mkdir -p "$LOGS"
JOBS=${JOBS:-$(nproc)}
export CXLKV_REQUIRE_GPU=1
passed=0; failed=0; failures=()
ok()   { passed=$((passed + 1)); echo "gpu.sh: ok: $1"; }
bad()  { failed=$((failed + 1)); failures+=("$1"); echo "gpu.sh: FAILED: $1"; }

{
  date -u; uname -a; nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv || true
  nvcc --version | tail -2; cmake --version | head -1; python3 --version
} > "$LOGS/env.txt" 2>&1
cat "$LOGS/env.txt"

# ---- dependencies the GPU image may lack ----
PREFIX=""
if [ -d .deps ]; then
  PREFIX=$ROOT/.deps/prefix
  export PATH=$ROOT/.deps/bin:$PATH LD_LIBRARY_PATH=$ROOT/.deps/lib:${LD_LIBRARY_PATH:-}
  if [ -d .deps/googletest ] && [ ! -f "$PREFIX/lib/cmake/GTest/GTestConfig.cmake" ]; then
    cmake -S .deps/googletest -B "$B/googletest" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_GMOCK=OFF \
      -DCMAKE_POSITION_INDEPENDENT_CODE=ON > "$LOGS/googletest.log" 2>&1 &&
    cmake --build "$B/googletest" -j "$JOBS" >> "$LOGS/googletest.log" 2>&1 &&
    cmake --install "$B/googletest" >> "$LOGS/googletest.log" 2>&1 || { bad googletest; tail -20 "$LOGS/googletest.log"; }
  fi
fi
PYBIND=$(python3 -m pybind11 --cmakedir 2>/dev/null || true)
PYINC=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)
WITH_PY=ON; PYTARGET=_cxlkv
if [ -z "$PYBIND" ] || [ ! -f "$PYINC/Python.h" ]; then
  echo "gpu.sh: no pybind11 or no Python.h under '$PYINC': building without the Python binding"
  WITH_PY=OFF; PYTARGET=""
fi

# ---- configure and build (engine + GPU path + binding only) ----
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCXLKV_ENGINE_ONLY=ON \
  -DCXLKV_CUDA=ON -DCXLKV_PYTHON=$WITH_PY -DPython_EXECUTABLE="$(command -v python3)" \
  ${PREFIX:+-DCMAKE_PREFIX_PATH=$PREFIX} ${PYBIND:+-Dpybind11_DIR=$PYBIND} \
  > "$LOGS/configure.log" 2>&1 || { tail -40 "$LOGS/configure.log"; bad configure; }
if cmake --build "$B" -j "$JOBS" --target crc32c_math_test gpu_transfer_test region_gpu_test region_gpu_parts_test \
     region_gpu_peer cxlkv-bench-gpu $PYTARGET > "$LOGS/build.log" 2>&1; then
  ok build
else
  grep -E "error|Error" "$LOGS/build.log" | head -40; bad build
fi

# ---- C++ tests ----
for t in crc32c_math_test gpu_transfer_test region_gpu_test region_gpu_parts_test; do
  if [ -x "$B/bin/$t" ]; then
    if "$B/bin/$t" --gtest_output=xml:"$LOGS/$t.xml" > "$LOGS/$t.log" 2>&1; then ok "$t"
    else tail -40 "$LOGS/$t.log"; bad "$t"; fi
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|batch api" "$LOGS/$t.log"
  else bad "$t (not built)"; fi
done

# ---- Python binding tests (GPU parts included) ----
if ls "$B"/python/cxlkv/_cxlkv*.so > /dev/null 2>&1; then
  if PYTHONPATH="$B/python" python3 -m pytest -q -rs python/tests > "$LOGS/pytest.log" 2>&1; then ok pytest
  else bad pytest; fi
  tail -15 "$LOGS/pytest.log"
else bad "python binding (not built)"; fi

# ---- bench (CXLKV_GPU_BENCH=0 skips it; BENCH_ARGS picks sections) ----
if [ "${CXLKV_GPU_BENCH:-1}" = 1 ] && [ -x "$B/bin/cxlkv-bench-gpu" ]; then
  # shellcheck disable=SC2086
  if "$B/bin/cxlkv-bench-gpu" ${BENCH_ARGS:-} --json "$LOGS/bench_gpu.json" > "$LOGS/bench_gpu.txt" 2>&1; then ok bench
  else bad bench; fi
  cat "$LOGS/bench_gpu.txt"
fi

if [ -n "${OUT:-}" ]; then
  tar czf "$OUT/gpu-logs.tgz" -C "$B" logs
  cp "$LOGS"/bench_gpu.* "$OUT"/ 2>/dev/null || true
fi
echo
[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]}"
echo "gpu: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
