#!/usr/bin/env bash
# Stage: the Spin model of the slot and participant protocol (model/,
# docs/model.md) via scripts/model-check.sh: the names the model cites exist
# in src/region/ (and the check fails on a bogus one), and the old protocol
# (layout v1) shows its defects.
# CXLKV_FULL=1 (scripts/test.sh --full) adds the larger bounds.
# Warm: about 40 s on 2 cores (no build; gcc compiles each verifier).
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
args=()
[ "$CXLKV_FULL" = 1 ] && args=(--full)
exec scripts/model-check.sh "${args[@]}"
