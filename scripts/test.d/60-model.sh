#!/usr/bin/env bash
# Stage: the Spin models of the slot and participant protocol (model/,
# docs/model.md) via scripts/model-check.sh: the names the models cite exist
# in src/region/ (and the check fails on a bogus one), the current protocol
# (layout v2) and format-or-attach satisfy every property, and the old
# protocol (layout v1) and two weakened variants show their violations;
# software mode (model/coherence.pml: per-host caches, flush, invalidate, no
# atomics) passes, the code's variant and the heartbeat-in-the-record variant
# show theirs, and each of its 13 flush/invalidate sites removed in turn is
# caught. CXLKV_FULL=1 (scripts/test.sh --full) adds the larger bounds.
# Warm: about 3.5 min on 2 idle cores (about 180 s of CPU: 262 s measured,
# 19 min wall at load 18-23, with a since-removed 14th mutant that took 81 s).
# No build; spin and gcc make each verifier in a temporary directory.
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
args=()
[ "$CXLKV_FULL" = 1 ] && args=(--full)
exec scripts/model-check.sh "${args[@]}"
