"""Settings of the cxlkv backend: vLLM's kv_connector_extra_config plus the
environment the DRA driver injects. Parsed and checked without touching the
region (the spec is constructed in every vLLM process)."""

import dataclasses
import os

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
    "prefault",         # none | at_attach | background (default background)
    "max_participants",  # region participants (default 64)
})
DEFAULT_PATH = "/dev/shm/cxlkv/vllm"
DEFAULT_SIZE = 1 << 30


def _int(name, value):
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"cxlkv: {name}={value!r} is not an integer number of bytes") from None
    if v < 0:
        raise ValueError(f"cxlkv: {name}={value!r} is negative")
    return v


@dataclasses.dataclass(frozen=True)
class Settings:
    region_path: str
    region_size: int
    region_offset: int
    model_fingerprint: str | None
    pin_ttl_s: float
    prefault: str
    max_participants: int

    @classmethod
    def from_extra_config(cls, extra, environ=None):
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
        prefault = str(extra.get("prefault", "background"))
        if prefault not in ("none", "at_attach", "background"):
            raise ValueError(f"cxlkv: prefault={prefault!r}: one of none, at_attach, background")
        try:
            ttl = float(extra.get("pin_ttl_s", 30.0))
        except (TypeError, ValueError):
            raise ValueError(f"cxlkv: pin_ttl_s={extra['pin_ttl_s']!r} is not a number") from None
        if ttl <= 0:
            raise ValueError("cxlkv: pin_ttl_s must be positive")
        return cls(region_path=str(path), region_size=size, region_offset=offset,
                   model_fingerprint=extra.get("model_fingerprint"), pin_ttl_s=ttl,
                   prefault=prefault,
                   max_participants=_int("max_participants", extra.get("max_participants", 64)))
