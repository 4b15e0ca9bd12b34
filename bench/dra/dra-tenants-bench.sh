#!/usr/bin/env bash
# dra-tenants-bench: the multi-tenant experiment the paper leaves open ([Fan26]
# §6, "no multi-tenant scheduling experiment"): three namespaces' claims
# competing for one appliance, per mode, all modes in one run.
#
#   bench/dra/dra-tenants-bench.sh [--claims N] [--hold S] [--modes LIST] [--json FILE]
#
# Real kube-apiserver + scheduler + controller-manager (test/e2e/cluster.sh,
# 3 fake nodes), the kubelet's own plugin and DRA managers per node
# (cxlkv-fakekubelet), cxlkv-fabricd with one 8 GiB blade (256 MiB blocks,
# 4 channels) cabled to the three nodes, cxlkv-hostd and
# cxlkv-dra-kubeletplugin per node, and two cxlkv-dra-controller replicas per
# mode. Modes:
#   binding-conditions  consumable capacity with binding conditions: the
#                       scheduler waits in PreBind for cxlkv.dev/composed;
#   capacity            consumable capacity without binding conditions (the
#                       controller's --flow paper: the pod binds at once, the
#                       controller composes, prepare waits for the CDI ids);
#   annotation          the paper's setting (gates off, [Fan26] §2.2): fixed
#                       devices, the size in the claim's cxlkv.dev/capacity-mib,
#                       no binding conditions (--capacity-mode annotation
#                       --flow paper); skipped, and said so in the JSON, when
#                       the controller has no --capacity-mode.
# Workload per mode: tenants team-a, team-b, team-c (each with the namespace
# budget cxlkv.dev/memory-budget=4Gi, so the three together ask for more than
# the blade's 8 GiB), each submitting N claims at once (sizes 1, 2, 1, 2 ...
# GiB), one pod per claim on the nodes in turn; a pod holds its region for
# --hold seconds and exits; the bench then deletes pod and claim, freeing room
# for the next. Measured per mode: admitted claims (container started),
# failed composes (Warning Events ComposeFailed and NamespaceBudgetExceeded),
# capacity utilisation (composed bytes / blade bytes, sampled every 0.5 s
# from the fabric manager, averaged over the time from the first claim to
# the last pod start), time to ready (claim created -> the container's own
# first line) p50/p99 and the ratio of each mode's to binding-conditions', and
# leaks (regions left and claims stuck after everything is deleted), and each tenant's peak
# composed bytes (from the same samples: a budget refusal needs a tenant at its budget).
# Prints a table and one JSON object. Needs root (private mount namespaces).
# Not in the default test run (several minutes).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
N=6
HOLD=3
MODES="binding-conditions capacity annotation"
JSON_OUT=""
bench_args dra-tenants-bench "--claims N, --hold S, --modes LIST, --json FILE" \
  --claims=N --hold=HOLD --modes=MODES --json=JSON_OUT -- "$@"
if [ "$(id -u)" != 0 ]; then echo "dra-tenants-bench: needs root (the fake kubelet)" >&2; exit 2; fi
TENANTS=(team-a team-b team-c)
bench_world_up dra-tenants-bench 1s fake-node-0 fake-node-1 fake-node-2
for t in "${TENANTS[@]}"; do
  kubectl create namespace "$t" >/dev/null
  kubectl label namespace "$t" cxlkv.dev/memory-budget=4Gi >/dev/null
done
sa_ready() { kubectl -n "$1" get serviceaccount default; }
for t in "${TENANTS[@]}"; do wait_until 60 sa_ready "$t" || { echo "no ServiceAccount in $t"; exit 1; }; done

# Composed bytes on the blade every 0.5 s: "<time> <bytes> <claim uid>=<bytes>,..." (the
# claim UID from the compose tag "cxlkv.dev/<uid>@<allocation time>"; "-" for none).
cat >"$E/sample.py" <<'PY'
import json, sys, time, urllib.request
base, out = sys.argv[1], open(sys.argv[2], "w", buffering=1)
while True:
    try:
        mem = json.load(urllib.request.urlopen(base + "/cfm/v1/appliances/cma-0/blades/blade-0/memory", timeout=2))
        total, by_claim = 0, []
        for m in mem.get("members", []):
            r = json.load(urllib.request.urlopen(base + m["uri"], timeout=2))
            total += r.get("sizeMiB", 0) << 20
            tag = r.get("claimUid", "")
            if tag.startswith("cxlkv.dev/"):
                by_claim.append("%s=%d" % (tag[len("cxlkv.dev/"):].split("@")[0], r.get("sizeMiB", 0) << 20))
        out.write(f"{time.time()} {total} {','.join(by_claim) or '-'}\n")
    except Exception as e:  # the manager is busy: skip this sample
        pass
    time.sleep(0.5)
PY
python3 "$E/sample.py" "$F" "$E/samples.txt" &
PIDS+=($!)

run_mode() {  # run_mode <mode>: every tenant's N claims at once; prints nothing
  local mode=$1 flow extra=()
  case $mode in
    binding-conditions) flow=binding-conditions ;;
    capacity) flow=paper ;;
    annotation) flow=paper; extra=(--capacity-mode annotation) ;;
  esac
  for r in 0 1; do
    start "ctl-$mode-$r" "$BIN/cxlkv-dra-controller" --kubeconfig "$KUBECONFIG" --fabric "$F" \
      --identity "bench-$mode-$r" --flow "$flow" --resync-period 5 --lease-duration 6 "${extra[@]}"
  done
  local want=1; [ "$flow" = paper ] && want=0
  wait_until 40 slice_flow "$want" || { echo "dra-tenants-bench: the slice never matched mode $mode" >&2; return 1; }
  echo "mode $mode start $(date +%s.%N)" >>"$E/marks.txt"
  local t i k=0 size node name
  for i in $(seq 1 "$N"); do
    for t in "${TENANTS[@]}"; do
      size=$(( (i % 2) + 1 ))Gi; node=${NODES[$((k % 3))]}; k=$((k + 1))
      name=$mode-$i
      if [ "$mode" = annotation ]; then
        cat <<YAML >"$E/$t-$name.yaml"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: $name, namespace: $t, annotations: {cxlkv.dev/capacity-mib: "$(( ${size%Gi} * 1024 ))"}}
spec:
  devices:
    requests:
      - name: kv
        exactly: {deviceClassName: cxlkv.dev}
YAML
      else
        claim_yaml "$name" "$size" "$t" >"$E/$t-$name.yaml"
      fi
      { echo ---
        ns_pod_yaml "$t" "$name" "$name" "$node" "date +%s.%N; test -s \"\$CXL_DAX_DEVICE\" && sleep $HOLD"
      } >>"$E/$t-$name.yaml"
      echo "$mode $t $name $node $size $(date +%s.%N)" >>"$E/created.txt"
      kubectl apply -f "$E/$t-$name.yaml" >/dev/null
    done
  done
  # Which tenant each claim UID belongs to (the samples name regions by claim UID).
  kubectl get resourceclaims -A -o jsonpath='{range .items[*]}{.metadata.namespace} {.metadata.uid}{"\n"}{end}' \
    >>"$E/uids.txt"
  # Delete each pod (and its claim) once it finished; give up after 300 s.
  local left=$((N * 3)) end=$((SECONDS + 300)) phase
  declare -A done_
  while [ "$left" -gt 0 ] && [ $SECONDS -lt $end ]; do
    for i in $(seq 1 "$N"); do
      for t in "${TENANTS[@]}"; do
        name=$mode-$i
        [ -n "${done_[$t/$name]:-}" ] && continue
        phase=$(kubectl -n "$t" get pod "$name" -o jsonpath='{.status.phase}' 2>/dev/null)
        if [ "$phase" = Succeeded ] || [ "$phase" = Failed ]; then
          done_[$t/$name]=1; left=$((left - 1))
          echo "$mode $t $name $phase" >>"$E/finished.txt"
          kubectl -n "$t" delete pod "$name" --wait=false >/dev/null
          kubectl -n "$t" delete resourceclaim "$name" --wait=false >/dev/null
        fi
      done
    done
    sleep 0.5
  done
  echo "mode $mode end $(date +%s.%N)" >>"$E/marks.txt"
  for t in "${TENANTS[@]}"; do
    kubectl -n "$t" delete pods --all --wait=false >/dev/null 2>&1
    kubectl -n "$t" delete resourceclaims --all --wait=false >/dev/null 2>&1
  done
  local stuck=0
  for t in "${TENANTS[@]}"; do
    wait_until 60 sh -c "[ -z \"\$(kubectl -n $t get resourceclaims -o name)\" ]" ||
      stuck=$((stuck + $(kubectl -n "$t" get resourceclaims -o name | wc -l)))
  done
  sleep 2
  local regions
  regions=$(curl -s "$F/cfm/v1/appliances/cma-0/blades/blade-0/memory" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("members", [])))')
  echo "$mode $stuck $regions" >>"$E/leaks.txt"
  # Failed composes: the controllers' refusals as Events, per reason.
  for t in "${TENANTS[@]}"; do
    kubectl -n "$t" get events.events.k8s.io -o json | python3 -c '
import json, sys
mode = sys.argv[1]
for e in json.load(sys.stdin)["items"]:
    n = e.get("regarding", {}).get("name", "")
    if e.get("regarding", {}).get("kind") == "ResourceClaim" and n.startswith(mode + "-") and e.get("type") == "Warning":
        print(mode, sys.argv[2], n, e.get("reason"), e.get("series", {}).get("count", 1))' "$mode" "$t" >>"$E/warnings.txt"
  done
  for r in 0 1; do
    local v=PID_ctl_${mode//-/_}_$r
    kill "${!v}" 2>/dev/null; wait "${!v}" 2>/dev/null
  done
}
RUN_MODES=""
for m in $MODES; do
  if [ "$m" = annotation ] && ! "$BIN/cxlkv-dra-controller" --help 2>&1 | grep -q -- --capacity-mode; then
    echo "dra-tenants-bench: mode annotation skipped: this controller has no --capacity-mode" >&2
    echo "annotation" >>"$E/skipped.txt"
    continue
  fi
  run_mode "$m" || exit 1
  RUN_MODES="$RUN_MODES $m"
done
MODES=$RUN_MODES
kill "${PIDS[-1]}" 2>/dev/null
# The container's own first line: when it started.
for f in "$E"/fake-node-*/logs/*_main.log; do
  b=$(basename "$f" _main.log); echo "${b%%_*} ${b#*_} $(head -1 "$f")"
done >"$E/started.txt"
PYTHONPATH=$ROOT/bench/dra python3 - "$E" "$N" "$MODES" "$JSON_OUT" <<'PY'
import json, sys
from summary import emit, pct
E, n, modes, out = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
created, started, marks = {}, {}, {}
for line in open(f"{E}/created.txt"):
    mode, t, name, node, size, ts = line.split()
    created[(t, name)] = (mode, float(ts), int(size[:-2]) << 30)
for line in open(f"{E}/started.txt"):
    f = line.split()
    if len(f) == 3:
        try:
            started[(f[0], f[1])] = float(f[2])
        except ValueError:
            pass
for line in open(f"{E}/marks.txt"):
    _, mode, what, ts = line.split()
    marks.setdefault(mode, {})[what] = float(ts)
samples, by_claim = [], []
for l in open(f"{E}/samples.txt"):
    f = l.split()
    if len(f) != 3:
        continue
    samples.append((float(f[0]), float(f[1])))
    by_claim.append((float(f[0]), {} if f[2] == "-" else {u: int(b) for u, b in (x.split("=") for x in f[2].split(","))}))
tenant_of = dict(reversed(l.split()) for l in open(f"{E}/uids.txt") if len(l.split()) == 2)
leaks = {l.split()[0]: (int(l.split()[1]), int(l.split()[2])) for l in open(f"{E}/leaks.txt")}
warn = {}
try:
    for line in open(f"{E}/warnings.txt"):
        mode, t, name, reason, count = line.split()
        warn.setdefault(mode, {}).setdefault(reason, 0)
        warn[mode][reason] += int(count)
except FileNotFoundError:
    pass
BLADE = 8 << 30

skipped = open(f"{E}/skipped.txt").read().split() if __import__("os").path.exists(f"{E}/skipped.txt") else []
res = {"skipped_modes": skipped, "claims_per_tenant": n, "tenants": 3, "blade_bytes": BLADE, "budget_per_tenant": "4Gi",
       "modes": {}}
for mode in modes:
    keys = [k for k, v in created.items() if v[0] == mode]
    ready = [started[k] - created[k][1] for k in keys if k in started]
    t0 = marks[mode]["start"]
    t1 = max([started[k] for k in keys if k in started], default=marks[mode]["end"])
    win = [b for t, b in samples if t0 <= t <= t1]
    per_tenant = {}
    for k in keys:
        per_tenant.setdefault(k[0], [0, 0])
        per_tenant[k[0]][1] += 1
        if k in started:
            per_tenant[k[0]][0] += 1
    # Each tenant's composed bytes at its peak over the mode's window: a budget refusal needs
    # a tenant at its 4 GiB budget (what the controller's ledger counts is composed bytes).
    peak = {}
    for t, claims in by_claim:
        if not t0 <= t <= t1:
            continue
        held = {}
        for u, b in claims.items():
            held[tenant_of.get(u, "?")] = held.get(tenant_of.get(u, "?"), 0) + b
        for tn, b in held.items():
            peak[tn] = max(peak.get(tn, 0), b)
    w = warn.get(mode, {})
    res["modes"][mode] = {
        "claims": len(keys), "admitted": len(ready),
        "admitted_per_tenant": {t: v[0] for t, v in sorted(per_tenant.items())},
        "failed_composes": sum(w.values()), "failed_by_reason": w,
        "utilisation_mean": (sum(win) / len(win) / BLADE) if win else None,
        "utilisation_samples": len(win),
        "peak_tenant_composed_bytes": dict(sorted(peak.items())),
        "makespan_s": t1 - t0,
        "ready_p50_s": pct(ready, 50), "ready_p99_s": pct(ready, 99),
        "leaked_regions": leaks.get(mode, (None, None))[1],
        "stuck_claims": leaks.get(mode, (None, None))[0]}
base = res["modes"].get("binding-conditions")
for mode, r in res["modes"].items():
    r["ready_p50_ratio_to_binding_conditions"] = (
        r["ready_p50_s"] / base["ready_p50_s"] if base and base["ready_p50_s"] and r["ready_p50_s"] else None)
    r["ready_p99_ratio_to_binding_conditions"] = (
        r["ready_p99_s"] / base["ready_p99_s"] if base and base["ready_p99_s"] and r["ready_p99_s"] else None)
fmt = lambda v, f="{:.2f}": "-" if v is None else f.format(v)
print(f"{'mode':<20} {'admitted':>9} {'failed':>7} {'util':>6} {'p50 s':>7} {'p99 s':>7} "
      f"{'p50 x':>6} {'p99 x':>6} {'makespan':>9} {'leaks':>6} {'tenant peak GiB':>16}")
for mode, r in res["modes"].items():
    print(f"{mode:<20} {str(r['admitted']) + '/' + str(r['claims']):>9} {r['failed_composes']:>7} "
          f"{fmt(r['utilisation_mean']):>6} {fmt(r['ready_p50_s']):>7} {fmt(r['ready_p99_s']):>7} "
          f"{fmt(r['ready_p50_ratio_to_binding_conditions']):>6} "
          f"{fmt(r['ready_p99_ratio_to_binding_conditions']):>6} {fmt(r['makespan_s'], '{:.1f}'):>9} "
          f"{r['leaked_regions']}+{r['stuck_claims']:>4} "
          f"{'/'.join(fmt(b / (1 << 30), '{:.0f}') for b in r['peak_tenant_composed_bytes'].values()) or '-':>16}")
emit(res, out)
ok = all(r["admitted"] == r["claims"] and r["leaked_regions"] == 0 and r["stuck_claims"] == 0
         for r in res["modes"].values())
sys.exit(0 if ok else 1)
PY
