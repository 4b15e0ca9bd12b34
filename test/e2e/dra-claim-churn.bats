#!/usr/bin/env bats
# Claims with pods created and deleted in a loop (10; 50 with CXLKV_FULL=1),
# spread over the three nodes, against whichever controller replicas run
# (the world's two race for every claim): every pod runs, every claim is
# composed exactly once, and nothing is left: no region, no stuck finalizer,
# no checkpoint entry. The world: test/e2e/lib/dra.bash. Warm: about 35 s.
# bats file_tags=dra,churn

load lib/dra

loops() { if [ "${CXLKV_FULL:-0}" = 1 ]; then echo 50; else echo 10; fi; }

@test "churn: every pod of the loop's claims runs to completion" {
  local i n=$(loops)
  for i in $(seq 1 "$n"); do
    claim_pod "loop-$i" 1Gi "loop-$i" "fake-node-$((i % 3))" sh -c 'test -s "$CXL_DAX_DEVICE"'
  done
  local notrun=()
  for i in $(seq 1 "$n"); do
    wait_until 120 succeeded "loop-$i" || notrun+=("loop-$i:$(phase "loop-$i")")
    kubectl delete pod "loop-$i" --wait=false >/dev/null
  done
  [ ${#notrun[@]} -eq 0 ] || fail "pods that did not run: ${notrun[*]}"
}

@test "churn: the racing controllers composed each of the loop's claims exactly once, and no claim of the run twice" {
  local n=$(loops) total dups by0 by1
  dups=$(cat "$E"/logs/controller-*.log | grep -o "claim default/[a-z0-9-]*: composed region" | sort | uniq -d | wc -l)
  total=$(cat "$E"/logs/controller-*.log | grep -o "claim default/loop-[0-9]*: composed region" | sort -u | wc -l)
  by0=$(cat "$E"/logs/controller-0*.log | grep -c "claim default/loop-[0-9]*: composed region" || true)
  by1=$(cat "$E"/logs/controller-1*.log | grep -c "claim default/loop-[0-9]*: composed region" || true)
  note "composes: ctl-0 $by0, ctl-1 $by1"
  assert_eq "$dups" 0 "claims composed twice"
  assert_eq "$total" "$n" "claims of the loop composed"
}

@test "churn: nothing left: zero regions, zero stuck finalizers, zero stale checkpoint entries" {
  local i n=$(loops) stuck=0 stale=0 node
  for i in $(seq 1 "$n"); do
    wait_until 60 gone pod "loop-$i"
    kubectl delete resourceclaim "loop-$i" --wait=false >/dev/null
  done
  for i in $(seq 1 "$n"); do wait_until 60 gone resourceclaim "loop-$i" || stuck=$((stuck + 1)); done
  wait_until 30 no_regions || true
  for node in "${DRA_NODES[@]}"; do stale=$((stale + $(ckpt_entries "$node"))); done
  assert_eq "$(regions)" 0 "regions left"
  assert_eq "$stuck" 0 "claims stuck on their finalizer"
  assert_eq "$stale" 0 "stale checkpoint entries"
}
