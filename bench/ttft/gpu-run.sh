#!/usr/bin/env bash
# The one entry point the lead calls on the GPU machine (one H200, or several):
#
#   bench/ttft/gpu-run.sh RUN_DIR BUDGET_SECONDS [ttft.py run options]
#
# Assumes Python 3.12, no network, cxlkv importable (built there with the
# CUDA data path, e.g. by scripts/gpu-vllm.sh) and /dev/shm large enough for
# the region. vLLM 0.26: when python3 cannot import it, the bundle set
# "vllm" (scripts/gpu-bundle.sh, parts kept on this machine earlier) is
# installed and used; likewise the set "lmcache" (LMCache 0.5.3) when the
# tiers asked for (--tiers, default all) include T5 or T6, and the set
# "mooncake" (Mooncake 0.3.14 and the system libraries it links that the
# image lacks) when they include T3. cxlkv is needed only when they include
# T4.
# RUN_DIR lives in the checkout (e.g. docs/results/h200-<date>), so the log
# travels back in with the working tree on the next call: the run resumes
# from RUN_DIR/log.jsonl and stops cleanly before BUDGET_SECONDS. Defaults:
# the whole grid of issue 12 (4 tiers x 2 arms x the paper's 4 prefixes x 20
# sessions, control, oracle); add e.g. `--phases load` for the load runs.
#
# Copies back under $OUT (when set): log.jsonl, state.json, run-cN.txt (this
# call's output) and engines-cN.tar.xz (the engine logs of this call). Put
# log.jsonl and state.json back into RUN_DIR before the next call.
set -uo pipefail
RUN=${1:?usage: gpu-run.sh RUN_DIR BUDGET_SECONDS [ttft.py run options]}
BUDGET=${2:?usage: gpu-run.sh RUN_DIR BUDGET_SECONDS [ttft.py run options]}
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
mkdir -p "$RUN"
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}
# use_set SET MODULES: when python cannot import MODULES, the bundle set SET
# (its parts kept on this machine earlier) is installed and its exports taken.
use_set() {
  "$PY" -c "import $2" 2>/dev/null && return 0
  "$HERE/../../scripts/gpu-bundle.sh" take "$1" 2>/dev/null || true
  local env_line
  env_line=$("$HERE/../../scripts/gpu-bundle.sh" install "$1") || exit 2
  eval "$env_line"
}
use_set vllm vllm
tiers=T0,T1,T2,T3,T4,T5,T6
for ((i = 1; i <= $#; i++)); do
  case ${!i} in
    --tiers=*) tiers=${!i#--tiers=} ;;
    --tiers) j=$((i + 1)); tiers=${!j:-} ;;
  esac
done
mods=vllm
case ",$tiers," in
  *,T4,*|*,T4pc,*)
    # cxlkv with the CUDA data path, built here once (scripts/gpu-vllm.sh
    # --build-only: needs .deps/ carried, scripts/gpu-deps.sh) when the image
    # cannot import it.
    if ! "$PY" -c 'import cxlkv' 2>/dev/null; then
      site=${CXLKV_SITE:-/tmp/cxlkv-site}
      if [ ! -f "$site/.built" ]; then
        "$HERE/../../scripts/gpu-vllm.sh" --build-only | tail -3
        [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "gpu-run: building cxlkv failed"; exit 2; }
      fi
      export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
    fi
    mods+=", cxlkv" ;;
esac
case ",$tiers," in
  *,T5,*|*,T6,*)
    use_set lmcache lmcache
    mods+=", lmcache" ;;
esac
case ",$tiers," in
  *,T3,*)
    use_set mooncake 'torch, mooncake.store'
    mods+=", torch, mooncake.store" ;;
esac
if ! "$PY" -c "import $mods, torch; assert torch.cuda.is_available()" 2>"$RUN/.import-err"; then
  echo "gpu-run: $mods and a CUDA torch must import (PYTHONPATH=${PYTHONPATH:-}):"
  tail -5 "$RUN/.import-err"; exit 2
fi
rm -f "$RUN/.import-err"
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader
df -h /dev/shm | tail -1
call=$(grep -c '"kind": "call"' "$RUN/log.jsonl" 2>/dev/null || true)
call=${call:-0}
# The harness keeps STOP_MARGIN_S (45 s) for shutdown; 30 s more for copying.
"$PY" "$HERE/ttft.py" run "$RUN" --budget-s $((BUDGET - 30)) --platform gpu --python "$PY" \
  --models-dir /tmp/cxlkv-ttft-models "$@" 2>&1 | tee "$RUN/run-c$call.txt"
rc=${PIPESTATUS[0]}
if [ -n "${OUT:-}" ]; then
  cp "$RUN/log.jsonl" "$RUN/state.json" "$RUN/run-c$call.txt" "$OUT/" 2>/dev/null
  tar cJf "$OUT/engines-c$call.tar.xz" -C "$RUN" engines 2>/dev/null
fi
exit "$rc"
