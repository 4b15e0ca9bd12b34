// Copyright cxlkv authors.
//
// Maintenance that is safe while other participants are attached: drop one
// block, scrub every READY slot's CRC, wipe all unpinned blocks.
#include "crc32c.h"
#include "region_impl.h"

namespace cxlkv::internal {
namespace {

#if defined(__SANITIZE_THREAD__) || defined(CXLKV_TSAN)
__attribute__((no_sanitize("thread")))
#endif
uint32_t
RegionBytesCrc(const uint8_t* p, size_t n) {
  return Crc32c(p, n);
}

}  // namespace

bool RegionImpl::FreeTakenEntry(uint64_t slot, uint64_t evicting) {
  // The entry FREE first, then its data word if it still names the lease
  // we took: dying between the two leaves a word whose lease is over, which
  // the orphan rule frees. If the entry is no longer ours (we were
  // reclaimed and it is READY again, same generation), its data slot stays.
  const int64_t d = geo_.decoupled ? EntryDataSlot(slot) : -1;
  const bool freed = ReleaseOwnedSlot(slot, evicting);
  if (freed && d >= 0) FreeLeaseData(static_cast<uint64_t>(d), slot, WordGen(evicting));
  return freed;
}

Status RegionImpl::Drop(NamespaceId ns, const BlockKey& key) {
  if (soft_) return SwDrop(ns, key);
  CXLKV_RETURN_IF_ERROR(CheckWritable());
  uint64_t w;
  const int64_t slot = Find(ns, key, Place(ns, key), &w, true);
  if (slot < 0) return Status::NotFound("block not in region");
  if (!TakeReadySlot(static_cast<uint64_t>(slot), w) ||
      !FreeTakenEntry(static_cast<uint64_t>(slot), PackWord(WordGen(w), self_index(), kEvicting))) {
    // Not ours after all: pinned, being evicted by another participant
    // (found EVICTING), changed, or we were reclaimed meanwhile.
    CXLKV_RETURN_IF_ERROR(CheckWritable());
    return Status::Busy("block is pinned, being evicted or changed concurrently; retry");
  }
  return Status::OK();
}

Status RegionImpl::Verify(bool drop_corrupt, ScrubReport* report) {
  if (soft_) return SwVerify(drop_corrupt, report);
  *report = ScrubReport{};
  if (drop_corrupt) CXLKV_RETURN_IF_ERROR(CheckWritable());
  for (uint64_t s = 0; s < geo_.num_entries; ++s) {
    std::atomic<uint64_t>& st = meta_[s].state;
    const uint64_t w = st.load(std::memory_order_acquire);
    const uint8_t state = WordState(w);
    if (state > kEvicting ||
        ((state == kWriting || state == kEvicting) && WordOwner(w) >= geo_.max_participants)) {
      // Impossible word: nobody could ever finish or reclaim it.
    } else if (state == kReady && ReadyOffData(s, w)) {
      // Layout 5: its data slot's word is not its lease (the orphan
      // sweep's rule): the bytes there may be another block's soon.
      ++report->ready;
      ++report->ready_off_data;
    } else if (state == kReady) {
      ++report->ready;
      const SlotMeta& m = meta_[s];
      const uint32_t len = m.len.load(std::memory_order_relaxed);
      const uint32_t crc = m.crc.load(std::memory_order_relaxed);
      const NamespaceId ns = m.ns.load(std::memory_order_relaxed);
      const BlockKey key{m.key_hi.load(std::memory_order_relaxed),
                         m.key_lo.load(std::memory_order_relaxed)};
      const int64_t d = EntryDataSlot(s);
      if (len <= geo_.slot_size && d >= 0) {
        // The slot's own identity: a key, namespace, length or data slot
        // that does not belong to these bytes (damage) fails like a
        // damaged byte.
        const uint32_t got = BindSlotCrc(RegionBytesCrc(SlotData(static_cast<uint64_t>(d)), len),
                                         WordGen(w), ns, key, len, geo_.decoupled ? d : -1);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (!SameReadableBlock(w, st.load(std::memory_order_relaxed))) {
          ++report->skipped_changed;
          continue;
        }
        if (got == crc) {
          ++report->verified;
          continue;
        }
      }
    } else {
      continue;
    }
    ++report->crc_failures;
    Count(Counter::kCrcFailures);
    if (!drop_corrupt) continue;
    // READY: a corrupt block; otherwise an impossible word nobody could
    // ever finish or reclaim. Either way take the slot, then free it.
    if (TakeAndFreeSlot(s, w)) ++report->dropped;
  }
  // Layout 5: the data words, after the entries (a block dropped above
  // ends its lease), by the orphan rule; settled as a wipe or a reclaim
  // settles them. A word in flight (a live mover between its steps) may be
  // counted; settling it is safe, as every step expects its own lease.
  if (!geo_.decoupled) return Status::OK();
  for (uint64_t d = 0; d < geo_.num_slots; ++d) {
    const uint64_t w = dwords_[d].load(std::memory_order_seq_cst);
    if (DataWordFate(d, w) == DataFate::kKeep) continue;
    ++report->data_unsettled;
    if (!drop_corrupt) continue;
    SettleDataWord(d, w);
    if (dwords_[d].load(std::memory_order_seq_cst) != w) ++report->data_settled;
  }
  return Status::OK();
}

Status RegionImpl::Wipe(WipeReport* report) {
  if (soft_) return SwWipe(report);
  *report = WipeReport{};
  CXLKV_RETURN_IF_ERROR(CheckWritable());
  for (uint64_t s = 0; s < geo_.num_entries; ++s) {
    uint64_t w = meta_[s].state.load(std::memory_order_acquire);
    uint8_t state = WordState(w);
    if (state == kEvicting && !OwnerAlive(WordOwner(w)) && RestoreEvictedBlock(s, w)) {
      // A dead evictor's block is intact: back to READY, then as any other.
      w = meta_[s].state.load(std::memory_order_acquire);
      state = WordState(w);
    }
    if (state > kEvicting ||
        ((state == kWriting || state == kEvicting) && !OwnerAlive(WordOwner(w)))) {
      // Nobody alive will finish or free it (the orphan sweep would, after
      // its stall timeout; an operator's wipe need not wait). A resumed
      // owner's ownership checks fail on the bumped generation.
      if (TakeAndFreeSlot(s, w)) ++report->orphaned;
    } else if (state == kWriting || state == kEvicting) {
      ++report->writing;
    } else if (state == kReady) {
      if (TakeReadySlot(s, w) && FreeTakenEntry(s, PackWord(WordGen(w), self_index(), kEvicting))) {
        ++report->dropped;
      } else {
        ++report->pinned;
      }
    }
  }
  // Data slots a dead participant left in flight (the orphan sweep would
  // after its stall timeout); counted with their entries above.
  if (geo_.decoupled) (void)SettleOrphanedData();
  return Status::OK();
}

}  // namespace cxlkv::internal
