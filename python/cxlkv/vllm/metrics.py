"""cxlkv's own metrics, published beside vLLM's vllm:kv_offload_* ones
(declared by the spec's build_metric_definitions, filled by the manager's
get_stats; both run in vLLM's processes, the API server only reads the
declarations)."""

from __future__ import annotations

from typing import Any

CROSS_REPLICA_HITS = "cxlkv:cross_replica_hits"
LOOKUP_HITS = "cxlkv:lookup_hits"
LOADS = "cxlkv:loaded_chunks"
STORES = "cxlkv:stored_chunks"
STORE_FAILURES = "cxlkv:store_failures"          # label reason
LOAD_FALLBACKS = "cxlkv:load_fallbacks"          # label reason: promised chunks recomputed
CRC_FAILURES = "cxlkv:crc_failures"
EVICTIONS = "cxlkv:evictions"
PIN_EXPIRIES = "cxlkv:pin_expiries"
REGION_FILL = "cxlkv:region_fill"                # gauge, 0..1
REGION_SLOTS = "cxlkv:region_slots"              # gauge
MANAGER_SECONDS = "cxlkv:manager_seconds"        # label op: scheduler-side time per call kind
LOAD_DECISIONS = "cxlkv:load_decisions"          # label decision: load | recompute (policy.py)


def definitions() -> dict[str, Any]:
    from . import compat

    return {
        CROSS_REPLICA_HITS: compat.counter(
            "Chunks this replica found in the shared region that it did not store itself"),
        LOOKUP_HITS: compat.counter("Chunks found in the shared region (pinned until loaded)"),
        LOADS: compat.counter("Chunks promised to the engine for loading"),
        STORES: compat.counter("Chunks committed to the shared region by this replica"),
        STORE_FAILURES: compat.counter(
            "Chunks offered for storing that were not stored, by reason "
            "(full, lost_race, incomplete, fenced)", ("reason",)),
        LOAD_FALLBACKS: compat.counter(
            "Promised chunk loads that failed and were recomputed, by reason "
            "(crc, missing)", ("reason",)),
        CRC_FAILURES: compat.counter("Region slots whose bytes failed CRC32C (region-wide)"),
        EVICTIONS: compat.counter("Slots evicted to make room, by any replica (region-wide)"),
        PIN_EXPIRIES: compat.counter("Lookup pins released because no load followed in time"),
        REGION_FILL: compat.gauge("Fraction of the region's slots holding a block (estimate)"),
        REGION_SLOTS: compat.gauge("Slots in the region (one chunk each)"),
        MANAGER_SECONDS: compat.counter(
            "Seconds spent in the manager on the scheduler's thread, by call "
            "(lookup, prepare_load, complete_load, prepare_store, complete_store, get_stats)",
            ("op",)),
        LOAD_DECISIONS: compat.counter(
            "Requests with a hit in the region, by what the manager chose from the costs it "
            "measured: load the hit, or recompute it (decision)", ("decision",)),
    }
