"""CxlkvOffloadingSpec: the region as a backend of vLLM's OffloadingConnector.

vLLM constructs the spec in every process (API server: only the metric
classmethods; EngineCore: get_manager; each worker: get_worker), so the
constructor only checks settings; the region is opened by get_manager and
get_worker.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from vllm.v1.kv_offload.base import OffloadingSpec

from .. import NamespaceDesc, Region, open_region, release_partition_lock
from ..errors import InvalidArgumentError, NotFoundError
from . import _log, compat, keys, metrics
from .settings import Settings

if TYPE_CHECKING:  # imported where used: the API server never loads them
    from .manager import CxlkvManager
    from .worker import CxlkvWorker

logger = _log.get(__name__)

_ALIGN = 64  # part length granularity (cache line)
# Room for the part table of up to this many ranks in every slot, so that
# engines of one model at different TP sizes (parts x part_len equal) format
# and share one region geometry (in separate namespaces).
_MAX_PARTS = 64
_PART_ENTRY = 16


class CxlkvOffloadingSpec(OffloadingSpec):
    """Select with kv_connector_extra_config={"spec_name": "CxlkvOffloadingSpec",
    "spec_module_path": "cxlkv.vllm", ...}; keys in cxlkv/vllm/settings.py."""

    @classmethod
    def build_metric_definitions(cls, extra_config: Any) -> dict[str, Any]:
        return metrics.definitions()

    @classmethod
    def config_info_keys(cls, extra_config: Any) -> tuple[str, ...]:  # 0.33
        return ("region", "slot_size", "num_slots", "parts")

    def __init__(self, config: Any) -> None:
        self.vllm_version = compat.check_supported()
        super().__init__(config)
        self.settings = Settings.from_extra_config(config.extra_config)
        p = config.parallel
        self.parts = int(p.world_size)
        part = int(config.worker_kv_bytes_per_block) * int(config.cache.blocks_per_chunk)
        self.part_len = (part + _ALIGN - 1) // _ALIGN * _ALIGN
        from .. import _cxlkv

        if self.parts > _MAX_PARTS:
            raise ValueError(f"cxlkv: {self.parts} workers; at most {_MAX_PARTS} share one slot")
        self.payload_len = int(_cxlkv.parted_payload_len(self.parts, self.part_len))
        self.slot_size = self.parts * self.part_len + _MAX_PARTS * _PART_ENTRY
        # Every process that opens the region (EngineCore and workers: any may
        # format it) records the same hashing identity. vLLM builds the spec
        # while its config is current, in every process.
        vcfg = compat.current_vllm_config()
        algo = getattr(getattr(vcfg, "cache_config", None), "prefix_caching_hash_algo",
                       None) or "sha256"
        self.hash_algorithm, self.hash_seed_fingerprint = keys.hash_identity(algo)
        self._region: Region | None = None

    # ---- region ----
    def _open(self, *, manager: bool) -> Region:
        s = self.settings
        if s.region_size and s.region_size < 4 * self.slot_size:
            raise ValueError(
                f"cxlkv: region_size={s.region_size} bytes is too small: one chunk of this engine "
                f"needs a {self.slot_size}-byte slot ({self.parts} rank(s) x {self.part_len} B "
                f"+ {_MAX_PARTS * _PART_ENTRY} B part table); "
                "give the region room for many chunks")
        if s.region_path.startswith("/dev/shm/"):
            os.makedirs(os.path.dirname(s.region_path), exist_ok=True)
        kw = dict(size=s.region_size, offset=s.region_offset, slot_size=self.slot_size,
                  # Workers reach payloads by DMA (registered, so pinned) or
                  # memcpy: their directory only is populated here.
                  prefault=s.prefault if manager else "metadata",
                  max_participants=s.max_participants, hash_algorithm=self.hash_algorithm,
                  hash_seed_fingerprint=self.hash_seed_fingerprint)
        if s.coherence == "software":
            kw.update(coherence="software", software_partitions=s.software_partitions)
        t0 = time.perf_counter()
        try:
            if s.coherence == "software":
                region = self._open_software(s.region_path, kw, manager=manager)
            else:
                region = open_region(s.region_path, **kw)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(
                f"cxlkv: this engine cannot use region {s.region_path}: {e} (this engine: slot "
                f"{self.slot_size} B = {self.parts} rank(s) x {self.part_len} B + part table, hash "
                f"{self.hash_algorithm} with NONE_HASH seed fingerprint "
                f"{self.hash_seed_fingerprint:#x})") from e
        # Attach (format or join, prefault on the manager side) stays off
        # the first request; the TTFT harness reads this line per engine.
        logger.info("cxlkv: %s attached region %s in %.1f ms (prefault %s, %s)",
                    "manager" if manager else "worker", s.region_path,
                    (time.perf_counter() - t0) * 1e3, kw["prefault"],
                    f"coherence=software, host {s.host} partition {s.software_partition} of "
                    f"{region.info().config.software_partitions}" if s.coherence == "software"
                    else "coherence=hardware")
        return region

    def _open_software(self, path: str, kw: dict[str, Any], *, manager: bool) -> Region:
        """coherence=software (docs/coherence.md): one process per host writes
        (holds the host's write partition): the manager, which reserves and
        commits every store (cxlkv/delegate.h); the workers fill parts of the
        manager's reservations and load, as observers. Only partition 0's
        holder formats, and vLLM may start the workers first, so on a blank
        region rank 0's worker of partition 0 formats it (attaching as
        partition 0 and leaving again) before the manager attaches."""
        s = self.settings
        if manager:
            return open_region(path, software_partition=s.software_partition, **kw)
        observer = dict(kw, register_participant=False)
        try:
            return open_region(path, create_if_missing=False, **observer)
        except NotFoundError:
            if s.software_partition != 0 or int(self.config.parallel.rank) != 0:
                return open_region(path, **observer)  # waits for partition 0's format
        formatter = open_region(path, software_partition=0, **kw)
        del formatter  # gives partition 0 back before the manager takes it
        release_partition_lock()  # and the node's partition lock, if open_region took it
        return open_region(path, **observer)

    def _namespaces(self, region: Region, fingerprint: str) -> tuple[dict[int, int], str]:
        fmt = keys.page_format()
        model, dtype, layout = keys.namespace_fields(self.config, fingerprint, fmt)
        out = {}
        for g in range(len(self.config.groups)):
            out[g] = region.register_namespace(NamespaceDesc(model, dtype, layout, 0, g))
        return out, f"{model} {dtype} {layout}"

    def get_manager(self) -> CxlkvManager:
        from .manager import CxlkvManager

        region = self._open(manager=True)
        fp = keys.model_fingerprint(self.config.model.name, self.settings.model_fingerprint)
        served = os.path.basename(str(self.config.model.name).rstrip("/"))
        try:
            # The claim is held by a pin, which coherence=software does not
            # have (docs/vllm.md, "Non-coherent regions"): not checked there.
            claim = (None if self.settings.coherence == "software" else
                     keys.claim_model_name(region, served, fp))
        except InvalidArgumentError as e:
            raise InvalidArgumentError(
                f"cxlkv: this engine cannot use region {self.settings.region_path}: {e}") from e
        namespaces, label = self._namespaces(region, fp)
        logger.info("cxlkv: region %s (%d slots of %d B), namespace %s", self.settings.region_path,
                    region.info().num_slots, self.slot_size, label)
        self._region = region
        kv_events = bool(getattr(getattr(self, "kv_events_config", None),
                                 "enable_kv_cache_events", False))
        # Tokens per chunk of each KV group, for the chunks' depths (0.34+
        # record end-token positions; compat.chain_depths).
        per_chunk = {g: int(getattr(grp, "tokens_per_block", 0) or 0)
                    * int(self.config.cache.blocks_per_chunk)
                    for g, grp in enumerate(self.config.groups)}
        return CxlkvManager(region, namespaces, (self.parts, self.part_len), self.settings,
                            self.settings.region_path, kv_events=kv_events, claim=claim,
                            tokens_per_chunk=per_chunk)

    def get_worker(self, kv_caches: Any) -> CxlkvWorker:
        # KV on a GPU: copies by the GPU's copy engines (worker_cuda.py);
        # on the CPU: memcpy (worker.py).
        on_gpu = any(t.tensor.device.type == "cuda" for t in kv_caches.tensors)
        if on_gpu:
            from .worker_cuda import CxlkvCudaWorker as cls
        else:
            from .worker import CxlkvWorker as cls

        region = self._open(manager=False)
        self._region = region
        return cls(region, kv_caches, self.config.parallel.rank, (self.parts, self.part_len),
                   self.config.cache.blocks_per_chunk)
