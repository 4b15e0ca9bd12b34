"""CxlkvOffloadingConnector: vLLM's OffloadingConnector plus load-error
reporting, so that a chunk failing its CRC after a promised load is
recomputed instead of crashing the engine (vLLM asserts on failed transfers,
and the plain connector reports no invalid blocks, so its
kv_load_failure_policy has no effect).

    kv_transfer_config = {"kv_connector": "CxlkvOffloadingConnector",
                          "kv_connector_module_path": "cxlkv.vllm.connector",
                          "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                          "kv_connector_extra_config": {"spec_name": "CxlkvOffloadingSpec",
                                                        "spec_module_path": "cxlkv.vllm"}}

vLLM's scheduler then truncates the request's computed tokens at the first
failed block and recomputes from there (v1/core/sched/scheduler.py,
_update_requests_with_invalid_blocks; single KV group models only).

In the scheduler process it asks the manager, for every request with a
hit, whether loading the hit pays on this engine or recomputing it is
faster (policy.py: from the costs of loads and steps this engine measured;
extra-config keys load_policy and load_min_gain), and feeds the manager each
step's scheduled tokens and duration. It hands the manager vLLM's connector
scheduler, whose state of each request gives a stored chunk's depth in its
prefix chain before 0.34 (compat.chain_depths). It also stops vLLM's KV-events tracker from keeping
a payload for every lookup hit (compat.skip_lookup_snapshots): cxlkv never
uses those, and in a replica that loads what others stored they would pile
up for good.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
    OffloadingConnector,
)

from typing import Any

from . import compat
from .worker import CxlkvWorker


class CxlkvOffloadingConnector(OffloadingConnector):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        sched = getattr(self, "connector_scheduler", None)
        if sched is not None:
            compat.skip_lookup_snapshots(sched)
            m = self._cxlkv_manager()
            if m is not None:
                m.attach_scheduler(sched)  # each stored chunk's depth (compat.chain_depths)

    def _cxlkv_manager(self) -> Any:
        m = getattr(getattr(self, "connector_scheduler", None), "manager", None)
        return m if hasattr(m, "decide_load") else None

    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        n, is_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        m = self._cxlkv_manager()
        if n and m is not None and not m.decide_load(request.request_id, n):
            return 0, False  # recompute: the scheduler treats the hit as a miss
        return n, is_async

    def build_connector_meta(self, scheduler_output: Any) -> Any:
        m = self._cxlkv_manager()
        if m is not None:
            m.step_scheduled(getattr(scheduler_output, "total_num_scheduled_tokens", 0))
        return super().build_connector_meta(scheduler_output)

    def update_connector_output(self, connector_output: Any) -> None:
        super().update_connector_output(connector_output)
        m = self._cxlkv_manager()
        if m is not None:
            m.step_done()

    def register_kv_caches(self, kv_caches: Any) -> None:
        super().register_kv_caches(kv_caches)
        w = self._cxlkv_worker()
        if w is not None:
            w.report_load_errors = True

    def _cxlkv_worker(self) -> CxlkvWorker | None:
        cw = getattr(self, "connector_worker", None)
        w = getattr(cw, "worker", None)
        return w if isinstance(w, CxlkvWorker) else None

    def get_block_ids_with_load_errors(self) -> set[int]:
        w = self._cxlkv_worker()
        return w.take_failed_block_ids() if w is not None else set()
