#!/usr/bin/env bash
# cxlkv.vllm with real vLLM engines on CUDA, on the GPU machine: installs the
# package offline (pip install --no-build-isolation, GPU data path on, with
# the image's own scikit-build-core, pybind11 and CMake), then runs
# test/vllm/test_engines.py and test_spec.py against vLLM 0.26.0 on the GPU
# (the engines' KV lives on the GPU, so the worker is CxlkvCudaWorker).
#
#   scripts/gpu-vllm.sh [pytest -k expression]
#
# vLLM 0.26 comes from the bundle set "vllm" (scripts/gpu-bundle.sh): when
# python3 cannot import vllm, this script installs the set from the parts
# kept earlier on this machine (or carried in .bundle/vllm/) and uses it.
#
# Needs .deps/ (scripts/gpu-deps.sh) for nlohmann_json and pkg-config. Setting
# CMAKE_PREFIX_PATH hides the image's pybind11 from CMake, so pybind11_DIR is
# passed too (seen on the H200 image, 2026-12-01).
# PYTHONHASHSEED is set (0.26 draws NONE_HASH at random otherwise, and
# cxlkv refuses to start without it). Logs: build-gpu/logs-vllm (and $OUT).
# Ends with "gpu-vllm: N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOGS=$ROOT/build-gpu/logs-vllm
SITE=${CXLKV_SITE:-/tmp/cxlkv-site}
mkdir -p "$LOGS"
export PYTHONHASHSEED=${PYTHONHASHSEED:-0}
if ! python3 -c 'import vllm' 2>/dev/null; then
  scripts/gpu-bundle.sh take vllm 2>/dev/null || true
  env_line=$(scripts/gpu-bundle.sh install vllm) \
    || { echo "gpu-vllm: 0 passed, 1 failed, 0 skipped (no vLLM: carry the bundle's parts, scripts/gpu-bundle.sh)"; exit 1; }
  eval "$env_line"
fi
if [ -d .deps ]; then
  export PATH=$ROOT/.deps/bin:$PATH LD_LIBRARY_PATH=$ROOT/.deps/lib:${LD_LIBRARY_PATH:-}
fi
t0=$(date +%s)
if ! python3 -m pip install -q --no-build-isolation --no-deps --target "$SITE" --upgrade . \
    -Ccmake.define.CXLKV_CUDA=ON -Cbuild-dir="$ROOT/build-gpu/wheel" \
    -Ccmake.define.CMAKE_PREFIX_PATH="$ROOT/.deps/prefix" \
    -Ccmake.define.pybind11_DIR="$(python3 -m pybind11 --cmakedir)" > "$LOGS/pip.log" 2>&1; then
  tail -40 "$LOGS/pip.log"
  echo "gpu-vllm: 0 passed, 1 failed, 0 skipped (pip install --no-build-isolation failed)"
  exit 1
fi
echo "gpu-vllm: pip install --no-build-isolation . (CUDA on): $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$SITE:${PYTHONPATH:-}
python3 - <<'EOF' || { echo "gpu-vllm: 0 passed, 1 failed, 0 skipped (import)"; exit 1; }
import cxlkv, vllm
assert cxlkv._cxlkv.HAVE_CUDA, "built without the GPU data path"
print(f"gpu-vllm: cxlkv {cxlkv.__version__} (CUDA), vLLM {vllm.__version__}")
EOF
K=()
[ $# -gt 0 ] && K=(-k "$1")
python3 -m pytest -q -rs -s -p no:cacheprovider "${K[@]}" test/vllm/test_spec.py \
  test/vllm/test_engines.py --junitxml="$LOGS/pytest.xml" 2>&1 | tee "$LOGS/pytest.log"
rc=${PIPESTATUS[0]}
read -r p f s < <(python3 - "$LOGS/pytest.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
t = ET.parse(sys.argv[1]).getroot()
t = t if t.tag == "testsuite" else t[0]
n, f, e, s = (int(t.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
print(n - f - e - s, f + e, s)
EOF
)
if [ -n "${OUT:-}" ]; then cp -r "$LOGS" "$OUT/" 2>/dev/null || true; fi
echo "gpu-vllm: ${p:-0} passed, ${f:-1} failed, ${s:-0} skipped"
[ "$rc" -eq 0 ]
