"""Settings of the cxlkv backend: vLLM's kv_connector_extra_config plus the
environment the DRA driver injects. Parsed and checked without touching the
region (the spec is constructed in every vLLM process)."""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

# Keys that vLLM itself reads from kv_connector_extra_config (0.26-0.33).
VLLM_KEYS = frozenset({
    "spec_name", "spec_module_path", "block_size", "blocks_per_chunk", "offload_prompt_only",
    "sync_load_budget_bytes", "canonical_layout", "self_describing_kv_events",
    "cpu_bytes_to_use", "max_load_tokens", "max_offload_tokens",
})
# cxlkv's own keys.
CXLKV_KEYS = frozenset({
    "region_path",      # file or devdax device; default $CXL_DAX_DEVICE or /dev/shm/cxlkv/vllm
    "region_size",      # bytes; default $CXL_DAX_SIZE, cpu_bytes_to_use, or 1 GiB
    "region_offset",    # bytes into the file/device; default $CXL_DAX_OFFSET or 0
    "model_fingerprint",  # overrides the computed weights fingerprint
    "pin_ttl_s",        # how long a lookup HIT stays pinned without prepare_load (default 30)
    "prefault",         # EngineCore's handle: metadata | none | at_attach | background
                        # (default metadata; docs/vllm.md says why not background)
    "max_participants",  # region participants (default 64)
    "load_policy",      # measured | always: load a hit only when this engine measured that
                        # it beats recomputing it (default measured; policy.py)
    "load_min_gain",    # measured: load when predicted load <= this x predicted recompute
                        # (0 < x <= 1, default 0.9)
    # Memory shared by hosts without hardware coherence (docs/coherence.md):
    "coherence",        # hardware | software; default $CXL_COHERENCE, else hardware
    "software_partitions",  # write partitions (hosts that may write), 1..16;
                        # default $CXL_SOFTWARE_PARTITIONS, else len(software_hosts)
    "software_partition",  # the partition this host holds; default
                        # $CXL_SOFTWARE_PARTITION, else host's index in software_hosts
    "software_hosts",   # the hosts sharing the region, in partition order (list or
                        # comma-separated names)
    "host",             # this host's name in software_hosts; default $NODE_NAME, else
                        # the hostname
})
DEFAULT_PATH = "/dev/shm/cxlkv/vllm"
PREFAULTS = ("metadata", "none", "at_attach", "background")
DEFAULT_SIZE = 1 << 30


def _int(name: str, value: Any) -> int:
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"cxlkv: {name}={value!r} is not an integer number of bytes") from None
    if v < 0:
        raise ValueError(f"cxlkv: {name}={value!r} is negative")
    return v


def _float(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"cxlkv: {name}={value!r} is not a number") from None


def _one_of(name: str, value: Any, allowed: Sequence[str]) -> str:
    v = str(value)
    if v not in allowed:
        raise ValueError(f"cxlkv: {name}={v!r}: one of {', '.join(allowed)}")
    return v


def _coherence(extra: Mapping[str, Any], env: Mapping[str, str]
               ) -> tuple[str, int, int, str]:
    """(mode, partitions, partition, host) from the extra config and the CDI
    environment; partition -1 in hardware mode. ValueError when software mode
    cannot tell which write partition this host holds."""
    mode = str(extra.get("coherence") or env.get("CXL_COHERENCE") or "hardware").lower()
    if mode not in ("hardware", "software"):
        raise ValueError(f"cxlkv: coherence={mode!r}: one of hardware, software")
    keys = [k for k in ("software_partitions", "software_partition", "software_hosts")
            if k in extra]
    if mode == "hardware":
        if keys:
            raise ValueError(f"cxlkv: {', '.join(keys)} need coherence=software "
                             "(docs/coherence.md); this region is coherence=hardware")
        return mode, 0, -1, ""
    hosts = extra.get("software_hosts") or []
    if isinstance(hosts, str):
        hosts = [h.strip() for h in hosts.split(",") if h.strip()]
    hosts = [str(h) for h in hosts]
    host = str(extra.get("host") or env.get("NODE_NAME") or socket.gethostname())
    if "software_partitions" in extra:
        parts = _int("software_partitions", extra["software_partitions"])
    elif env.get("CXL_SOFTWARE_PARTITIONS"):
        parts = _int("CXL_SOFTWARE_PARTITIONS", env["CXL_SOFTWARE_PARTITIONS"])
    else:
        parts = len(hosts)
    if "software_partition" in extra:
        part = _int("software_partition", extra["software_partition"])
    elif env.get("CXL_SOFTWARE_PARTITION"):
        part = _int("CXL_SOFTWARE_PARTITION", env["CXL_SOFTWARE_PARTITION"])
    elif host in hosts:
        part = hosts.index(host)
    else:
        raise ValueError(
            "cxlkv: coherence=software needs the write partition this host holds: set "
            "software_partition, or $CXL_SOFTWARE_PARTITION (the DRA driver injects it), or "
            f"list this host ({host!r}: host, $NODE_NAME or the hostname) in software_hosts"
            + (f" (now {hosts})" if hosts else ""))
    if host in hosts and hosts.index(host) != part:
        raise ValueError(f"cxlkv: software_partition={part}, but this host {host!r} is partition "
                         f"{hosts.index(host)} in software_hosts {hosts}")
    if parts and not 1 <= parts <= 16:
        raise ValueError(f"cxlkv: software_partitions={parts}: 1..16")
    if parts and part >= parts:
        raise ValueError(f"cxlkv: software_partition={part} does not exist: the region has "
                         f"{parts} write partitions (0..{parts - 1})")
    return mode, parts, part, host


@dataclasses.dataclass(frozen=True)
class Settings:
    region_path: str
    region_size: int
    region_offset: int
    model_fingerprint: str | None
    pin_ttl_s: float
    prefault: str
    max_participants: int
    coherence: str = "hardware"   # hardware | software
    software_partitions: int = 0  # software: write partitions (0 = accept the region's)
    software_partition: int = -1  # software: the partition this host holds
    host: str = ""                # software: this host's name (for messages)
    load_policy: str = "measured"  # measured | always (policy.py)
    load_min_gain: float = 0.9

    @classmethod
    def from_extra_config(cls, extra: Mapping[str, Any] | None,
                          environ: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if environ is None else environ
        extra = dict(extra or {})
        unknown = sorted(set(extra) - VLLM_KEYS - CXLKV_KEYS)
        if unknown:
            raise ValueError(
                f"cxlkv: unknown kv_connector_extra_config key(s) {', '.join(unknown)}; "
                f"cxlkv's keys are {', '.join(sorted(CXLKV_KEYS))}")
        path = extra.get("region_path") or env.get("CXL_DAX_DEVICE") or DEFAULT_PATH
        if "region_size" in extra:
            size = _int("region_size", extra["region_size"])
        elif env.get("CXL_DAX_SIZE"):
            size = _int("CXL_DAX_SIZE", env["CXL_DAX_SIZE"])
        elif "cpu_bytes_to_use" in extra:  # --kv-offloading-size
            size = _int("cpu_bytes_to_use", extra["cpu_bytes_to_use"])
        elif path.startswith("/dev/dax"):
            size = 0  # the whole device
        else:
            size = DEFAULT_SIZE
        offset = _int("region_offset", extra.get("region_offset", env.get("CXL_DAX_OFFSET", 0)))
        prefault = _one_of("prefault", extra.get("prefault", "metadata"), PREFAULTS)
        ttl = _float("pin_ttl_s", extra.get("pin_ttl_s", 30.0))
        if ttl <= 0:
            raise ValueError("cxlkv: pin_ttl_s must be positive")
        mode, parts, part, host = _coherence(extra, env)
        from .policy import MODES

        load_policy = _one_of("load_policy", extra.get("load_policy", "measured"), MODES)
        gain = _float("load_min_gain", extra.get("load_min_gain", 0.9))
        if not 0 < gain <= 1:
            raise ValueError(f"cxlkv: load_min_gain={gain}: above 0, at most 1")
        return cls(region_path=str(path), region_size=size, region_offset=offset,
                   model_fingerprint=extra.get("model_fingerprint"), pin_ttl_s=ttl,
                   prefault=prefault,
                   max_participants=_int("max_participants", extra.get("max_participants", 64)),
                   coherence=mode, software_partitions=parts, software_partition=part, host=host,
                   load_policy=load_policy, load_min_gain=gain)
