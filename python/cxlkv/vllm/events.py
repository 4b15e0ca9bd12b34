"""KV events of the shared tier: SharedTierEvents, owned by CxlkvManager.

A replica's manager does not see evictions made by other replicas, so it
cannot keep a private index of "what I stored". Instead every chunk is
announced once, by the replica that committed it (BlockStored), and that
replica withdraws it (BlockRemoved) when it is no longer in the region,
whoever evicted or dropped it: take() tails the directory entries of the
slots it announced (slot, generation and key as read from the region), a
bounded batch per step. The fleet's events therefore describe each chunk of
the shared tier once and never claim one that is gone for longer than the
tail takes to come round (ceil(announced / TAIL_BATCH) steps).

A chunk that this replica announced, lost (evicted by anyone) and is storing
again stays announced across that store: prepare_store moves it to the new
reservation without a withdrawal (keep_announced), and the commit announces
nothing new (a failed store withdraws it: store_lost). Withdrawing in between
would reach vLLM's events tracker after it snapshotted the new store's
payload (record_store runs right after prepare_store, take_events at the end
of that step) and drop that payload, so the re-announcement would go out
without the self-describing fields; and an indexer that counts announcements
must not see it twice.

All methods run on vLLM's scheduler thread, as the manager's do.
"""
from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

from .. import BlockKey, Region, _cxlkv
from . import compat
from .keys import block_key

TAIL_BATCH = 256  # announced slots re-read per take() call


class SharedTierEvents:
    """The chunks this replica announced and the events not yet taken.

    ``ns_of`` maps an OffloadKey to the namespace id its chunk is stored under.
    """

    def __init__(self, region: Region, ns_of: Callable[[bytes], int]) -> None:
        self.region = region
        self._ns_of = ns_of
        # slot -> (generation, ns, BlockKey, OffloadKey) of the chunk announced there
        self.announced: dict[int, tuple[int, int, BlockKey, bytes]] = {}
        self._announced_slot: dict[bytes, int] = {}        # OffloadKey -> slot
        self._tail: collections.deque[int] = collections.deque()  # announced slots, tail order
        self._events: list[tuple[bool, bytes]] = []        # (removed, OffloadKey), oldest first
        self._restoring: set[bytes] = set()  # announced keys being stored again (module doc)

    def take(self) -> Sequence[Any]:
        """Re-reads up to TAIL_BATCH announced slots (withdrawing what is gone),
        then returns the pending events as vLLM OffloadingEvents, one per run of
        announcements or withdrawals, in order; () when there are none."""
        for _ in range(min(TAIL_BATCH, len(self._tail))):
            slot = self._tail.popleft()
            if slot in self.announced and self._still_there(slot):
                self._tail.append(slot)
        if not self._events:
            return ()
        out: list[Any] = []
        run: list[tuple[bool, bytes]] = []
        for removed, key in self._events:  # keep the order; one event per run
            if run and run[0][0] != removed:
                out.append(compat.offloading_event([k for _, k in run], run[0][0]))
                run = []
            run.append((removed, key))
        out.append(compat.offloading_event([k for _, k in run], run[0][0]))
        self._events = []
        return out

    def keep_announced(self, key: bytes) -> None:
        """prepare_store reserved `key`, so no copy of it is in the region: if
        this replica announced one, it stays announced across this store
        (module doc) instead of being withdrawn now."""
        old = self._announced_slot.pop(key, None)
        if old is None:
            return
        entry = self.announced.get(old)
        if entry is not None and entry[3] == key:
            del self.announced[old]  # its tail entry drops out when it comes round
        self._restoring.add(key)

    def store_lost(self, key: bytes) -> None:
        """A store did not commit: withdraw the key if it was kept announced."""
        if key in self._restoring:
            self._restoring.discard(key)
            self._events.append((True, key))

    def announce(self, key: bytes, slot: int | None) -> None:
        """The store of `key` into `slot` committed: announce it (unless it was
        kept announced), if the region still holds it there."""
        again = key in self._restoring  # still announced from its earlier copy
        self._restoring.discard(key)
        old = self._announced_slot.get(key)
        if old is not None:
            self._still_there(old)  # a re-store after eviction: withdraw first
        if slot is None:  # no reservation recorded (cannot happen): announce nothing
            if again:
                self._events.append((True, key))
            return
        state, generation, ns, bkey = self._view(slot)
        if state != "ready" or ns != self._ns_of(key) or bkey != block_key(key):
            if again:  # evicted again already: withdrawn
                self._events.append((True, key))
            return  # else never announced
        prev = self.announced.get(slot)
        if prev is not None:  # our earlier chunk in this slot is gone
            self._withdraw(slot)
        self.announced[slot] = (generation, ns, bkey, key)
        self._announced_slot[key] = slot
        self._tail.append(slot)
        if not again:
            self._events.append((False, key))

    def _view(self, slot: int) -> tuple[str, int, int, BlockKey]:
        (v,) = _cxlkv.scan_slots(self.region, slot, 1)
        _slot, state, generation, _owner, ns, _len, key, _depth, _data = v
        return state, generation, ns, key

    def _still_there(self, slot: int) -> bool:
        """True if the chunk announced in `slot` is still there; else withdraws it."""
        generation, ns, bkey, _key = self.announced[slot]
        state, g, n, k = self._view(slot)
        if state == "ready" and g == generation and n == ns and k == bkey:
            return True
        self._withdraw(slot)
        return False

    def _withdraw(self, slot: int) -> None:
        _g, _ns, _k, key = self.announced.pop(slot)
        if self._announced_slot.get(key) == slot:
            del self._announced_slot[key]
        self._events.append((True, key))
