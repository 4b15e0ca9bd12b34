#!/usr/bin/env bash
# Stage: the Spin model of the slot and participant protocol (model/,
# docs/model.md) via scripts/model-check.sh: the names the model cites exist
# in src/region/ (and the check fails on a bogus one), the current protocol
# (layout v2) and format-or-attach satisfy every property, and the old
# protocol (layout v1) and two weakened variants show their violations.
# CXLKV_FULL=1 (scripts/test.sh --full) adds the larger bounds.
# Warm: about 80 s on 2 idle cores (77 s of CPU; 4 min wall at load 15). No
# build; spin and gcc make each verifier in a temporary directory.
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
args=()
[ "$CXLKV_FULL" = 1 ] && args=(--full)
exec scripts/model-check.sh "${args[@]}"
