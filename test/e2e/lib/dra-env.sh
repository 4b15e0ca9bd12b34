# Helpers shared by the DRA e2e scripts (scripts/test.d/55-dra.sh, test/e2e/dra-demo.sh,
# dra-bench.sh, dra-binding-conditions.sh). Sourced, not run. Expects the caller to have set
# E (the run's scratch dir, with E/logs) and the array PIDS (what the caller's trap stops).

# A free TCP port on 127.0.0.1.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start <name> <cmd...>: a background process logged to $E/logs/<name>.log, its pid in PIDS
# and in PID_<name>. DRA_LOG_APPEND=1 appends (a restart under one name keeps the old log).
start() {
  local name=$1; shift
  if [ "${DRA_LOG_APPEND:-0}" = 1 ]; then "$@" >>"$E/logs/$name.log" 2>&1 &
  else "$@" >"$E/logs/$name.log" 2>&1 &
  fi
  PIDS+=($!)
  eval "PID_${name//-/_}=$!"
}

# wait_until <seconds> <cmd...>: true once cmd succeeds, false after the deadline.
wait_until() {
  local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do [ $SECONDS -ge $end ] && return 1; sleep 0.3; done
}

# fabricd_config <agent timeout ms> <node...>: the emulator's config on stdout: one appliance,
# one blade of 8 GiB (4 channels x 8 blocks of 256 MiB) with one port cabled to each node,
# whose hostd listens on 127.0.0.1:${HPORT[node]} (the caller's associative array). Uses $E
# and $BACKING. FABRICD_BLADES=N (default 1) gives blade-0 .. blade-(N-1), alike.
fabricd_config() {
  local timeout=$1; shift
  local i n b
  cat <<YAML
stateDir: $E/fabricd
backingDir: $BACKING
agentTimeoutMs: $timeout
appliances:
  - id: cma-0
    blades:
YAML
  for b in $(seq 0 $((${FABRICD_BLADES:-1} - 1))); do
    printf '      - id: blade-%d\n        resourceBlockMiB: 256\n        channels: 4\n' "$b"
    printf '        blocksPerChannel: 8\n        ports:\n'
    i=0
    for n in "$@"; do i=$((i + 1)); printf '          - {id: P%d, host: %s, hostPort: port0}\n' "$i" "$n"; done
  done
  echo "hosts:"
  for n in "$@"; do
    printf '  - {id: %s, agent: "http://127.0.0.1:%s", localMemoryMiB: 65536}\n' "$n" "${HPORT[$n]}"
  done
}
