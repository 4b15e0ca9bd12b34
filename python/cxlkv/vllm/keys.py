"""Keys and namespaces: what makes two replicas' KV interchangeable.

vLLM's offload key is the chained block hash of the chunk's last hash block
plus the KV group (4 bytes). It says nothing about the model, dtype, TP or
page format, so cxlkv adds a namespace (include/cxlkv/key.h) made of:

- the model fingerprint: a digest of the model's config and weight files
  (sizes, safetensors headers, and 16 evenly spread 64 KiB samples of each
  weight file), not its name: two fine-tunes served under one name differ
  in their weights, so they never share KV;
- the KV cache dtype, tokens per hash block, blocks per chunk;
- the KV layout and the attention backend's page byte order (CPU attention
  keeps K and V as two planes per head, FlashAttention interleaves them per
  token: same layout name, different bytes);
- the parallel layout (world size, TP, PP, PCP), whose parts one slot holds;
- the KV group.

The region itself records the hash algorithm and a fingerprint of vLLM's
NONE_HASH seed: replicas whose block hashes can never agree are refused when
they attach (the paper's and LMCache's silent zero-hit bug).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .. import BlockKey, PinSet, Region

_SAMPLES = 16
_SAMPLE_BYTES = 64 << 10


def _weight_files(model_dir: str) -> list[str]:
    files = []
    for pattern in ("*.safetensors", "*.bin", "*.pt", "*.gguf"):
        files += glob.glob(os.path.join(model_dir, pattern))
    return sorted(files)


def _digest_file(h: Any, path: str) -> None:  # h: a hashlib hash
    size = os.path.getsize(path)
    h.update(f"{os.path.basename(path)}:{size}\n".encode())
    with open(path, "rb") as f:
        if path.endswith(".safetensors"):
            n = int.from_bytes(f.read(8), "little")
            if 0 < n <= min(size - 8, 100 << 20):
                h.update(f.read(n))  # tensor names, dtypes, shapes, offsets
        for i in range(_SAMPLES):
            f.seek(max(0, (size - _SAMPLE_BYTES) * i // max(1, _SAMPLES - 1)))
            h.update(f.read(_SAMPLE_BYTES))


def resolve_model_dir(name: str) -> str | None:
    """The local directory of a model given by path or by hub id (if cached), or None."""
    if os.path.isdir(name):
        return name
    try:
        from huggingface_hub import try_to_load_from_cache

        cfg = try_to_load_from_cache(name, "config.json")
        if isinstance(cfg, str):
            return os.path.dirname(cfg)
    except Exception:  # noqa: BLE001 - no hub client, or not cached
        pass
    return None


def model_fingerprint(name: str, override: str | None = None) -> str:
    """A 128-bit hex digest identifying the model's weights and config.

    ``override`` (extra-config ``model_fingerprint``) is used as given, for
    deployments that know their models' identity better (e.g. an image digest).
    """
    if override:
        return str(override)
    model_dir = resolve_model_dir(name)
    if model_dir is None:
        raise ValueError(
            f"cxlkv: cannot fingerprint model {name!r}: not a local directory nor in the "
            "hub cache; set kv_connector_extra_config['model_fingerprint']")
    h = hashlib.sha256(b"cxlkv-model-v1\n")
    cfg = os.path.join(model_dir, "config.json")
    if os.path.exists(cfg):
        with open(cfg, "rb") as f:
            h.update(json.dumps(json.load(f), sort_keys=True).encode())
    files = _weight_files(model_dir)
    if not files:
        from .compat import load_format

        dummy = load_format() == "dummy"
        raise ValueError(
            f"cxlkv: no weight files in {model_dir} to fingerprint model {name!r}"
            + (" (--load-format dummy: vLLM makes the weights up at start)" if dummy
               else " (no *.safetensors, *.bin, *.pt or *.gguf: a config-only directory?)")
            + ". The fingerprint keeps engines whose weights differ from sharing KV; without "
            "files, name the weights yourself: set kv_connector_extra_config['model_fingerprint'] "
            "to a string that only engines serving these exact weights share (e.g. an image "
            "digest"
            + (", or 'dummy-' plus the model and the vLLM version: vLLM fills dummy weights "
               "from a fixed seed" if dummy else "")
            + "; docs/vllm.md, extra-config keys)")
    for path in files:
        _digest_file(h, path)
    return h.hexdigest()[:32]


def hash_identity(algorithm: str) -> tuple[str, int]:
    """(algorithm, 64-bit fingerprint of NONE_HASH) of this process's block hashing.

    Computed the way vLLM's init_none_hash will (that runs after the connector
    is built). A per-process random seed (xxhash without PYTHONHASHSEED) can
    never match another replica's, so it is refused here.
    """
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core import kv_cache_utils

    hash_fn = get_hash_fn_by_name(algorithm)
    non_crypto: frozenset[str] = getattr(kv_cache_utils, "_NON_CRYPTO_HASH_FUNCTIONS", frozenset())
    seed = os.getenv("PYTHONHASHSEED")
    # 0.32/0.33 give cryptographic hashes a fixed default seed; 0.26 (no
    # DEFAULT_NONE_HASH_SEED) draws NONE_HASH from os.urandom for every
    # algorithm unless PYTHONHASHSEED is set.
    default_seed = getattr(kv_cache_utils, "DEFAULT_NONE_HASH_SEED", None)
    if seed is None:
        if hash_fn in non_crypto or default_seed is None:
            raise ValueError(
                f"cxlkv: prefix_caching_hash_algo={algorithm} without PYTHONHASHSEED uses a random "
                "per-process NONE_HASH seed in this vLLM, so no other replica could ever hit this "
                "one's blocks; set PYTHONHASHSEED to one value on every replica"
                + ("" if default_seed is None else ", or use sha256"))
        seed = default_seed
    none_hash = hash_fn(seed)
    fp = int.from_bytes(bytes(none_hash)[:8], "big") or 1
    return algorithm, fp


def page_format() -> str:
    """The attention backend's page byte order on this platform (see module doc)."""
    try:
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            return "cpu-attn"  # per head: K plane (N x D) then V plane
        cfg = None
        from .compat import current_vllm_config

        cfg = current_vllm_config()
        backend = getattr(getattr(cfg, "attention_config", None), "backend", None)
        # The version too: 0.26-0.28 can hand the KV over as one cross-layer
        # tensor (all layers of a block together; worker_cuda.py), 0.29+
        # always per layer: the same backend name, other bytes (docs/vllm.md).
        from .compat import minor

        return f"{current_platform.device_name}-{backend or 'auto'}-v{minor()}".lower()[:24]
    except Exception:  # noqa: BLE001
        return "unknown"


def namespace_fields(config: Any, fingerprint: str, fmt: str) -> tuple[str, str, str]:
    """(model, dtype, kv_layout) of the namespace for this engine (limits of key.h)."""
    from .compat import kv_cache_layout_name

    p = config.parallel
    layout = (f"{kv_cache_layout_name(getattr(config, 'kv_cache_layout', None))}/{fmt}"
              f"/t{config.cache.tokens_per_hash}/c{config.cache.blocks_per_chunk}"
              f"/b{config.worker_kv_bytes_per_block}"
              f"/w{p.world_size}t{p.tp_size}p{p.pp_size}c{p.pcp_size}")
    name = os.path.basename(str(config.model.name).rstrip("/"))
    return f"{fingerprint} {name}"[:127], str(config.model.dtype)[:23], layout[:63]


def block_key(offload_key: bytes) -> BlockKey:
    """cxlkv.BlockKey of vLLM's OffloadKey: the block hash's first 128 bits."""
    from .. import BlockKey

    return BlockKey.from_bytes(bytes(offload_key[:-4]))


def group_of(offload_key: bytes) -> int:
    """The KV group of vLLM's OffloadKey (its last 4 bytes, big-endian)."""
    return int.from_bytes(offload_key[-4:], "big")


# The served-model-name claims: one small block per model name, in a
# namespace of its own, whose payload is the fingerprint of the weights that
# the replicas attached under that name serve. Each replica's manager holds
# a pin on its name's claim while it is attached (released at shutdown, or
# by the region's reclaim when the process dies), so a live claim is never
# evicted and can be told from a stale one (Region.drop refuses pinned slots).
CLAIM_NAMESPACE = ("cxlkv:served-model-names", "", "claim/v1")
_CLAIM_CAP = 256


def claim_model_name(region: Region, name: str, fingerprint: str) -> PinSet:
    """Pins this engine's claim on model name `name` in the region; returns the PinSet.

    Replicas behind one model name are interchangeable to a router: it sends a
    prefix to whichever replica announced it. A replica whose weights differ
    (another fine-tune under the same name, a stale snapshot) would never hit
    the others' KV (another namespace) while looking like them: the silent
    zero-hit failure. So, while any replica that serves `name` with other
    weights is attached, this one is refused (InvalidArgumentError naming both
    fingerprints). A claim nobody holds any more (all its replicas gone) is
    replaced, so new weights under an old name start once the old ones left.
    """
    from .. import BlockKey, NamespaceDesc
    from ..errors import BusyError, CorruptionError, InvalidArgumentError, NotFoundError

    ns = region.register_namespace(NamespaceDesc(*CLAIM_NAMESPACE, 0, 0))
    key = BlockKey.from_bytes(hashlib.sha256(b"cxlkv-model-name\n" + name.encode()).digest())
    mine = str(fingerprint).encode()[:_CLAIM_CAP]
    for _ in range(16):
        pins = region.pin_prefix(ns, [key])
        if len(pins):
            buf = bytearray(_CLAIM_CAP)
            try:
                theirs: bytes | None = bytes(buf[:region.load(ns, key, buf)])
            except (CorruptionError, NotFoundError, InvalidArgumentError):
                theirs = None  # damaged (dropped by load) or not a claim: replace it
            if theirs == mine:
                return pins
            pins.release()
            try:
                region.drop(ns, key)
            except BusyError:
                shown = theirs.decode("utf-8", "replace") if theirs is not None else "?"
                raise InvalidArgumentError(
                    f"cxlkv: model_fingerprint mismatch for model name {name!r}: a replica "
                    f"attached to this region serves it with weights {shown}, this engine's are "
                    f"{fingerprint}; replicas under one name must serve the same weights (serve "
                    "these under another name, or use another region)") from None
            except NotFoundError:
                pass
            continue
        region.store(ns, key, mine)  # stored, duplicate or lost race: look again
    raise BusyError(f"cxlkv: could not claim model name {name!r} in the region (contended)")
