#!/usr/bin/env bash
# cxlkv.vllm with real vLLM engines on CUDA, on the GPU machine: installs the
# package offline (pip install --no-build-isolation, GPU data path on, with
# the image's own scikit-build-core, pybind11 and CMake), then runs
# test/vllm/test_engines.py and test_spec.py against vLLM 0.26.0 on the GPU
# (the engines' KV lives on the GPU, so the worker is CxlkvCudaWorker).
#
#   scripts/gpu-vllm.sh [pytest -k expression]
#   scripts/gpu-vllm.sh --contract TREE [pytest -k expression]
#   scripts/gpu-vllm.sh --serve
#   scripts/gpu-vllm.sh --build-only   # install cxlkv into $CXLKV_SITE (/tmp/cxlkv-site), no test
#
# --build-only: what bench/ttft/gpu-run.sh calls when a T4 tier is asked
# for and cxlkv does not import: the install and its import check, then a
# stamp ($CXLKV_SITE/.built) and exit 0.
#
# --serve: `vllm serve` with cxlkv's flags (test/vllm/serve_smoke.py): the
# `vllm` console command (when the bundle installed none, one made as pip
# makes it: vllm.entrypoints.cli.main:main), a token-id prompt, the engine's
# prefix cache reset, the prompt again loaded from the region.
#
# --contract: instead of the engines, test/vllm/contract.py (the contract
# test of one vLLM release, test/vllm/test_contract.py) on CUDA tensors, so
# the spec builds CxlkvCudaWorker: TREE is that release's Python tree, a
# directory or a .tar.xz of one (scripts/vllm-src.sh's vllm/ and dist-info),
# loaded whole over the image's torch and the bundle's dependencies (the
# tree goes first on sys.path, so the bundle's vLLM 0.26 is not used; the
# test checks every module it loads is the tree's). vLLM's platform is fixed
# to its UnspecifiedPlatform there (contract.py's module doc: its
# CudaPlatform imports native kernels the tree has not). For 0.34+ this is
# the GPU check of the DevicePointers path with synthetic pointers (no 0.34
# engine runs on the image's torch): pointers that vLLM's own
# resolve_device_pointers makes from CUDA tensors, round trips, the
# corrupted part, pointers outside the KV refused. The tree for 0.34:
#   tar cJf v034.tar.xz -C "$(scripts/vllm-src.sh 0.34.0)" vllm vllm-0.34.0.dist-info
#
# vLLM 0.26 comes from the bundle set "vllm" (scripts/gpu-bundle.sh): when
# python3 cannot import vllm, this script installs the set from the parts
# kept earlier on this machine (or carried in .bundle/vllm/) and uses it;
# --contract uses its dependencies (0.34's modules import 17 of its wheels
# that the image lacks) and goes on without it when the set is not kept
# (the dependencies then come from PYTHONPATH).
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
MODE=engines
case "${1:-}" in
  --contract)
    MODE=contract
    tree=${2:?--contract needs a vLLM release tree (directory or .tar.xz)}
    shift 2
    if [ -f "$tree" ]; then
      mkdir -p /tmp/cxlkv-contract && tar xJf "$tree" -C /tmp/cxlkv-contract
      tree=/tmp/cxlkv-contract
    fi ;;
  --serve) MODE=serve; shift ;;
  --build-only) MODE=build; shift ;;
esac
# The contract test brings its vLLM (the tree) and takes the bundle's
# dependencies where the set is kept; the other modes use 0.26's.
if ! python3 -c 'import vllm' 2>/dev/null; then
  scripts/gpu-bundle.sh take vllm 2>/dev/null || true
  if env_line=$(scripts/gpu-bundle.sh install vllm); then
    eval "$env_line"
  elif [ "$MODE" = contract ]; then
    echo "gpu-vllm: the bundle set vllm is not kept here; the contract test's dependencies come from PYTHONPATH"
  else
    echo "gpu-vllm: 0 passed, 1 failed, 0 skipped (no vLLM: carry the bundle's parts, scripts/gpu-bundle.sh)"
    exit 1
  fi
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
python3 - "$MODE" <<'EOF' || { echo "gpu-vllm: 0 passed, 1 failed, 0 skipped (import)"; exit 1; }
import sys
import cxlkv
assert cxlkv._cxlkv.HAVE_CUDA, "built without the GPU data path"
if sys.argv[1] != "contract":
    import vllm
    print(f"gpu-vllm: cxlkv {cxlkv.__version__} (CUDA), vLLM {vllm.__version__}")
EOF
if [ "$MODE" = build ]; then
  touch "$SITE/.built"
  echo "gpu-vllm: cxlkv built into $SITE"
  exit 0
fi
K=()
TESTS=(test/vllm/test_spec.py test/vllm/test_late_joiner.py test/vllm/test_load_policy.py
       test/vllm/test_engines.py)
if [ "$MODE" = serve ]; then
  if ! command -v vllm > /dev/null 2>&1; then
    mkdir -p /tmp/cxlkv-bin
    # With the __main__ guard a console script has: vLLM starts its engine
    # core by spawn, which imports the main module again (without the guard,
    # the child ran `vllm serve` itself and the start failed).
    printf '#!%s\nimport sys\nfrom vllm.entrypoints.cli.main import main\nif __name__ == "__main__":\n    sys.exit(main())\n' \
      "$(command -v python3)" > /tmp/cxlkv-bin/vllm
    chmod +x /tmp/cxlkv-bin/vllm
    export PATH=/tmp/cxlkv-bin:$PATH
  fi
  mkdir -p /tmp/cxlkv-serve
  if python3 test/vllm/serve_smoke.py /tmp/cxlkv-serve; then p=1 f=0; else p=0 f=1; fi
  cp /tmp/cxlkv-serve/serve.log "$LOGS/" 2>/dev/null || true
  if [ -n "${OUT:-}" ]; then cp -r "$LOGS" "$OUT/" 2>/dev/null || true; fi
  echo "gpu-vllm: $p passed, $f failed, 0 skipped"
  exit "$f"
fi
if [ "$MODE" = contract ]; then
  meta=$(ls "$tree"/vllm-*.dist-info/METADATA)
  export CXLKV_VLLM_SRC=$tree CXLKV_CONTRACT_DEVICE=cuda
  CXLKV_VLLM_RELEASE=$(sed -n 's/^Version: //p' "$meta")
  export CXLKV_VLLM_RELEASE
  echo "gpu-vllm: contract test of vLLM $CXLKV_VLLM_RELEASE on CUDA tensors"
  TESTS=(test/vllm/contract.py)
fi
[ $# -gt 0 ] && K=(-k "$1")
python3 -m pytest -q -rs -s -p no:cacheprovider "${K[@]}" "${TESTS[@]}" \
  --junitxml="$LOGS/pytest.xml" 2>&1 | tee "$LOGS/pytest.log"
rc=${PIPESTATUS[0]}
# pytest writes skip locations with this machine's absolute paths; the logs
# travel into docs/results, so they name files relative to the checkout.
sed -i "s#$ROOT/##g" "$LOGS/pytest.xml" "$LOGS/pytest.log" 2>/dev/null || true
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
