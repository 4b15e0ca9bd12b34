#!/usr/bin/env bash
# Runs the named bats tests of test/e2e/dra-noncoherent.bats (a non-coherent
# blade end to end in a world of its own; its header says what each checks)
# and closes with "dra-noncoherent: N passed, N failed, N skipped": the line
# scripts/test.d/55-dra.sh reads when it runs this in its background.
# Needs root, build/bin (the dra stage builds it) and the fake kubelet (FK,
# else built). Warm on 2 cores: about 45 s.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$ROOT/scripts/lib/bats.sh"
cd "$ROOT"
passed=0; failed=0; skipped=0
cxlkv_bats dra-noncoherent test/e2e/dra-noncoherent.bats
cxlkv_bats_close dra-noncoherent
