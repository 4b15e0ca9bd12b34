# Scenario 1 with the local composer on one node (no fabric manager),
# sourced by scripts/test.d/55-dra.sh after dra-controller-cases.sh (never
# run alone; it reuses that stage's cluster, helpers and fake-node-0's fake
# kubelet and plugin). fake-node-0's hostd restarts without a fabric manager
# (it would otherwise remove regions the manager does not list), the fabric
# blade's slice goes, and cxlkv-dra-controller runs with --local-pool-dir: a
# per-node slice (nodeName), a 2 GiB claim shared by two `cxlkv replay` pods
# on that node composed once from the /dev/shm pool, materialized by the
# node's hostd at the controller's request, the same CDI device for both,
# cross-replica hits; deleting the claim frees the region file and the spec.
# Warm: about 25 s.

echo "== dra: scenario 1 with the local composer on fake-node-0 (no fabric manager)"
# Whichever controller the cases before left running (ctl-fp-2, ctl-heir).
for v in ${!PID_ctl_@}; do kill "${!v}" 2>/dev/null; done
for v in ${!PID_ctl_@}; do wait "${!v}" 2>/dev/null; done
kubectl delete resourceslice cxlkv.dev-cma-0-blade-0 >/dev/null 2>&1
LPOOL=$BACKING-local
mkdir -p "$LPOOL"
N0=fake-node-0; D0=$E/$N0
kill "$PID_hostd_fake_node_0"; wait "$PID_hostd_fake_node_0" 2>/dev/null
start hostd-local "$BIN/cxlkv-hostd" --host-id "$N0" --listen "127.0.0.1:${HPORT[$N0]}" \
  --cdi-dir "$D0/cdi" --state-dir "$D0/hostd" --dev-dir "$D0/dev" --container-dir "$D0/ctr" \
  --allowed-backing-dir "$BACKING,$LPOOL" --resync-interval 0
wait_until 20 curl -sf "http://127.0.0.1:${HPORT[$N0]}/cxlkv/v1/regions" || bad "local hostd did not start"
start ctl-local "$BIN/cxlkv-dra-controller" --kubeconfig "$KCFG" --identity ctl-local \
  --local-pool-dir "$LPOOL" --local-pool-mib 4096 --local-block-mib 256 --local-node "$N0" \
  --local-hostd "http://127.0.0.1:${HPORT[$N0]}" --local-state-dir "$E/local-composer" \
  --resync-period 2 --lease-duration 6
LSLICE=cxlkv.dev-local-$N0
if wait_until 30 kubectl get resourceslice "$LSLICE"; then
  kubectl get resourceslice "$LSLICE" -o json | python3 -c '
import json, sys
s = json.load(sys.stdin)["spec"]
assert s.get("nodeName") == "fake-node-0" and "nodeSelector" not in s, s
assert s["devices"][0]["capacity"]["memory"]["value"] == str(4 << 30), s
' && ok "local pool: a per-node slice (nodeName fake-node-0, 4 GiB)" || bad "local slice shape"
else bad "no local slice"; fi
CTLL=$E/replay-local.ctl
claim_yaml kvl 2Gi | kubectl apply -f - >/dev/null
for i in 0 1; do
  pod_yaml "local-$i" kvl "$N0" "$BIN/cxlkv" replay \
    --trace "$ROOT/data/traces/mooncake-conversation-trace.jsonl" --limit 400 --block-tokens 16 \
    --kv-bytes-per-token 64 --replica-index "$i" --replica-count 2 --control "$CTLL" --json --quiet |
    kubectl apply -f - >/dev/null
done
if wait_until 120 succeeded local-0 && wait_until 60 succeeded local-1; then
  ok "local: both replay pods ran to completion"
else bad "local replay pods: $(phase local-0) / $(phase local-1)"; fi
nl=$(grep -c "claim default/kvl: composed region" "$E/logs/ctl-local.log")
ML=$(grep "claim default/kvl: composed region" "$E/logs/ctl-local.log" | head -1 |
  awk '{for (i = 1; i < NF; i++) if ($i == "region") { print $(i + 1); exit }}')
[ "$nl" = 1 ] && [ -n "$ML" ] && ok "local: composed once ($ML) for both pods" || bad "local: composed $nl times"
[ "$(grep -c "cxlkv.dev/region=$ML" "$D0/kubelet/dra/dra_manager_state" 2>/dev/null)" -gt 0 ] &&
  ok "local: kubelet's DRA manager holds CDI device cxlkv.dev/region=$ML" ||
  bad "local: CDI id not in kubelet's DRA state"
if python3 - "$D0/logs/default_local-0_main.log" "$D0/logs/default_local-1_main.log" <<'PY'
import json, sys
for p in sys.argv[1:]:
    r = json.loads(open(p).read())
    assert r["errors"] == 0 and r["wrong_data"] == 0, r
    assert r["cross_replica_hits"] > 0, f"{p}: no cross-replica hits: {r}"
    print(f"  {p.rsplit('/', 1)[1]}: {r['cross_replica_hits']} cross-replica hits")
PY
then ok "local: both containers attached to the one region and saw each other's stores"
else bad "local replay results"; fi
kubectl delete pod local-0 local-1 --wait=false >/dev/null
wait_until 60 gone pod local-0; wait_until 60 gone pod local-1
kubectl delete resourceclaim kvl --wait=false >/dev/null
pool_empty() { [ -z "$(ls "$LPOOL"/*.region 2>/dev/null)" ]; }
if wait_until 60 gone resourceclaim kvl && wait_until 20 pool_empty; then
  [ -e "$D0/cdi/$ML.json" ] && bad "local: CDI spec $ML.json left" ||
    ok "local: claim deleted, region file freed from the pool, CDI spec removed"
else bad "local teardown: claim $(gone resourceclaim kvl && echo gone || echo stuck), pool: $(ls "$LPOOL")"; fi
rm -rf "$LPOOL"
