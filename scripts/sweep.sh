#!/usr/bin/env bash
# Replay hit rate vs region size: shared region vs private regions (round-robin
# and prefix routing), whole Mooncake trace, 2 replicas, 32 KiB blocks.
# Prints a Markdown table (the one in docs/benchmarks.md) and writes JSON
# lines to ${OUT:-build/sweep.jsonl}.
#   scripts/sweep.sh [SIZES...]     default: 256MiB 512MiB 1GiB 2GiB 4GiB 8GiB
set -euo pipefail
cd "$(dirname "$0")/.."
REPLICAS=${REPLICAS:-2}
KV=${KV_BYTES_PER_TOKEN:-64}
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(256MiB 512MiB 1GiB 2GiB 4GiB 8GiB)
OUT=${OUT:-build/sweep.jsonl}
cmake --build build --target cxlkv_cli >/dev/null
: > "$OUT"
echo "| region | blocks held | shared RR | private RR | private prefix | bound |"
echo "|---|---|---|---|---|---|"
for size in "${SIZES[@]}"; do
  row=()
  for mode in "shared round-robin" "private round-robin" "private prefix"; do
    set -- $mode
    j=$(build/bin/cxlkv replay --region /dev/shm/cxlkv/sweep --region-size "$size" --replicas "$REPLICAS" \
        --kv-bytes-per-token "$KV" --baseline "$1" --routing "$2" --quiet --json)
    echo "$j" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' >> "$OUT"
    row+=("$(echo "$j" | python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["hit_rate"])')")
    bound=$(echo "$j" | python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["hit_rate_bound"])')
  done
  rm -f /dev/shm/cxlkv/sweep /dev/shm/cxlkv/sweep.r*
  held=$(python3 -c "import sys; print('%.0f%%' % (100.0 * int(sys.argv[1]) / (182790 * 512 * $KV)))" \
         "$(python3 -c "
s='$size'; u={'MiB':2**20,'GiB':2**30}
for k,v in u.items():
    if s.endswith(k): print(int(float(s[:-len(k)])*v))")")
  echo "| $size | $held | ${row[0]} | ${row[1]} | ${row[2]} | $bound |"
done
