"""cxlkv: KV-cache blocks in a shared memory region, for LLM serving.

The Region API of include/cxlkv/region.h, snake_case::

    import cxlkv
    region = cxlkv.open_region("/dev/shm/cxlkv/demo", size=1 << 30, slot_size=14 << 20,
                               hash_algorithm="sha256_cbor", hash_seed_fingerprint=seed)
    ns = region.register_namespace(cxlkv.NamespaceDesc("Qwen/Qwen2.5-7B-Instruct",
                                                       "bfloat16", "HND"))
    region.store(ns, cxlkv.as_key(block_hash), data)          # any bytes-like object
    n = region.load(ns, cxlkv.as_key(block_hash), buffer)     # NotFoundError on a miss

GPU tensors (vLLM's KV layout) go through ``cxlkv.gpu.GpuRegion`` when the
package was built with CUDA (``cxlkv.HAVE_CUDA``). Errors are the classes of
``cxlkv.errors``, one per Status code.
"""

from . import errors
from ._cxlkv import (  # noqa: F401
    HAVE_CUDA,
    check_attached,
    destroy_region,
    unformat_region,
    BlockKey,
    CoherenceMode,
    NamespaceDesc,
    PinSet,
    Prefault,
    Region,
    RegionConfig,
    RegionInfo,
    RegionOptions,
    StoreOutcome,
    __version__,
)
from .errors import (  # noqa: F401
    BusyError,
    CorruptionError,
    Error,
    InvalidArgumentError,
    LoadFailedError,
    NoSpaceError,
    NotFoundError,
    UnsupportedError,
)

_PREFAULT = {"none": Prefault.NONE, "at_attach": Prefault.AT_ATTACH, "background": Prefault.BACKGROUND}


def as_key(key):
    """A BlockKey from a BlockKey, an int id, >= 16 bytes of block hash, or 32+ hex digits."""
    if isinstance(key, BlockKey):
        return key
    if isinstance(key, int):
        return BlockKey.from_id(key)
    if isinstance(key, (bytes, bytearray, memoryview)):
        return BlockKey.from_bytes(bytes(key))
    if isinstance(key, str):
        return BlockKey.from_hex(key)
    raise TypeError(f"cannot make a BlockKey from {type(key).__name__}")


def as_keys(keys):
    return [as_key(k) for k in keys]


_COHERENCE = {"hardware": CoherenceMode.HARDWARE, "software": CoherenceMode.SOFTWARE}


def coherence_mode(value):
    """A CoherenceMode from a CoherenceMode or its name ("hardware", "software");
    ValueError for anything else."""
    if isinstance(value, CoherenceMode):
        return value
    try:
        return _COHERENCE[str(value).lower()]
    except KeyError:
        raise ValueError(f"coherence={value!r}: one of hardware, software") from None


def region_options(*, size=0, offset=0, slot_size=0, hash_algorithm="", hash_seed_fingerprint=0,
                   create_if_missing=True, register_participant=True, max_participants=64,
                   prefault="at_attach", metadata_json="", heartbeat_interval_ns=None,
                   liveness_timeout_ns=None, coherence="hardware", software_partitions=0,
                   software_partition=-1, **timing):
    """RegionOptions from keywords (fields and defaults as in include/cxlkv/options.h).

    heartbeat_interval_ns (default 100 ms, at most 60 s) and liveness_timeout_ns
    (default 5 s, at least 4 heartbeats) may go down to about 100 ms of liveness for
    tests that pause processes. ``timing`` may set format_wait_ns, format_stall_ns
    and sysfs_root.

    coherence ("hardware" or "software", or a CoherenceMode) must match the
    region's: the other mode is refused with InvalidArgumentError ("coherence
    mismatch: the region has ..., this process expects ..."). In software mode
    (hosts without hardware coherence, docs/coherence.md) software_partitions
    (1..16) is needed to format, software_partition (0..software_partitions-1,
    one process per partition at a time) to write; software_partition=-1 with
    register_participant=False reads only. Pins (Region.pin_prefix) raise
    UnsupportedError in software mode.
    """
    o = RegionOptions()
    if heartbeat_interval_ns is not None:
        o.heartbeat_interval_ns = heartbeat_interval_ns
    if liveness_timeout_ns is not None:
        o.liveness_timeout_ns = liveness_timeout_ns
    o.size = size
    o.offset = offset
    o.create_if_missing = create_if_missing
    o.register_participant = register_participant
    o.prefault = _PREFAULT[prefault]
    c = o.config
    c.slot_size = slot_size
    c.hash_algorithm = hash_algorithm
    c.hash_seed_fingerprint = hash_seed_fingerprint
    c.max_participants = max_participants
    c.metadata_json = metadata_json
    c.coherence = coherence_mode(coherence)
    c.software_partitions = software_partitions
    o.software_partition = software_partition
    o.config = c
    for name, value in timing.items():
        if not hasattr(o, name):
            raise TypeError(f"unknown region option {name!r}")
        setattr(o, name, value)
    return o


def open_region(path, **kwargs):
    """Region.open(path, region_options(**kwargs)): format-or-attach, register as a participant."""
    return Region.open(path, region_options(**kwargs))
