#!/usr/bin/env bash
# Runs the named bats tests of test/e2e/dra-gates-off.bats (both DRA feature
# gates off: annotation mode and the paper's flow, then the switch back to
# consumable capacity) and test/e2e/dra-gates-capacity-off.bats (only
# DRAConsumableCapacity off: annotation mode with our binding conditions),
# each on a control plane of its own (their headers say what each checks), and
# closes with "dra-gates-off: N passed, N failed, N skipped": the line
# scripts/test.d/55-dra.sh reads when it runs this in its background. The
# last-capacity races run with CXLKV_FULL=1 (scripts/test.sh --full); without
# it each of their steps counts as skipped.
# Needs root, build/bin (the dra stage builds it) and the fake kubelet (FK,
# else built). Warm on 2 cores: about 125 s (160 s with CXLKV_FULL=1).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$ROOT/scripts/lib/bats.sh"
cd "$ROOT"
passed=0; failed=0; skipped=0
cxlkv_bats dra-gates-off test/e2e/dra-gates-off.bats test/e2e/dra-gates-capacity-off.bats
cxlkv_bats_close dra-gates-off
