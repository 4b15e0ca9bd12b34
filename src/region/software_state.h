// Copyright cxlkv authors.
//
// coherence=software (layout 6): what the holder of a write partition keeps
// in its own memory and nowhere in the region. Every line of a partition
// has one writer host, so no other process needs these: the partition's
// free data slots, which entry holds each data slot, and the order in
// which its READY blocks leave (exact LRU over the partition, a chain's
// deeper chunks first among equally recent ones). Rebuilt at attach: the
// attach sweep frees every entry of an earlier incarnation, so a new
// holder starts with every data slot free (docs/coherence.md, "Eviction").
#ifndef CXLKV_SRC_REGION_SOFTWARE_STATE_H_
#define CXLKV_SRC_REGION_SOFTWARE_STATE_H_

#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

namespace cxlkv::internal {

class SwHolderState {
 public:
  static constexpr uint64_t kNone = ~0ull;

  // A partition of `datas` data slots starting at global index
  // `first_data`, and `entries` index entries from `first_entry`.
  void Reset(uint64_t first_data, uint64_t datas, uint64_t first_entry, uint64_t entries) {
    std::lock_guard<std::mutex> l(mu_);
    first_ = first_data;
    first_entry_ = first_entry;
    data_of_.assign(entries, kNone);
    entry_.assign(datas, kNone);
    tick_.assign(datas, 0);
    depth_.assign(datas, 0);
    queued_.assign(datas, false);
    order_.clear();
    free_.clear();
    for (uint64_t i = datas; i > 0; --i) free_.push_back(i - 1);  // lowest first
  }

  // A free data slot (global index) for `entry`, or kNone. The slot is
  // held but not in the eviction order until Commit.
  uint64_t TakeFree(uint64_t entry) {
    std::lock_guard<std::mutex> l(mu_);
    DetachLocked(entry);
    if (free_.empty()) return kNone;
    const uint64_t i = free_.back();
    free_.pop_back();
    entry_[i] = entry;
    data_of_[entry - first_entry_] = i;
    return first_ + i;
  }

  // The least recently used READY block's data slot and its entry, taken
  // out of the order (the caller frees the entry, then gives the slot to a
  // new entry with Reassign). False if no block is READY.
  bool PopOldest(uint64_t* data, uint64_t* entry) {
    std::lock_guard<std::mutex> l(mu_);
    if (order_.empty()) return false;
    const uint64_t i = order_.begin()->i;
    order_.erase(order_.begin());
    queued_[i] = false;
    *data = first_ + i;
    *entry = entry_[i];
    if (entry_[i] != kNone && data_of_[entry_[i] - first_entry_] == i)
      data_of_[entry_[i] - first_entry_] = kNone;
    entry_[i] = kNone;
    return true;
  }

  // Data slot `data` (popped by PopOldest) now belongs to `entry`.
  void Reassign(uint64_t data, uint64_t entry) {
    std::lock_guard<std::mutex> l(mu_);
    DetachLocked(entry);
    entry_[data - first_] = entry;
    data_of_[entry - first_entry_] = data - first_;
  }

  // The data slot (global) we gave `entry`, or kNone.
  uint64_t DataOf(uint64_t entry) const {
    std::lock_guard<std::mutex> l(mu_);
    const uint64_t i = data_of_[entry - first_entry_];
    return i == kNone ? kNone : first_ + i;
  }

  // Gives back the data slot `entry` holds, if any. True if there was one.
  bool ReleaseEntry(uint64_t entry) {
    std::lock_guard<std::mutex> l(mu_);
    const uint64_t i = data_of_[entry - first_entry_];
    if (i == kNone) return false;
    FreeLocked(i);
    return true;
  }

  // The entry holding `data` (kNone if free or out of the partition).
  uint64_t EntryOf(uint64_t data) const {
    std::lock_guard<std::mutex> l(mu_);
    return In(data) ? entry_[data - first_] : kNone;
  }

  // The chain depth of the block being written into `data`.
  void SetDepth(uint64_t data, uint32_t depth) {
    std::lock_guard<std::mutex> l(mu_);
    if (In(data)) depth_[data - first_] = depth;
  }

  // The block `entry` wrote into `data` became READY at tick `now`: it
  // joins the order at the young end. False if `data` is no longer
  // `entry`'s (the sweep or a Drop took it meanwhile).
  bool Commit(uint64_t data, uint64_t entry, uint64_t now) {
    std::lock_guard<std::mutex> l(mu_);
    if (!In(data) || entry_[data - first_] != entry) return false;
    const uint64_t i = data - first_;
    Unqueue(i);
    tick_[i] = now;
    order_.insert(Key{now, ~depth_[i], i});
    queued_[i] = true;
    return true;
  }

  // The last use of the block in `data` (0 for kNone or a free slot).
  uint64_t TickOf(uint64_t data) const {
    std::lock_guard<std::mutex> l(mu_);
    return In(data) && queued_[data - first_] ? tick_[data - first_] : 0;
  }

  // A use of the READY block in `data` by `entry` at tick `now` (ignored if
  // `data` is not `entry`'s, or not queued: freed or replaced since).
  void Touch(uint64_t data, uint64_t entry, uint64_t now) {
    std::lock_guard<std::mutex> l(mu_);
    if (!In(data)) return;
    const uint64_t i = data - first_;
    if (entry_[i] != entry || !queued_[i] || tick_[i] >= now) return;
    order_.erase(Key{tick_[i], ~depth_[i], i});
    tick_[i] = now;
    order_.insert(Key{now, ~depth_[i], i});
  }

  // Gives `data` back to the free list if `entry` holds it. True if so.
  bool Release(uint64_t data, uint64_t entry) {
    std::lock_guard<std::mutex> l(mu_);
    if (!In(data) || entry_[data - first_] != entry) return false;
    FreeLocked(data - first_);
    return true;
  }

  // SwTick()'s 32-bit milliseconds made a 64-bit count that only moves
  // forward (a test's clock skew back is ignored). The first reading is
  // where it starts, whatever it is: a host up for 24.8 days or more reads
  // 2^31 and above, which a start at 0 took for a step back for as long.
  uint64_t Extend(uint32_t now) {
    std::lock_guard<std::mutex> l(mu_);
    if (!started_) {
      started_ = true;
      last32_ = now;
    } else if (static_cast<int32_t>(now - last32_) > 0) {
      ext_ += now - last32_;
      last32_ = now;
    }
    return ext_;
  }

  uint64_t FreeCount() const {
    std::lock_guard<std::mutex> l(mu_);
    return free_.size();
  }

 private:
  struct Key {
    uint64_t tick;
    uint32_t inv_depth;  // ~depth: deeper first among equal ticks
    uint64_t i;
    bool operator<(const Key& o) const {
      if (tick != o.tick) return tick < o.tick;
      if (inv_depth != o.inv_depth) return inv_depth < o.inv_depth;
      return i < o.i;
    }
  };
  bool In(uint64_t data) const { return data >= first_ && data - first_ < entry_.size(); }
  void FreeLocked(uint64_t i) {
    Unqueue(i);
    if (entry_[i] != kNone && data_of_[entry_[i] - first_entry_] == i)
      data_of_[entry_[i] - first_entry_] = kNone;
    entry_[i] = kNone;
    free_.push_back(i);
  }
  // `entry` is given a new data slot: its line says FREE (the store chose
  // it so), so a data slot we still believed it held (its line freed behind
  // our back: damage, or a zombie's late line, before the sweep saw it) is
  // no block's any more. Freed here, or it would stay in the order under
  // this entry and, once the oldest, take the entry's next block with it.
  void DetachLocked(uint64_t entry) {
    const uint64_t i = data_of_[entry - first_entry_];
    if (i == kNone) return;
    if (entry_[i] == entry) {
      FreeLocked(i);
    } else {
      data_of_[entry - first_entry_] = kNone;
    }
  }
  void Unqueue(uint64_t i) {
    if (!queued_[i]) return;
    order_.erase(Key{tick_[i], ~depth_[i], i});
    queued_[i] = false;
  }

  mutable std::mutex mu_;
  bool started_ = false;
  uint32_t last32_ = 0;
  uint64_t ext_ = 1ull << 32;
  uint64_t first_ = 0;
  uint64_t first_entry_ = 0;
  std::vector<uint64_t> data_of_;  // per entry: the data slot (offset) it holds, or kNone
  std::vector<uint64_t> entry_;    // per data slot: the entry holding it, or kNone
  std::vector<uint64_t> tick_;     // per data slot: its block's last use
  std::vector<uint32_t> depth_;    // per data slot: its block's chain depth
  std::vector<bool> queued_;       // per data slot: in order_ (READY)
  std::set<Key> order_;            // READY blocks, least recently used first
  std::vector<uint64_t> free_;     // free data slots (partition offsets)
};

// The hint rings' process-local side (layout.h, "Hint rings"): as a
// reader, where our own ring's head is and how much of it reached memory;
// as a holder, how far each other partition's ring was read.
struct SwHintState {
  std::mutex mu;           // our ring's appends and flushes
  uint64_t head = 0;       // appends so far (memory's head once flushed)
  uint64_t flushed = 0;    // appends whose slots and head reached memory
  uint64_t seen[16] = {};  // holder: each ring's head when last drained
  uint64_t evictions = 0;  // holder, under sw_claim_mu_: since the last drain
};

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_REGION_SOFTWARE_STATE_H_
