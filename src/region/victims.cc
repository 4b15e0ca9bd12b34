// Copyright cxlkv authors.
//
// Layout 5's victim choice: the least recently used READY unpinned block
// of the whole region, a chain's deeper chunks first among equally recent
// ones (a prefix is served only up to its first missing chunk). Exact LRU
// over the region would need a shared ordered structure every hit updates;
// instead each process sweeps the index incrementally (a bounded number of
// entries per eviction) and keeps the kVictimQueue most evictable entries
// it saw; a finished pass becomes its queue, consumed oldest first. A
// queued entry used or replaced since is passed over (its word or last_use
// changed). bench/eviction/policies.py `indexed` models this and keeps at
// least exact LRU's usable tokens at every capacity on both traces, where
// a choice among a key's 32 ways kept 0.95-0.97 of it (docs/benchmarks.md).
//
// Several processes each have a queue over the same region; the victim
// entry's READY -> EVICTING CAS decides who takes it, and the loser pops
// its next one.
#include <algorithm>

#include "region_impl.h"

namespace cxlkv::internal {
namespace {

// Entries per queue: 1/64 of the data slots (at least 64). A pass reads
// every entry once, so an eviction costs 2 x 64 entry reads on average;
// bench/eviction's model gave the same hit rate for 1/16 .. 1/64.
uint64_t QueueLength(uint64_t slots) { return std::max<uint64_t>(64, slots / 64); }

// True if a goes before b: older, then deeper.
bool MoreEvictable(int32_t a_rel, uint32_t a_depth, int32_t b_rel, uint32_t b_depth) {
  return a_rel != b_rel ? a_rel < b_rel : a_depth > b_depth;
}

}  // namespace

void RegionImpl::RefillVictims(uint64_t budget) {
  const uint64_t n = geo_.num_entries;
  const uint64_t k = QueueLength(geo_.num_slots);
  if (sweep_cursor_ == 0 && building_.empty()) sweep_ref_ = RecencyTick();
  // Max-heap on evictability's reverse: the front is the least evictable
  // entry kept, the first to drop when a better one is found.
  auto less_evictable_first = [](const Victim& a, const Victim& b) {
    return MoreEvictable(a.rel, a.depth, b.rel, b.depth);
  };
  const uint64_t end = budget == 0 ? n : std::min(n, sweep_cursor_ + budget);
  for (uint64_t e = sweep_cursor_; e < end; ++e) {
    const SlotMeta& m = meta_[e];
    const uint64_t w = m.state.load(std::memory_order_acquire);
    if (WordState(w) != kReady || SlotPinned(e)) continue;
    // last_use and depth are hints from untrusted bytes: a damaged one only
    // changes which block goes.
    const uint32_t last = m.last_use.load(std::memory_order_relaxed);
    const Victim v{static_cast<int32_t>(last - sweep_ref_),
                   UnpackDepth(m.depth.load(std::memory_order_relaxed), w), last, e, w};
    if (building_.size() < k) {
      building_.push_back(v);
      std::push_heap(building_.begin(), building_.end(), less_evictable_first);
    } else if (MoreEvictable(v.rel, v.depth, building_.front().rel, building_.front().depth)) {
      std::pop_heap(building_.begin(), building_.end(), less_evictable_first);
      building_.back() = v;
      std::push_heap(building_.begin(), building_.end(), less_evictable_first);
    }
  }
  sweep_cursor_ = end;
  if (sweep_cursor_ < n) return;
  // Pass done: the queue, most evictable at the back (pop_back).
  std::sort(building_.begin(), building_.end(), [](const Victim& a, const Victim& b) {
    return MoreEvictable(b.rel, b.depth, a.rel, a.depth);
  });
  victims_.swap(building_);
  building_.clear();
  sweep_cursor_ = 0;
}

bool RegionImpl::NextVictim(uint64_t* entry, uint64_t* word) {
  std::lock_guard<std::mutex> l(victim_mu_);
  // Keep the next pass moving as the queue drains, so it is ready about
  // when the queue runs out: a pass of n entries per k evictions.
  const uint64_t k = QueueLength(geo_.num_slots);
  RefillVictims((geo_.num_entries + k - 1) / k + 1);
  // Other processes evict from the same region, and their queues hold the
  // same oldest entries as ours: the whole queue, and the pass finished to
  // refill it, may have been taken since. So refill until a pass queues an
  // entry that is still what it was, a pass of the whole index from its
  // start finds nothing evictable at all (then the region has no READY
  // unpinned entry), or kMaxRefills passes (bounded work per store).
  constexpr int kMaxRefills = 4;
  for (int refills = 0;;) {
    if (victims_.empty()) {
      if (refills == kMaxRefills) return false;
      const bool whole = sweep_cursor_ == 0 && building_.empty();
      RefillVictims(0);  // finish this pass now
      ++refills;
      if (whole && victims_.empty()) return false;
      continue;
    }
    const Victim v = victims_.back();
    victims_.pop_back();
    const SlotMeta& m = meta_[v.entry];
    if (m.state.load(std::memory_order_acquire) != v.word ||
        m.last_use.load(std::memory_order_relaxed) != v.last_use) {
      continue;  // replaced, or used since it was queued
    }
    // Pinned since it was queued: skip it without the EVICTING transient,
    // which makes a concurrent Find of the pinned block miss (its recheck
    // sees the word change).
    if (SlotPinned(v.entry)) continue;
    *entry = v.entry;
    *word = v.word;
    return true;
  }
}

}  // namespace cxlkv::internal
