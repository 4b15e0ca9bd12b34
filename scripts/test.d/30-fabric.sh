#!/usr/bin/env bash
# Stage: fabric manager emulator and host agent.
#  1. schemathesis: cxlkv-fabricd against cfm-openapi.yaml + our overlay.
#  2. CDI: specs written by cxlkv-hostd, validated and injected into an OCI
#     spec by the reference CDI Go module.
#  3. Scenarios with real processes (fabricd + two hostd + the cxlkv CLI).
# Prints "N passed, N failed"; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BIN=${CXLKV_BIN:-$ROOT/build/bin}
SPEC=${CXLKV_CFM_OPENAPI:-$ROOT/../shared/reference/cfm-openapi.yaml}
WORK=$(mktemp -d /tmp/cxlkv-fabric-stage.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
passed=0; failed=0
ok() { echo "PASS: $1"; passed=$((passed + 1)); }
bad() { echo "FAIL: $1"; failed=$((failed + 1)); }

# Starts cxlkv-fabricd on a free loopback port; sets FABRIC_URL and FABRIC_PID.
start_fabricd() {  # start_fabricd <config> <log>
  local out=$WORK/fabricd.$RANDOM.out
  "$BIN/cxlkv-fabricd" --config "$1" --listen 127.0.0.1:0 --log-level warn >"$out" 2>"$2" &
  FABRIC_PID=$!
  pids+=("$FABRIC_PID")
  for _ in $(seq 100); do
    if grep -q '^listening ' "$out"; then
      FABRIC_URL="http://$(sed -n 's/^listening //p' "$out")"
      return 0
    fi
    kill -0 "$FABRIC_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "cxlkv-fabricd did not start:"; cat "$2"
  return 1
}

stop_pid() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

# ---- 1. schemathesis --------------------------------------------------------
if [ ! -f "$SPEC" ]; then
  bad "schemathesis: OpenAPI file $SPEC not found"
elif ! command -v schemathesis >/dev/null; then
  bad "schemathesis: not installed (scripts/setup.sh installs scripts/pip-requirements.txt)"
else
  python3 fabric/api/apply_overlay.py "$SPEC" fabric/api/cxlkv-overlay.yaml "$WORK/openapi.yaml" ||
    bad "apply overlay"
  # Management operations that remove or rename the topology run last, on
  # their own server, so they do not starve the rest of the run of ids.
  destructive='^(appliances|blades|hosts)(DeleteById|UpdateById)$'
  run_st() {  # run_st <name> <filter args...>
    local name=$1; shift
    mkdir -p "$WORK/$name"
    sed "s#\${STATE}#$WORK/$name#g" fabric/api/fuzz-topology.yaml >"$WORK/$name/topology.yaml"
    start_fabricd "$WORK/$name/topology.yaml" "$WORK/$name/fabricd.log" || { bad "schemathesis $name: start"; return; }
    local log=$WORK/$name/schemathesis.log
    if schemathesis --config-file fabric/api/schemathesis.toml run "$WORK/openapi.yaml" \
        --url "$FABRIC_URL" --checks all --exclude-checks positive_data_acceptance \
        --max-examples "${CXLKV_FUZZ_EXAMPLES:-40}" --seed 4242 -w 2 --no-color \
        "$@" >"$log" 2>&1; then
      ok "schemathesis $name ($(grep -oE '[0-9]+ generated' "$log" | head -1) cases)"
    else
      bad "schemathesis $name"; sed -n "/=== FAILURES/,\$p" "$log"
    fi
    kill -0 "$FABRIC_PID" 2>/dev/null || { bad "cxlkv-fabricd died during schemathesis $name"; cat "$WORK/$name/fabricd.log"; }
    stop_pid "$FABRIC_PID"
  }
  run_st api --exclude-path /cxlkv/v1/faults --exclude-operation-id-regex "$destructive"
  run_st management --include-operation-id-regex "$destructive"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
