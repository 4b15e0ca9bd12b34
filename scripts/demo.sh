#!/usr/bin/env bash
# The main job on the embedded default: replay the Mooncake conversation
# trace (12,031 requests) across replica processes that share one /dev/shm
# region, then the same with private per-replica regions (the node-local
# tier), with and without prefix-aware routing. No hardware, no cluster.
#
# Scaled to run in about a minute on 2 cores: blocks are 512 tokens x
# KV_BYTES_PER_TOKEN (default 64 B, i.e. 32 KiB blocks instead of Qwen2.5-7B's
# 28 MiB), so the 1 GiB region holds ~17% of the trace's 182,790 distinct
# blocks: the capacity-pressure case [Fan26] (docs/references.md) did not measure.
# Override with REPLICAS, REGION_SIZE, KV_BYTES_PER_TOKEN, LIMIT.
set -euo pipefail
cd "$(dirname "$0")/.."
REPLICAS=${REPLICAS:-2}
REGION_SIZE=${REGION_SIZE:-1GiB}
KV_BYTES_PER_TOKEN=${KV_BYTES_PER_TOKEN:-64}
LIMIT=${LIMIT:-0}
TRACE=data/traces/mooncake-conversation-trace.jsonl

setup_log=$(mktemp)
bash scripts/setup.sh >"$setup_log" 2>&1 || { cat "$setup_log"; exit 1; }
rm -f "$setup_log"
echo "== build"
# build/ configured exactly as the test stages configure it (scripts/lib/stage.sh,
# ccache where installed): a different configuration would make the next
# scripts/test.sh rebuild every object this build made.
source scripts/lib/stage.sh
build_log=$(mktemp)
cxlkv_build_main cxlkv_cli >"$build_log" 2>&1 || { cat "$build_log"; exit 1; }
tail -1 "$build_log"; rm -f "$build_log"
CXLKV=build/bin/cxlkv
out=$(mktemp -d)
# Each replay starts from a fresh region (replay refuses an existing one), so
# every run gets its own path; the PID keeps two clones' demos apart, and the
# trap removes only this run's regions (REGION, REGION.r<i>).
REGION_BASE=/dev/shm/cxlkv/demo-$$
trap 'rm -rf "$out"; rm -f "$REGION_BASE"-*' EXIT

echo "== replay: $TRACE"
echo "   scaled: --kv-bytes-per-token $KV_BYTES_PER_TOKEN (blocks of $((512 * KV_BYTES_PER_TOKEN / 1024)) KiB)," \
     "--limit $LIMIT (0 = whole trace), $REPLICAS replicas, region $REGION_SIZE"
run() {  # run <name> <replay flags...>
  local name=$1; shift
  echo "-- $name"
  "$CXLKV" replay --trace "$TRACE" --region "$REGION_BASE-$name" --region-size "$REGION_SIZE" \
    --replicas "$REPLICAS" --kv-bytes-per-token "$KV_BYTES_PER_TOKEN" --limit "$LIMIT" \
    --json "$@" > "$out/$name.json"
  rm -f "$REGION_BASE-$name" "$REGION_BASE-$name".r*  # /dev/shm back before the next run
}
run shared --baseline shared --routing round-robin
run private --baseline private --routing round-robin
run private-prefix --baseline private --routing prefix

python3 - "$out" <<'PY'
import json, sys, os
d = sys.argv[1]
runs = [("shared region, round-robin", "shared"), ("private regions, round-robin", "private"),
        ("private regions, prefix routing", "private-prefix")]
rows = [(label, json.load(open(os.path.join(d, f + ".json")))) for label, f in runs]
b = rows[0][1]
print()
print(f"{b['requests']} requests, {b['blocks_requested']} block lookups, {b['distinct_blocks']} distinct blocks, "
      f"{b['block_bytes']//1024} KiB blocks, region {b['region_size']} ({b['replicas']} replicas)")
print(f"{'tier':34} {'hit rate':>9} {'bound':>7} {'cross-replica hits':>19} {'evictions':>10} {'verify fail':>11} {'load/memcpy':>11} {'wall s':>7}")
for label, r in rows:
    print(f"{label:34} {r['hit_rate']:9.4f} {r['hit_rate_bound']:7.4f} {r['cross_replica_hits']:19d} "
          f"{r['evictions']:10d} {r['verify_failures']:11d} {r['load_vs_memcpy']:11.2f} {r['wall_s']:7.1f}")
print()
print("bound = leading-prefix hit rate of an unbounded shared cache over the same requests.")
print("load/memcpy = the replicas' load rate (pin, copy, CRC32C check, per small block) / memcpy of the")
print("same block size measured in this run; block-sized engine rates: build/bin/cxlkv bench.")
print("Every hit was loaded, CRC32C-verified and compared with the block's expected bytes (wrong data: "
      + str(sum(r['wrong_data'] for _, r in rows)) + ").")
PY
