#!/usr/bin/env bats
# A dead owner's claim taken over by a replica with another name (the world:
# test/e2e/lib/dra.bash; every controller running stops first). The owning
# replica (ctl-dead) is SIGKILLed mid-operation (failpoint after-compose: the
# region is composed, the claim does not name it yet) and never comes back;
# a replacement with a new name (a Deployment's new pod, ctl-heir) sees the
# owner's heartbeat Lease go unrenewed for its duration (6 s here), takes the
# claim over by the owner compare-and-set, adopts the region composed for
# this allocation (no second compose), and the pod runs on it. Then the
# heartbeat Leases of departed replicas (ctl-dead's, never renewed again, and
# those released by the replicas stopped before) are deleted by the Lease
# holder's resync once unrenewed for 2 x their 6 s duration (--owner-lease-gc
# 2), while a live replica's (ctl-live) and the holder's own stay. ctl-heir
# and ctl-live keep running after the file. Warm: about 25 s.
# bats file_tags=dra,takeover

load lib/dra

setup_file() {
  dra_setup_file
  dra_stop_controllers
}

owner_of() { cj "$1" '.metadata.annotations["cxlkv.dev/owner"] // "none"'; }
uid_regions() { region_list | grep -c "$(claim_uid "$1")"; }

@test "takeover: owner ctl-dead SIGKILLed after compose owns the claim, 1 region composed, not yet recorded" {
  ctl_start ctl-dead ctl-dead CXLKV_DRA_FAILPOINT=after-compose
  claim_pod heir 1Gi heir fake-node-1 sh -c 'test -s "$CXL_DAX_DEVICE" && echo attached && exec sleep 600'
  wait_until 60 proc_gone "$(dra_pid ctl-dead)" || fail "the failpoint did not fire for the dead owner"
  rm -f "$E/pids/ctl-dead"
  assert_eq "$(owner_of heir)" ctl-dead "owner of claim heir"
  assert_eq "$(uid_regions heir)" 1 "regions composed for claim heir"
  assert_eq "$(cj heir '.metadata.annotations["cxlkv.dev/region"] // "none"')" none "annotation cxlkv.dev/region"
}

@test "takeover: ctl-heir takes the claim over and adopts the dead owner's region (1 region, no second compose); the pod runs" {
  local t0=$SECONDS
  ctl_start ctl-heir ctl-heir CXLKV_DRA_OWNER_LEASE_GC=2
  wait_until 90 running heir || fail "heir after the takeover: $(phase heir), owner $(owner_of heir)"
  wait_until 10 grep -q attached "$E/fake-node-1/logs/default_heir_main.log" || fail "heir did not attach"
  assert_eq "$(owner_of heir)" ctl-heir "owner of claim heir"
  assert_eq "$(uid_regions heir)" 1 "regions of claim heir"
  assert_eq "$(grep -c "claim default/heir: adopted region" "$E/logs/ctl-heir.log")" 1 "adoptions by ctl-heir"
  assert_eq "$(grep -c "claim default/heir: composed region" "$E/logs/ctl-heir.log")" 0 "composes by ctl-heir"
  note "the pod ran $((SECONDS - t0)) s after ctl-heir started"
}

@test "takeover: an OwnerTakenOver Event on the claim" {
  has_event heir OwnerTakenOver || fail "no OwnerTakenOver Event: $(events_for heir)"
  note "$(events_for heir | grep '^OwnerTakenOver' | head -1 | cut -c1-160)"
}

@test "takeover: ctl-heir's metric cxlkv_dra_owner_takeovers_total is 1" {
  assert_eq "$(ctl_metric cxlkv_dra_owner_takeovers_total)" 1 cxlkv_dra_owner_takeovers_total
}

@test "takeover: the taken-over claim deleted, its finalizer is removed and zero regions are left" {
  delete_pods heir
  delete_claims heir || fail "claim heir stuck"
  wait_until 20 no_regions || fail "$(regions) regions left"
}

# bats test_tags=leases
@test "takeover: departed replicas' heartbeat Leases are deleted (ctl-dead's once, by the Lease holder); ctl-heir's and the live ctl-live's stay" {
  owner_leases() {
    kubectl get leases -o name | sed -n 's|^lease.coordination.k8s.io/cxlkv-dra-controller-owner-||p' | sort | tr '\n' ' '
  }
  alive ctl-heir || ctl_start ctl-heir ctl-heir CXLKV_DRA_OWNER_LEASE_GC=2
  # Another live replica (no metrics port: ctl-heir has it), once ctl-heir
  # holds the singleton Lease (it runs the resync).
  wait_until 20 grep -q "ctl-heir holds Lease" "$E/logs/ctl-heir.log" || fail "ctl-heir never held the Lease"
  start ctl-live "$BIN/cxlkv-dra-controller" --kubeconfig "$KCFG" --fabric "$F" \
    --identity ctl-live --resync-period 2 --lease-duration 6 --owner-lease-gc 2
  echo "owner Leases before: $(owner_leases)"
  only_live() { [ "$(owner_leases)" = "ctl-heir ctl-live " ]; }
  wait_until 60 only_live || fail "owner Leases left: $(owner_leases) (want ctl-heir ctl-live)"
  local n
  n=$(grep -c "deleted heartbeat Lease default/cxlkv-dra-controller-owner-ctl-dead of departed replica ctl-dead: not renewed" \
    "$E/logs/ctl-heir.log" "$E/logs/ctl-live.log" | awk -F: '{s += $2} END {print s}')
  assert_eq "$n" 1 "log lines deleting ctl-dead's Lease"
  [ "$(ctl_metric cxlkv_dra_owner_leases_collected_total)" -ge 1 ] ||
    fail "cxlkv_dra_owner_leases_collected_total $(ctl_metric cxlkv_dra_owner_leases_collected_total)"
}
