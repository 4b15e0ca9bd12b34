// Copyright cxlkv authors.
//
// The in-region directory: a set-associative table with two candidate sets
// per key ("two choices" keeps sets evenly filled, so a region sized for N
// blocks holds N blocks without conflict misses). Each set has a tag line
// (one cache line of 16 fingerprints) so a lookup touches two cache lines on
// a miss and three on a hit. Layout 5: an entry names the data slot its
// block lives in (one more dependent load on a hit, data.cc), so the index
// is not where the bytes are, and eviction is free to take any block.
#include <time.h>

#include <chrono>
#include <thread>

#include "cpu.h"
#include "failpoint.h"
#include "region_impl.h"

namespace cxlkv::internal {

uint64_t Mix64(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

namespace {

inline uint64_t Reduce(uint64_t h, uint64_t n) {  // uniform h -> [0, n)
  return static_cast<uint64_t>((static_cast<unsigned __int128>(h) * n) >> 64);
}

}  // namespace

KeyPlace RegionImpl::Place(NamespaceId ns, const BlockKey& key) const {
  // Keys are hashes already, but mix anyway: trace ids and test keys are not.
  const uint64_t a = Mix64(key.lo ^ (uint64_t(ns) * 0x9E3779B97F4A7C15ull));
  const uint64_t b = Mix64(key.hi + a);
  KeyPlace p;
  p.set[0] = Reduce(a, geo_.num_sets);
  p.set[1] = Reduce(b, geo_.num_sets);
  p.tag = static_cast<uint32_t>(b >> 32) | 1u;  // never 0 (0 = empty way)
  return p;
}

bool RegionImpl::KeyMatches(uint64_t slot, NamespaceId ns, const BlockKey& key) const {
  const SlotMeta& m = meta_[slot];
  return m.key_lo.load(std::memory_order_relaxed) == key.lo &&
         m.key_hi.load(std::memory_order_relaxed) == key.hi &&
         m.ns.load(std::memory_order_relaxed) == ns;
}

int64_t RegionImpl::Find(NamespaceId ns, const BlockKey& key, const KeyPlace& place, uint64_t* word,
                         bool readable_only) const {
  const int nsets = place.set[0] == place.set[1] ? 1 : 2;
  for (int k = 0; k < nsets; ++k) {
    const uint64_t set = place.set[k];
    const SetTags& t = tags_[set];
    for (uint32_t way = 0; way < geo_.ways; ++way) {
      if (t.tag[way].load(std::memory_order_relaxed) != place.tag) continue;
      const uint64_t slot = set * geo_.ways + way;
      std::atomic<uint64_t>& st = meta_[slot].state;
      const uint64_t w = st.load(std::memory_order_acquire);
      const uint8_t s = WordState(w);
      // EVICTING keeps key, bytes and generation: the block is still there
      // (an eviction attempt restores READY when it finds a pin).
      if (s == kReady || s == kEvicting || (!readable_only && s == kWriting)) {
        if (!KeyMatches(slot, ns, key)) continue;
        // The key fields are only meaningful if the state did not change
        // while we read them (a writer reusing the slot bumps the word).
        std::atomic_thread_fence(std::memory_order_acquire);
        if (st.load(std::memory_order_relaxed) != w) continue;
        *word = w;
        return static_cast<int64_t>(slot);
      }
    }
  }
  return -1;
}

int64_t RegionImpl::FindReadySlot(NamespaceId ns, const BlockKey& key) const {
  if (soft_) {
    SwMeta m;
    return SwFind(ns, key, true, -1, &m);
  }
  uint64_t w;
  return Find(ns, key, Place(ns, key), &w, true);
}

std::vector<uint64_t> RegionImpl::CandidateSlots(NamespaceId ns, const BlockKey& key) const {
  uint64_t set[2];
  if (soft_) {
    // Layout 6: a store may evict any block of our partition.
    (void)ns;
    (void)key;
    if (self_ < 0) return {};
    std::vector<uint64_t> all(part_sets_ * geo_.ways);
    for (uint64_t i = 0; i < all.size(); ++i) all[i] = uint64_t(self_index()) * all.size() + i;
    return all;
  } else {
    const KeyPlace p = Place(ns, key);
    set[0] = p.set[0];
    set[1] = p.set[1];
  }
  std::vector<uint64_t> out;
  for (int k = 0; k < (set[0] == set[1] ? 1 : 2); ++k) {
    for (uint32_t w = 0; w < geo_.ways; ++w) out.push_back(set[k] * geo_.ways + w);
  }
  return out;
}

void RegionImpl::Touch(uint64_t slot, uint64_t word, uint32_t now) const {
  // Recency for eviction (ClaimSlot pass 2). Written at most once per
  // kTouchGranularityMs per slot, and the use count at most kMaxUses times
  // per block, so readers of a hot block do not bounce its line on every
  // lookup. Plain stores, no CAS: concurrent readers may lose a count, and
  // a reader that lost the race with the slot's reuse may store the old
  // block's count, which the generation bits then reject (a hint).
  SlotMeta& m = meta_[slot];
  std::atomic<uint32_t>& t = m.last_use;
  // Signed: `now` may be a chain's tick older than the last use (StoreTick);
  // recency only moves forward.
  if (static_cast<int32_t>(now - t.load(std::memory_order_relaxed)) >=
      static_cast<int32_t>(kTouchGranularityMs)) {
    t.store(now, std::memory_order_relaxed);
  }
  const uint32_t uses = UnpackDepth(m.uses.load(std::memory_order_relaxed), word);
  if (uses < kMaxUses) m.uses.store(PackDepth(uses + 1, WordGen(word)), std::memory_order_relaxed);
}

uint32_t RecencyTick() {
  // CLOCK_REALTIME because it is the one clock the hosts sharing a region
  // roughly agree on (NTP: milliseconds); a skew only reorders blocks used
  // within it. COARSE: a vDSO read of the last tick, no syscall (lookup's
  // contract) and a few nanoseconds. Milliseconds in 32 bits wrap every 49
  // days; ages are differences modulo 2^32, right for any age below that.
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  // The real reading outside test builds (EvictionClock: a test's skew and hold).
  return EvictionClock(kRecencyClock,
                       static_cast<uint32_t>(static_cast<uint64_t>(ts.tv_sec) * 1000u +
                                             static_cast<uint64_t>(ts.tv_nsec) / 1000000u));
}

// ---- pins ----
//
// A pin is bit `self` in the slot's pin words. Pinning and evicting follow
// Dekker's pattern: the reader sets its bit then re-reads the state word;
// the evictor moves the state to EVICTING then reads the pin words; both
// sequentially consistent, so at least one of them sees the other.
bool RegionImpl::PinSlot(uint64_t slot, uint64_t word) {
  const uint64_t bit = 1ull << (self_index() % 64);
  std::atomic<uint64_t>& pw = PinWords(slot)[self_index() / 64];
  const int stripe = static_cast<int>(slot % kPinStripes);
  std::lock_guard<std::mutex> l(pin_mu_[stripe]);
  uint32_t& count = pin_counts_[stripe][slot];
  if (count > 0) {
    // Already pinned by this process: no eviction can complete, so the
    // block is ours as long as the generation holds (an evictor may be
    // between its CAS and seeing our bit: EVICTING is fine).
    if (!SameReadableBlock(word, meta_[slot].state.load(std::memory_order_seq_cst))) return false;
    ++count;
    return true;
  }
  CXLKV_FAILPOINT_HIT("pin.before_pin");
  const uint64_t before = pw.fetch_or(bit, std::memory_order_seq_cst);
  CXLKV_FAILPOINT_HIT("pin.after_pin");
  // Judged dead before our bit landed? Then our reclaimer's sweep may have
  // passed this slot already and nobody would clear the bit: take it back
  // if we set it. (seq_cst with the reclaimer's registry CAS and pin sweep.
  // If the entry's next owner set the same bit in the instant between our
  // fetch_or and fetch_and, its pin is lost: its read then fails the
  // generation check, a miss.)
  if (!StillRegistered()) {
    if (!(before & bit)) pw.fetch_and(~bit, std::memory_order_seq_cst);
    pin_counts_[stripe].erase(slot);
    return false;
  }
  // READY with the same generation: pinned. EVICTING: an evictor is between
  // its CAS and its pin check and may not have seen our bit; wait for its
  // verdict (it restores READY, or moves on to WRITING) while it is a live
  // participant, for at most kEvictWait. A word naming no live evictor
  // (damaged, or its owner died) is a miss now; reclaim restores it later.
  constexpr auto kEvictWait = std::chrono::milliseconds(200);
  const auto deadline = std::chrono::steady_clock::now() + kEvictWait;
  bool ok = false;
  for (int spin = 0;; ++spin) {
    const uint64_t cur = meta_[slot].state.load(std::memory_order_seq_cst);
    if (WordGen(cur) != WordGen(word)) break;
    if (WordState(cur) == kReady) {
      ok = true;
      break;
    }
    if (WordState(cur) != kEvicting) break;
    if (!ParticipantActive(WordOwner(cur))) break;
    if (spin < 256) {
      CpuRelax();
    } else {
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::yield();
    }
  }
  if (!ok) {
    pw.fetch_and(~bit, std::memory_order_release);
    pin_counts_[stripe].erase(slot);
    return false;
  }
  ++count;
  return true;
}

void RegionImpl::UnpinSlot(uint64_t slot) {
  const uint64_t bit = 1ull << (self_index() % 64);
  std::atomic<uint64_t>& pw = PinWords(slot)[self_index() / 64];
  const int stripe = static_cast<int>(slot % kPinStripes);
  std::lock_guard<std::mutex> l(pin_mu_[stripe]);
  auto it = pin_counts_[stripe].find(slot);
  if (it == pin_counts_[stripe].end()) return;
  if (--it->second == 0) {
    pin_counts_[stripe].erase(it);
    // Once reclaimed, our bit was cleared by the reclaimer and may now be
    // the pin of the entry's next owner: leave it alone.
    if (StillRegistered()) pw.fetch_and(~bit, std::memory_order_release);
  }
}

void RegionImpl::ClearStrayOwnPin(uint64_t slot) {
  const uint64_t bit = 1ull << (self_index() % 64);
  std::atomic<uint64_t>& pw = PinWords(slot)[self_index() / 64];
  if ((pw.load(std::memory_order_relaxed) & bit) == 0) return;
  // Our bit changes only under the stripe's lock (PinSlot, UnpinSlot), with
  // our pin count: set with no count is no pin of ours. Never wait (a
  // PinSlot may hold the lock while it waits on an evictor, and this runs
  // on the heartbeat thread): a busy stripe is looked at next pass.
  const int stripe = static_cast<int>(slot % kPinStripes);
  std::unique_lock<std::mutex> l(pin_mu_[stripe], std::try_to_lock);
  if (!l.owns_lock() || pin_counts_[stripe].count(slot) != 0) return;
  // Once reclaimed, the bit may be the index's next owner's (as UnpinSlot).
  if (!StillRegistered()) return;
  if (pw.fetch_and(~bit, std::memory_order_acq_rel) & bit) Count(Counter::kReleasedPins);
}

void RegionImpl::UnpinSlots(const std::vector<uint64_t>& slots) {
  if (self_ < 0) return;
  for (uint64_t s : slots) UnpinSlot(s);
}

bool RegionImpl::SlotPinned(uint64_t slot) const {
  const std::atomic<uint64_t>* pw = PinWords(slot);
  for (uint32_t k = 0; k < geo_.pin_words; ++k) {
    if (pw[k].load(std::memory_order_seq_cst) != 0) return true;
  }
  return false;
}

bool RegionImpl::TakeReadySlot(uint64_t slot, uint64_t word) {
  // Only a READY word. An EVICTING one (Drop's Find returns those: they are
  // still readable) is another evictor's, between its take and its pin
  // check: taken from it, its restore on a pin would fail, and ours would
  // put back its EVICTING word after it moved on, leaving the block
  // EVICTING under a live participant that no longer owns it (Spin's
  // l5-drop-evicting, docs/model.md).
  if (WordState(word) != kReady) return false;
  std::atomic<uint64_t>& st = meta_[slot].state;
  const uint64_t evicting = PackWord(WordGen(word), OwnerId(), kEvicting);
  uint64_t expected = word;
  if (!st.compare_exchange_strong(expected, evicting, std::memory_order_seq_cst)) return false;
  CXLKV_FAILPOINT_HIT("evict.after_take");
  if (SlotPinned(slot)) {
    // Restore the exact READY word (writer and generation unchanged).
    expected = evicting;
    st.compare_exchange_strong(expected, word, std::memory_order_seq_cst);
    return false;
  }
  return true;
}

uint32_t RegionImpl::SlotTag(uint64_t slot) const {
  return tags_[slot / geo_.ways].tag[slot % geo_.ways].load(std::memory_order_relaxed);
}

void RegionImpl::ClearTag(uint64_t slot, uint32_t tag) {
  uint32_t expected = tag;
  tags_[slot / geo_.ways].tag[slot % geo_.ways].compare_exchange_strong(expected, 0,
                                                                        std::memory_order_relaxed);
}

void RegionImpl::RepairTag(uint64_t slot, uint64_t word, uint32_t tag) {
  // Read the tag, then confirm the slot still holds the block: a new owner
  // CASes the state before it writes its own tag, so if the state is
  // unchanged after our read, a tag it writes later differs from `seen`
  // (tags are never 0) and our CAS fails, or lands first and is overwritten.
  std::atomic<uint32_t>& t = tags_[slot / geo_.ways].tag[slot % geo_.ways];
  uint32_t seen = t.load(std::memory_order_acquire);
  if (seen == tag) return;
  if (meta_[slot].state.load(std::memory_order_seq_cst) != word) return;
  t.compare_exchange_strong(seen, tag, std::memory_order_relaxed);
}

bool RegionImpl::RestoreEvictedBlock(uint64_t slot, uint64_t evicting) {
  // READY with its generation and the writer the slot recorded: the
  // EVICTING word names the evictor, not the writer.
  uint32_t writer = meta_[slot].writer.load(std::memory_order_relaxed);
  if (writer >= geo_.max_participants) writer = static_cast<uint32_t>(kOwnerMask);
  uint64_t expected = evicting;
  return meta_[slot].state.compare_exchange_strong(
      expected, PackWord(WordGen(evicting), writer, kReady), std::memory_order_acq_rel);
}

bool RegionImpl::ForceDropSlot(uint64_t slot, uint64_t word) {
  // Corrupt bytes fail every reader alike, so pins (which protect good
  // blocks from eviction) do not hold a corrupt one. Pinners that copy it
  // concurrently see the generation change and miss; their pin bits only
  // delay the next eviction of the reused slot until they unpin.
  // `word` is the one the reader found, which may be an evictor's EVICTING
  // word that has since been restored READY (the reader's pin made the
  // evictor give up): take the block as its word is now, if it is still the
  // block that failed (same generation, readable).
  const uint64_t now = meta_[slot].state.load(std::memory_order_seq_cst);
  if (!SameReadableBlock(word, now)) return false;
  return TakeAndFreeSlot(slot, now);
}

bool RegionImpl::TakeAndFreeSlot(uint64_t slot, uint64_t word) {
  // Tags are cleared only by an owner, so first own the slot: a writer that
  // re-stores the key meanwhile claims the slot after we freed it, and its
  // tag can never be cleared by us.
  const uint64_t mine = PackWord(WordGen(word) + 1, OwnerId(), kWriting);
  uint64_t expected = word;
  if (!meta_[slot].state.compare_exchange_strong(expected, mine, std::memory_order_seq_cst)) {
    return false;
  }
  // Layout 5: a READY entry's data slot goes with it: its index read while
  // the entry is ours, its word freed after the entry, and only if it still
  // names the lease we took (READY at its generation: that lease is over
  // now, whoever frees its word). Any other entry's index may be a previous
  // block's; a dead writer's MOVING word is its lease's, and the orphan rule
  // frees it (SettleOrphanedData).
  const int64_t d = geo_.decoupled && WordState(word) == kReady ? EntryDataSlot(slot) : -1;
  const bool freed = ReleaseOwnedSlot(slot, mine);
  if (d >= 0) FreeLeaseData(static_cast<uint64_t>(d), slot, WordGen(word));
  return freed;
}

bool RegionImpl::ReleaseOwnedSlot(uint64_t slot, uint64_t owned_word) {
  // Check ownership before touching the tag: a writer that was reclaimed
  // while paused must not clear the tag of the slot's next owner. (Paused
  // between this check and the clear, it can still clear a tag equal to
  // the one it read, i.e. the same key's: the next store of that key finds
  // the untagged READY copy and repairs it.)
  const uint32_t tag = SlotTag(slot);
  if (!Owns(slot, owned_word)) return false;
  ClearTag(slot, tag);
  uint64_t expected = owned_word;
  return meta_[slot].state.compare_exchange_strong(
      expected, PackWord(WordGen(owned_word), 0, kFree), std::memory_order_acq_rel);
}

// ---- lookups ----

Status RegionImpl::Lookup(NamespaceId ns, const BlockKey& key) {
  Count(Counter::kLookups);
  if (soft_) {
    SwMeta m;
    const int64_t slot = SwFind(ns, key, true, -1, &m);
    if (slot < 0) return Status::NotFound("block not in region");
    SwTouch(static_cast<uint64_t>(slot), m.data, m.state);
    return Status::OK();
  }
  uint64_t w;
  const int64_t slot = Find(ns, key, Place(ns, key), &w, true);
  if (slot < 0) return Status::NotFound("block not in region");
  Touch(static_cast<uint64_t>(slot), w, RecencyTick());
  return Status::OK();
}

size_t RegionImpl::LookupPrefix(NamespaceId ns, const BlockKey* keys, size_t n) {
  if (soft_) {
    size_t hits = 0;
    SwMeta m;
    for (int64_t slot; hits < n && (slot = SwFind(ns, keys[hits], true, -1, &m)) >= 0; ++hits) {
      SwTouch(static_cast<uint64_t>(slot), m.data, m.state);
    }
    Count(Counter::kLookups, hits < n ? hits + 1 : n);
    return hits;
  }
  // Prefetch the tag lines of the next key while checking this one.
  size_t hits = 0;
  const uint32_t now = RecencyTick();  // one tick for the chain (Touch)
  KeyPlace next = n ? Place(ns, keys[0]) : KeyPlace{};
  for (size_t i = 0; i < n; ++i) {
    const KeyPlace cur = next;
    if (i + 1 < n) {
      next = Place(ns, keys[i + 1]);
      PrefetchForRead(&tags_[next.set[0]]);
      PrefetchForRead(&tags_[next.set[1]]);
    }
    uint64_t w;
    const int64_t slot = Find(ns, keys[i], cur, &w, true);
    if (slot < 0) break;
    Touch(static_cast<uint64_t>(slot), w, now);
    ++hits;
  }
  Count(Counter::kLookups, hits < n ? hits + 1 : n);
  return hits;
}

Status RegionImpl::PinPrefix(NamespaceId ns, const BlockKey* keys, size_t n, PinSet* pins) {
  if (soft_) {
    return Status::Unsupported("region " + info_.path +
                               ": pins need cross-host atomics, which coherence=software does not "
                               "use (docs/coherence.md); loads validate by generation instead");
  }
  CXLKV_RETURN_IF_ERROR(CheckWritable());
  std::vector<uint64_t> slots;
  slots.reserve(n);
  const uint32_t now = RecencyTick();  // one tick for the chain (Touch)
  for (size_t i = 0; i < n; ++i) {
    uint64_t w;
    const int64_t slot = Find(ns, keys[i], Place(ns, keys[i]), &w, true);
    if (slot < 0 || !PinSlot(static_cast<uint64_t>(slot), w)) break;
    Touch(static_cast<uint64_t>(slot), w, now);
    slots.push_back(static_cast<uint64_t>(slot));
  }
  Count(Counter::kLookups, slots.size() < n ? slots.size() + 1 : n);
  pins->Release();
  RegionInternal::InitPinSet(pins, this, std::move(slots));
  return Status::OK();
}

Status RegionImpl::CheckWritable() const {
  // A region file truncated under us: the SIGBUS guard replaced the mapping
  // with zeros (mapping.h); report that, not a fenced participant.
  if (map_->lost()) return map_->LostStatus();
  if (self_ < 0) {
    return Status::InvalidArgument("region " + info_.path +
                                   " was opened as an observer (register_participant=false)");
  }
  if (!StillRegistered()) {
    const_cast<RegionImpl*>(this)->Fence();
    return Status::Busy("region " + info_.path +
                        ": this participant was judged dead and reclaimed (paused longer than "
                        "the liveness timeout?); reopen the region");
  }
  return Status::OK();
}

}  // namespace cxlkv::internal
