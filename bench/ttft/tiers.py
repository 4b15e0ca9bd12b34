"""The tiers under comparison and each one's exact vLLM server flags (the
paper's Table 2, on vLLM 0.26/0.32 flag names).

  T0  recompute                 --no-enable-prefix-caching
  T1  GPU prefix cache          --enable-prefix-caching
  T2  vLLM native CPU offload   --no-enable-prefix-caching --kv-offloading-backend native
                                --kv-offloading-size GiB, 256-token chunks
  T3  Mooncake Store            --no-enable-prefix-caching, MooncakeStoreConnector to one
                                `mooncake_master` per tier run, tcp, each replica's
                                segment T4's region / replicas (mooncake_tier.py)
  T4  cxlkv shared region       --no-enable-prefix-caching, CxlkvOffloadingConnector,
                                256-token chunks
  T4pc  T4 with vLLM's default  --enable-prefix-caching, CxlkvOffloadingConnector:
        prefix caching on       T1 and T4 together, as a deployment runs them
  T5  LMCache MP, L1 in DRAM    --no-enable-prefix-caching, LMCacheMPConnector to one
                                `lmcache server` per tier run (lmcache_tier.py)
  T6  LMCache MP, devdax L1     the same, the server's L1 on a devdax path (a /dev/shm file)

The offload granularity (256 tokens, the paper's) is vLLM's
kv_connector_extra_config "block_size" for both T2 and T4; for T2 it rides
in a --kv-transfer-config that names no connector (vLLM 0.26's
VllmConfig._post_init_kv_transfer_config fills in OffloadingConnector and
cpu_bytes_to_use and keeps the extra keys).
"""

import json

import lmcache_tier
import mooncake_tier

CXLKV_TIERS = ("T4", "T4pc")
TIERS = ("T0", "T1", "T2") + mooncake_tier.TIERS + CXLKV_TIERS + lmcache_tier.TIERS
GRANULARITY = 256
NAMES = {"T0": "recompute (no reuse)", "T1": "GPU prefix cache", "T2": "vLLM native CPU offload",
         "T4": "cxlkv shared region", "T4pc": "cxlkv shared region + GPU prefix cache",
         **mooncake_tier.NAMES, **lmcache_tier.NAMES}
# Tiers whose replicas share one store (the cross arm can hit).
SHARED = mooncake_tier.TIERS + ("T4",) + lmcache_tier.TIERS


def t4_transfer_config(region_path, region_size, poison=False, model_fingerprint=None,
                       extra_config=None):
    extra = {"spec_name": "PoisonableSpec" if poison else "CxlkvOffloadingSpec",
             "spec_module_path": "poison" if poison else "cxlkv.vllm",
             "region_path": region_path, "region_size": int(region_size),
             "block_size": GRANULARITY}
    if model_fingerprint:
        # Dummy weights have no files for cxlkv to fingerprint (it refuses
        # rather than guess): the harness names the model's identity.
        extra["model_fingerprint"] = model_fingerprint
    extra.update(extra_config or {})  # --t4-extra: e.g. prefault, load_policy
    return {"kv_connector": "CxlkvOffloadingConnector",
            "kv_connector_module_path": "cxlkv.vllm.connector", "kv_role": "kv_both",
            "kv_load_failure_policy": "recompute", "kv_connector_extra_config": extra}


def flags(tier, *, t2_gib=16, region_path=None, region_size=None, poison=False,
          model_fingerprint=None, lmcache_port=None, mooncake_lookup_port=None,
          extra_config=None):
    """The tier's own server flags (the common ones are added by replica.py);
    T5/T6 name their `lmcache server`'s port, T3 the replica's own lookup
    port."""
    if tier == "T0":
        return ["--no-enable-prefix-caching"]
    if tier == "T1":
        return ["--enable-prefix-caching"]
    if tier == "T2":
        return ["--no-enable-prefix-caching", "--kv-offloading-backend", "native",
                "--kv-offloading-size", str(t2_gib), "--kv-transfer-config",
                json.dumps({"kv_connector_extra_config": {"block_size": GRANULARITY}})]
    if tier in CXLKV_TIERS:
        if not region_path or not region_size:
            raise ValueError(f"{tier} needs a region path and size")
        pc = "--enable-prefix-caching" if tier == "T4pc" else "--no-enable-prefix-caching"
        return [pc, "--kv-transfer-config",
                json.dumps(t4_transfer_config(region_path, region_size, poison, model_fingerprint,
                                              extra_config))]
    if tier in mooncake_tier.TIERS:
        if mooncake_lookup_port is None:
            raise ValueError(f"{tier} needs the replica's lookup_rpc_port")
        return mooncake_tier.flags(tier, mooncake_lookup_port)
    if tier in lmcache_tier.TIERS:
        if lmcache_port is None:
            raise ValueError(f"{tier} needs its lmcache server's port")
        return lmcache_tier.flags(tier, lmcache_port)
    raise ValueError(f"unknown tier {tier!r}; one of {', '.join(TIERS)}")
