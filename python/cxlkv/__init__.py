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

import fcntl
import os
import socket
from collections.abc import Iterable
from typing import Any

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

_PREFAULT = {"none": Prefault.NONE, "at_attach": Prefault.AT_ATTACH, "background": Prefault.BACKGROUND,
             "metadata": Prefault.METADATA}


def as_key(key: "BlockKey | int | bytes | str") -> BlockKey:
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


def as_keys(keys: Iterable["BlockKey | int | bytes | str"]) -> list[BlockKey]:
    return [as_key(k) for k in keys]


_COHERENCE = {"hardware": CoherenceMode.HARDWARE, "software": CoherenceMode.SOFTWARE}


def coherence_mode(value: "CoherenceMode | str") -> CoherenceMode:
    """A CoherenceMode from a CoherenceMode or its name ("hardware", "software");
    ValueError for anything else."""
    if isinstance(value, CoherenceMode):
        return value
    try:
        return _COHERENCE[str(value).lower()]
    except KeyError:
        raise ValueError(f"coherence={value!r}: one of hardware, software") from None


def region_options(*, size: int = 0, offset: int = 0, slot_size: int = 0,
                   hash_algorithm: str = "", hash_seed_fingerprint: int = 0,
                   create_if_missing: bool = True, register_participant: bool = True,
                   max_participants: int = 64, prefault: str = "at_attach",
                   metadata_json: str = "", heartbeat_interval_ns: int | None = None,
                   liveness_timeout_ns: int | None = None,
                   coherence: "CoherenceMode | str" = "hardware", software_partitions: int = 0,
                   software_partition: int = -1, **timing: Any) -> RegionOptions:
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


def open_region(path: str, **kwargs: Any) -> Region:
    """Region.open(path, region_options(**kwargs)): format-or-attach, register as a participant.

    A coherence=software writer (``software_partition`` >= 0) first takes the
    node's partition lock when ``CXL_PARTITION_LOCK`` names one
    (``hold_partition_lock``), as the cxlkv CLI's writers do."""
    locked = (coherence_mode(kwargs.get("coherence", "hardware")) == CoherenceMode.SOFTWARE
              and kwargs.get("software_partition", -1) >= 0
              and kwargs.get("register_participant", True) and hold_partition_lock())
    try:
        return Region.open(path, region_options(**kwargs))
    except BaseException:
        if locked:
            release_partition_lock()
        raise


PARTITION_LOCK_ENV = "CXL_PARTITION_LOCK"
_lock: dict[str, Any] = {}  # "fd", "path", "holds": this process's hold of the partition lock


def _lock_holder(path: str, fd: int) -> str | None:
    """Who holds the flock on `path`: the pid /proc/locks shows for its inode
    (with its command line, when that process is visible here), else what the
    holder wrote into the file (cxlkv's Python writers do), else None."""
    st = os.fstat(fd)
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pid = None
    try:
        with open("/proc/locks") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 5 and parts[1] == "FLOCK" and parts[5] == ident:
                    pid = parts[4]
                    break
    except OSError:
        pass
    try:
        record = os.pread(fd, 512, 0).decode(errors="replace").strip()
    except OSError:
        record = ""
    if pid and pid.isdigit() and int(pid) > 0:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = " ".join(f.read().decode(errors="replace").replace("\0", " ").split())
            return f"pid {pid} ({cmd[:200]})"
        except OSError:
            if record.startswith(f"pid {pid} "):
                return record
            return f"pid {pid}"
    return record or None


def hold_partition_lock(path: str | None = None) -> bool:
    """Takes the node's partition lock of a coherence=software region:
    flock(LOCK_EX | LOCK_NB) on ``path`` (default: $CXL_PARTITION_LOCK, the
    lock file hostd's CDI spec bind-mounts into every container of the node
    that got the region; docs/coherence.md), held until the process exits or
    ``release_partition_lock`` drops the last hold. Two writers of one host's
    write partition would fence each other; with the lock the second is
    refused before it attaches. Returns False without a lock file named; True
    once held (again: this process already holds it). BusyError naming the
    file and its holder when another process holds it; IOError if it cannot
    be opened."""
    path = path or os.environ.get(PARTITION_LOCK_ENV, "")
    if not path:
        return False
    if _lock:
        if _lock["path"] != path:
            raise InvalidArgumentError(f"cxlkv: this process holds the partition lock "
                                       f"{_lock['path']}; it cannot also write as {path}'s")
        _lock["holds"] += 1
        return True
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        raise errors.IOError(f"cxlkv: partition lock {path} (${PARTITION_LOCK_ENV}): "
                             f"{e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(path, fd)
        os.close(fd)
        raise BusyError(
            f"cxlkv: another process on this node already writes as this host's write partition: "
            f"{path} (${PARTITION_LOCK_ENV}) is locked by "
            f"{holder or 'a process not visible from here'}. Two engines of one non-coherent "
            "region on one node share one partition and only one of them may write; stop that "
            "one, or run this one on another node (docs/coherence.md)") from None
    except OSError as e:
        os.close(fd)
        raise errors.IOError(f"cxlkv: flock {path}: {e.strerror}") from None
    try:
        os.ftruncate(fd, 0)
        with open("/proc/self/cmdline", "rb") as f:
            cmd = " ".join(f.read().decode(errors="replace").replace("\0", " ").split())
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} ({cmd[:200]})\n".encode(), 0)
    except OSError:
        pass  # the record only names the holder in a refusal
    _lock.update(fd=fd, path=path, holds=1)
    return True


def release_partition_lock() -> None:
    """Drops one hold of ``hold_partition_lock``; the last one unlocks."""
    if not _lock:
        return
    _lock["holds"] -= 1
    if _lock["holds"] > 0:
        return
    fd = _lock["fd"]
    _lock.clear()
    try:
        os.ftruncate(fd, 0)
    except OSError:
        pass
    os.close(fd)
