#!/usr/bin/env bats
# The fabric manager emulator and the host agent with real processes:
#  - schemathesis: cxlkv-fabricd against the unedited CFM OpenAPI file
#    (third_party/reference/cfm-openapi.yaml) plus our overlay: the API's
#    operations, then the ones that remove or rename the topology on a server
#    of their own, then every operation with basic auth on (a request without
#    it refused, one with it served);
#  - CDI: specs written by cxlkv-hostd, validated and injected into an OCI
#    spec by the reference CDI Go module (hostd/cdicheck);
#  - two hosts: cxlkv-fabricd and two cxlkv-hostd (started in setup_file),
#    one region composed for both, each host's CDI spec injected, the cxlkv
#    CLI on each host attaching through it and seeing the other's stores, and
#    the free removing everything;
#  - taken port: a second cxlkv-fabricd or cxlkv-hostd on a running one's
#    port and state exits at its bind, before it changes any state.
# Run by the fabric stage (scripts/test.d/30-fabric.sh, after the fabric.e2e
# ctest tests); alone: `bats test/e2e/fabric.bats` (build/ built by the
# stage, or CXLKV_BIN). A failing test prints the processes' logs.
# bats file_tags=fabric

ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
BIN=${CXLKV_BIN:-$ROOT/build/bin}
CLI=${CXLKV_CLI:-$BIN/cxlkv}
SPEC=${CXLKV_CFM_OPENAPI:-$ROOT/third_party/reference/cfm-openapi.yaml}

load lib/common  # free_port

setup_file() {
  export W=$BATS_FILE_TMPDIR
  local h port
  # Two hosts and one blade for the scenario tests: fabricd, hostd on node-a and node-b.
  E=$W/e2e; mkdir -p "$E"; export E
  FPORT=$(free_port); PA=$(free_port); PB=$(free_port)
  export F=http://127.0.0.1:$FPORT
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
    >"$E/fabricd.out" 2>&1 3>&- &
  echo $! >"$W/pids"
  for h in a b; do
    port=$PA; [ $h = b ] && port=$PB
    "$BIN/cxlkv-hostd" --host-id node-$h --listen "127.0.0.1:$port" --fabric "$F" \
      --cdi-dir "$E/node-$h/cdi" --state-dir "$E/node-$h/state" --dev-dir "$E/node-$h/dev" \
      --container-dir "$E/ctr-$h" --resync-interval 0 --allowed-backing-dir "$E/backing" \
      >"$E/hostd-$h.out" 2>&1 3>&- &
    echo $! >>"$W/pids"
  done
}

teardown_file() {
  local p
  for p in $(cat "$W/pids" 2>/dev/null); do kill "$p" 2>/dev/null; done
  for p in $(cat "$W/pids" 2>/dev/null); do wait "$p" 2>/dev/null; done
  return 0
}

# The failure hook: the logs of the processes the failed test talked to.
teardown() {
  if [ -z "${BATS_TEST_COMPLETED:-}" ] && [ -z "${BATS_TEST_SKIPPED:-}" ]; then
    local f
    for f in "$E"/*.out "$W"/*/fabricd.log; do
      [ -s "$f" ] && { echo "--- $f (last 15 lines)"; tail -15 "$f"; }
    done
  fi
  return 0
}

# start_fabricd <config> <log>: cxlkv-fabricd on a free loopback port; sets
# FABRIC_URL and FABRIC_PID.
start_fabricd() {
  local out=$W/fabricd.$RANDOM.out
  "$BIN/cxlkv-fabricd" --config "$1" --listen 127.0.0.1:0 --log-level warn >"$out" 2>"$2" 3>&- &
  FABRIC_PID=$!
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

# Management operations that remove or rename the topology run last, on their
# own server, so they do not starve the rest of the run of ids.
DESTRUCTIVE='^(appliances|blades|hosts)(DeleteById|UpdateById)$'
# schemathesis_run <name> <filter args...>: schemathesis against a fresh
# fabricd (its topology fabric/api/fuzz-topology.yaml, plus ST_EXTRA_YAML).
# positive_data_acceptance is left out: the emulator refuses some schema-valid
# requests by design (adding a device its config lacks).
schemathesis_run() {
  local name=$1 rc=0; shift
  [ -f "$SPEC" ] || { echo "OpenAPI file $SPEC not found"; return 1; }
  command -v schemathesis >/dev/null ||
    { echo "schemathesis not installed (scripts/setup.sh installs scripts/pip-requirements.txt)"; return 1; }
  [ -s "$W/openapi.yaml" ] ||
    python3 "$ROOT/fabric/api/apply_overlay.py" "$SPEC" "$ROOT/fabric/api/cxlkv-overlay.yaml" "$W/openapi.yaml"
  mkdir -p "$W/$name"
  sed "s#\${STATE}#$W/$name#g" "$ROOT/fabric/api/fuzz-topology.yaml" >"$W/$name/topology.yaml"
  [ -n "${ST_EXTRA_YAML:-}" ] && printf '%s\n' "$ST_EXTRA_YAML" >>"$W/$name/topology.yaml"
  start_fabricd "$W/$name/topology.yaml" "$W/$name/fabricd.log" || return 1
  local log=$W/$name/schemathesis.log
  # From the scratch dir: schemathesis leaves a cache directory in its cwd.
  (cd "$W/$name" && schemathesis --config-file "$ROOT/fabric/api/schemathesis.toml" \
     run "$W/openapi.yaml" --url "$FABRIC_URL" --checks all \
     --exclude-checks positive_data_acceptance \
     --max-examples "${CXLKV_FUZZ_EXAMPLES:-40}" --seed 4242 -w 2 --no-color "$@") >"$log" 2>&1 3>&- || rc=1
  if ! kill -0 "$FABRIC_PID" 2>/dev/null; then
    echo "cxlkv-fabricd died during schemathesis $name:"; cat "$W/$name/fabricd.log"; rc=1
  fi
  kill "$FABRIC_PID" 2>/dev/null; wait "$FABRIC_PID" 2>/dev/null
  if [ $rc = 0 ]; then
    echo "# schemathesis $name:$(grep -E '^  Tested:' "$log" | tr -s ' ') operations, $(grep -oE '[0-9]+ generated' "$log" | tail -1) cases, $(grep -oE 'API Links: +[0-9]+ covered' "$log" | tr -s ' ' | tail -1)" >&3
  else
    sed -n "/=== FAILURES/,\$p" "$log"; tail -20 "$log"
  fi
  return $rc
}

# bats test_tags=schemathesis
@test "schemathesis: every CFM and cxlkv operation but faults and the destructive ones" {
  schemathesis_run api --exclude-path /cxlkv/v1/faults --exclude-operation-id-regex "$DESTRUCTIVE"
}

# bats test_tags=schemathesis
@test "schemathesis: the management operations that remove or rename the topology" {
  schemathesis_run management --include-operation-id-regex "$DESTRUCTIVE"
}

# With basic auth on: every operation must refuse a request without it (401,
# documented by the overlay) and serve one with it.
# bats test_tags=schemathesis
@test "schemathesis: basic auth on: every operation refuses a request without it and serves one with it" {
  ST_EXTRA_YAML='auth: {username: fuzz, password: fuzz-pass}' \
    CXLKV_FUZZ_EXAMPLES=${CXLKV_FUZZ_AUTH_EXAMPLES:-8} \
    schemathesis_run auth --auth fuzz:fuzz-pass --exclude-path /cxlkv/v1/faults \
      --exclude-operation-id-regex "$DESTRUCTIVE"
}

# The Go that scripts/setup.sh installs lives in /usr/local/go, which a fresh
# machine does not have on PATH (Debian's own golang-go is too old for go.mod).
# bats test_tags=cdi
@test "cdi: cdicheck builds (tags.cncf.io/container-device-interface)" {
  (cd "$ROOT/hostd/cdicheck" && PATH=/usr/local/go/bin:$PATH GOTOOLCHAIN=local go build -o "$W/cdicheck" .)
}

cdicheck() {
  [ -x "$W/cdicheck" ] || { echo "no cdicheck: its build test failed"; return 1; }
  "$W/cdicheck" "$@"
}

# bats test_tags=cdi
@test "cdi: a devdax region's spec validated and injected (env and the c device node)" {
  mkdir -p "$W/devdax-cdi"
  CXLKV_CDI_EXPORT_DIR=$W/devdax-cdi "$BIN/hostd_unit_test" \
    --gtest_filter='DevdaxTest.CreatesAlignedSizedBoundSubDeviceAndDestroysIt' >"$W/dd.log" 2>&1 ||
    { cat "$W/dd.log"; return 1; }
  cdicheck -spec-dir "$W/devdax-cdi" cxlkv.dev/region=devdax-r1 >"$W/devdax-oci.json"
  jq -e '(.process.env | index("CXL_DAX_DEVICE=/dev/dax0.1") and index("CXL_DAX_SIZE=8388608")
          and index("CXL_DAX_OFFSET=0"))
         and (.linux.devices[0] | .path == "/dev/dax0.1" and .type == "c" and .major == 251 and .minor == 1)' \
    "$W/devdax-oci.json" || { cat "$W/devdax-oci.json"; return 1; }
}

up() { grep -q listening "$E/fabricd.out" && grep -q listening "$E/hostd-a.out" && grep -q listening "$E/hostd-b.out"; }
MEM_PATH=/cfm/v1/appliances/cma-0/blades/blade-0/memory
region_id() { jq -r '.id // empty' "$E/region.json" 2>/dev/null; }

# bats test_tags=two-hosts
@test "two hosts: compose with shareCount 2 -> 201" {
  local code
  for _ in $(seq 100); do up && break; sleep 0.1; done
  up || { cat "$E"/*.out; return 1; }
  code=$(curl -s -o "$E/region.json" -w '%{http_code}' -X POST "$F$MEM_PATH" \
    -H 'Content-Type: application/json' -d '{"memorySizeMiB": 64, "QoS": 2, "shareCount": 2, "claimUid": "e2e"}')
  cat "$E/region.json"
  [ "$code" = 201 ] && [ -n "$(region_id)" ]
}

# bats test_tags=two-hosts
@test "two hosts: both hosts' CDI specs validated and injected (env and bind mount)" {
  local id h
  id=$(region_id); [ -n "$id" ] || { echo "no region: the compose test failed"; return 1; }
  for h in a b; do
    cdicheck -spec-dir "$E/node-$h/cdi" "cxlkv.dev/region=$id" >"$E/oci-$h.json"
    jq -e --arg ctr "$E/ctr-$h/$id" --arg host "$E/node-$h/dev/$id" --arg size "CXL_DAX_SIZE=$((64 << 20))" '
      (.process.env | index("CXL_DAX_DEVICE=" + $ctr) and index($size) and index("CXL_DAX_OFFSET=0"))
      and any(.mounts[]; .destination == $ctr and .source == $host and (.options | index("bind")))' \
      "$E/oci-$h.json" || { cat "$E/oci-$h.json"; return 1; }
  done
}

# One replay worker "on" each host, each attaching through its own CDI
# environment and mount; they share only the region's bytes (and the replay's
# control file, which stands for the request router).
# bats test_tags=two-hosts
@test "two hosts: cxlkv on node-a and node-b attach through CDI and see each other's stores" {
  local i h r0=0 r1=0 rp0 rp1
  if [ "$(id -u)" != 0 ] || ! unshare --mount true 2>/dev/null; then
    echo "cxlkv on each host needs root for a private mount namespace (unshare -m)"; return 1
  fi
  [ -x "$CLI" ] || { echo "cxlkv CLI not built ($CLI)"; return 1; }
  [ -s "$E/oci-a.json" ] && [ -s "$E/oci-b.json" ] || { echo "no OCI specs: the CDI test failed"; return 1; }
  for i in 0 1; do
    h=a; [ $i = 1 ] && h=b
    python3 "$ROOT/hostd/cdicheck/run_in_oci.py" "$E/oci-$h.json" -- "$CLI" replay \
      --trace "$ROOT/data/traces/mooncake-conversation-trace.jsonl" --limit 400 --block-tokens 16 \
      --kv-bytes-per-token 64 --replica-index $i --replica-count 2 --control "$E/replay.ctl" \
      --json --quiet >"$E/replay-$h.json" 2>"$E/replay-$h.err" 3>&- &
    eval "rp$i=\$!"
  done
  wait "$rp0" || r0=$?; wait "$rp1" || r1=$?
  tail -n 5 "$E"/replay-*
  [ $r0 = 0 ] && [ $r1 = 0 ]
  for h in a b; do
    jq -e '.errors == 0 and .wrong_data == 0 and .unexpected_verify_failures == 0 and .cross_replica_hits > 0' \
      "$E/replay-$h.json" >/dev/null
    echo "# replay-$h: region $(jq -r .region "$E/replay-$h.json"), $(jq .cross_replica_hits "$E/replay-$h.json") cross-host hits" >&3
  done
}

# bats test_tags=two-hosts
@test "two hosts: free -> both hosts' devices and CDI specs gone, capacity back" {
  local id code left alloc
  id=$(region_id); [ -n "$id" ] || { echo "no region: the compose test failed"; return 1; }
  code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$F$MEM_PATH/$id")
  left=$(ls "$E/node-a/cdi" "$E/node-b/cdi" "$E/node-a/dev" "$E/node-b/dev" "$E/backing" 2>/dev/null | grep -c "$id" || true)
  alloc=$(curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0" | jq '.totalMemoryAllocatedMiB // 0')
  echo "HTTP $code, $left leftovers, $alloc MiB still allocated"
  [ "$code" = 200 ] && [ "$left" = 0 ] && [ "$alloc" = 0 ]
}

# listening_port <stdout file> <pid>: waits for the daemon's "listening
# ADDR:PORT" line and prints PORT; fails if the daemon exits first.
listening_port() {
  for _ in $(seq 100); do
    if grep -q '^listening ' "$1"; then sed -n 's/^listening .*://p' "$1"; return 0; fi
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  echo "daemon $2 did not start"; return 1
}

# A second daemon started on a port another one holds can serve nothing, so
# it must change nothing: it binds first, and exits on the taken port before
# cxlkv-fabricd's recovery (which removes backing files no region owns) or
# cxlkv-hostd's open and first resync (which remove CDI specs its state does
# not list). Each first daemon runs on its own state; the files planted
# after it started are what the second one's start would have removed.
# bats test_tags=taken-port
@test "taken port: a second cxlkv-fabricd or cxlkv-hostd exits before touching its state" {
  local d=$W/taken hpid port
  mkdir -p "$d/backing" "$d/cdi"
  cat >"$d/fabricd.yaml" <<YAML
stateDir: $d/fabric-state
backingDir: $d/backing
appliances:
  - id: cma-0
    blades:
      - id: blade-0
        resourceBlockMiB: 16
        channels: 1
        blocksPerChannel: 2
        ports:
          - {id: P1, host: node-x, hostPort: port0}
hosts:
  - {id: node-x, agent: "http://127.0.0.1:1"}
YAML
  start_fabricd "$d/fabricd.yaml" "$d/fabricd.log" || return 1
  port=${FABRIC_URL##*:}
  : >"$d/backing/orphan.region"
  run "$BIN/cxlkv-fabricd" --config "$d/fabricd.yaml" --listen "127.0.0.1:$port" --log-level warn
  kill "$FABRIC_PID"; wait "$FABRIC_PID"
  echo "second cxlkv-fabricd: exit $status: $output"
  [ "$status" = 1 ] || fail "exit $status, want 1"
  [[ $output == *"address already in use"* ]] || fail "no 'address already in use'"
  [ -e "$d/backing/orphan.region" ] || fail "it removed a backing file before its bind failed"

  local hostd=("$BIN/cxlkv-hostd" --host-id node-x --cdi-dir "$d/cdi" --state-dir "$d/hostd-state"
               --dev-dir "$d/dev" --resync-interval 0)
  "${hostd[@]}" --listen 127.0.0.1:0 >"$d/hostd.out" 2>"$d/hostd.log" 3>&- &
  hpid=$!
  port=$(listening_port "$d/hostd.out" "$hpid") || { cat "$d/hostd.log"; kill "$hpid"; return 1; }
  printf '{"cdiVersion": "0.6.0", "kind": "cxlkv.dev/region", "devices": []}\n' >"$d/cdi/orphan.json"
  run "${hostd[@]}" --listen "127.0.0.1:$port"
  kill "$hpid"; wait "$hpid"
  echo "second cxlkv-hostd: exit $status: $output"
  [ "$status" = 1 ] || fail "exit $status, want 1"
  [[ $output == *"address already in use"* ]] || fail "no 'address already in use'"
  [ -e "$d/cdi/orphan.json" ] || fail "it removed a CDI spec before its bind failed"
}
