// Copyright cxlkv authors.
//
// RegionInternal: the engine's one narrow internal door, for what the public
// Region API deliberately does not offer. LevelDB's WriteBatchInternal
// pattern: a class of static functions that the public types name as a
// friend, so the public header keeps its fields private and gains no
// methods.
//
// Who may use it: the engine itself (lease plumbing), its tests, the fuzzer,
// the `cxlkv` CLI's bench and replay (corruption injection) and the GPU data
// path (src/transfer: registering the slot area for DMA). Nothing here is a
// stable interface. The layout, mapping and geometry headers stay behind it:
// scripts/test.d/06-tree.sh fails when a file outside src/region/ and fuzz/
// includes region_impl.h, layout.h, mapping.h or geometry.h.
//
// Thread-safety: as Region's. The lease functions touch only the lease
// passed, which (like every lease) one thread uses at a time.
#ifndef CXLKV_SRC_REGION_REGION_INTERNAL_H_
#define CXLKV_SRC_REGION_REGION_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cxlkv/region.h"

namespace cxlkv {
namespace internal {
class Visibility;  // src/region/visibility/visibility.h
}  // namespace internal

class RegionInternal {
 public:
  // ---- coherence=software ----

  // Region::Open with `visibility` as the layer every software-mode load,
  // store, flush and invalidate of this process goes through (e.g. the
  // non-coherence emulator: each process a simulated host). Only used in
  // coherence=software; hardware mode ignores it. kInvalidArgument if null.
  static Status OpenWithVisibility(const std::string& path, const RegionOptions& options,
                                   std::unique_ptr<internal::Visibility> visibility,
                                   std::unique_ptr<Region>* out);
  // The layer a software-mode region uses (null in hardware mode), e.g. to
  // read a CountingVisibility's counts; and whether a slot's bytes must be
  // invalidated before a DMA reads them.
  static internal::Visibility* GetVisibility(Region* region);

  // ---- The slot area ----

  // The bytes every slot's payload lives in: [*base, *base + *len), slot i
  // at *base + i * region->info().slot_stride, *len = num_slots *
  // slot_stride. What a DMA engine registers (RegionGpu: cuMemHostRegister
  // of the whole area, docs/gpu.md). Valid while `region` is open.
  // REQUIRES: region != nullptr (every Region is the engine's own: its
  // constructor is private to the implementation).
  static void SlotArea(Region* region, uint8_t** base, uint64_t* len);

  // The payload bytes of the block entry `slot` names (REQUIRES: slot <
  // info().num_entries; null if the entry names no data slot). Writing them
  // bypasses the slot's CRC: for corruption injection.
  static uint8_t* SlotData(Region* region, uint64_t slot);

  // The slot holding (ns, key) READY right now, or -1. A snapshot: the slot
  // may be evicted as soon as this returns.
  static int64_t FindReadySlot(Region* region, NamespaceId ns, const BlockKey& key);

  // The slots a store of (ns, key) by this process may claim or evict: the
  // ways of the key's two candidate sets (in coherence=software, those of
  // this process's write partition). For tests of the eviction policy.
  static std::vector<uint64_t> CandidateSlots(Region* region, NamespaceId ns, const BlockKey& key);

  // ---- Lease plumbing (the implementation only) ----

  static void InitWriteLease(WriteLease* l, Region* r, void* data, size_t len, uint64_t slot,
                             uint64_t word, NamespaceId ns, const BlockKey& key,
                             uint64_t data_word = 0) {
    l->region_ = r;
    l->data_word_ = data_word;
    l->data_ = data;
    l->len_ = len;
    l->slot_ = slot;
    l->state_word_ = word;
    l->ns_ = ns;
    l->key_ = key;
  }
  static void InitReadLease(ReadLease* l, Region* r, const void* data, size_t len, uint64_t slot,
                            uint64_t word, uint32_t crc, uint32_t writer, bool pinned,
                            NamespaceId ns, const BlockKey& key) {
    l->region_ = r;
    l->data_ = data;
    l->len_ = len;
    l->slot_ = slot;
    l->state_word_ = word;
    l->crc_ = crc;
    l->writer_ = writer;
    l->pinned_ = pinned;
    l->ns_ = ns;
    l->key_ = key;
  }
  static void InitPinSet(PinSet* p, Region* r, std::vector<uint64_t> slots) {
    p->region_ = r;
    p->slots_ = std::move(slots);
  }
  static void CloseWriteLease(WriteLease* l) { l->region_ = nullptr; }
  static void CloseReadLease(ReadLease* l) { l->region_ = nullptr; }
  static uint64_t LeaseSlot(const WriteLease& l) { return l.slot_; }
  static uint64_t LeaseWord(const WriteLease& l) { return l.state_word_; }
  // Layout 5: the MOVING word of the lease's data slot (0 in layout 4).
  static uint64_t LeaseDataWord(const WriteLease& l) { return l.data_word_; }
  static NamespaceId LeaseNs(const WriteLease& l) { return l.ns_; }
  static const BlockKey& LeaseKey(const WriteLease& l) { return l.key_; }
  static uint64_t LeaseSlot(const ReadLease& l) { return l.slot_; }
  static uint64_t LeaseWord(const ReadLease& l) { return l.state_word_; }
  static bool LeasePinned(const ReadLease& l) { return l.pinned_; }
  static NamespaceId LeaseNs(const ReadLease& l) { return l.ns_; }
  static const BlockKey& LeaseKey(const ReadLease& l) { return l.key_; }
};

namespace internal {

// The engine's 64-bit mixer (the splitmix64 finalizer): key and namespace
// fingerprints, BlockKey::FromId, and the CLI's replay plans, which must
// stay reproducible from their seed (directory.cc).
uint64_t Mix64(uint64_t x);

}  // namespace internal
}  // namespace cxlkv

#endif  // CXLKV_SRC_REGION_REGION_INTERNAL_H_
