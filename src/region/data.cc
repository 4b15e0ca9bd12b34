// Copyright cxlkv authors.
//
// Layout 5's data slots: an index entry names the data slot its block lives
// in, and one word per data slot says whose it is (layout.h, DataState). The
// directory stays where lookups find it (a key's two index sets), while the
// bytes may be anywhere: eviction can take the region's least recently used
// block instead of one of the 32 a key may live beside (issue 24).
//
// Who may write a data slot's bytes: only the holder of its MOVING word,
// for the entry it holds WRITING. Readers never look at data words: they
// pin the entry, follow SlotMeta::data, copy, and recheck the entry's word;
// an entry's data slot only moves after the entry left READY unpinned, so
// an unchanged READY word after the copy means the bytes were not moved.
#include <algorithm>
#include <unordered_map>

#include "failpoint.h"
#include "region_impl.h"

namespace cxlkv::internal {
namespace {

constexpr uint8_t kDFree = static_cast<uint8_t>(DataState::kFree);
constexpr uint8_t kDHeld = static_cast<uint8_t>(DataState::kHeld);
constexpr uint8_t kDMoving = static_cast<uint8_t>(DataState::kMoving);
constexpr uint8_t kReady = static_cast<uint8_t>(SlotState::kReady);
constexpr uint8_t kEvicting = static_cast<uint8_t>(SlotState::kEvicting);
constexpr uint8_t kFreeEntry = static_cast<uint8_t>(SlotState::kFree);

// Data words one ClaimDataSlot looks at once a whole scan found none FREE (8
// cache lines): bounded store-path work on a full region, where the victim
// queue decides; the cursor still walks the region, so a slot freed since
// is found within num_slots / 64 stores.
constexpr uint64_t kFreeScanWords = 64;

}  // namespace

int64_t RegionImpl::EntryDataSlot(uint64_t entry) const {
  if (!geo_.decoupled) return static_cast<int64_t>(entry);
  // Untrusted like every region byte: an index past the data area is damage.
  const uint32_t d = meta_[entry].data.load(std::memory_order_relaxed);
  return d < geo_.num_slots ? static_cast<int64_t>(d) : -1;
}

uint8_t* RegionImpl::EntryData(uint64_t entry) const {
  const int64_t d = EntryDataSlot(entry);
  return d < 0 ? nullptr : SlotData(static_cast<uint64_t>(d));
}

bool RegionImpl::ClaimDataSlot(uint64_t* data, uint64_t* dword) {
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
  for (uint64_t i = 0; i < look; ++i, at = at + 1 == n ? 0 : at + 1) {
    uint64_t w = dwords_[at].load(std::memory_order_relaxed);
    if (WordState(w) != kDFree) continue;
    const uint64_t moving = PackWord(WordGen(w), OwnerId(), kDMoving);
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

int64_t RegionImpl::DetachDataSlot(uint64_t entry, uint64_t* dword) {
  const int64_t d = EntryDataSlot(entry);
  if (d < 0) return -1;
  std::atomic<uint64_t>& dw = dwords_[d];
  uint64_t w = dw.load(std::memory_order_seq_cst);
  // HELD: the entry's committed block. MOVING: its writer is between the
  // entry's READY and its settle (SettleDataSlot then fails, harmlessly).
  // Anything else is not a state a READY entry's data slot can be in.
  if (WordState(w) != kDHeld && WordState(w) != kDMoving) return -1;
  // A new generation: a settle or release of the word we replace (its
  // writer's, between READY and settle) can never match ours, even when
  // that writer is another thread of this process.
  const uint64_t moving = PackWord(WordGen(w) + 1, OwnerId(), kDMoving);
  if (!dw.compare_exchange_strong(w, moving, std::memory_order_seq_cst)) return -1;
  *dword = moving;
  return d;
}

bool RegionImpl::MoveDataSlot(uint64_t victim, uint64_t vword, uint64_t* data, uint64_t* dword) {
  if (!TakeReadySlot(victim, vword)) return false;  // pinned or changed: victim unchanged
  const uint64_t evicting = PackWord(WordGen(vword), OwnerId(), kEvicting);
  const int64_t d = DetachDataSlot(victim, dword);
  if (d < 0) {
    // Damage (or a reclaimer moved the word under us): leave the block as
    // it was; a reader's checks decide what it is worth.
    RestoreEvictedBlock(victim, evicting);
    return false;
  }
  // The victim's entry goes FREE (its tag cleared while we own it): readers
  // that found it READY fail their recheck; pinners wait on EVICTING and
  // then miss. Its data slot is MOVING(us) until our own entry commits.
  if (!ReleaseOwnedSlot(victim, evicting)) {
    // Reclaimed meanwhile (we were judged dead): the slot is not ours.
    ReleaseDataSlot(static_cast<uint64_t>(d), *dword);
    return false;
  }
  CXLKV_FAILPOINT_HIT("evict.mid_move");
  *data = static_cast<uint64_t>(d);
  return true;
}

bool RegionImpl::ReleaseDataSlot(uint64_t data, uint64_t dword) {
  // The generation bump fails the settle CAS of a writer paused with this
  // word, so its late settle cannot mark a reused slot HELD.
  uint64_t expected = dword;
  return dwords_[data].compare_exchange_strong(expected, PackWord(WordGen(dword) + 1, 0, kDFree),
                                               std::memory_order_acq_rel);
}

void RegionImpl::SettleDataSlot(uint64_t data, uint64_t dword) {
  // Fails only if a Drop, eviction or reclaim moved the word after our
  // entry went READY: then it is theirs.
  uint64_t expected = dword;
  dwords_[data].compare_exchange_strong(
      expected, PackWord(WordGen(dword), WordOwner(dword), kDHeld), std::memory_order_acq_rel);
}

uint64_t RegionImpl::SettleOrphanedData(const std::function<bool(uint32_t)>& dead) {
  std::unordered_map<uint64_t, uint64_t> orphans;  // data slot -> its MOVING word
  for (uint64_t d = 0; d < geo_.num_slots; ++d) {
    const uint64_t w = dwords_[d].load(std::memory_order_seq_cst);
    if (WordState(w) == kDMoving && dead(WordOwner(w))) orphans.emplace(d, w);
  }
  return SettleMovingSlots(std::move(orphans));
}

uint64_t RegionImpl::SettleMovingSlots(std::unordered_map<uint64_t, uint64_t> orphans) {
  if (orphans.empty()) return 0;
  // A READY or EVICTING entry naming the slot: the mover died before it
  // freed the victim's entry (or the writer between READY and settle), so
  // the block is intact and stays where it is.
  for (uint64_t e = 0; e < geo_.num_entries; ++e) {
    const uint64_t w = meta_[e].state.load(std::memory_order_seq_cst);
    const uint8_t s = WordState(w);
    if (s != kReady && s != kEvicting) continue;
    const int64_t d = EntryDataSlot(e);
    if (d < 0) continue;
    auto it = orphans.find(static_cast<uint64_t>(d));
    if (it == orphans.end()) continue;
    uint64_t expected = it->second;
    dwords_[d].compare_exchange_strong(expected,
                                       PackWord(WordGen(it->second), WordOwner(it->second), kDHeld),
                                       std::memory_order_acq_rel);
    orphans.erase(it);
  }
  uint64_t freed = 0;
  for (const auto& [d, w] : orphans) freed += ReleaseDataSlot(d, w);
  return freed;
}

bool RegionImpl::AcquireDataSlot(uint64_t* data, uint64_t* dword, bool* evicted) {
  if (ClaimDataSlot(data, dword)) {
    *evicted = false;
    return true;
  }
  // Bounded: each failed try consumed a queued victim (taken by another
  // process, pinned, used since, or damaged).
  for (int tries = 0; tries < 64; ++tries) {
    uint64_t victim, vword;
    if (!NextVictim(&victim, &vword)) return false;
    if (MoveDataSlot(victim, vword, data, dword)) {
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
