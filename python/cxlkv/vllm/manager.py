"""The scheduler side (vLLM's EngineCore process): CxlkvManager.

Answers lookups from the region's directory, pins what it promised, reserves
slots for stores and commits them once every worker reported (see
cxlkv/delegate.h for the reserve -> fill part by part -> commit protocol).

All methods run on vLLM's scheduler thread; nothing here blocks or makes a
syscall on the lookup path (the directory and pins are memory of the
mapped region).

KV events from a shared tier (when vLLM's KV events are on): each replica
announces the chunks it committed and withdraws them when they leave the
region, whoever evicted them (events.py, SharedTierEvents).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from vllm.v1.kv_offload.base import (
    LoadStoreSpec,
    LookupResult,
    OffloadingManager,
    PrepareStoreOutput,
    RequestOffloadingContext,
)

from .. import PinSet, Region, _cxlkv
from ..errors import BusyError, CorruptionError, NotFoundError
from . import _log, compat, metrics
from .events import SharedTierEvents
from .keys import block_key, group_of
from .policy import LoadPolicy
from .settings import Settings

logger = _log.get(__name__)

RECOMPUTE_LOG_S = 10.0  # at most one "recomputing a hit" line per this many seconds
_OWN_KEYS_CAP = 1 << 20  # keys remembered as stored by this replica (for cross-replica counts)


_F = TypeVar("_F", bound=Callable[..., Any])


def _timed(op: str) -> Callable[[_F], _F]:
    """Adds the wall seconds of each call to cxlkv:manager_seconds{op}: the
    scheduler-side share of a request's TTFT (lookup and pin, load and store
    bookkeeping), which the TTFT report sets beside the worker's copy time."""

    def wrap(fn: _F) -> _F:
        @functools.wraps(fn)
        def timed(self: CxlkvManager, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(self, *args, **kwargs)
            finally:
                self._count(metrics.MANAGER_SECONDS, time.perf_counter() - t0, op)

        return timed  # type: ignore[return-value]  # wraps keeps fn's signature

    return wrap


class _Pin:
    __slots__ = ("pins", "deadline", "loading")

    def __init__(self, pins: PinSet | _Unpinned, deadline: float | None) -> None:
        self.pins = pins          # cxlkv.PinSet holding one slot
        self.deadline = deadline  # monotonic seconds; None while a load holds it
        self.loading = False


class _Unpinned:
    """What a lookup holds in coherence=software, where there are no pins (a
    pin is a store into another host's line, docs/coherence.md): the hit as
    seen, kept nowhere in the region. A chunk evicted before its load fails
    the worker's load (LoadPart: a miss) and vLLM recomputes those blocks."""

    __slots__ = ("_n",)

    def __init__(self, hit: bool) -> None:
        self._n = 1 if hit else 0

    def __len__(self) -> int:
        return self._n

    def release(self) -> None:
        self._n = 0


class CxlkvManager(OffloadingManager):
    """Built by CxlkvOffloadingSpec.get_manager."""

    def __init__(self, region: Region, namespaces: dict[int, int],
                 layout: tuple[int, int], settings: Settings, region_label: str,
                 kv_events: bool = False, claim: PinSet | None = None,
                 tokens_per_chunk: dict[int, int] | None = None) -> None:
        self.region = region
        self._claim = claim                   # PinSet on the model-name claim (keys.py)
        self.namespaces = namespaces          # KV group index -> NamespaceId
        self.parts, self.part_len = layout    # one part per worker rank
        self.payload_len = _cxlkv.parted_payload_len(self.parts, self.part_len)
        self.ttl = settings.pin_ttl_s
        self.region_label = region_label
        self._pins: dict[str, dict[bytes, _Pin]] = {}  # req_id -> {OffloadKey: _Pin}
        self._leases: dict[bytes, _cxlkv.WriteLease] = {}  # OffloadKey -> its reservation
        # OffloadKey -> None, keys we committed
        self._own: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        # (metric, label) -> increment since get_stats; totals: since start (tests,
        # tools). Counts stay ints, manager_seconds is a float.
        self._counts: collections.defaultdict[tuple[str, str | None], float] = \
            collections.defaultdict(int)
        self.totals: collections.defaultdict[tuple[str, str | None], float] = \
            collections.defaultdict(int)
        self._region_base = self._region_counters()
        self._num_slots = region.info().num_slots
        # KV events (module doc). Only when vLLM drains them (take_events is
        # called only with KV events on), else they would pile up.
        self._kv_events = bool(kv_events)
        self._lease_slot: dict[bytes, int] = {}  # OffloadKey -> slot of its open reservation
        self._shared_events = SharedTierEvents(region, self._ns)
        # What the last reset_cache left to on_reset_flushed (0.33, reset_cache).
        self._flushing_leases: list[_cxlkv.WriteLease] = []  # of discarded store jobs
        self._flushing_pins: list[PinSet | _Unpinned] = []   # of discarded load jobs
        self._software = region.info().config.coherence == _cxlkv.CoherenceMode.SOFTWARE
        # Load or recompute (policy.py): fed by the connector's step hooks and
        # by the loads themselves.
        self.policy = LoadPolicy(settings.load_policy, settings.load_min_gain)
        # req_id -> (monotonic s, chunks) of a promised load, from its
        # decision, then from its prepare_load; None: recomputed
        self._load_started: dict[str, tuple[float, int] | None] = {}
        self._steps: collections.deque[tuple[float, int]] = collections.deque()  # not yet done
        self._loads_timed = 0
        self._recompute_logged_at = float("-inf")
        self._recomputes_unlogged = 0
        # Each stored chunk's depth in its request's chain (compat.chain_depths):
        # KV group -> tokens per chunk (0.34+), and vLLM's connector scheduler
        # (given by CxlkvOffloadingConnector: attach_scheduler).
        self._tokens_per_chunk = dict(tokens_per_chunk or {})
        self._scheduler: Any = None

    # ---- helpers ----
    def _ns(self, key: bytes) -> int:
        return self.namespaces[group_of(key)]

    def _pin(self, key: bytes) -> PinSet | _Unpinned:
        if self._software:
            return _Unpinned(self.region.lookup(self._ns(key), block_key(key)))
        return self.region.pin_prefix(self._ns(key), [block_key(key)])

    def _count(self, name: str, n: float = 1, label: str | None = None) -> None:
        self._counts[(name, label)] += n
        self.totals[(name, label)] += n

    def _region_counters(self) -> dict[str, int]:
        c = self.region.region_counters()
        return {k: c.get(k, 0) for k in ("stores", "evictions", "crc_failures")}

    def _release(self, req_id: str, keys: Iterable[bytes] | None = None) -> None:
        held = self._pins.get(req_id)
        if not held:
            return
        for key in list(held) if keys is None else keys:
            p = held.pop(key, None)
            if p is not None:
                p.pins.release()
        if not held:
            self._pins.pop(req_id, None)

    # ---- OffloadingManager ----
    @property
    def lock(self) -> contextlib.AbstractContextManager[None]:
        """0.33+: none needed, every call already runs on the scheduler thread."""
        return contextlib.nullcontext()

    def on_new_request(self, req_context: Any) -> Any:
        return RequestOffloadingContext()

    @_timed("lookup")
    def lookup(self, key: bytes, req_context: Any) -> Any:  # a LookupResult
        held = self._pins.setdefault(req_context.req_id, {})
        p = held.get(key)
        if p is not None:
            if not p.loading:
                p.deadline = time.monotonic() + self.ttl
            return LookupResult.HIT
        pins = self._pin(key)
        if len(pins) == 0:
            if not held:
                self._pins.pop(req_context.req_id, None)
            return LookupResult.MISS
        held[key] = _Pin(pins, time.monotonic() + self.ttl)
        self._count(metrics.LOOKUP_HITS)
        if key not in self._own:
            self._count(metrics.CROSS_REPLICA_HITS)
        return LookupResult.HIT

    @_timed("prepare_load")
    def prepare_load(self, keys: Iterable[bytes], req_context: Any) -> CxlkvLoadSpec:
        held = self._pins.setdefault(req_context.req_id, {})
        keys = list(keys)
        wanted = set(keys)
        # Lookups beyond what is loaded need no pin any more.
        self._release(req_context.req_id, [k for k in list(held) if k not in wanted])
        held = self._pins.setdefault(req_context.req_id, {})
        # A load's cost is timed from here, where vLLM found GPU blocks for
        # the request and hands its job to the workers, not from the decision:
        # a request that waited steps for room in the GPU cache would charge
        # that wait to the load, and a recompute pays the same wait. Under load
        # (many 32K sessions per engine) such waits of seconds taught the
        # policy that a 127-chunk load costs more than its prefill.
        if self._load_started.get(req_context.req_id) is not None:
            self._load_started[req_context.req_id] = (time.monotonic(), len(keys))
        entries = []
        for key in keys:
            p = held.get(key)
            if p is None:  # not looked up by this request (should not happen): pin now
                pins = self._pin(key)
                p = held[key] = _Pin(pins, None)
                if len(pins) == 0:
                    # Gone already; the worker's load reports it and it is recomputed.
                    logger.warning("cxlkv: request %s: chunk gone before prepare_load",
                                   req_context.req_id)
            p.loading = True
            p.deadline = None
            k = block_key(key)
            entries.append((self._ns(key), k.hi, k.lo))
        self._count(metrics.LOADS, len(entries))
        return CxlkvLoadSpec(entries)

    @_timed("complete_load")
    def complete_load(self, keys: Iterable[bytes], req_context: Any) -> None:
        # Still pinned here, so a chunk that left the region since
        # prepare_load was dropped by a reader's failed check (LoadPart drops
        # a slot whose CRC fails), or was gone already: the worker reported
        # its blocks and vLLM recomputes them. Counted as fallbacks.
        keys = list(keys)
        held = self._pins.get(req_context.req_id, {})
        fell_back = False
        for key in keys:
            p = held.get(key)
            if p is None:
                continue
            if len(p.pins) == 0:
                self._count(metrics.LOAD_FALLBACKS, label="missing")
                fell_back = True
            elif not self.region.lookup(self._ns(key), block_key(key)):
                self._count(metrics.LOAD_FALLBACKS, label="crc")
                fell_back = True
        self._release(req_context.req_id, keys)
        started = self._load_started.pop(req_context.req_id, None)
        if started is not None and not fell_back:  # what a load costs, seen from here
            # A process's first load also pays its one-time costs (the worker's
            # first kernel launches): not what the next load will cost.
            if self._loads_timed:
                self.policy.observe_load(len(keys), time.monotonic() - started[0])
            self._loads_timed += 1

    # ---- load or recompute (policy.py; called by CxlkvOffloadingConnector) ----
    def decide_load(self, req_id: str, hit_tokens: int) -> bool:
        """After the lookups of a request found `hit_tokens` in the region:
        True to load them, False to recompute them (its pins are let go)."""
        held = self._pins.get(req_id, {})
        chunks = max(1, len(held))
        load, _why, load_s, recompute_s = self.policy.decide(hit_tokens, chunks)
        if req_id not in self._load_started:  # vLLM may ask again (no room yet): count once
            self._count(metrics.LOAD_DECISIONS, label="load" if load else "recompute")
        if load:
            if self._load_started.get(req_id) is None:
                self._load_started[req_id] = (time.monotonic(), chunks)
        else:
            self._load_started[req_id] = None  # decided; nothing to time
            self._release(req_id)
            self._log_recompute(req_id, hit_tokens, chunks, load_s, recompute_s)
        return load

    def _log_recompute(self, req_id: str, hit_tokens: int, chunks: int, load_s: float | None,
                       recompute_s: float | None) -> None:
        # A hit found and then recomputed costs a prefill: say why, with the
        # measurements the policy used. At most one line per RECOMPUTE_LOG_S
        # (short hits may recompute on every request); the others are counted
        # into the next line.
        now = time.monotonic()
        if now - self._recompute_logged_at < RECOMPUTE_LOG_S:
            self._recomputes_unlogged += 1
            return
        logger.info("cxlkv: request %s: recomputing a hit of %d tokens in %d chunks (predicted: "
                    "load %.1f ms, recompute %.1f ms; %s); %d other recomputes since the last "
                    "such line", req_id, hit_tokens, chunks, (load_s or 0) * 1e3,
                    (recompute_s or 0) * 1e3, self.policy.describe(), self._recomputes_unlogged)
        self._recompute_logged_at = now
        self._recomputes_unlogged = 0

    def attach_scheduler(self, scheduler: Any) -> None:
        """vLLM's OffloadingConnectorScheduler that drives this manager: its
        per-request state gives each stored chunk's depth before 0.34."""
        self._scheduler = scheduler

    def step_scheduled(self, tokens: int) -> None:
        self._steps.append((time.monotonic(), int(tokens)))

    def step_done(self) -> None:
        while len(self._steps) > 2:  # an output that never came: pair with the newest again
            self._steps.popleft()
        if self._steps:
            t0, tokens = self._steps.popleft()
            if tokens > 0:
                self.policy.observe_step(tokens, time.monotonic() - t0)

    if compat.manager_touch():  # 0.26-0.33 (0.34 dropped it)
        def touch(self, keys: Iterable[bytes], req_context: Any) -> None:
            return  # recency comes from lookups (the region's CLOCK bit)

    @_timed("prepare_store")
    def prepare_store(self, keys: Iterable[bytes], req_context: Any) -> Any:
        to_store: list[bytes] = []
        tokens: list[_cxlkv.WriteToken] = []
        ids: list[tuple[int, int, int]] = []
        full = False
        depth = compat.chain_depths(req_context, self._scheduler, self._tokens_per_chunk,
                                    group_of)
        for key in keys:
            if key in self._leases:
                continue  # this replica is already storing it
            try:
                w = _cxlkv.begin_write(self.region, self._ns(key), block_key(key),
                                       self.payload_len, depth(key))
            except BusyError as e:
                # This replica was judged dead (paused past the liveness
                # timeout) and reclaimed: it may not write until it reattaches.
                self._count(metrics.STORE_FAILURES, label="fenced")
                logger.warning("cxlkv: not storing: %s", e)
                full = True
                break
            if w.open:
                self._leases[key] = w
                to_store.append(key)
                if self._kv_events:
                    self._shared_events.keep_announced(key)
                token = _cxlkv.export_write_token(self.region, w)
                tokens.append(token)
                self._lease_slot[key] = token[1]
                k = block_key(key)
                ids.append((self._ns(key), k.hi, k.lo))
                continue
            outcome = w.outcome
            if outcome == _cxlkv.StoreOutcome.FULL:
                self._count(metrics.STORE_FAILURES, label="full")
                full = True
                break
            if outcome == _cxlkv.StoreOutcome.LOST_RACE:
                self._count(metrics.STORE_FAILURES, label="lost_race")
            # DUPLICATE: already in the region (stored by anyone): nothing to do.
        if not to_store and full:
            return None
        return PrepareStoreOutput(keys_to_store=to_store,
                                  store_spec=CxlkvStoreSpec(tokens, self.parts, self.part_len,
                                                            ids),
                                  evicted_keys=[])

    @_timed("complete_store")
    def complete_store(self, keys: Iterable[bytes], req_context: Any,
                       success: bool = True) -> None:
        for key in keys:
            w = self._leases.pop(key, None)
            slot = self._lease_slot.pop(key, None)
            if w is None:
                continue
            if not success:
                _cxlkv.abort_write(self.region, w)
                self._count(metrics.STORE_FAILURES, label="failed")
                self._shared_events.store_lost(key)
                continue
            try:
                _cxlkv.commit_parted_write(self.region, w, self.parts, self.part_len)
            except CorruptionError as e:
                self._count(metrics.STORE_FAILURES, label="incomplete")
                logger.warning("cxlkv: chunk not stored: %s", e)
                self._shared_events.store_lost(key)
                continue
            except (BusyError, NotFoundError) as e:  # this replica was judged dead meanwhile
                self._count(metrics.STORE_FAILURES, label="fenced")
                logger.warning("cxlkv: chunk not stored: %s", e)
                self._shared_events.store_lost(key)
                continue
            self._count(metrics.STORES)
            if self._kv_events:
                self._shared_events.announce(key, slot)
            self._own[key] = None
            if len(self._own) > _OWN_KEYS_CAP:
                self._own.popitem(last=False)

    def on_request_finished(self, req_context: Any) -> None:
        self._load_started.pop(req_context.req_id, None)
        held = self._pins.get(req_context.req_id)
        if held:
            # Loading pins stay until complete_load (the job may still run).
            self._release(req_context.req_id, [k for k, p in held.items() if not p.loading])

    def on_schedule_end(self, context: Any) -> None:
        now = time.monotonic()
        for req_id, held in list(self._pins.items()):
            stale = [k for k, p in held.items() if p.deadline is not None and p.deadline < now]
            if stale:
                self._count(metrics.PIN_EXPIRIES, len(stale))
                self._release(req_id, stale)

    def has_pending_work(self) -> bool:
        return False

    def take_events(self) -> Iterable[Any]:
        if not self._kv_events:
            return ()
        return self._shared_events.take()

    def reset_cache(self) -> None:
        """The region is shared with other replicas: a local reset drops only
        what this replica holds (pins, reservations), never others' blocks.

        vLLM discards the jobs in flight at a reset (0.32 and 0.33,
        ``offloading/scheduler.py`` ``_reset_cache``: their completions are
        skipped as stale), so complete_store/complete_load never come for
        them: their reservations are closed here, not left WRITING (a stuck
        key, skipped by this replica's prepare_store for good). The workers
        may still be copying those jobs until they report them flushed; 0.33
        says when (``on_reset_flushed``), so there the reservations and the
        pins of loads in flight are kept until then. 0.32 has no such call:
        they are closed now, and a worker's late fill is refused or never
        served (cxlkv/delegate.h: the part table's word and the CRC).
        """
        fenced = compat.reset_is_fenced()
        for key, w in list(self._leases.items()):
            if fenced:
                self._flushing_leases.append(w)
            else:
                _cxlkv.abort_write(self.region, w)
            self._shared_events.store_lost(key)
        self._leases.clear()
        self._lease_slot.clear()
        for req_id, held in list(self._pins.items()):
            if fenced:
                self._flushing_pins += [p.pins for p in held.values() if p.loading]
                for p in held.values():
                    if not p.loading:
                        p.pins.release()
            else:
                for p in held.values():
                    p.pins.release()
        self._pins.clear()

    def on_reset_flushed(self) -> None:  # 0.33
        """The workers reported every job of the last reset: nothing copies
        into or out of those slots any more."""
        for w in self._flushing_leases:
            _cxlkv.abort_write(self.region, w)
        self._flushing_leases = []
        for pins in self._flushing_pins:
            pins.release()
        self._flushing_pins = []

    @_timed("get_stats")
    def get_stats(self) -> Any:  # OffloadingConnectorStats
        st = compat.stats()
        for (name, label), n in self._counts.items():
            st.increase_counter(name, n, () if label is None else (label,))
        self._counts.clear()
        now = self._region_counters()
        st.increase_counter(metrics.EVICTIONS, now["evictions"] - self._region_base["evictions"])
        st.increase_counter(metrics.CRC_FAILURES,
                            now["crc_failures"] - self._region_base["crc_failures"])
        self._region_base = now
        held = now["stores"] - now["evictions"] - now["crc_failures"]
        st.set_gauge(metrics.REGION_FILL, max(0.0, min(1.0, held / max(1, self._num_slots))))
        st.set_gauge(metrics.REGION_SLOTS, self._num_slots)
        return st

    def config_info(self) -> list[dict[str, Any]]:  # 0.33
        i = self.region.info()
        return [{"region": self.region_label, "slot_size": int(i.slot_size),
                 "num_slots": int(i.num_slots), "parts": int(self.parts)}]

    def shutdown(self) -> None:
        self.on_reset_flushed()  # vLLM is stopping: its workers with it
        for w in self._leases.values():
            _cxlkv.abort_write(self.region, w)
        self._leases.clear()
        self._lease_slot.clear()
        for req_id in list(self._pins):
            self._release(req_id)
        if self._claim is not None:
            self._claim.release()

    # For tests and tools.
    def pinned(self) -> int:
        return sum(len(h) for h in self._pins.values()) + len(self._flushing_pins)


class CxlkvLoadSpec(LoadStoreSpec):
    """Where a load job's chunks are: (namespace id, key hi, key lo) each, in
    the order of the GPU blocks (by group, then chunk). Picklable."""

    def __init__(self, entries: list[tuple[int, int, int]]) -> None:
        self.entries = entries

    def __repr__(self) -> str:
        return f"CxlkvLoadSpec({len(self.entries)} chunks)"


class CxlkvStoreSpec(LoadStoreSpec):
    """Reservations of a store job: one write token per chunk, in the order of
    the GPU blocks, the parted layout the workers fill, and (for logs and
    tests) each chunk's (namespace id, key hi, key lo). Picklable."""

    def __init__(self, tokens: list[_cxlkv.WriteToken], parts: int, part_len: int,
                 keys: Iterable[tuple[int, int, int]] = ()) -> None:
        self.tokens = tokens
        self.parts = parts
        self.part_len = part_len
        self.keys = list(keys)

    def __repr__(self) -> str:
        return f"CxlkvStoreSpec({len(self.tokens)} chunks)"

