#!/usr/bin/env bats
# Namespace byte budgets (dra/controller/quota.h) and `cxlkv status` (the
# world: test/e2e/lib/dra.bash), with the controller cases' replica ctl-fp-2
# (lib/dra.bash ctl_ensure) and two more, ctl-q0 and ctl-q1 (stopped after
# the file), so three race for every claim:
#  - team-a (label cxlkv.dev/memory-budget=3Gi): three 2 GiB claims with pods
#    created at once: exactly one is composed and runs; the others are
#    refused with the condition cxlkv.dev/compose-failed (reason
#    NamespaceBudgetExceeded, seen on a watch) and a NamespaceBudgetExceeded
#    Event; the ledger ConfigMap holds the one reservation;
#  - team-b (4Gi) meanwhile: a 2 GiB claim under its budget is admitted;
#  - team-c (label "lots"): refused with an Event naming the bad label;
#  - `cxlkv status` shows the Ready claim with its region and hosts, the
#    refused ones, the budgets and the pool, and (--json) the regions;
#  - team-a's running claim deleted: exactly one of the two waiting claims is
#    admitted and runs; still one region for team-a;
#  - the negative: team-a's label removed, the last claim is composed too.
# The steps run in order (--filter 'budget:' runs them). Warm: about 50 s.
# bats file_tags=dra,quota

load lib/dra

setup_file() {
  dra_setup_file
  ctl_ensure
  local r
  for r in q0 q1; do
    start "ctl-$r" "$BIN/cxlkv-dra-controller" --kubeconfig "$KCFG" --fabric "$F" \
      --identity "ctl-$r" --resync-period 2 --lease-duration 6
  done
}
teardown_file() {
  dra_stop ctl-q0 ctl-q1 team-a-conds
  dra_teardown_file
}

nphase() { kubectl -n "$1" get pod "$2" -o jsonpath='{.status.phase}' 2>/dev/null; }
nrunning() { [ "$(nphase "$1" "$2")" = Running ]; }
nuid() { kubectl -n "$1" get resourceclaim "$2" -o jsonpath='{.metadata.uid}' 2>/dev/null; }
qa_running() { local n=0 i; for i in 1 2 3; do nrunning team-a "qa-$i" && n=$((n + 1)); done; echo "$n"; }
some_running() { [ "$(qa_running)" -ge 1 ]; }
team_a_regions() {  # regions on the fabric tagged for team-a's claims
  local n=0 i u
  for i in 1 2 3; do
    u=$(nuid team-a "qa-$i"); [ -n "$u" ] && n=$((n + $(region_list | grep -c "cxlkv.dev/$u@")))
  done
  echo "$n"
}
refused_events() {  # claims of team-a with a NamespaceBudgetExceeded Event
  local n=0 i
  for i in 1 2 3; do
    [ "$(events_for "qa-$i" team-a | grep -c '^NamespaceBudgetExceeded .*namespace memory budget exceeded')" -gt 0 ] && n=$((n + 1))
  done
  echo "$n"
}
two_refused() { [ "$(refused_events)" -ge 2 ]; }
CONDS() { echo "$E/logs/team-a-conds.log"; }
refusals() {  # refusals <claim>: its budget refusals seen on the watch
  grep -c "^$1 cxlkv.dev/compose-failed True NamespaceBudgetExceeded" "$(CONDS)" 2>/dev/null || true
}
# The refused claims keep being retried (the failure condition hands each
# back to the scheduler, which allocates it again): instead of a fixed wait,
# wait until every claim not running was refused once more after
# mark_refusals, so a retry that slipped through the budget would have shown.
declare -gA R0=()
mark_refusals() { local i; for i in 1 2 3; do R0[qa-$i]=$(refusals "qa-$i"); done; }
retried() {
  local i
  for i in 1 2 3; do
    nrunning team-a "qa-$i" && continue
    [ -n "$(nuid team-a "qa-$i")" ] || continue  # deleted
    [ "$(refusals "qa-$i")" -gt "${R0[qa-$i]}" ] || return 1
  done
}

# bats test_tags=budget
@test "budget: of three 2 GiB claims racing over three replicas under a 3Gi budget, one is composed and runs; the others get a NamespaceBudgetExceeded Event" {
  local ns i sa_ready
  for ns in team-a team-b team-c; do kubectl create namespace "$ns" >/dev/null; done
  kubectl label namespace team-a cxlkv.dev/memory-budget=3Gi >/dev/null
  kubectl label namespace team-b cxlkv.dev/memory-budget=4Gi >/dev/null
  kubectl label namespace team-c cxlkv.dev/memory-budget=lots >/dev/null
  for ns in team-a team-b team-c; do
    wait_until 30 kubectl -n "$ns" get serviceaccount default || fail "no default ServiceAccount in $ns"
  done
  # Every condition the controllers write on team-a's claims, as it happens:
  # the scheduler clears a refused allocation (and its conditions) quickly.
  start team-a-conds bash -c "kubectl -n team-a get resourceclaims -w -o json 2>/dev/null |
    jq --unbuffered -r '. as \$o | .status.devices[]?.conditions[]?
      | \"\(\$o.metadata.name) \(.type) \(.status) \(.reason // \"\")\"'"
  sleep 1
  for i in 1 2 3; do
    claim_yaml "qa-$i" 2Gi team-a | kubectl apply -f - >/dev/null
    ns_pod_yaml team-a "qa-$i" "qa-$i" "fake-node-$((i - 1))" | kubectl apply -f - >/dev/null
  done
  wait_until 90 some_running || fail "no team-a claim ran ($(refused_events) refused)"
  wait_until 30 two_refused || fail "$(qa_running) running, $(refused_events) refused claims"
  mark_refusals
  wait_until 30 retried || fail "the refused claims were not retried within 30 s"
  WINNER=""
  for i in 1 2 3; do nrunning team-a "qa-$i" && WINNER=qa-$i; done
  dra_keep WINNER
  assert_eq "$(qa_running)" 1 "team-a claims running"
  assert_eq "$(team_a_regions)" 1 "regions for team-a"
  note "composed and running: $WINNER; $(refused_events) refused"
}

# bats test_tags=budget
@test "budget: the refused claims carried cxlkv.dev/compose-failed True, reason NamespaceBudgetExceeded" {
  [ "$(grep -c 'cxlkv.dev/compose-failed True NamespaceBudgetExceeded' "$(CONDS)" 2>/dev/null)" -gt 0 ] ||
    fail "no NamespaceBudgetExceeded condition seen: $(sort -u "$(CONDS)" 2>/dev/null | tail -3)"
}

# bats test_tags=budget
@test "budget: the ledger ConfigMap holds exactly the admitted claim's 2 GiB" {
  dra_need WINNER
  local ledger
  ledger=$(kubectl -n default get configmap cxlkv-budget-team-a -o jsonpath='{.data.reservations}' 2>/dev/null || true)
  jq -e --arg w "$WINNER" --argjson b $((2 << 30)) '[.[].claim] == [$w] and ([.[]][0].bytes == $b)' <<<"$ledger" >/dev/null ||
    fail "ledger: $ledger"
}

# bats test_tags=budget
@test "budget: team-b's 2 GiB claim under its 4Gi budget is admitted and runs" {
  claim_yaml qb-1 2Gi team-b | kubectl apply -f - >/dev/null
  ns_pod_yaml team-b qb-1 qb-1 fake-node-1 | kubectl apply -f - >/dev/null
  wait_until 90 nrunning team-b qb-1 || fail "team-b qb-1: $(nphase team-b qb-1)"
}

# bats test_tags=budget
@test "budget: team-c's budget label that is no quantity refuses the compose with an Event naming it; the pod is not bound" {
  claim_yaml qc-1 1Gi team-c | kubectl apply -f - >/dev/null
  ns_pod_yaml team-c qc-1 qc-1 fake-node-2 | kubectl apply -f - >/dev/null
  badlabel() { [ "$(events_for qc-1 team-c | grep -c 'cxlkv.dev/memory-budget "lots" is not a quantity')" -gt 0 ]; }
  wait_until 60 badlabel || fail "no Event about the bad label: $(events_for qc-1 team-c | tail -2)"
  assert_eq "$(kubectl -n team-c get pod qc-1 -o jsonpath='{.spec.nodeName}')" "" "node of pod qc-1"
}

# bats test_tags=budget,status
@test "budget: cxlkv status shows the Ready claims with region and hosts, the refused ones, the budgets and the pool; --json regions name their claims" {
  dra_need WINNER
  run "$BIN/cxlkv" status --kubeconfig "$KCFG"
  [ "$status" -eq 0 ] || fail "cxlkv status: exit status $status: $output"
  echo "$output" | sed 's/^/  /'
  grep -qE "^claim +team-a/$WINNER +Ready +2 GiB +[0-9a-f-]+ +fake-node-[0-2]=Materialized" <<<"$output" ||
    fail "no Ready line for team-a/$WINNER"
  grep -qE "^claim +team-b/qb-1 +Ready" <<<"$output" || fail "no Ready line for team-b/qb-1"
  grep -qE "^budget +team-a +2 GiB composed of 3 GiB" <<<"$output" || fail "no budget line for team-a"
  grep -qE "^budget +team-c +- composed of lots \(not a quantity" <<<"$output" || fail "no budget line for team-c"
  grep -qE "^pool +cma-0/blade-0/blade-0 +Published +8 GiB +fake-node-0,fake-node-1,fake-node-2" <<<"$output" ||
    fail "no pool line"
  [ "$(grep -E '^claim +team-a/qa-' <<<"$output" | grep -c NamespaceBudgetExceeded)" -ge 1 ] ||
    fail "no refused team-a claim shown"
  run "$BIN/cxlkv" status --kubeconfig "$KCFG" --fabric "$F" --json
  [ "$status" -eq 0 ] || fail "cxlkv status --json: exit status $status: $output"
  jq -e --arg w "team-a/$WINNER" --argjson b $((2 << 30)) '
    ([.claims[] | {key: (.namespace + "/" + .name), value: .}] | from_entries)[$w] as $c
    | [.regions[] | select(.memoryId == $c.memoryId)] as $r
    | ($r | length) == 1 and $r[0].claim == $w and $r[0].sizeBytes == $b and ($r[0].hosts | length) > 0' \
    <<<"$output" >/dev/null || fail "cxlkv status --json: $(head -c 600 <<<"$output")"
}

# bats test_tags=budget
@test "budget: team-a's running claim freed, exactly one waiting claim is admitted and runs" {
  dra_need WINNER
  kubectl -n team-a delete pod "$WINNER" --wait=false >/dev/null
  wait_until 60 sh -c "! kubectl -n team-a get pod $WINNER >/dev/null 2>&1"
  kubectl -n team-a delete resourceclaim "$WINNER" --wait=false >/dev/null
  wait_until 90 some_running || fail "no waiting claim admitted after $WINNER was freed"
  mark_refusals
  wait_until 30 retried || fail "the claim still waiting was not retried within 30 s"
  assert_eq "$(qa_running)" 1 "team-a claims running"
  assert_eq "$(team_a_regions)" 1 "regions for team-a"
}

# bats test_tags=budget
@test "budget: team-a's budget label removed, the third claim is composed too (4 GiB in team-a)" {
  dra_need WINNER
  kubectl label namespace team-a cxlkv.dev/memory-budget- >/dev/null
  two_running() { [ "$(qa_running)" = 2 ]; }
  wait_until 90 two_running || fail "without the label: $(qa_running) running"
  assert_eq "$(team_a_regions)" 2 "regions for team-a"
}

# bats test_tags=budget
@test "budget: every claim of the budget cases freed, no region left" {
  local ns
  for ns in team-a team-b team-c; do kubectl -n "$ns" delete pods --all --wait=false >/dev/null 2>&1; done
  for ns in team-a team-b team-c; do
    wait_until 60 sh -c "[ -z \"\$(kubectl -n $ns get pods -o name)\" ]"
    kubectl -n "$ns" delete resourceclaims --all --wait=false >/dev/null 2>&1
  done
  for ns in team-a team-b team-c; do
    wait_until 60 sh -c "[ -z \"\$(kubectl -n $ns get resourceclaims -o name)\" ]" || fail "claims of $ns stuck"
  done
  wait_until 30 no_regions || fail "$(regions) regions left: $(region_list)"
}
