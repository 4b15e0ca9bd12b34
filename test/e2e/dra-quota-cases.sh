# Namespace byte budgets (dra/controller/quota.h) and `cxlkv status`,
# sourced by scripts/test.d/55-dra.sh after dra-controller-cases.sh (never
# run alone: it reuses that stage's cluster, fabricd, hostds, fake kubelets,
# helpers, and the cases' controller ctl-fp-2), with two more controller
# replicas so three race for every claim. Checks:
#  1. team-a (label cxlkv.dev/memory-budget=3Gi): three 2 GiB claims with
#     pods created at once: exactly one is composed and runs; the others are
#     refused with the condition cxlkv.dev/compose-failed (reason
#     NamespaceBudgetExceeded, seen on a watch) and a NamespaceBudgetExceeded
#     Event; the ledger ConfigMap holds the one reservation;
#  2. team-b (4Gi) meanwhile: a 2 GiB claim under its budget is admitted;
#  3. team-c (label "lots"): refused with an Event naming the bad label;
#  4. `cxlkv status` shows the Ready claim with its region and hosts, the
#     refused ones, the budgets and the pool, and (--json) the regions;
#  5. team-a's running claim deleted: exactly one of the two waiting claims
#     is admitted and runs; still one region for team-a;
#  6. the negative: team-a's label removed, the last claim is composed too.
# Warm: about 60 s.

echo "== dra: namespace byte budgets (three controller replicas) and cxlkv status"
for r in q0 q1; do
  start "ctl-$r" "$BIN/cxlkv-dra-controller" --kubeconfig "$KCFG" --fabric "$F" \
    --identity "ctl-$r" --resync-period 2 --lease-duration 6
done
ns_claim_yaml() {  # ns_claim_yaml <ns> <name> <size>
  cat <<YAML
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: $2, namespace: $1}
spec:
  devices:
    requests:
      - name: kv
        exactly: {deviceClassName: cxlkv.dev, capacity: {requests: {memory: $3}}}
YAML
}
ns_pod_yaml() {  # ns_pod_yaml <ns> <name> <claim> <node>: a pod that holds its region
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $2, namespace: $1}
spec:
  nodeSelector: {kubernetes.io/hostname: $4}
  restartPolicy: Never
  resourceClaims: [{name: kv, resourceClaimName: $3}]
  containers:
    - name: main
      image: none
      command: [sh, -c, 'test -s "\$CXL_DAX_DEVICE" && exec sleep 600']
      resources: {claims: [{name: kv}]}
YAML
}
nphase() { kubectl -n "$1" get pod "$2" -o jsonpath='{.status.phase}' 2>/dev/null; }
nrunning() { [ "$(nphase "$1" "$2")" = Running ]; }
nuid() { kubectl -n "$1" get resourceclaim "$2" -o jsonpath='{.metadata.uid}' 2>/dev/null; }
nevents() {  # nevents <ns> <name>: "reason note" of Events regarding it
  kubectl -n "$1" get events.events.k8s.io -o json | python3 -c '
import json, sys
for e in json.load(sys.stdin)["items"]:
    if e.get("regarding", {}).get("name") == sys.argv[1]:
        print(e.get("reason"), e.get("note", ""))' "$2"
}
sa_ready() { kubectl -n "$1" get serviceaccount default; }
for ns in team-a team-b team-c; do kubectl create namespace "$ns" >/dev/null; done
kubectl label namespace team-a cxlkv.dev/memory-budget=3Gi >/dev/null
kubectl label namespace team-b cxlkv.dev/memory-budget=4Gi >/dev/null
kubectl label namespace team-c cxlkv.dev/memory-budget=lots >/dev/null
for ns in team-a team-b team-c; do wait_until 30 sa_ready "$ns" || bad "no default ServiceAccount in $ns"; done
# Every condition the controller writes on team-a's claims, as it happens:
# the scheduler clears a refused allocation (and its conditions) quickly.
cat >"$E/conds.py" <<'PY'
import json, os, sys
dec, buf = json.JSONDecoder(), ""
out = open(sys.argv[1], "w", buffering=1)
while True:
    chunk = os.read(0, 1 << 16)
    if not chunk:
        break
    buf += chunk.decode()
    while True:
        buf = buf.lstrip()
        try:
            obj, end = dec.raw_decode(buf)
        except ValueError:
            break
        buf = buf[end:]
        for d in obj.get("status", {}).get("devices", []):
            for c in d.get("conditions", []):
                out.write(f'{obj["metadata"]["name"]} {c["type"]} {c["status"]} {c.get("reason", "")}\n')
PY
(kubectl -n team-a get resourceclaims -w -o json 2>/dev/null | python3 "$E/conds.py" "$E/team-a-conds.txt") &
PIDS+=($!)
sleep 1
for i in 1 2 3; do
  ns_claim_yaml team-a "qa-$i" 2Gi | kubectl apply -f - >/dev/null
  ns_pod_yaml team-a "qa-$i" "qa-$i" "fake-node-$((i - 1))" | kubectl apply -f - >/dev/null
done
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
    [ "$(nevents team-a "qa-$i" | grep -c '^NamespaceBudgetExceeded .*namespace memory budget exceeded')" -gt 0 ] && n=$((n + 1))
  done
  echo "$n"
}
two_refused() { [ "$(refused_events)" -ge 2 ]; }
# The refused claims keep being retried (the failure condition hands each
# back to the scheduler, which allocates it again): instead of a fixed wait,
# wait until every claim not running was refused once more after this call,
# so a retry that slipped through the budget would have shown.
refusals() {  # refusals <claim>: its budget refusals seen on the watch
  grep -c "^$1 cxlkv.dev/compose-failed True NamespaceBudgetExceeded" "$E/team-a-conds.txt" 2>/dev/null
}
declare -A R0
mark_refusals() { local i; for i in 1 2 3; do R0[qa-$i]=$(refusals "qa-$i"); done; }
retried() {  # every team-a claim left and not running refused again since mark_refusals
  local i
  for i in 1 2 3; do
    nrunning team-a "qa-$i" && continue
    [ -n "$(nuid team-a "qa-$i")" ] || continue  # deleted
    [ "$(refusals "qa-$i")" -gt "${R0[qa-$i]}" ] || return 1
  done
}
WINNER=""
if wait_until 90 some_running && wait_until 30 two_refused; then
  mark_refusals
  wait_until 30 retried || bad "budget: the refused claims were not retried within 30 s"
  for i in 1 2 3; do nrunning team-a "qa-$i" && WINNER=qa-$i; done
  nr=$(qa_running); nreg=$(team_a_regions)
  [ "$nr" = 1 ] && [ "$nreg" = 1 ] &&
    ok "budget 3Gi, three 2 GiB claims racing over three replicas: one composed and running ($WINNER), $(refused_events) refused with a NamespaceBudgetExceeded Event" ||
    bad "budget: $nr running, $nreg regions for team-a (budget admits one)"
else bad "budget: $(qa_running) running, $(refused_events) refused claims"; fi
[ "$(grep -c 'cxlkv.dev/compose-failed True NamespaceBudgetExceeded' "$E/team-a-conds.txt" 2>/dev/null)" -gt 0 ] &&
  ok "refused claims carried cxlkv.dev/compose-failed True, reason NamespaceBudgetExceeded" ||
  bad "no NamespaceBudgetExceeded condition seen: $(sort -u "$E/team-a-conds.txt" 2>/dev/null | tail -3)"
ledger=$(kubectl -n default get configmap cxlkv-budget-team-a -o jsonpath='{.data.reservations}' 2>/dev/null)
echo "dra: ledger cxlkv-budget-team-a: $ledger"
[ -n "$WINNER" ] && python3 -c '
import json, sys
r = json.loads(sys.argv[1])
assert [v["claim"] for v in r.values()] == [sys.argv[2]], r
assert list(r.values())[0]["bytes"] == 2 << 30, r' "$ledger" "$WINNER" 2>/dev/null &&
  ok "the ledger ConfigMap holds exactly the admitted claim's 2 GiB" || bad "ledger: $ledger"

ns_claim_yaml team-b qb-1 2Gi | kubectl apply -f - >/dev/null
ns_pod_yaml team-b qb-1 qb-1 fake-node-1 | kubectl apply -f - >/dev/null
wait_until 90 nrunning team-b qb-1 && ok "team-b: a 2 GiB claim under its 4Gi budget is admitted and runs" ||
  bad "team-b qb-1: $(nphase team-b qb-1)"
ns_claim_yaml team-c qc-1 1Gi | kubectl apply -f - >/dev/null
ns_pod_yaml team-c qc-1 qc-1 fake-node-2 | kubectl apply -f - >/dev/null
badlabel() { [ "$(nevents team-c qc-1 | grep -c 'cxlkv.dev/memory-budget "lots" is not a quantity')" -gt 0 ]; }
if wait_until 60 badlabel; then
  [ -z "$(kubectl -n team-c get pod qc-1 -o jsonpath='{.spec.nodeName}')" ] &&
    ok "team-c: a budget label that is no quantity refuses the compose with an Event naming it; pod not bound" ||
    bad "team-c: pod bound despite the refused compose"
else bad "team-c: no Event about the bad label: $(nevents team-c qc-1 | tail -2)"; fi

"$BIN/cxlkv" status --kubeconfig "$KCFG" >"$E/status.txt" 2>&1; src=$?
"$BIN/cxlkv" status --kubeconfig "$KCFG" --fabric "$F" --json >"$E/status.json" 2>&1; srj=$?
sed 's/^/  /' "$E/status.txt"
if [ "$src" = 0 ] && [ "$srj" = 0 ] && [ -n "$WINNER" ] &&
    grep -qE "^claim +team-a/$WINNER +Ready +2 GiB +[0-9a-f-]+ +fake-node-[0-2]=Materialized" "$E/status.txt" &&
    grep -qE "^claim +team-b/qb-1 +Ready" "$E/status.txt" &&
    grep -qE "^budget +team-a +2 GiB composed of 3 GiB" "$E/status.txt" &&
    grep -qE "^budget +team-c +- composed of lots \(not a quantity" "$E/status.txt" &&
    grep -qE "^pool +cma-0/blade-0/blade-0 +Published +8 GiB +fake-node-0,fake-node-1,fake-node-2" "$E/status.txt" &&
    [ "$(grep -E '^claim +team-a/qa-' "$E/status.txt" | grep -c NamespaceBudgetExceeded)" -ge 1 ] &&
    python3 - "$E/status.json" "$WINNER" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
c = {x["namespace"] + "/" + x["name"]: x for x in s["claims"]}
w = c["team-a/" + sys.argv[2]]
regs = [r for r in s["regions"] if r["memoryId"] == w["memoryId"]]
assert len(regs) == 1 and regs[0]["claim"] == "team-a/" + sys.argv[2], regs
assert regs[0]["sizeBytes"] == 2 << 30 and regs[0]["hosts"], regs
PY
then ok "cxlkv status: the Ready claims with region and hosts, the refused ones with NamespaceBudgetExceeded, budgets, pool; --json regions name their claims"
else bad "cxlkv status (rc $src, json rc $srj): $(head -c 600 "$E/status.json")"; fi

if [ -n "$WINNER" ]; then
  kubectl -n team-a delete pod "$WINNER" --wait=false >/dev/null
  wait_until 60 sh -c "! kubectl -n team-a get pod $WINNER >/dev/null 2>&1"
  kubectl -n team-a delete resourceclaim "$WINNER" --wait=false >/dev/null
  if wait_until 90 some_running; then
    mark_refusals
    wait_until 30 retried || bad "budget: the claim still waiting was not retried within 30 s"
    nr=$(qa_running); nreg=$(team_a_regions)
    [ "$nr" = 1 ] && [ "$nreg" = 1 ] &&
      ok "after $WINNER was freed, exactly one waiting claim was admitted and runs" ||
      bad "after the free: $nr running, $nreg regions for team-a"
  else bad "no waiting claim admitted after $WINNER was freed"; fi
  # The negative: without the label the last claim is composed past 3 GiB.
  kubectl label namespace team-a cxlkv.dev/memory-budget- >/dev/null
  two_running() { [ "$(qa_running)" = 2 ]; }
  wait_until 90 two_running && [ "$(team_a_regions)" = 2 ] &&
    ok "budget label removed: the third claim is composed too (4 GiB in team-a)" ||
    bad "without the label: $(qa_running) running, $(team_a_regions) regions"
fi
for ns in team-a team-b team-c; do
  kubectl -n "$ns" delete pods --all --wait=false >/dev/null 2>&1
done
for ns in team-a team-b team-c; do
  wait_until 60 sh -c "[ -z \"\$(kubectl -n $ns get pods -o name)\" ]"
  kubectl -n "$ns" delete resourceclaims --all --wait=false >/dev/null 2>&1
done
for ns in team-a team-b team-c; do
  wait_until 60 sh -c "[ -z \"\$(kubectl -n $ns get resourceclaims -o name)\" ]" ||
    bad "claims of $ns stuck"
done
wait_until 30 no_regions && ok "budget cases: every claim freed, no region left" ||
  bad "budget cases left $(regions) regions: $(region_list)"
for r in q0 q1; do v=PID_ctl_$r; kill "${!v}" 2>/dev/null; wait "${!v}" 2>/dev/null; done
