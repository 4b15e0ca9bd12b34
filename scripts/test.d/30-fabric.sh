#!/usr/bin/env bash
# Stage: fabric manager emulator and host agent.
#  1. schemathesis: cxlkv-fabricd against cfm-openapi.yaml + our overlay.
#  2. CDI: specs written by cxlkv-hostd, validated and injected into an OCI
#     spec by the reference CDI Go module.
#  3. Scenarios with real processes: the fabric.e2e tests (test/e2e/), then
#     fabricd + two hostd + the cxlkv CLI on each host.
# Prints "fabric: N passed, N failed, N skipped"; exits non-zero on any failure.
# Builds what it needs in build/ (CXLKV_BIN points at other binaries instead).
# Warm: about 55 s on 2 cores.
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
ROOT=$PWD
BIN=${CXLKV_BIN:-$ROOT/build/bin}
SPEC=${CXLKV_CFM_OPENAPI:-$ROOT/third_party/reference/cfm-openapi.yaml}  # unedited upstream copy
WORK=$(mktemp -d /tmp/cxlkv-fabric-stage.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
passed=0; failed=0; skipped=0
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

if [ -z "${CXLKV_BIN:-}" ]; then
  echo "== fabric: build (build/: the daemons, the CLI, the fabric.e2e and hostd tests)"
  cxlkv_build_main cxlkv-fabricd cxlkv-hostd cxlkv_cli hostd_unit_test fabric_scenario_test ||
    { bad "build"; echo "fabric: $passed passed, $failed failed, $skipped skipped"; exit 1; }
fi

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
    [ -n "${ST_EXTRA_YAML:-}" ] && printf '%s\n' "$ST_EXTRA_YAML" >>"$WORK/$name/topology.yaml"
    start_fabricd "$WORK/$name/topology.yaml" "$WORK/$name/fabricd.log" || { bad "schemathesis $name: start"; return; }
    local log=$WORK/$name/schemathesis.log
    # From the scratch dir: schemathesis leaves a cache directory in its cwd.
    # positive_data_acceptance is left out: the emulator refuses some
    # schema-valid requests by design (adding a device its config lacks).
    if (cd "$WORK/$name" && schemathesis --config-file "$ROOT/fabric/api/schemathesis.toml" \
          run "$WORK/openapi.yaml" --url "$FABRIC_URL" --checks all \
          --exclude-checks positive_data_acceptance \
          --max-examples "${CXLKV_FUZZ_EXAMPLES:-40}" --seed 4242 -w 2 --no-color \
          "$@") >"$log" 2>&1; then
      ok "schemathesis $name: $(grep -E '^  Tested:' "$log" | tr -s ' ') operations, $(grep -oE '[0-9]+ generated' "$log" | tail -1) cases, $(grep -oE 'API Links: +[0-9]+ covered' "$log" | tr -s ' ' | tail -1)"
    else
      bad "schemathesis $name"; sed -n "/=== FAILURES/,\$p" "$log"
    fi
    kill -0 "$FABRIC_PID" 2>/dev/null || { bad "cxlkv-fabricd died during schemathesis $name"; cat "$WORK/$name/fabricd.log"; }
    stop_pid "$FABRIC_PID"
  }
  run_st api --exclude-path /cxlkv/v1/faults --exclude-operation-id-regex "$destructive"
  run_st management --include-operation-id-regex "$destructive"
  # With basic auth on: every operation must refuse a request without it (401,
  # documented by the overlay) and serve one with it.
  ST_EXTRA_YAML='auth: {username: fuzz, password: fuzz-pass}' \
    CXLKV_FUZZ_EXAMPLES=${CXLKV_FUZZ_AUTH_EXAMPLES:-8} \
    run_st auth --auth fuzz:fuzz-pass --exclude-path /cxlkv/v1/faults \
      --exclude-operation-id-regex "$destructive"
fi

# ---- 2. CDI specs through the reference implementation ----------------------
CDICHECK=$WORK/cdicheck
# The Go that scripts/setup.sh installs lives in /usr/local/go, which a fresh
# machine does not have on PATH (Debian's own golang-go is too old for go.mod).
if (cd hostd/cdicheck && PATH=/usr/local/go/bin:$PATH GOTOOLCHAIN=local go build -o "$CDICHECK" .) \
    >"$WORK/go-build.log" 2>&1; then
  ok "build cdicheck (tags.cncf.io/container-device-interface)"
else
  bad "build cdicheck"; cat "$WORK/go-build.log"; CDICHECK=
fi
if [ -n "$CDICHECK" ]; then
  mkdir -p "$WORK/devdax-cdi"
  if CXLKV_CDI_EXPORT_DIR=$WORK/devdax-cdi "$BIN/hostd_unit_test" \
       --gtest_filter='DevdaxTest.CreatesAlignedSizedBoundSubDeviceAndDestroysIt' >"$WORK/dd.log" 2>&1 &&
     "$CDICHECK" -spec-dir "$WORK/devdax-cdi" cxlkv.dev/region=devdax-r1 >"$WORK/devdax-oci.json" &&
     python3 - "$WORK/devdax-oci.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
env = s["process"]["env"]
assert "CXL_DAX_DEVICE=/dev/dax0.1" in env and "CXL_DAX_SIZE=8388608" in env and "CXL_DAX_OFFSET=0" in env, env
dev = s["linux"]["devices"][0]
assert dev["path"] == "/dev/dax0.1" and dev["type"] == "c" and (dev["major"], dev["minor"]) == (251, 1), dev
PY
  then ok "CDI devdax spec validated and injected (env + c device node)"
  else bad "CDI devdax spec"; cat "$WORK/dd.log"; fi
fi

# ---- 3. scenarios with real processes ---------------------------------------
echo "== fabric: fabric.e2e tests (cxlkv-fabricd and two cxlkv-hostd per test)"
if [ -z "${CXLKV_BIN:-}" ]; then
  cxlkv_ctest build -L '^fabric\.e2e$' -j "$JOBS"
else
  echo "fabric: CXLKV_BIN is set; the fabric.e2e tests run from build/ only"; skipped=$((skipped + 1))
fi

# Two hosts, one region, the cxlkv CLI on each.
CLI=${CXLKV_CLI:-$BIN/cxlkv}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
E=$WORK/e2e; mkdir -p "$E"
FPORT=$(free_port); PA=$(free_port); PB=$(free_port)
cat >"$E/fabricd.yaml" <<YAML
stateDir: $E/fabric-state
backingDir: $E/backing
appliances:
  - id: cma-0
    blades:
      - id: blade-0
        resourceBlockMiB: 16
        channels: 4
        blocksPerChannel: 2
        ports:
          - {id: P1, host: node-a, hostPort: port0}
          - {id: P2, host: node-b, hostPort: port0}
hosts:
  - {id: node-a, agent: "http://127.0.0.1:$PA"}
  - {id: node-b, agent: "http://127.0.0.1:$PB"}
YAML
"$BIN/cxlkv-fabricd" --config "$E/fabricd.yaml" --listen "127.0.0.1:$FPORT" --log-level warn \
  >"$E/fabricd.out" 2>&1 & pids+=($!)
for h in a b; do
  port=$PA; [ $h = b ] && port=$PB
  "$BIN/cxlkv-hostd" --host-id node-$h --listen "127.0.0.1:$port" --fabric "http://127.0.0.1:$FPORT" \
    --cdi-dir "$E/node-$h/cdi" --state-dir "$E/node-$h/state" --dev-dir "$E/node-$h/dev" \
    --container-dir "$E/ctr-$h" --resync-interval 0 --allowed-backing-dir "$E/backing" \
    >"$E/hostd-$h.out" 2>&1 & pids+=($!)
done
up=0
for _ in $(seq 100); do
  if grep -q listening "$E/fabricd.out" && grep -q listening "$E/hostd-a.out" && grep -q listening "$E/hostd-b.out"; then up=1; break; fi
  sleep 0.1
done
F=http://127.0.0.1:$FPORT
MEM=$F/cfm/v1/appliances/cma-0/blades/blade-0/memory
if [ $up = 0 ]; then
  bad "e2e: processes did not start"; cat "$E"/*.out
else
  code=$(curl -s -o "$E/region.json" -w '%{http_code}' -X POST "$MEM" \
    -H 'Content-Type: application/json' -d '{"memorySizeMiB": 64, "QoS": 2, "shareCount": 2, "claimUid": "e2e"}')
  ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$E/region.json" 2>/dev/null)
  if [ "$code" = 201 ] && [ -n "$ID" ]; then ok "e2e: compose shareCount 2 -> 201"; else bad "e2e: compose ($code)"; cat "$E/region.json"; fi
  cdi_ok=1
  for h in a b; do
    if [ -n "$CDICHECK" ] && "$CDICHECK" -spec-dir "$E/node-$h/cdi" "cxlkv.dev/region=$ID" >"$E/oci-$h.json" &&
       python3 - "$E/oci-$h.json" "$E/ctr-$h/$ID" "$E/node-$h/dev/$ID" <<'PY'
import json, sys
s, ctr, host = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
env = s["process"]["env"]
assert f"CXL_DAX_DEVICE={ctr}" in env and f"CXL_DAX_SIZE={64 << 20}" in env and "CXL_DAX_OFFSET=0" in env, env
assert any(m["destination"] == ctr and m["source"] == host and "bind" in m["options"] for m in s["mounts"]), s["mounts"]
PY
    then :; else cdi_ok=0; fi
  done
  [ $cdi_ok = 1 ] && ok "e2e: both hosts' CDI specs validated and injected (env + bind mount)" || bad "e2e: CDI specs"
  if [ "$(id -u)" != 0 ] || ! unshare --mount true 2>/dev/null; then
    bad "e2e: cxlkv on each host needs root for a private mount namespace (unshare -m)"
  elif [ ! -x "$CLI" ]; then
    bad "e2e: cxlkv CLI not built ($CLI)"
  else
    # One replay worker "on" each host, each attaching through its own CDI
    # environment and mount; they share only the region's bytes (and the
    # replay's control file, which stands for the request router).
    for i in 0 1; do
      h=a; [ $i = 1 ] && h=b
      python3 hostd/cdicheck/run_in_oci.py "$E/oci-$h.json" -- "$CLI" replay \
        --trace data/traces/mooncake-conversation-trace.jsonl --limit 400 --block-tokens 16 \
        --kv-bytes-per-token 64 --replica-index $i --replica-count 2 --control "$E/replay.ctl" \
        --json --quiet >"$E/replay-$h.json" 2>"$E/replay-$h.err" &
      eval "rp$i=\$!"
    done
    wait "$rp0"; r0=$?; wait "$rp1"; r1=$?
    if [ $r0 = 0 ] && [ $r1 = 0 ] && python3 - "$E/replay-a.json" "$E/replay-b.json" <<'PY'
import json, sys
for p in sys.argv[1:]:
    r = json.load(open(p))
    assert r["errors"] == 0 and r["wrong_data"] == 0 and r["unexpected_verify_failures"] == 0, r
    assert r["cross_replica_hits"] > 0, f"{p}: no hit on the other host's stores: {r}"
    print(f"  {p.rsplit('/', 1)[1]}: region {r['region']}, {r['cross_replica_hits']} cross-host hits")
PY
    then ok "e2e: cxlkv on node-a and node-b attach through CDI and see each other's stores"
    else bad "e2e: cxlkv replay across hosts (rc $r0/$r1)"; tail -5 "$E"/replay-*; fi
  fi
  code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$MEM/$ID")
  left=$(ls "$E/node-a/cdi" "$E/node-b/cdi" "$E/node-a/dev" "$E/node-b/dev" "$E/backing" 2>/dev/null | grep -c "$ID")
  alloc=$(curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("totalMemoryAllocatedMiB", 0))')
  if [ "$code" = 200 ] && [ "$left" = 0 ] && [ "$alloc" = 0 ]; then
    ok "e2e: free -> both hosts' devices and CDI specs gone, capacity back"
  else bad "e2e: free (HTTP $code, $left leftovers, $alloc MiB still allocated)"; fi
fi

echo "fabric: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
