#!/usr/bin/env bash
# Runs the named bats tests of test/e2e/dra-binding-conditions.bats
# (Kubernetes' binding-condition scenarios ported to our controller, in a world
# of their own; its header says what each checks) and closes with
# "dra-binding: N passed, N failed, N skipped": the line
# scripts/test.d/55-dra.sh reads when it runs this in its background.
# Needs build/bin (the dra stage builds it). About 100 s warm on 2 cores.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$ROOT/scripts/lib/bats.sh"
cd "$ROOT"
passed=0; failed=0; skipped=0
cxlkv_bats dra-binding test/e2e/dra-binding-conditions.bats
cxlkv_bats_close dra-binding
