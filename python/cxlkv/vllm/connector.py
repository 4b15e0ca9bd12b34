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

In the scheduler process it also stops vLLM's KV-events tracker from keeping
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
