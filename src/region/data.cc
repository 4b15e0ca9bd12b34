// Copyright cxlkv authors.
//
// Layout 5's data slots: an index entry names the data slot its block lives
// in, and one word per data slot names the lease holding it: the entry and
// its generation (layout.h, DataState). The
// directory stays where lookups find it (a key's two index sets), while the
// bytes may be anywhere: eviction can take the region's least recently used
// block instead of one of the 32 a key may live beside (issue 24).
//
// Who may write a data slot's bytes: only the holder of the entry lease its
// MOVING word names, while it holds that entry WRITING. Readers never look at data words: they
// pin the entry, follow SlotMeta::data, copy, and recheck the entry's word;
// an entry's data slot only moves after the entry left READY unpinned, so
// an unchanged READY word after the copy means the bytes were not moved.
#include <algorithm>
#include <unordered_map>

#include "failpoint.h"
#include "region_impl.h"

namespace cxlkv::internal {
namespace {

// Data words one ClaimDataSlot looks at once a whole scan found none FREE (8
// cache lines): bounded store-path work on a full region, where the victim
// queue decides; the cursor still walks the region, so a slot freed since
// is found within num_slots / 64 stores.
constexpr uint64_t kFreeScanWords = 64;

}  // namespace

int64_t RegionImpl::EntryDataSlot(uint64_t entry) const {
  if (!geo_.decoupled && geo_.partitions == 0) return static_cast<int64_t>(entry);
  // Untrusted like every region byte: an index past the data area is damage.
  const uint32_t d = meta_[entry].data.load(std::memory_order_relaxed);
  return d < geo_.num_slots ? static_cast<int64_t>(d) : -1;
}

uint8_t* RegionImpl::EntryData(uint64_t entry) const {
  const int64_t d = EntryDataSlot(entry);
  return d < 0 ? nullptr : SlotData(static_cast<uint64_t>(d));
}

bool RegionImpl::ClaimDataSlot(uint64_t entry, uint64_t egen, uint64_t* data, uint64_t* dword) {
  const uint64_t n = geo_.num_slots;
  // Each process starts where its cursor left off: claims of several
  // processes rarely meet on one word, and a filling region is claimed in
  // order instead of rescanning its taken head on every store.
  uint64_t at = free_cursor_.load(std::memory_order_relaxed) % n;
  // Until a whole scan has come back empty, look at the whole region: other
  // processes may have filled the stretch after our cursor while free slots
  // remain elsewhere, and evicting then would throw a block away for nothing.
  const bool full = data_full_.load(std::memory_order_relaxed);
  const uint64_t look = full ? std::min(n, kFreeScanWords) : n;
  const uint64_t moving = PackData(entry, egen, DataState::kMoving);
  for (uint64_t i = 0; i < look; ++i, at = at + 1 == n ? 0 : at + 1) {
    uint64_t w = dwords_[at].load(std::memory_order_relaxed);
    if (WordState(w) != kDFree) continue;
    // seq_cst with the reclaimer's sweep, as the entry claim.
    if (dwords_[at].compare_exchange_strong(w, moving, std::memory_order_seq_cst)) {
      free_cursor_.store(at + 1, std::memory_order_relaxed);
      if (full) data_full_.store(false, std::memory_order_relaxed);
      *data = at;
      *dword = moving;
      return true;
    }
  }
  free_cursor_.store(at, std::memory_order_relaxed);
  if (!full) data_full_.store(true, std::memory_order_relaxed);
  return false;
}

bool RegionImpl::DetachDataSlot(uint64_t data, uint64_t from, uint64_t from_gen, uint64_t entry,
                                uint64_t egen, uint64_t* dword) {
  std::atomic<uint64_t>& dw = dwords_[data];
  uint64_t w = dw.load(std::memory_order_seq_cst);
  // HELD: the lease's committed block. MOVING: its writer is between the
  // entry's READY and its settle (SettleDataSlot then fails, harmlessly).
  // A word naming any other lease is not the one we took: a stale index,
  // or the entry was restored and leased again while we were paused.
  if (!DataLeaseIs(w, from, from_gen)) return false;
  const uint64_t moving = PackData(entry, egen, DataState::kMoving);
  if (!dw.compare_exchange_strong(w, moving, std::memory_order_seq_cst)) return false;
  *dword = moving;
  return true;
}

bool RegionImpl::MoveDataSlot(uint64_t victim, uint64_t vword, uint64_t entry, uint64_t egen,
                              uint64_t* data, uint64_t* dword) {
  if (!TakeReadySlot(victim, vword)) return false;  // pinned or changed: victim unchanged
  const uint64_t evicting = PackWord(WordGen(vword), OwnerId(), kEvicting);
  // Its data index, read while the entry is ours.
  const int64_t d = EntryDataSlot(victim);
  if (d < 0 || !DataLeaseIs(dwords_[d].load(std::memory_order_seq_cst), victim, WordGen(vword))) {
    // Damage: the victim's data index is past the data area or names a
    // slot its lease does not hold (a READY entry's word always names its
    // lease), so its bytes are gone or may be overwritten by that slot's
    // holder. It was to be evicted anyway: drop the entry and try the next
    // victim (put back READY, it would be the oldest again on every pass,
    // failing every store once 64 of them are queued). Its own data slot,
    // if any, is a lease that is over: the orphan rule frees it.
    if (ReleaseOwnedSlot(victim, evicting)) Count(Counter::kCrcFailures);
    return false;
  }
  // The victim's entry goes FREE (its tag cleared while we own it): readers
  // that found it READY fail their recheck; pinners wait on EVICTING and
  // then miss. Failing means we were reclaimed meanwhile (judged dead) and
  // the entry is READY again or reused: it keeps its data slot, which we
  // have not touched.
  if (!ReleaseOwnedSlot(victim, evicting)) return false;
  CXLKV_FAILPOINT_HIT("evict.mid_move");
  // Only now the data word, and only from the lease we took: a victim
  // restored and leased again names another generation, and then the word
  // is not ours (the orphan rule frees the old lease's word if nobody did).
  if (!DetachDataSlot(static_cast<uint64_t>(d), victim, WordGen(vword), entry, egen, dword)) {
    return false;
  }
  *data = static_cast<uint64_t>(d);
  return true;
}

bool RegionImpl::ReleaseDataSlot(uint64_t data, uint64_t dword) {
  // The exact word of our lease: a late release of a paused holder fails
  // on any word a newer lease wrote.
  uint64_t expected = dword;
  return dwords_[data].compare_exchange_strong(expected, PackData(0, 0, DataState::kFree),
                                               std::memory_order_acq_rel);
}

bool RegionImpl::FreeLeaseData(uint64_t data, uint64_t entry, uint64_t egen) {
  uint64_t w = dwords_[data].load(std::memory_order_seq_cst);
  if (!DataLeaseIs(w, entry, egen)) return false;
  return dwords_[data].compare_exchange_strong(w, PackData(0, 0, DataState::kFree),
                                               std::memory_order_acq_rel);
}

void RegionImpl::SettleDataSlot(uint64_t data, uint64_t dword) {
  // Fails only if a Drop, eviction or reclaim moved the word after our
  // entry went READY: then it is theirs.
  uint64_t expected = dword;
  dwords_[data].compare_exchange_strong(
      expected, PackData(DataEntry(dword), DataGen(dword), DataState::kHeld),
      std::memory_order_acq_rel);
}

DataFate RegionImpl::DataWordFate(uint64_t data, uint64_t w) const {
  const uint8_t s = WordState(w);
  if (s == kDFree) return DataFate::kKeep;
  const uint64_t e = DataEntry(w);
  // Untrusted: a state or entry no lease can have is damage, held by nobody.
  if ((s != kDHeld && s != kDMoving) || e >= geo_.num_entries) return DataFate::kFree;
  const SlotMeta& m = meta_[e];
  const uint64_t ew = m.state.load(std::memory_order_seq_cst);
  const uint8_t es = WordState(ew);
  if (es == kFree || es > kEvicting || (WordGen(ew) & kDataGenMask) != DataGen(w)) {
    return DataFate::kFree;  // the lease is over
  }
  if (es == kReady || es == kEvicting) {
    // A committed lease's entry names its one data slot (its writer stored
    // `data` before READY). A word of that lease on any other data slot is
    // damage (a copied word), which nothing would ever free: the lease's
    // block is not here. Read the index between two loads of the entry's
    // word, so it is the lease's own (a changed word: decide next time).
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint32_t named = m.data.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (m.state.load(std::memory_order_relaxed) != ew) return DataFate::kKeep;
    if (named != data) return DataFate::kFree;
  }
  // Its writer died between the entry's READY and its settle.
  if (s == kDMoving && es == kReady) return DataFate::kHeld;
  return DataFate::kKeep;
}

bool RegionImpl::ReadyOffData(uint64_t entry, uint64_t word) const {
  if (!geo_.decoupled || WordState(word) != kReady) return false;
  const int64_t d = EntryDataSlot(entry);
  if (d >= 0 && DataLeaseIs(dwords_[d].load(std::memory_order_seq_cst), entry, WordGen(word))) {
    return false;
  }
  // The index and the word read were the lease's own only if the entry
  // still holds it (a block evicted or replaced since is not damage).
  return meta_[entry].state.load(std::memory_order_seq_cst) == word;
}

bool RegionImpl::SettleDataWord(uint64_t data, uint64_t w) {
  const DataFate fate = DataWordFate(data, w);
  if (fate == DataFate::kKeep) return false;
  uint64_t expected = w;
  if (fate == DataFate::kHeld) {
    dwords_[data].compare_exchange_strong(
        expected, PackData(DataEntry(w), DataGen(w), DataState::kHeld), std::memory_order_acq_rel);
    return false;
  }
  return dwords_[data].compare_exchange_strong(expected, PackData(0, 0, DataState::kFree),
                                               std::memory_order_acq_rel);
}

uint64_t RegionImpl::SettleOrphanedData() {
  uint64_t freed = 0;
  for (uint64_t d = 0; d < geo_.num_slots; ++d) {
    freed += SettleDataWord(d, dwords_[d].load(std::memory_order_seq_cst));
  }
  return freed;
}

uint64_t RegionImpl::SettleMovingSlots(std::unordered_map<uint64_t, uint64_t> orphans) {
  uint64_t freed = 0;
  for (const auto& [d, w] : orphans) freed += SettleDataWord(d, w);
  return freed;
}

bool RegionImpl::AcquireDataSlot(uint64_t entry, uint64_t egen, uint64_t* data, uint64_t* dword,
                                 bool* evicted) {
  if (ClaimDataSlot(entry, egen, data, dword)) {
    *evicted = false;
    return true;
  }
  // Bounded: each failed try consumed a queued victim (taken by another
  // process, pinned, used since, or damaged).
  for (int tries = 0; tries < 64; ++tries) {
    // A participant judged dead (paused past the liveness timeout, e.g. in
    // a move that the next try follows) evicts nobody's block: the caller
    // answers kFenced.
    if (!StillRegistered()) return false;
    uint64_t victim, vword;
    if (!NextVictim(&victim, &vword)) return false;
    if (MoveDataSlot(victim, vword, entry, egen, data, dword)) {
      *evicted = true;
      return true;
    }
  }
  return false;
}

uint32_t RegionImpl::StoreTick(uint32_t depth) const {
  // A request stores its chain head first; under plain recency its head
  // would then be the oldest chunk and leave first, cutting everything
  // behind it. Chunks stored together as one chain by one thread get the
  // chain's tick, so eviction orders them by depth (victims.cc). Bounded
  // by kChainSpanMs: a chunk never looks older than that beyond its store.
  constexpr uint32_t kChainSpanMs = 1000;
  struct Chain {
    const RegionImpl* region = nullptr;
    uint32_t depth = 0;
    uint32_t tick = 0;
  };
  thread_local Chain last;
  const uint32_t now = RecencyTick();
  uint32_t tick = now;
  if (depth > 0 && last.region == this && last.depth < depth && now - last.tick < kChainSpanMs) {
    tick = last.tick;
  }
  last = Chain{this, depth, tick};
  return tick;
}

}  // namespace cxlkv::internal
