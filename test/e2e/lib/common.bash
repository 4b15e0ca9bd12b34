# Helpers any e2e shell file may use, with no world behind them. Sourcing
# this file only defines functions (and CXLKV_E2E_LIB, the directory it is
# in): it starts nothing, so a file that must not
# load lib/dra.bash (whose setup_file starts the DRA world), such as
# realnodes/realnodes.bash, fabric.bats or images.bats, shares them too.
# Sourced by lib/dra-env.sh (so by lib/dra.bash and the DRA benches),
# lib/dra.bash, realnodes/realnodes.bash and test/e2e/cluster.sh; loaded by
# fabric.bats and images.bats (`load lib/common`).

# free_port: a TCP port on 127.0.0.1 for a daemon the caller starts next,
# which nothing else is given before that daemon binds it, however many test
# lanes run beside: picked outside the kernel's ephemeral range (no bind to
# port 0 and no outgoing connection gets it) and leased for an hour to this
# caller alone (a directory per port under $CXLKV_PORT_LEASES, default
# /tmp/cxlkv-port-leases-UID: one for every lane and run of the user,
# whatever TMPDIR each has); lib/free_port.py says how. The kernel's pick
# for a bind to port 0, released at once, could be given to another
# process before the daemon bound it.
CXLKV_E2E_LIB=${CXLKV_E2E_LIB:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
free_port() {
  python3 "$CXLKV_E2E_LIB/free_port.py" "${CXLKV_PORT_LEASES:-/tmp/cxlkv-port-leases-$(id -u)}"
}

# ---- bats tests ----------------------------------------------------------------

# fail <message>: the test fails with the message (bats prints the test's
# output, then the failure hook's).
fail() { echo "FAILED: $*" >&2; return 1; }

# note <text>: a line in the TAP stream (a "# " comment) under the test
# (seconds, ids), shown whether the test passes or not.
note() { echo "# $*" >&3; }

# dead <pid>: the process has exited (a zombie until reaped counts as exited:
# kill -0 would still succeed on it).
dead() { [ ! -e "/proc/$1" ] || [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]; }

# gone <kubectl get arguments>: the object does not exist (any more).
gone() { ! kubectl get "$@" >/dev/null 2>&1; }

# dump_kube_state: the Kubernetes part of a failure hook's print-out
# (lib/dra.bash's dra_dump_state, realnodes.bash's rn_dump_state): pods and
# claims in every namespace, ResourceSlices, the last 25 Events, and
# `kubectl describe` (its last 30 lines) of up to five pods neither Running
# nor Succeeded.
dump_kube_state() {
  echo "--- pods and claims, every namespace"
  kubectl get pods,resourceclaims -A -o wide 2>&1
  echo "--- ResourceSlices"
  kubectl get resourceslices -o wide 2>&1
  echo "--- the last 25 Events, every namespace"
  kubectl get events -A --sort-by=.lastTimestamp 2>&1 | tail -25
  kubectl get pods -A -o json 2>/dev/null |
    jq -r 2>/dev/null '.items[] | select(.status.phase != "Running" and .status.phase != "Succeeded")
           | "\(.metadata.namespace) \(.metadata.name)"' | head -5 |
    while read -r ns name; do
      echo "--- kubectl describe pod -n $ns $name (its last 30 lines)"
      kubectl describe pod -n "$ns" "$name" 2>&1 | tail -30
    done
}

# A @test runs in a process of its own, so a step that learns something a
# later step of its scenario needs writes it to the file of the world's facts,
# which every test sources first (lib/dra.bash's dra_keep/dra_need,
# realnodes.bash's rn_keep/rn_need wrap these with their file and hint).

# state_keep <file> <var>...: appends the variables' values to <file>.
state_keep() {
  local state_file=$1 v
  shift
  for v in "$@"; do printf '%s=%q\n' "$v" "${!v}" >>"$state_file"; done
}

# state_need <how to run it> <var>...: skips the test, saying how to run the
# step that records it, when an earlier step did not record the variable (it
# failed, or the test was selected alone).
state_need() {
  local how=$1 v
  shift
  for v in "$@"; do
    [ -n "${!v:-}" ] || skip "needs \$$v from an earlier step$how"
  done
}
