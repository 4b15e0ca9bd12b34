#!/usr/bin/env bash
# test.sh: background lane
# Stage: the DRA driver end to end, against a real kube-apiserver,
# kube-scheduler and kube-controller-manager (test/e2e/cluster.sh, 3 fake
# nodes), with the kubelet's own plugin manager and DRA manager per node
# (cxlkv-fakekubelet), cxlkv-fabricd (one 8 GiB blade cabled to all three
# nodes), one cxlkv-hostd and one cxlkv-dra-kubeletplugin per node, and
# cxlkv-dra-controller: the world of test/e2e/lib/dra.bash, started once
# here and shared by the bats files below, run one after another in this
# order (each file's header says what it checks; test/README.md says how to
# list the tests and run one by name):
#   dra-shared-claim.bats    the slice, /healthz, scenario 1 (a 2 GiB claim
#                            shared by replay pods on two nodes), about 35 s
#   dra-plugin.bats          a node reboot and the health stream, the plugin
#                            SIGKILLed mid-prepare, a rolling update, prepare
#                            refusing another claim's region, about 75 s
#   dra-claim-churn.bats     a create/delete loop (10 claims; 50 with
#                            CXLKV_FULL=1) over two racing controllers, about 35 s
#   dra-node.bats            release on the last unprepare, prepare's UID and
#                            node-selector checks, start-up cleanup, health
#                            with hostd down, about 40 s
#   dra-controller.bats      the controller's failure cases, about 85 s
#   dra-quota.bats           namespace byte budgets over three replicas and
#                            `cxlkv status`, about 50 s
#   dra-takeover.bats        the dead-owner takeover and the heartbeat-Lease
#                            garbage collection, about 25 s
#   dra-release.bats         a release racing a new consumer, a claim every
#                            host has released, about 45 s
#   dra-release-epoch.bats   a release held past a new consumer's add-host, about 20 s
#   dra-local-composer.bats  scenario 1 with the local composer, about 25 s
# With --filter REGEX or --tags LIST (CXLKV_TEST_FILTER, CXLKV_TEST_TAGS)
# only the matching tests run, and
# neither the background scripts below nor test/scripts/bats-check.sh do.
# In the background meanwhile (started before the main control plane, one
# after the other, output shown and counted at the end): on a control plane
# of its own with a short bindingTimeout, Kubernetes' binding-condition
# scenarios ported to our controller (test/e2e/dra-binding-conditions.sh,
# about 95 s); then, on another control plane with DRAConsumableCapacity and
# DRADeviceBindingConditions off, annotation mode and the paper's flow, then
# the switch back to consumable capacity, then on a third with only
# DRAConsumableCapacity off annotation mode with our binding conditions
# (test/e2e/dra-gates-off.sh, about 105 s); then a non-coherent blade on a
# fourth (test/e2e/dra-noncoherent.sh: hostd --coherence software, replay
# pods on two nodes each on its own write partition from the CDI env, a
# second writer on one node refused by the node's partition lock, a
# hardware-coherence claim left unallocated; 8 checks, about 45 s).
# First, beside the world's start: test/scripts/bats-check.sh, how this stage counts
# bats' results and that the failure hook prints the cluster state (8 checks).
# The log ends with the seconds of every file ("dra: seconds per file").
# Default vs --full (CXLKV_FULL=1): --full adds gates-off's last-capacity
# race (the default keeps the start probe, annotation mode's fixed devices,
# the paper's flow and leaving annotation mode, and compose-failed in
# dra-controller.bats; the race counts as one skipped) and 50 create/delete
# loops instead of 10. --full: about 900 s on 2 busy cores.
# Warm (Kubernetes and the fake kubelet cached): about 350 s on 2 cores for
# about 170 checks, in the background lane; up to about 600 s on busy cores.
# CHANGELOG.md has the measured runs.
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
ROOT=$PWD
CLUSTER=$ROOT/test/e2e/cluster.sh
BIN=$ROOT/build/bin
source "$ROOT/scripts/lib/bats.sh"
FILES=(dra-shared-claim dra-plugin dra-claim-churn dra-node dra-controller dra-quota dra-takeover
  dra-release dra-release-epoch dra-local-composer)
passed=0; failed=0; skipped=0
BATS_SECONDS=()
unset CXLKV_E2E_DIR DRA_STATE
E=""; BGD=""; BG_PID=""
PIDS=()
finish() {
  # The background scripts (stopped early only when this stage is): each
  # tears its own control plane down on TERM.
  [ -n "$BG_PID" ] && { kill "$BG_PID" 2>/dev/null; wait "$BG_PID" 2>/dev/null; }
  [ -n "$E" ] && dra_world_down
  [ -n "$BGD" ] && rm -rf "$BGD"
  cxlkv_bats_close dra
}
trap finish EXIT

if [ "$(id -u)" != 0 ] || ! unshare --mount true 2>/dev/null; then
  echo "dra: the fake kubelet needs root for private mount namespaces; skipping"
  skipped=1; exit 0
fi
t0=$SECONDS
cxlkv_build_main cxlkv-dra-kubeletplugin cxlkv-dra-controller cxlkv-fabricd cxlkv-hostd cxlkv_cli ||
  { failed=1; exit 1; }
FK=$(test/e2e/fakekubelet/build.sh) || { failed=1; exit 1; }
BATS_SECONDS+=("$(printf '%5d s  %s' $((SECONDS - t0)) "build (build/: driver, fabricd, hostd, cxlkv CLI; the fake kubelet)")")
source "$ROOT/test/e2e/lib/dra.bash"

# Kubernetes' binding-condition scenarios (a short bindingTimeout), the
# gates-off run and the non-coherent blade (hostd and controller in
# coherence=software) each need a control plane of their own: they run in the
# background, one after the other, beside the files below (their waits are
# mostly on the control plane, not on the 2 cores), instead of after them
# (about 220 s of the stage's wall time on 2 cores). Output goes to
# $BGD/*.out, shown and counted at the end.
BGD=$(mktemp -d /tmp/cxlkv-dra-bg.XXXXXX)
# How this stage counts (test/scripts/bats-check.sh: cxlkv_bats on planted
# files that pass, fail, skip and die, the failure hook with a stand-in
# kubectl), beside the world's start; counted at the end.
BC_PID=""
if [ -z "${CXLKV_TEST_FILTER:-}${CXLKV_TEST_TAGS:-}" ]; then
  test/scripts/bats-check.sh >"$BGD/bats-check.out" 2>&1 &
  BC_PID=$!
fi
BG=(binding-conditions:dra-binding gates-off:dra-gates-off noncoherent:dra-noncoherent)
[ -n "${CXLKV_TEST_FILTER:-}${CXLKV_TEST_TAGS:-}" ] && BG=()
if [ ${#BG[@]} -gt 0 ]; then
  (
    child=""
    trap '[ -n "$child" ] && kill "$child" 2>/dev/null; wait; exit 143' TERM
    for b in "${BG[@]}"; do
      t=$SECONDS
      FK=$FK bash "test/e2e/dra-${b%%:*}.sh" >"$BGD/${b%%:*}.out" 2>&1 &
      child=$!; wait "$child"; echo $((SECONDS - t)) >"$BGD/${b%%:*}.out.secs"
    done
  ) &
  BG_PID=$!
fi

t0=$SECONDS
dra_world_up || { failed=1; exit 1; }
export DRA_STATE FK
BATS_SECONDS+=("$(printf '%5d s  %s' $((SECONDS - t0)) "the world up (test/e2e/lib/dra.bash)")")
for f in "${FILES[@]}"; do cxlkv_bats dra "$ROOT/test/e2e/$f.bats"; done

# The background scripts ran meanwhile; their output is shown here, in
# order, and counted.
t0=$SECONDS
dra_world_down; E=""
BATS_SECONDS+=("$(printf '%5d s  %s' $((SECONDS - t0)) "the world down")")
if [ -n "$BG_PID" ]; then wait "$BG_PID"; BG_PID=""; fi
if [ -n "$BC_PID" ]; then
  wait "$BC_PID"; bc_rc=$?
  echo "== dra: test/scripts/bats-check.sh (how the stage counts)"
  cat "$BGD/bats-check.out"
  passed=$((passed + $(grep -c '^bats-check: ok:' "$BGD/bats-check.out")))
  skipped=$((skipped + $(grep -c '^bats-check: skipped:' "$BGD/bats-check.out")))
  bc_failed=$(grep -c '^bats-check: FAILED:' "$BGD/bats-check.out")
  [ "$bc_rc" -ne 0 ] && [ "$bc_failed" -eq 0 ] && bc_failed=1
  failed=$((failed + bc_failed))
fi
for b in "${BG[@]}"; do
  f=$BGD/${b%%:*}.out; name=${b#*:}
  echo "== dra: $name (in the background: $(cat "$f.secs" 2>/dev/null || echo '?') s, own control plane)"
  cat "$f"
  read -r bp bf bs < <(sed -n "s/^$name: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped\$/\1 \2 \3/p" "$f" | tail -1)
  passed=$((passed + ${bp:-0})); failed=$((failed + ${bf:-1})); skipped=$((skipped + ${bs:-0}))
  BATS_SECONDS+=("$(printf '%5s s  %s (in the background)' "$(cat "$f.secs" 2>/dev/null || echo '?')" "test/e2e/dra-${b%%:*}.sh")")
done
[ "$failed" -eq 0 ]
