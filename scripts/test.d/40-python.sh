#!/usr/bin/env bash
# Stage: the Python binding (python/). Builds cxlkv._cxlkv against the engine
# in build-py/ (no CUDA: the GPU tests report as skipped, with the reason)
# and runs python/tests with pytest, or with unittest where the interpreter
# that has the Python headers has no pytest. Exits non-zero on any failure.
# The one test build without failpoints: the binding is configured as the
# wheel is (-DCXLKV_FAILPOINTS=OFF), and python/tests/test_failpoints.py
# proves a stray CXLKV_FAILPOINT does nothing there.
# Then mypy over cxlkv and cxlkv.vllm (pyproject.toml [tool.mypy]: every function
# annotated, disallow_untyped_defs), one test:
# about 7 s cold, 1 s with its cache (.mypy_cache/).
# Warm: about 5 s on 2 quiet cores with build-py/ and .mypy_cache/ up to date
# (the README's figure, from the latest measured run in CHANGELOG.md).
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"

# An interpreter with headers to build against; prefer one that has pytest.
PY=""
for cand in python3 /usr/bin/python3; do
  command -v "$cand" > /dev/null 2>&1 || continue
  inc=$("$cand" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null) || continue
  [ -f "$inc/Python.h" ] || continue
  if "$cand" -c 'import pytest' > /dev/null 2>&1; then PY=$cand; break; fi
  [ -z "$PY" ] && PY=$cand
done
if [ -z "$PY" ]; then echo "python stage: no python3 with development headers"; exit 1; fi
echo "python stage: using $PY ($("$PY" --version 2>&1))"

cmake -S . -B build-py -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCXLKV_ENGINE_ONLY=ON \
  -DCXLKV_PYTHON=ON -DCXLKV_FAILPOINTS=OFF -DPython_EXECUTABLE="$(command -v "$PY")" $(cxlkv_launcher_args) \
  > build-py.configure.log 2>&1 \
  || { cat build-py.configure.log; exit 1; }
rm -f build-py.configure.log
cmake --build build-py -j "$JOBS" --target _cxlkv || exit 1

# The C++ GPU tests are registered as skipped in a build without CUDA; show why.
ctest --test-dir build-py -L '\.gpu$' -V 2>/dev/null | grep -E "^[0-9]+: SKIPPED" || true

export PYTHONPATH=$PWD/build-py/python
log=$(mktemp)
if "$PY" -c 'import pytest' > /dev/null 2>&1; then
  "$PY" -m pytest -v -rsfE python/tests 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  cxlkv_pytest_failed "$log"
  p=$(grep -oE '[0-9]+ passed' "$log" | tail -1 | grep -oE '[0-9]+'); f=$(grep -oE '[0-9]+ failed' "$log" | tail -1 | grep -oE '[0-9]+')
  s=$(grep -oE '[0-9]+ skipped' "$log" | tail -1 | grep -oE '[0-9]+')
else
  "$PY" -m unittest discover -v -s python/tests 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  p=$(grep -cE ' \.\.\. ok$' "$log"); f=$(grep -cE ' \.\.\. (FAIL|ERROR)$' "$log")
  s=$(grep -cE ' \.\.\. skipped' "$log")
fi
rm -f "$log"
p=${p:-0}; f=${f:-0}; s=${s:-0}
[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1

# The type check of cxlkv and cxlkv.vllm (pyproject.toml [tool.mypy]: the
# binding's types from python/cxlkv/_cxlkv.pyi, vLLM's and torch's as Any).
# One test; mypy comes from scripts/pip-requirements.txt (scripts/setup.sh).
mypy_py=""
for cand in "$PY" python3; do
  if "$cand" -c 'import mypy' > /dev/null 2>&1; then mypy_py=$cand; break; fi
done
if [ -z "$mypy_py" ]; then
  echo "python: SKIPPED: mypy is not installed (scripts/setup.sh installs it)"
  s=$((s + 1))
elif "$mypy_py" -m mypy --config-file pyproject.toml; then
  p=$((p + 1))
else
  echo "python: FAILED: mypy found type errors in python/cxlkv (above)"
  cxlkv_failed_test "mypy (pyproject.toml)"
  f=$((f + 1)); rc=1
fi
# The closing line scripts/test.sh reads (skipped GPU tests printed their reason above).
echo "python: $p passed, $f failed, $s skipped"
exit "$rc"
