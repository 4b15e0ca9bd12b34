// Copyright cxlkv authors.
//
// Writes (layout 5): claim an index entry in the key's two sets (a free one
// first; only if both sets are full, the least recently used of their 32
// entries, with its data slot), then a data slot (a free one, else the
// victim queue's: data.cc, victims.cc), fill it, publish the entry READY,
// then settle the data slot HELD.
#include <algorithm>
#include <cstring>

#include "crc32c.h"
#include "failpoint.h"
#include "region_impl.h"

namespace cxlkv::internal {

bool RegionImpl::ClaimSlot(NamespaceId ns, const BlockKey& key, const KeyPlace& place,
                           uint64_t* slot_out, uint64_t* word_out, bool* evicted,
                           int64_t* ready_copy, int64_t* data, uint64_t* dword) {
  // Pass 2's candidates are entries other processes evict too (their victim
  // queues free them): when a candidate changed between our scan and our
  // take, an entry of the key's sets may have been freed meanwhile, which
  // pass 1 then finds. Without this, a store in a region where others
  // evict could fail as full with an entry free in its sets. A few tries.
  for (int attempt = 0;; ++attempt) {
    bool raced = false;
    if (ClaimSlotOnce(ns, key, place, slot_out, word_out, evicted, ready_copy, data, dword,
                      &raced)) {
      return true;
    }
    if (!raced || *ready_copy >= 0 || attempt == 3) return false;
  }
}

bool RegionImpl::ClaimSlotOnce(NamespaceId ns, const BlockKey& key, const KeyPlace& place,
                               uint64_t* slot_out, uint64_t* word_out, bool* evicted,
                               int64_t* ready_copy, int64_t* data, uint64_t* dword, bool* raced) {
  *ready_copy = -1;
  *data = -1;
  const uint32_t ways = geo_.ways;
  const int nsets = place.set[0] == place.set[1] ? 1 : 2;
  // Fill the emptier set first (two choices).
  uint64_t order[2] = {place.set[0], place.set[1]};
  if (nsets == 2) {
    int used[2] = {0, 0};
    for (int k = 0; k < 2; ++k)
      for (uint32_t w = 0; w < ways; ++w)
        used[k] += tags_[order[k]].tag[w].load(std::memory_order_relaxed) != 0;
    if (used[1] < used[0]) std::swap(order[0], order[1]);
  }
  const uint32_t me = self_index();
  // Pass 1: free ways (tag 0 is a hint; the state word decides).
  for (int k = 0; k < nsets; ++k) {
    for (uint32_t way = 0; way < ways; ++way) {
      const uint64_t slot = order[k] * ways + way;
      std::atomic<uint64_t>& st = meta_[slot].state;
      uint64_t w = st.load(std::memory_order_relaxed);
      if (WordState(w) != kFree) continue;
      const uint64_t writing = PackWord(WordGen(w) + 1, me, kWriting);
      if (st.compare_exchange_strong(w, writing, std::memory_order_seq_cst)) {
        *slot_out = slot;
        *word_out = writing;
        *evicted = false;
        return true;
      }
    }
  }
  // Before evicting anything: a READY copy of the key whose tag was lost
  // (damage, or a reclaimed writer's late tag clear) is invisible to Find;
  // look for it ignoring tags, so that no other block is evicted for a
  // store that is a duplicate.
  for (int k = 0; k < nsets; ++k) {
    for (uint32_t way = 0; way < ways; ++way) {
      const uint64_t slot = order[k] * ways + way;
      const uint64_t w = meta_[slot].state.load(std::memory_order_acquire);
      if (WordState(w) != kReady || !KeyMatches(slot, ns, key)) continue;
      std::atomic_thread_fence(std::memory_order_acquire);
      if (meta_[slot].state.load(std::memory_order_relaxed) != w) continue;
      *ready_copy = static_cast<int64_t>(slot);
      *word_out = w;
      return false;
    }
  }
  // Pass 2, both index sets full (rare: twice as many entries as data
  // slots, filled by two choices): evict among the unpinned READY entries
  // (up to 2 x kMaxWays) the one of largest EvictionRank, and take its data
  // slot with it: least recently used, with a chain's
  // deeper chunks counted older (region_impl.h). Not CLOCK: a prefix is
  // served only as far as its chunks are present without a gap, and almost
  // every chunk of a KV cache is read once (by the next turn or another
  // replica) or never, so reference bits are nearly all clear and CLOCK
  // degenerates to evicting at random: under store pressure a chunk stored
  // a moment ago, whose reader is on its way, went as often as one from
  // minutes ago, and one lost chunk cuts the whole prefix behind it (the
  // H200 load runs of docs/results/h200-2026-12-01: 32K prefixes at
  // 4 sessions per replica hit 8 % with the region at 95 % fill). Ages and
  // depths are hints from untrusted bytes: a damaged one only changes which
  // block goes.
  // Not once judged dead: a fenced participant evicts nobody's block (the
  // caller answers kFenced).
  if (!StillRegistered()) return false;
  struct Candidate {
    uint64_t rank;
    uint32_t pos;  // scan position from the rotating start: breaks ties
    uint64_t slot;
    uint64_t word;
  };
  Candidate cand[2 * kMaxWays];
  uint32_t n = 0;
  const uint32_t now = RecencyTick();
  const uint32_t total = ways * nsets;
  // Ties (same tick) go to a rotating start, so equal ages do not always
  // sacrifice the same way.
  const uint32_t start = clock_hand_.fetch_add(1, std::memory_order_relaxed) % total;
  for (uint32_t i = 0; i < total; ++i) {
    const uint32_t c = (start + i) % total;
    const uint64_t slot = order[c / ways] * ways + c % ways;
    const SlotMeta& m = meta_[slot];
    const uint64_t w = m.state.load(std::memory_order_acquire);
    if (WordState(w) != kReady) continue;
    // Cheap pre-check: skip pinned slots without the EVICTING transient.
    if (SlotPinned(slot)) continue;
    const uint32_t age = now - m.last_use.load(std::memory_order_relaxed);
    cand[n] = {EvictionRank(age, UnpackDepth(m.depth.load(std::memory_order_relaxed), w),
                            UnpackDepth(m.uses.load(std::memory_order_relaxed), w)),
               n, slot, w};
    ++n;
  }
  // std::sort, not stable_sort: no temporary buffer on the store path.
  std::sort(cand, cand + n, [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos < b.pos;
  });
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t slot = cand[i].slot;
    if (!TakeReadySlot(slot, cand[i].word)) {
      // Changed since the scan (not pinned): another process's eviction.
      if (meta_[slot].state.load(std::memory_order_relaxed) != cand[i].word) *raced = true;
      continue;
    }
    const uint64_t gen = WordGen(cand[i].word);
    uint64_t evicting = PackWord(gen, me, kEvicting);
    // Its data index, read while the entry is ours.
    const int64_t d = EntryDataSlot(slot);
    const uint64_t writing = PackWord(gen + 1, me, kWriting);
    // Failing: reclaimed meanwhile (the entry is READY again or reused),
    // and we touched nothing of it.
    if (!meta_[slot].state.compare_exchange_strong(evicting, writing, std::memory_order_seq_cst)) {
      continue;
    }
    // The data slot comes with the entry: its word from the lease we took
    // to ours. If it names another lease by then (damage, or the orphan
    // rule freed it: the old lease is over), the entry is ours without a
    // data slot and AcquireDataSlot finds one.
    *data = d >= 0 && DetachDataSlot(static_cast<uint64_t>(d), slot, gen, slot, gen + 1, dword)
                ? d
                : -1;
    *slot_out = slot;
    *word_out = writing;
    *evicted = true;
    return true;
  }
  return false;
}

Status RegionImpl::Fenced(StoreOutcome* outcome) {
  Fence();
  // Count region-wide in the retired block: our own block in the registry
  // was retired by our reclaimer and may belong to the entry's next owner by
  // now. The process view is the local block Fence() switched to.
  const auto k = static_cast<uint32_t>(Counter::kStoreFenced);
  retired_->v[k].fetch_add(1, std::memory_order_relaxed);
  observer_counters_.v[k].fetch_add(1, std::memory_order_relaxed);
  *outcome = StoreOutcome::kFenced;
  return Status::Busy("region " + info_.path +
                      ": this participant was judged dead and reclaimed (paused longer than "
                      "the liveness timeout?); reopen the region");
}

Status RegionImpl::LostSlot(StoreOutcome* outcome) {
  // Only a reclaimer takes a WRITING slot from its writer, so losing it
  // means we were judged dead, unless the slot's word was damaged.
  if (!StillRegistered()) return Fenced(outcome);
  Count(Counter::kStoreLostRace);
  *outcome = StoreOutcome::kLostRace;
  return Status::Busy("region " + info_.path +
                      ": the slot was taken while this participant was writing it (damaged "
                      "state word?)");
}

Status RegionImpl::BeginWrite(NamespaceId ns, const BlockKey& key, size_t len, WriteLease* lease,
                              StoreOutcome* outcome, uint32_t depth) {
  if (soft_) return SwBeginWrite(ns, key, len, lease, outcome, /*raw_fill=*/true, depth);
  StoreOutcome dummy;
  if (outcome == nullptr) outcome = &dummy;
  if (lease->open()) AbortWrite(lease);
  // A region file truncated under us (mapping.h's SIGBUS guard): nothing to
  // count into, and the reason is the file, not a fence.
  if (map_->lost()) {
    *outcome = StoreOutcome::kRefused;
    return map_->LostStatus();
  }
  if (self_ < 0) {
    Count(Counter::kStoreRefused);
    *outcome = StoreOutcome::kRefused;
    return Status::InvalidArgument("region " + info_.path +
                                   " was opened as an observer (register_participant=false)");
  }
  if (!StillRegistered()) return Fenced(outcome);
  if (ns >= kNamespaceEntries || WordState(nss_[ns].state.load(std::memory_order_acquire)) !=
                                     static_cast<uint8_t>(NamespaceState::kReady)) {
    Count(Counter::kStoreRefused);
    *outcome = StoreOutcome::kRefused;
    return Status::InvalidArgument("namespace id " + std::to_string(ns) +
                                   " is not registered in region " + info_.path);
  }
  if (len > geo_.slot_size) {
    Count(Counter::kStoreTooLarge);
    *outcome = StoreOutcome::kTooLarge;
    return Status::InvalidArgument("block of " + std::to_string(len) +
                                   " bytes exceeds the slot size " +
                                   std::to_string(geo_.slot_size));
  }
  const KeyPlace place = Place(ns, key);
  uint64_t w;
  const int64_t existing = Find(ns, key, place, &w, false);
  if (existing >= 0) {
    if (WordState(w) == kReady) {
      // The caller holds this chunk as part of a prefix it is using: a use,
      // as a hit is (or the chain's deeper chunks would outlive it).
      Touch(static_cast<uint64_t>(existing), w, StoreTick(depth));
      Count(Counter::kStoreDuplicate);
      *outcome = StoreOutcome::kDuplicate;
      return Status::OK();
    }
    Count(Counter::kStoreLostRace);
    *outcome = StoreOutcome::kLostRace;
    return Status::Busy("another participant is storing this block");
  }
  uint64_t slot, writing;
  bool evicted;
  CXLKV_FAILPOINT_HIT("write.before_claim");
  int64_t untagged, data;
  uint64_t dword = 0;
  if (!ClaimSlot(ns, key, place, &slot, &writing, &evicted, &untagged, &data, &dword)) {
    if (untagged >= 0) {
      RepairTag(static_cast<uint64_t>(untagged), writing, place.tag);
      Count(Counter::kStoreDuplicate);
      *outcome = StoreOutcome::kDuplicate;
      return Status::OK();
    }
    if (!StillRegistered()) return Fenced(outcome);
    Count(Counter::kStoreFull);
    *outcome = StoreOutcome::kFull;
    return Status::NoSpace(
        "no free or evictable index entry for this block (both of its index sets are "
        "pinned or being written)");
  }
  // Gives back what we hold: the entry, and a data slot once we have one.
  auto give_back = [&] {
    if (data >= 0) ReleaseDataSlot(static_cast<uint64_t>(data), dword);
    ReleaseOwnedSlot(slot, writing);
  };
  CXLKV_FAILPOINT_HIT("write.after_claim");
  // A participant paused before its claim CAS may have been reclaimed
  // meanwhile; the reclaimer's sweep then missed this slot, so give it back
  // ourselves. (seq_cst, with the claim CAS and the reclaimer's registry
  // CAS and sweep: one of us sees the other.)
  if (!StillRegistered()) {
    give_back();
    return Fenced(outcome);
  }
  // No metadata store without ownership: each one is preceded by a check
  // that the slot still holds our WRITING word. A pause between a check and
  // its store can still land a stale field in a reused slot; every reader
  // binds its CRC check to the generation it saw, so that field makes the
  // new owner's block a miss, never wrong bytes.
  SlotMeta& m = meta_[slot];
  SetTags& tags = tags_[slot / geo_.ways];
  auto put = [&](auto& field, auto value) {
    if (!Owns(slot, writing)) return false;
    field.store(value, std::memory_order_relaxed);
    return true;
  };
  if (!(put(m.key_hi, key.hi) && put(m.key_lo, key.lo) && put(m.ns, ns) &&
        put(m.len, static_cast<uint32_t>(len)) && put(m.writer, self_index()) &&
        put(m.last_use, StoreTick(depth)) && put(m.depth, PackDepth(depth, WordGen(writing))) &&
        put(m.uses, PackDepth(0, WordGen(writing))) &&
        put(tags.tag[slot % geo_.ways], place.tag))) {
    if (data >= 0) ReleaseDataSlot(static_cast<uint64_t>(data), dword);
    return LostSlot(outcome);
  }
  // Two writers of the same key may claim different slots at once. After
  // publishing our key, look again (seq_cst, so of two racers at least one
  // sees the other), ignoring tags: a READY copy always wins (and if its tag
  // was lost, we repair it: the key is then found again), else the lower
  // slot index wins.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int k = 0; k < 2; ++k) {
    const uint64_t set = place.set[k];
    for (uint32_t way = 0; way < geo_.ways; ++way) {
      const uint64_t other = set * geo_.ways + way;
      if (other == slot) continue;
      const uint64_t ow = meta_[other].state.load(std::memory_order_acquire);
      const uint8_t os = WordState(ow);
      if (os != kReady && os != kWriting) continue;
      if (!KeyMatches(other, ns, key)) continue;
      if (os == kReady) {
        give_back();
        RepairTag(other, ow, place.tag);
        Count(Counter::kStoreDuplicate);
        *outcome = StoreOutcome::kDuplicate;
        return Status::OK();
      }
      if (other < slot) {
        give_back();
        Count(Counter::kStoreLostRace);
        *outcome = StoreOutcome::kLostRace;
        return Status::Busy("another participant is storing this block");
      }
    }
  }
  // The block is ours to store: now its data slot (unless the entry came
  // with one), a free one or the next victim's. After the duplicate check,
  // so a duplicate evicts nothing.
  if (data < 0) {
    uint64_t d;
    bool moved;
    if (!AcquireDataSlot(slot, WordGen(writing), &d, &dword, &moved)) {
      ReleaseOwnedSlot(slot, writing);
      if (!StillRegistered()) return Fenced(outcome);
      Count(Counter::kStoreFull);
      *outcome = StoreOutcome::kFull;
      return Status::NoSpace(
          "no free data slot and no evictable block (every block is pinned or being written)");
    }
    data = static_cast<int64_t>(d);
    evicted = moved;
  }
  // Order the victim entry's FREE (or our WRITING) word before any byte of
  // the new payload: a reader still copying the old payload must see it.
  std::atomic_thread_fence(std::memory_order_release);
  if (evicted) Count(Counter::kEvictions);
  if (!StillRegistered()) {
    give_back();
    return Fenced(outcome);
  }
  if (!put(m.data, static_cast<uint32_t>(data))) {
    ReleaseDataSlot(static_cast<uint64_t>(data), dword);
    return LostSlot(outcome);
  }
  RegionInternal::InitWriteLease(lease, this, SlotData(static_cast<uint64_t>(data)), len, slot,
                                 writing, ns, key, dword);
  *outcome = StoreOutcome::kStored;
  return Status::OK();
}

Status RegionImpl::CommitWrite(WriteLease* lease, const uint32_t* crc32c, StoreOutcome* outcome) {
  if (soft_) return SwCommitWrite(lease, crc32c, outcome);
  StoreOutcome dummy;
  if (outcome == nullptr) outcome = &dummy;
  if (!lease->open()) {
    *outcome = StoreOutcome::kRefused;
    return Status::InvalidArgument("CommitWrite on a closed lease");
  }
  const uint64_t slot = RegionInternal::LeaseSlot(*lease);
  const uint64_t writing = RegionInternal::LeaseWord(*lease);
  const uint64_t dword = RegionInternal::LeaseDataWord(*lease);
  const uint64_t data = DataIndexOf(lease->data());
  const size_t len = lease->len();
  const NamespaceId ns = RegionInternal::LeaseNs(*lease);
  const BlockKey key = RegionInternal::LeaseKey(*lease);
  RegionInternal::CloseWriteLease(lease);
  if (map_->lost()) {
    *outcome = StoreOutcome::kRefused;
    return map_->LostStatus();
  }
  SlotMeta& m = meta_[slot];
  const uint32_t payload_crc = crc32c ? *crc32c : Crc32c(SlotData(data), len);
  // Identity from our own lease, never from the slot's metadata.
  const uint32_t crc =
      BindSlotCrc(payload_crc, WordGen(writing), ns, key, len, static_cast<int64_t>(data));
  // Losing the entry means we were reclaimed (or its word was damaged):
  // give the data slot back if the reclaim has not (exact word: a no-op
  // once it did).
  if (!Owns(slot, writing)) {
    ReleaseDataSlot(data, dword);
    return LostSlot(outcome);
  }
  m.crc.store(crc, std::memory_order_relaxed);
  CXLKV_FAILPOINT_HIT("write.before_commit");
  uint64_t expected = writing;
  const uint64_t ready = PackWord(WordGen(writing), self_index(), kReady);
  // Release: key, length, CRC and payload before READY.
  if (!m.state.compare_exchange_strong(expected, ready, std::memory_order_acq_rel)) {
    ReleaseDataSlot(data, dword);
    return LostSlot(outcome);
  }
  // READY first, then HELD: a writer dying between the two leaves a MOVING
  // word that a READY entry names, which the reclaim settles HELD.
  CXLKV_FAILPOINT_HIT("write.after_ready");
  SettleDataSlot(data, dword);
  Count(Counter::kStores);
  Count(Counter::kBytesStored, len);
  *outcome = StoreOutcome::kStored;
  return Status::OK();
}

void RegionImpl::AbortWrite(WriteLease* lease) {
  if (soft_) return SwAbortWrite(lease);
  if (!lease->open()) return;
  const uint64_t slot = RegionInternal::LeaseSlot(*lease);
  const uint64_t writing = RegionInternal::LeaseWord(*lease);
  const uint64_t dword = RegionInternal::LeaseDataWord(*lease);
  const uint64_t data = DataIndexOf(lease->data());
  RegionInternal::CloseWriteLease(lease);
  // Both no-ops once no longer ours (we were reclaimed and they were
  // reused): the words then belong to their new owners.
  ReleaseDataSlot(data, dword);
  ReleaseOwnedSlot(slot, writing);
}

Status RegionImpl::Store(NamespaceId ns, const BlockKey& key, const void* data, size_t len,
                         StoreOutcome* outcome, uint32_t depth) {
  if (soft_) return SwStore(ns, key, data, len, outcome, depth);
  StoreOutcome dummy;
  if (outcome == nullptr) outcome = &dummy;
  WriteLease lease;
  CXLKV_RETURN_IF_ERROR(BeginWrite(ns, key, len, &lease, outcome, depth));
  if (!lease.open()) return Status::OK();  // duplicate
  auto* dst = static_cast<uint8_t*>(lease.data());
  auto* src = static_cast<const uint8_t*>(data);
  // CRC of the caller's bytes (likely still in cache), then one memcpy (see
  // read.cc for why not chunked). A byte damaged in the region after this
  // point is exactly what the CRC is there to catch.
  const uint32_t crc = Crc32c(src, len);
  if (FailpointsEnabled()) {
    std::memcpy(dst, src, len / 2);
    CXLKV_FAILPOINT_HIT("write.mid_copy");
    std::memcpy(dst + len / 2, src + len / 2, len - len / 2);
  } else {
    std::memcpy(dst, src, len);
  }
  return CommitWrite(&lease, &crc, outcome);
}

}  // namespace cxlkv::internal
