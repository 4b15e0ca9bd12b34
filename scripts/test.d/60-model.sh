#!/usr/bin/env bash
# test.sh: background lane
# Stage: the Spin models of the slot and participant protocol (model/,
# docs/model.md) via scripts/model-check.sh: the names the models cite exist
# in src/region/ (and the check fails on a bogus one); the current protocol
# (layout 5: index entries naming data slots) keeps every read exact, keeps
# every property under crashes, shows its data-slot counterexample under a
# pause and the CommitWrite(nullptr) limit; the data word naming its lease
# satisfies every property and its two mutants do not; Drop's take, restore
# and free beside a reader and an evictor satisfy every property, and its
# mutant and Drop as it was before its take refused EVICTING words do not; format-or-attach
# satisfies every property, and the old protocol (layout 1) shows its two
# defects (layout 2's cases are in the full tier);
# software mode (model/coherence.pml: per-host caches, flush, invalidate, no
# atomics; the default is the code, layout 6: index entries apart from data
# slots, SW2b, the sweep's give-back, its tag line rewrite and the payload
# check) passes with the lease never moving, with crashes, and with the new
# holder storing while the paused old one still runs; the give-back mutant,
# the protocol without the tag line rewrite and payload check (the old
# holder's late tag line: sw-l6-no-repair), the layout v3 variant and the
# heartbeat-in-the-record variant show theirs, and each of its 15
# flush/invalidate sites removed in turn (SW2b's among them) is caught
# (docs/model.md). All of these run by
# default; CXLKV_FULL=1 (scripts/test.sh --full) adds the larger-bound cases
# (model-check.sh's "full" tier). In scripts/test.sh's background lane,
# after helm (no build directory of the tree, no timed check: only slower
# under load).
# Warm: about 90 s (87 s and 91 s measured alone on 2 cores with other work
# beside it, about 68 s of CPU; 75 M states searched, the layout-5 cases 47 M
# of them, software mode 20 M), each verifier's compile, about 9 s of CPU,
# from ccache (scripts/model-check.sh) while the models are unchanged. On 2
# busy cores up to about 6 min, most of it the searches.
# Cold (a model edited, or an empty cache): about 5 min idle (+9 s of CPU
# per case compiled), up to 25 min on busy cores.
# No build; spin and gcc make each verifier in a temporary directory.
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
cd "$CXLKV_ROOT"
args=()
[ "$CXLKV_FULL" = 1 ] && args=(--full)
exec scripts/model-check.sh "${args[@]}"
