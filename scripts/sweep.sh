#!/usr/bin/env bash
# Replay hit rate vs region size: shared region vs private regions (round-robin
# and prefix routing), whole Mooncake trace, 2 replicas, 32 KiB blocks. "shared
# RR, sw" is the shared region in coherence=software (replica i writes only
# write partition i; its eviction sees the other replica's hits through the
# hint channel: docs/coherence.md, "Eviction").
# Prints a Markdown table (the one in docs/benchmarks.md) and writes JSON
# lines to ${OUT:-build/sweep.jsonl}. "LRU ceiling" is the hit rate of exact
# global LRU over the shared region's slot count, in trace order
# (bench/eviction/lru_ceiling.py): the policy's ceiling at that capacity.
#   scripts/sweep.sh [SIZES...]     default: 256MiB 512MiB 1GiB 2GiB 4GiB 8GiB
#   BUILD=DIR scripts/sweep.sh ...  the cxlkv of another build dir (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
REPLICAS=${REPLICAS:-2}
KV=${KV_BYTES_PER_TOKEN:-64}
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(256MiB 512MiB 1GiB 2GiB 4GiB 8GiB)
BUILD=${BUILD:-build}
OUT=${OUT:-$BUILD/sweep.jsonl}
# Its own region path per run (PID), so two sweeps never meet; removed on exit.
REGION=/dev/shm/cxlkv/sweep-$$
trap 'rm -f "$REGION" "$REGION".r*' EXIT
cmake --build "$BUILD" --target cxlkv_cli >/dev/null
: > "$OUT"
echo "| region | blocks held | shared RR | shared RR, sw | LRU ceiling (shared) | private RR | private prefix | bound |"
echo "|---|---|---|---|---|---|---|---|"
for size in "${SIZES[@]}"; do
  row=()
  for mode in "shared round-robin hardware" "shared round-robin software" \
              "private round-robin hardware" "private prefix hardware"; do
    set -- $mode
    j=$("$BUILD"/bin/cxlkv replay --region "$REGION" --region-size "$size" --replicas "$REPLICAS" \
        --kv-bytes-per-token "$KV" --baseline "$1" --routing "$2" --coherence "$3" --quiet --json)
    echo "$j" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' >> "$OUT"
    row+=("$(echo "$j" | python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["hit_rate"])')")
    bound=$(echo "$j" | python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["hit_rate_bound"])')
    rm -f "$REGION" "$REGION".r*  # replay starts from a fresh region
  done
  rm -f "$REGION" "$REGION".r*
  "$BUILD"/bin/cxlkv format --region "$REGION" --region-size "$size" --slot-size $((512 * KV)) >/dev/null
  slots=$("$BUILD"/bin/cxlkv inspect --region "$REGION" --json |
          python3 -c 'import json,sys; print(json.load(sys.stdin)["slots"]["free"])')
  rm -f "$REGION"
  ceiling=$(python3 bench/eviction/lru_ceiling.py data/traces/mooncake-conversation-trace.jsonl "$slots" | cut -d" " -f2)
  held=$(python3 -c "import sys; print('%.0f%%' % (100.0 * int(sys.argv[1]) / (182790 * 512 * $KV)))" \
         "$(python3 -c "
s='$size'; u={'MiB':2**20,'GiB':2**30}
for k,v in u.items():
    if s.endswith(k): print(int(float(s[:-len(k)])*v))")")
  echo "| $size | $held | ${row[0]} | ${row[1]} | $ceiling | ${row[2]} | ${row[3]} | $bound |"
done
