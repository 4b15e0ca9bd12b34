// Copyright cxlkv authors.
//
// Region geometry: where each array lives, derived deterministically from
// (region_size, slot_size, max_participants). The formatter records the
// result; an attacher recomputes it from the recorded inputs and refuses the
// region unless every recorded offset matches, so no offset read from the
// region is ever used without having been derived locally.
#ifndef CXLKV_SRC_REGION_GEOMETRY_H_
#define CXLKV_SRC_REGION_GEOMETRY_H_

#include <cstdint>
#include <string>

#include "cxlkv/status.h"
#include "layout.h"

namespace cxlkv::internal {

struct Geometry {
  uint64_t region_size = 0;
  uint64_t slot_size = 0;
  uint32_t max_participants = 0;
  bool decoupled = false;    // layout 5: index entries name their data slots
  uint64_t num_slots = 0;    // data slots
  uint64_t num_entries = 0;  // index entries: 2 x num_slots decoupled, else num_slots
  uint64_t num_sets = 0;     // index sets: num_entries / ways
  uint32_t ways = 0;
  uint32_t pin_words = 0;
  uint64_t slot_stride = 0;
  uint64_t data_align = 0;
  uint64_t registry_off = 0;
  uint64_t namespaces_off = 0;
  uint64_t retired_off = 0;
  uint64_t tags_off = 0;
  uint64_t meta_off = 0;
  uint64_t pins_off = 0;
  uint64_t dwords_off = 0;  // decoupled only: one DataState word per data slot
  // Layout 6 (coherence=software): write partitions (0 otherwise), each
  // owning num_sets / partitions index sets and num_slots / partitions data
  // slots, and one hint ring each at rings_off (== the header's dwords_off).
  uint32_t partitions = 0;
  uint64_t ring_entries = 0;
  uint64_t rings_off = 0;
  uint64_t data_off = 0;
};

// Computes the geometry: `decoupled` for layout 5 (coherence=hardware: an
// index of 2 entries per data slot, and data words), else layout 4's (one
// entry per slot, entry i's data in slot i). kInvalidArgument if the inputs
// are out of range or the region cannot hold at least one slot (message
// gives the exact minimum in bytes, derived from the layout).
Status ComputeGeometry(uint64_t region_size, uint64_t slot_size, uint32_t max_participants,
                       bool decoupled, Geometry* out);

// Layout 6's geometry: `partitions` (1..16) write partitions, each with
// the same number of data slots (a multiple of the ways) and twice as many
// index entries, and a hint ring each. kInvalidArgument as ComputeGeometry,
// or if the region cannot give every partition one set of data slots.
Status ComputeSoftwareGeometry(uint64_t region_size, uint64_t slot_size, uint32_t max_participants,
                               uint32_t partitions, Geometry* out);

// Checks a superblock's recorded geometry against a recomputation (the
// layout version decides `decoupled`).
// kCorruption naming the first field that differs. `mapped_bytes` is how
// much of the region this process actually mapped; `size_given` whether the
// caller chose that size (else it is the whole file or device): a region
// larger than the mapping is kInvalidArgument saying which to fix.
Status CheckRecordedGeometry(const Superblock& sb, uint64_t mapped_bytes, bool size_given,
                             Geometry* out);

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_REGION_GEOMETRY_H_
