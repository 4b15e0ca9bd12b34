# A dead owner's claim taken over by a replica with another name, sourced by
# scripts/test.d/55-dra.sh after dra-controller-cases.sh (never run alone: it
# reuses that stage's cluster, fake kubelets, fabricd, hostds and the cases'
# helpers ctl_start, cj, region_list, has_event, ctl_metric, proc_gone).
# The owning replica is SIGKILLed mid-operation (failpoint after-compose:
# the region is composed, the claim does not name it yet) and never comes
# back; a replacement with a new name (a Deployment's new pod) sees the
# owner's heartbeat Lease go unrenewed for its duration (6 s here), takes
# the claim over by the owner compare-and-set, adopts the region composed
# for this allocation (no second compose), and the pod runs on it. Then the
# heartbeat Leases of departed replicas (ctl-dead's, never renewed again, and
# those released by the replicas the earlier cases stopped) are deleted by
# the Lease holder's resync once unrenewed for 2 x their 6 s duration
# (--owner-lease-gc 2), while a live replica's (ctl-live) and the holder's
# own stay.
# Warm: about 40 s.

echo "== dra: dead owner: SIGKILLed mid-compose, a replica with another name takes over"
kill "$PID_ctl_fp_2" 2>/dev/null; wait "$PID_ctl_fp_2" 2>/dev/null
ctl_start ctl-dead ctl-dead CXLKV_DRA_FAILPOINT=after-compose
claim_yaml heir 1Gi | kubectl apply -f - >/dev/null
pod_yaml heir heir fake-node-1 sh -c 'test -s "$CXL_DAX_DEVICE" && echo attached && exec sleep 600' |
  kubectl apply -f - >/dev/null
owner_of() { cj "$1" 'c["metadata"].get("annotations",{}).get("cxlkv.dev/owner","none")'; }
uid_regions() { region_list | grep -c "$(cj "$1" 'c["metadata"]["uid"]')"; }
if wait_until 60 proc_gone "$PID_ctl_dead"; then
  wait "$PID_ctl_dead" 2>/dev/null
  o=$(owner_of heir); n=$(uid_regions heir)
  ann=$(cj heir 'c["metadata"].get("annotations",{}).get("cxlkv.dev/region","none")')
  [ "$o" = ctl-dead ] && [ "$n" = 1 ] && [ "$ann" = none ] &&
    ok "owner ctl-dead SIGKILLed after compose: it owns the claim, 1 region composed, not yet recorded" ||
    bad "dead owner state: owner $o, $n regions, annotation $ann"
  t0=$SECONDS
  ctl_start ctl-heir ctl-heir CXLKV_DRA_OWNER_LEASE_GC=2
  HLOG=$E/fake-node-1/logs/default_heir_main.log
  if wait_until 90 running heir && wait_until 10 grep -q attached "$HLOG"; then
    o=$(owner_of heir); n=$(uid_regions heir)
    na=$(grep -c "claim default/heir: adopted region" "$E/logs/ctl-heir.log")
    nc=$(grep -c "claim default/heir: composed region" "$E/logs/ctl-heir.log")
    [ "$o" = ctl-heir ] && [ "$n" = 1 ] && [ "$na" = 1 ] && [ "$nc" = 0 ] &&
      ok "ctl-heir took the claim over and adopted the dead owner's region (1 region, no second compose); pod ran after $((SECONDS - t0))s" ||
      bad "after takeover: owner $o, $n regions, $na adoptions, $nc composes"
    has_event heir OwnerTakenOver && ok "OwnerTakenOver Event: $(events_for heir | grep '^OwnerTakenOver' | head -1 | cut -c1-160)" ||
      bad "no OwnerTakenOver Event"
    [ "$(ctl_metric cxlkv_dra_owner_takeovers_total)" = 1 ] && ok "metric cxlkv_dra_owner_takeovers_total 1" ||
      bad "cxlkv_dra_owner_takeovers_total $(ctl_metric cxlkv_dra_owner_takeovers_total)"
  else bad "heir after takeover: $(phase heir), owner $(owner_of heir)"; fi
else bad "failpoint did not fire for the dead owner"; fi
kubectl delete pod heir --wait=false >/dev/null; wait_until 60 gone pod heir
kubectl delete resourceclaim heir --wait=false >/dev/null
wait_until 60 gone resourceclaim heir && wait_until 20 no_regions &&
  ok "taken-over claim deleted: finalizer removed, zero regions left" || bad "after takeover: $(regions) regions"

echo "== dra: heartbeat Leases of departed replicas are garbage-collected"
owner_leases() { kubectl get leases -o name | sed -n 's|^lease.coordination.k8s.io/cxlkv-dra-controller-owner-||p' | sort | tr '\n' ' '; }
# Another live replica (no metrics port: ctl-heir has it), once ctl-heir holds
# the singleton Lease (it runs the resync).
wait_until 20 grep -q "ctl-heir holds Lease" "$E/logs/ctl-heir.log" || bad "ctl-heir never held the Lease"
start ctl-live "$BIN/cxlkv-dra-controller" --kubeconfig "$KCFG" --fabric "$F" \
  --identity ctl-live --resync-period 2 --lease-duration 6 --owner-lease-gc 2
echo "owner Leases before: $(owner_leases)"
only_live() { [ "$(owner_leases)" = "ctl-heir ctl-live " ]; }
if wait_until 60 only_live; then
  n=$(grep -c "deleted heartbeat Lease default/cxlkv-dra-controller-owner-ctl-dead of departed replica ctl-dead: not renewed" "$E/logs/ctl-heir.log" "$E/logs/ctl-live.log" | awk -F: '{s += $2} END {print s}')
  [ "$n" = 1 ] && [ "$(ctl_metric cxlkv_dra_owner_leases_collected_total)" -ge 1 ] &&
    ok "departed replicas' heartbeat Leases deleted (ctl-dead's once, by the Lease holder; metric $(ctl_metric cxlkv_dra_owner_leases_collected_total)); ctl-heir's and live ctl-live's kept" ||
    bad "Lease GC: $n log lines for ctl-dead, metric $(ctl_metric cxlkv_dra_owner_leases_collected_total)"
else bad "owner Leases left: $(owner_leases) (want ctl-heir ctl-live)"; fi
