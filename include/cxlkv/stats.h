// Copyright cxlkv authors.
//
// Counters kept in the region (one block per participant, plus a retired
// total for participants that left) and readable per process or per region.
// Every failed or skipped store is counted by reason ([Fan26]
// silently discarded store failures).
#ifndef CXLKV_STATS_H_
#define CXLKV_STATS_H_

#include <cstdint>

namespace cxlkv {

// Index of each counter in the in-region counter block. Persisted: append
// only, never renumber.
enum class Counter : uint32_t {
  kLookups = 0,          // keys looked up (Lookup, LookupPrefix, PinPrefix)
  kHits = 1,             // loads that returned verified bytes
  kMisses = 2,           // loads and lookups that found nothing usable
  kStores = 3,           // blocks committed (now READY)
  kStoreDuplicate = 4,   // store skipped: the key is already READY
  kStoreFull = 5,        // store failed: no free or evictable slot
  kStoreTooLarge = 6,    // store failed: block larger than the slot size
  kStoreLostRace = 7,    // store skipped: another writer is storing the key
  kEvictions = 8,        // READY slots taken by CLOCK for a new block
  kCrcFailures = 9,      // loads whose bytes failed CRC32C (became misses)
  kReclaimedSlots = 10,  // half-written slots of dead participants freed
  kLoadRaces = 11,       // loads invalidated because the slot changed mid-copy
  kCrossHits = 12,       // hits on blocks written by another participant
  kBytesLoaded = 13,     // payload bytes of hits
  kBytesStored = 14,     // payload bytes of commits
  kReleasedPins = 15,    // pins of dead participants released by reclaim
  kStoreFenced = 16,     // store failed: this participant had been judged dead
  kStoreRefused = 17,    // store refused: namespace not registered, or an observer
  kCount = 18,
};

const char* CounterName(Counter c);

struct Counters {
  uint64_t v[static_cast<uint32_t>(Counter::kCount)] = {};
  uint64_t& operator[](Counter c) { return v[static_cast<uint32_t>(c)]; }
  uint64_t operator[](Counter c) const { return v[static_cast<uint32_t>(c)]; }
  uint64_t store_failures() const {
    return (*this)[Counter::kStoreFull] + (*this)[Counter::kStoreTooLarge] +
           (*this)[Counter::kStoreLostRace] + (*this)[Counter::kStoreFenced] +
           (*this)[Counter::kStoreRefused];
  }
  Counters& operator+=(const Counters& o) {
    for (uint32_t i = 0; i < static_cast<uint32_t>(Counter::kCount); ++i) v[i] += o.v[i];
    return *this;
  }
};

}  // namespace cxlkv

#endif  // CXLKV_STATS_H_
