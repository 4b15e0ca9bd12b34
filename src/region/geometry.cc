// Copyright cxlkv authors.
#include "geometry.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

#include "cxlkv/base/size.h"

namespace cxlkv::internal {
namespace {

constexpr uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Regions this large align their data area to 2 MiB, smaller ones to 4 KiB.
constexpr uint64_t kLargeRegionBytes = 64ull << 20;

// Bytes needed for `n` slots (all metadata plus data), given the rest.
bool Layout(uint64_t n, uint64_t slot_size, uint32_t max_participants, uint64_t region_size,
            bool decoupled, uint32_t partitions, Geometry* g) {
  g->decoupled = decoupled;
  g->partitions = partitions;
  g->num_slots = n;
  g->ways = n >= kMaxWays ? kMaxWays : static_cast<uint32_t>(n);
  g->num_sets = g->ways ? n / g->ways : 0;
  if (partitions > 0) g->num_sets = g->num_sets / partitions * partitions;
  g->num_slots = g->num_sets * g->ways;
  // Decoupled (layouts 5 and 6): two index entries per data slot
  // (bench/eviction's model of this design never found both of a key's
  // sets full at that ratio), so twice the sets of the same ways.
  if (decoupled || partitions > 0) g->num_sets *= 2;
  g->num_entries = g->num_sets * g->ways;
  g->pin_words = max_participants / 64;
  // 64-byte stride keeps slot starts cache-line aligned; page-sized slots
  // stay page aligned so DMA engines see whole pages.
  g->slot_stride = slot_size >= 4096 ? RoundUp(slot_size, 4096) : RoundUp(slot_size, 64);
  // Large regions align the data area to 2 MiB (huge pages, devdax align).
  g->data_align = region_size >= kLargeRegionBytes ? (2ull << 20) : 4096;
  uint64_t off = kSuperblockBytes;
  g->registry_off = off;
  off += uint64_t(max_participants) * sizeof(ParticipantRecord);
  g->namespaces_off = off;
  off += uint64_t(kNamespaceEntries) * sizeof(NamespaceRecord);
  g->retired_off = off;
  off += sizeof(CounterBlock);
  g->tags_off = off;
  off += g->num_sets * sizeof(SetTags);
  g->meta_off = off;
  off += g->num_entries * sizeof(SlotMeta);
  g->pins_off = off;
  off += g->num_entries * g->pin_words * 8;
  g->dwords_off = 0;
  if (decoupled) {
    g->dwords_off = off;
    off += g->num_slots * 8;
  }
  g->ring_entries = 0;
  g->rings_off = 0;
  if (partitions > 0) {
    g->ring_entries = HintRingEntries(region_size);
    g->rings_off = off;
    off += uint64_t(partitions) * (sizeof(SwHintRingHead) + g->ring_entries * 8);
  }
  g->data_off = RoundUp(off, g->data_align);
  return g->data_off <= region_size && g->num_slots * g->slot_stride <= region_size - g->data_off;
}

// The fewest slots a layout can have: one, except that layout 6 with more
// than one write partition gives each partition whole sets (Layout() rounds
// the sets down to a multiple of the partitions), and a region of fewer
// than kMaxWays slots has one set only.
uint64_t MinSlots(uint32_t partitions) {
  return partitions > 1 ? uint64_t{partitions} * kMaxWays : 1;
}

// The smallest region that holds MinSlots(): its metadata and those slots
// of data, at the data alignment a region of that size gets. Derived from
// Layout() itself, so it follows the layout whatever it is.
uint64_t MinRegionBytes(uint64_t slot_size, uint32_t max_participants, bool decoupled,
                        uint32_t partitions) {
  const uint64_t n = MinSlots(partitions);
  Geometry one;
  Layout(n, slot_size, max_participants, kLargeRegionBytes - 1, decoupled, partitions, &one);
  const uint64_t small = one.data_off + n * one.slot_stride;
  if (small < kLargeRegionBytes) return small;
  // Too big for the 4 KiB alignment: a region this large aligns its data to
  // 2 MiB, so it needs that much more.
  Layout(n, slot_size, max_participants, ~0ull >> 1, decoupled, partitions, &one);
  return one.data_off + n * one.slot_stride;
}

Status ComputeAny(uint64_t region_size, uint64_t slot_size, uint32_t max_participants,
                  bool decoupled, uint32_t partitions, Geometry* out) {
  if (partitions > kMaxSoftwarePartitions) {
    return Status::InvalidArgument("software_partitions " + std::to_string(partitions) +
                                   " out of range [1, 16]");
  }
  if (slot_size < kMinSlotSize || slot_size > kMaxSlotSize) {
    return Status::InvalidArgument("slot_size " + std::to_string(slot_size) +
                                   " out of range [64, 2^40]");
  }
  if (max_participants < 64 || max_participants > kMaxParticipantsLimit ||
      max_participants % 64 != 0) {
    return Status::InvalidArgument("max_participants " + std::to_string(max_participants) +
                                   " must be a multiple of 64 in [64, 1024]");
  }
  if (region_size > (1ull << 50)) {
    return Status::InvalidArgument("region_size " + std::to_string(region_size) +
                                   " larger than 1 PiB");
  }
  Geometry g;
  g.region_size = region_size;
  g.slot_size = slot_size;
  g.max_participants = max_participants;
  // Layout() is monotone in the slot count, so binary-search the largest
  // count that fits; the data-only bound is an upper limit.
  const uint64_t stride = slot_size >= 4096 ? RoundUp(slot_size, 4096) : RoundUp(slot_size, 64);
  uint64_t lo = 0, hi = region_size / stride + 1;
  while (lo + 1 < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    Geometry probe;
    if (Layout(mid, slot_size, max_participants, region_size, decoupled, partitions, &probe))
      lo = mid;
    else
      hi = mid;
  }
  uint64_t n = lo;
  if (n > 0) Layout(n, slot_size, max_participants, region_size, decoupled, partitions, &g);
  if (n == 0 || g.num_slots == 0) {
    const uint64_t need = MinRegionBytes(slot_size, max_participants, decoupled, partitions);
    const uint64_t min_slots = MinSlots(partitions);
    // With several write partitions the least is a set of slots each.
    const std::string what = min_slots == 1
                                 ? "one slot"
                                 : std::to_string(min_slots) + " slots (one set of " +
                                       std::to_string(kMaxWays) + " per write partition, " +
                                       std::to_string(partitions) + " partitions)";
    return Status::InvalidArgument(
        "region of " + base::FormatBytes(region_size) + " cannot hold " + what + " of " +
        base::FormatBytes(slot_size) + ": its metadata (for " + std::to_string(max_participants) +
        " participants) and " + (min_slots == 1 ? "one slot" : "those") + " need at least " +
        std::to_string(need) + " bytes (" + base::FormatBytes(need) + "); give --region-size " +
        std::to_string(need) + " or more" + (min_slots > 1 ? ", or fewer --partitions" : "") +
        (slot_size > kMinSlotSize ? ", or a smaller --slot-size" : ""));
  }
  // Layouts 5, 6: SlotMeta::data and the data word's entry field (layout.h).
  if ((decoupled || partitions > 0) && g.num_slots > kMaxDataSlots) {
    return Status::InvalidArgument(
        "region of " + base::FormatBytes(region_size) + " holds " + std::to_string(g.num_slots) +
        " slots of " + base::FormatBytes(slot_size) + "; layout " + (partitions > 0 ? "6" : "5") +
        " allows at most " + std::to_string(kMaxDataSlots) + ": use a larger --slot-size");
  }
  *out = g;
  return Status::OK();
}

}  // namespace

Status ComputeGeometry(uint64_t region_size, uint64_t slot_size, uint32_t max_participants,
                       bool decoupled, Geometry* out) {
  return ComputeAny(region_size, slot_size, max_participants, decoupled, 0, out);
}

Status ComputeSoftwareGeometry(uint64_t region_size, uint64_t slot_size, uint32_t max_participants,
                               uint32_t partitions, Geometry* out) {
  if (partitions < 1) {
    return Status::InvalidArgument("software_partitions " + std::to_string(partitions) +
                                   " out of range [1, 16]");
  }
  return ComputeAny(region_size, slot_size, max_participants, false, partitions, out);
}

Status CheckRecordedGeometry(const Superblock& sb, uint64_t mapped_bytes, bool size_given,
                             Geometry* out) {
  if (sb.region_size > mapped_bytes) {
    const std::string recorded = std::to_string(sb.region_size);
    const std::string head = "its header records a region of " + recorded + " bytes (" +
                             base::FormatBytes(sb.region_size) + ")";
    if (size_given) {
      return Status::InvalidArgument(head + " but the size given is " +
                                     std::to_string(mapped_bytes) + " bytes: give --region-size " +
                                     recorded + ", or none");
    }
    // The whole file (or device) was mapped and is still too short: it was
    // truncated, or the header was written for a larger one. Either way the
    // blocks past its end are gone and only a new format makes it usable.
    return Status::InvalidArgument(
        head + " but the file (or device) holds only " + std::to_string(mapped_bytes) + " bytes (" +
        base::FormatBytes(mapped_bytes) +
        ") from its offset: it was truncated, and its blocks are lost. Reformat it: `cxlkv "
        "format --force --slot-size " +
        std::to_string(sb.slot_size) +
        "` makes a region of the file's present size; add `--region-size " + recorded +
        "` to keep the recorded size (the file is grown back to it)");
  }
  Geometry g;
  const bool decoupled = sb.layout_version == kLayoutVersion;
  const bool software = sb.layout_version == kLayoutVersionSoftware;
  Status s =
      software ? ComputeSoftwareGeometry(sb.region_size, sb.slot_size, sb.max_participants,
                                         sb.partitions, &g)
               : ComputeGeometry(sb.region_size, sb.slot_size, sb.max_participants, decoupled, &g);
  // The header checksum held (Validate checks it first), so these bytes
  // were written as they are: by a buggy or hostile writer, not a bit flip.
  // Either way nothing of the region can be placed.
  static constexpr char kHowOn[] =
      ": the header was damaged; reformat with `cxlkv format --force` (its blocks are lost)";
  if (!s.ok()) return Status::Corruption("header geometry invalid: " + s.message() + kHowOn);
  auto check = [](const char* field, uint64_t recorded, uint64_t derived) -> Status {
    if (recorded == derived) return Status::OK();
    return Status::Corruption(std::string("header field ") + field + " is " +
                              std::to_string(recorded) + ", geometry requires " +
                              std::to_string(derived) + kHowOn);
  };
  CXLKV_RETURN_IF_ERROR(check("num_slots", sb.num_slots, g.num_slots));
  CXLKV_RETURN_IF_ERROR(check("num_sets", sb.num_sets, g.num_sets));
  CXLKV_RETURN_IF_ERROR(check("num_entries", sb.num_entries, g.num_entries));
  CXLKV_RETURN_IF_ERROR(check("dwords_off", sb.dwords_off, software ? g.rings_off : g.dwords_off));
  CXLKV_RETURN_IF_ERROR(check("ways", sb.ways, g.ways));
  CXLKV_RETURN_IF_ERROR(check("pin_words", sb.pin_words, g.pin_words));
  CXLKV_RETURN_IF_ERROR(check("slot_stride", sb.slot_stride, g.slot_stride));
  CXLKV_RETURN_IF_ERROR(check("data_align", sb.data_align, g.data_align));
  CXLKV_RETURN_IF_ERROR(check("registry_off", sb.registry_off, g.registry_off));
  CXLKV_RETURN_IF_ERROR(check("namespaces_off", sb.namespaces_off, g.namespaces_off));
  CXLKV_RETURN_IF_ERROR(check("retired_off", sb.retired_off, g.retired_off));
  CXLKV_RETURN_IF_ERROR(check("tags_off", sb.tags_off, g.tags_off));
  CXLKV_RETURN_IF_ERROR(check("meta_off", sb.meta_off, g.meta_off));
  CXLKV_RETURN_IF_ERROR(check("pins_off", sb.pins_off, g.pins_off));
  CXLKV_RETURN_IF_ERROR(check("data_off", sb.data_off, g.data_off));
  *out = g;
  return Status::OK();
}

}  // namespace cxlkv::internal
