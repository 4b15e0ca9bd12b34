// Copyright cxlkv authors.
//
// Delegated, parted writes and per-part reads (include/cxlkv/delegate.h).
// Everything here goes through the slot state word and the Region API: the
// only metadata write is the reserving process's own CommitWrite/AbortWrite.
#include "cxlkv/delegate.h"

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "../transfer/crc32c_math.h"
#include "crc32c.h"
#include "region_impl.h"

namespace cxlkv {
namespace {

// Table entry of one part, as stored (host byte order: the memory is shared
// by processes of one architecture, and the format epoch ties tokens to it).
struct PartEntry {
  uint32_t crc32c;
  uint32_t reserved;
  uint64_t word;  // WRITING word of the reservation the part was filled for
};
static_assert(sizeof(PartEntry) == 16);

internal::RegionImpl* Impl(Region* r) { return static_cast<internal::RegionImpl*>(r); }

// An index apart from the data slots (layout 5; layout 6, coherence=
// software): the token carries the reservation's data slot.
bool TokenCarriesData(const Region& r) {
  const internal::Geometry& g = static_cast<const internal::RegionImpl&>(r).geometry();
  return g.decoupled || g.partitions > 0;
}

const uint32_t* Pow8() {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(64);
    internal::FillXPow8Table(t.data());
    return t;
  }();
  return table.data();
}

uint64_t PartPageBytes(const ChunkPages& p) {
  uint64_t n = 0;
  for (size_t t = 0; t < p.num_tensors; ++t) n += p.tensors[t].page_bytes * p.blocks_per_chunk;
  return n;
}

Status CheckPages(const ChunkPages& p, const PartedLayout& layout) {
  if (p.blocks_per_chunk == 0 || p.skip + p.count > p.blocks_per_chunk || p.count == 0)
    return Status::InvalidArgument(
        "pages: blocks [" + std::to_string(p.skip) + ", " + std::to_string(p.skip + p.count) +
        ") are not inside a chunk of " + std::to_string(p.blocks_per_chunk) + " blocks");
  if (PartPageBytes(p) > layout.part_len)
    return Status::InvalidArgument("pages: " + std::to_string(PartPageBytes(p)) +
                                   " bytes per chunk exceed the part length " +
                                   std::to_string(layout.part_len));
  for (size_t t = 0; t < p.num_tensors; ++t) {
    const PageTensor& pt = p.tensors[t];
    if (pt.page_bytes > pt.block_stride && pt.num_blocks > 1)
      return Status::InvalidArgument("pages: tensor " + std::to_string(t) +
                                     " has pages larger than its block stride");
    for (uint32_t i = 0; i < p.count; ++i) {
      const int64_t b = p.block_ids[i];
      if (b < 0 || static_cast<uint64_t>(b) >= pt.num_blocks)
        return Status::InvalidArgument("pages: block id " + std::to_string(b) + " outside 0.." +
                                       std::to_string(pt.num_blocks - 1));
    }
  }
  return Status::OK();
}

Status CheckLayout(const PartedLayout& layout, uint32_t part) {
  if (layout.parts == 0 || part >= layout.parts)
    return Status::InvalidArgument("part " + std::to_string(part) + " of a layout of " +
                                   std::to_string(layout.parts) + " parts");
  return Status::OK();
}

uint8_t* PageAddr(const PageTensor& t, int32_t block) {
  return reinterpret_cast<uint8_t*>(t.base + static_cast<uint64_t>(block) * t.block_stride);
}

}  // namespace

uint64_t PartedLayout::PayloadLen() const {
  return static_cast<uint64_t>(parts) * (part_len + sizeof(PartEntry));
}

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  // With initial value and final inversion both all-ones, the affine terms
  // cancel: CRC(A||B) = CRC(A) * x^(8|B|) + CRC(B) over GF(2)[x] mod P.
  return internal::GfMul(crc_a, internal::XPow8n(len_b, Pow8())) ^ crc_b;
}

Status ExportWriteToken(const Region& region, const WriteLease& lease, WriteToken* token) {
  if (!lease.open()) return Status::InvalidArgument("ExportWriteToken on a closed lease");
  token->format_epoch = region.info().format_epoch;
  token->slot = RegionInternal::LeaseSlot(lease);
  token->word = RegionInternal::LeaseWord(lease);
  token->len = lease.len();
  if (TokenCarriesData(region)) {
    // The lease's own data slot, as its holder claimed it (the region's
    // index is untrusted bytes; the lease is this process's memory).
    token->len |= static_cast<const internal::RegionImpl&>(region).DataIndexOf(lease.data()) << 32;
  }
  return Status::OK();
}

namespace {

Status CheckToken(const Region& region, const WriteToken& token, const PartedLayout& layout,
                  uint32_t part) {
  CXLKV_RETURN_IF_ERROR(CheckLayout(layout, part));
  const RegionInfo& info = region.info();
  if (token.format_epoch != info.format_epoch)
    return Status::InvalidArgument("write token of another region (format epoch " +
                                   std::to_string(token.format_epoch) + ", this region " +
                                   std::to_string(info.format_epoch) + ")");
  const uint64_t data_limit = TokenCarriesData(region) ? info.num_slots : 1;
  if (token.slot >= info.num_entries || TokenPayloadLen(token) > info.slot_size ||
      TokenDataSlot(token) >= data_limit)
    return Status::InvalidArgument("write token outside the region's slots");
  if (TokenPayloadLen(token) != layout.PayloadLen())
    return Status::InvalidArgument("write token of " + std::to_string(TokenPayloadLen(token)) +
                                   " bytes for a parted layout of " +
                                   std::to_string(layout.PayloadLen()));
  return Status::OK();
}

Status ReservationHolds(Region* region, const WriteToken& token, const char* when) {
  // Acquire: our writes to the slot must follow the reservation we check.
  if (Impl(region)->Meta(token.slot).state.load(std::memory_order_acquire) != token.word)
    return Status::NotFound("the reservation of slot " + std::to_string(token.slot) + when);
  return Status::OK();
}

// The payload's CRC as the stored bytes would have it, with part `part`'s
// CRC replaced by `part_crc` (what the reader copied): equal to the
// committed CRC only if that part and the table are intact.
uint32_t PayloadCrc(const std::vector<PartEntry>& table, const PartedLayout& layout, uint32_t part,
                    uint32_t part_crc) {
  uint32_t payload = 0;
  for (uint32_t p = 0; p < layout.parts; ++p) {
    const uint32_t c = p == part ? part_crc : table[p].crc32c;
    payload = p == 0 ? c : Crc32cCombine(payload, c, layout.part_len);
  }
  return Crc32cCombine(payload, internal::Crc32c(table.data(), table.size() * sizeof(PartEntry)),
                       table.size() * sizeof(PartEntry));
}

// The bytes of the token's reservation. Layout 5: the data slot the token
// carries, if its word is still the reservation's lease (MOVING for the
// entry at the WRITING word's generation, until the commit settles it):
// not the index in the region, which damage may point at another block's
// bytes. Layout 6: the token's data slot, if it lies in the reserved
// entry's write partition and the entry's index names it (no data words:
// the holder's free list is in its process's memory, so damage to the
// index, or a wrong token, is refused rather than filled). Otherwise the
// data slot its entry names.
// A token naming data slot 0 (zero high bits) whose reservation holds
// another data slot right now: exported by a build from before tokens
// carried the data slot, not a lost reservation. The entry's index is
// untrusted, but a data word held by this reservation's lease can only be
// its own data slot, so a token that says 0 was made without it.
// The error for a token that says data slot 0 while its reservation holds
// (or its index names: `whose`) data slot `held`.
Status OlderBuildToken(const WriteToken& token, uint64_t held, const char* whose,
                       const char* or_else) {
  return Status::InvalidArgument(
      "write token of slot " + std::to_string(token.slot) +
      " carries no data slot (the high 32 bits of its len are zero) while its " + whose + " " +
      std::to_string(held) +
      ": it was exported by an older cxlkv build, from before tokens carried the data slot" +
      or_else +
      ". Run the reserving process (the one that calls ExportWriteToken) on this build, the same "
      "as the fillers, and export the token again");
}

Status CheckTokenCarriesItsDataSlot(internal::RegionImpl* impl, const WriteToken& token) {
  const int64_t held = impl->EntryDataSlot(token.slot);
  if (held <= 0 || !internal::DataLeaseIs(
                       impl->DataWord(static_cast<uint64_t>(held)).load(std::memory_order_acquire),
                       token.slot, internal::WordGen(token.word)))
    return Status::OK();
  return OlderBuildToken(token, static_cast<uint64_t>(held), "reservation holds data slot", "");
}

Status TokenData(Region* region, const WriteToken& token, uint8_t** base) {
  internal::RegionImpl* impl = Impl(region);
  if (impl->geometry().partitions > 0) {
    const uint64_t d = TokenDataSlot(token);
    const uint64_t named = impl->Meta(token.slot).data.load(std::memory_order_acquire);
    if (!impl->SwDataInPartition(d, impl->SwPartitionOf(token.slot)) || named != d) {
      // Tokens of layout 6 carry their data slot since this build: one
      // that says 0 where the index names another was exported by an
      // older build (or the index is damaged: no data word tells which).
      if (d == 0)
        return OlderBuildToken(token, named, "reservation's index names data slot",
                               " (or the index is damaged)");
      return Status::NotFound("the reservation of slot " + std::to_string(token.slot) +
                              " does not hold data slot " + std::to_string(d) +
                              " (its index names " + std::to_string(named) + ")");
    }
    *base = impl->SlotData(d);
    return Status::OK();
  }
  if (TokenCarriesData(*region)) {
    const uint64_t d = TokenDataSlot(token);
    if (!internal::DataLeaseIs(impl->DataWord(d).load(std::memory_order_acquire), token.slot,
                               internal::WordGen(token.word))) {
      if (d == 0) CXLKV_RETURN_IF_ERROR(CheckTokenCarriesItsDataSlot(impl, token));
      return Status::NotFound("the reservation of slot " + std::to_string(token.slot) +
                              " no longer holds data slot " + std::to_string(d));
    }
    *base = impl->SlotData(d);
    return Status::OK();
  }
  *base = impl->EntryData(token.slot);
  if (*base == nullptr)
    return Status::Corruption("the reservation of slot " + std::to_string(token.slot) +
                              " names a data slot past the region's");
  return Status::OK();
}

}  // namespace

Status BeginFillPart(Region* region, const WriteToken& token, const PartedLayout& layout,
                     uint32_t part, uint8_t** dst) {
  CXLKV_RETURN_IF_ERROR(CheckToken(*region, token, layout, part));
  CXLKV_RETURN_IF_ERROR(ReservationHolds(region, token, " no longer holds"));
  uint8_t* base;
  CXLKV_RETURN_IF_ERROR(TokenData(region, token, &base));
  *dst = base + static_cast<uint64_t>(part) * layout.part_len;
  return Status::OK();
}

Status EndFillPart(Region* region, const WriteToken& token, const PartedLayout& layout,
                   uint32_t part, uint64_t bytes, uint32_t crc) {
  CXLKV_RETURN_IF_ERROR(CheckToken(*region, token, layout, part));
  if (bytes > layout.part_len)
    return Status::InvalidArgument("filled " + std::to_string(bytes) + " bytes into a part of " +
                                   std::to_string(layout.part_len));
  uint8_t* base;
  CXLKV_RETURN_IF_ERROR(TokenData(region, token, &base));
  uint8_t* dst = base + static_cast<uint64_t>(part) * layout.part_len;
  if (bytes < layout.part_len) {
    const uint64_t pad = layout.part_len - bytes;
    std::memset(dst + bytes, 0, pad);
    crc = Crc32cCombine(crc, internal::Crc32c(dst + bytes, pad), pad);
  }
  const PartEntry entry{crc, 0, token.word};
  uint8_t* table = base + static_cast<uint64_t>(layout.parts) * layout.part_len;
  std::memcpy(table + static_cast<uint64_t>(part) * sizeof(PartEntry), &entry, sizeof(entry));
  // Release: the part and its entry are complete before anyone who sees
  // our report (through the engine's own channel) commits.
  std::atomic_thread_fence(std::memory_order_release);
  return ReservationHolds(region, token, " was lost during the copy");
}

Status FillPart(Region* region, const WriteToken& token, const PartedLayout& layout, uint32_t part,
                const ChunkPages& pages) {
  CXLKV_RETURN_IF_ERROR(CheckToken(*region, token, layout, part));
  if (pages.skip != 0 || pages.count != pages.blocks_per_chunk)
    return Status::InvalidArgument("a stored part needs the chunk's every block");
  CXLKV_RETURN_IF_ERROR(CheckPages(pages, layout));
  uint8_t* dst = nullptr;
  CXLKV_RETURN_IF_ERROR(BeginFillPart(region, token, layout, part, &dst));
  uint32_t crc = internal::kCrc32cInit;
  uint64_t off = 0;
  for (size_t t = 0; t < pages.num_tensors; ++t) {
    const PageTensor& pt = pages.tensors[t];
    for (uint32_t i = 0; i < pages.count; ++i) {
      const uint8_t* src = PageAddr(pt, pages.block_ids[i]);
      // CRC of the source (the KV cache), so bytes damaged in the region
      // after the copy are caught by readers.
      crc = internal::Crc32cExtend(crc, src, pt.page_bytes);
      std::memcpy(dst + off, src, pt.page_bytes);
      off += pt.page_bytes;
    }
  }
  return EndFillPart(region, token, layout, part, off, internal::Crc32cFinish(crc));
}

Status CommitPartedWrite(Region* region, WriteLease* lease, const PartedLayout& layout) {
  if (!lease->open()) return Status::InvalidArgument("CommitPartedWrite on a closed lease");
  if (layout.parts == 0 || lease->len() != layout.PayloadLen()) {
    region->AbortWrite(lease);
    return Status::InvalidArgument("lease of " + std::to_string(lease->len()) +
                                   " bytes for a parted layout of " +
                                   std::to_string(layout.PayloadLen()));
  }
  const uint64_t word = RegionInternal::LeaseWord(*lease);
  const auto* data = static_cast<const uint8_t*>(lease->data());
  // One copy of the table: the bytes we check are the bytes we checksum.
  std::vector<PartEntry> table(layout.parts);
  std::atomic_thread_fence(std::memory_order_acquire);
  std::memcpy(table.data(), data + static_cast<uint64_t>(layout.parts) * layout.part_len,
              table.size() * sizeof(PartEntry));
  uint32_t crc = 0;
  for (uint32_t p = 0; p < layout.parts; ++p) {
    if (table[p].word != word) {
      region->AbortWrite(lease);
      return Status::Corruption("part " + std::to_string(p) + " of " +
                                std::to_string(layout.parts) +
                                " was not filled for this reservation");
    }
    crc = p == 0 ? table[p].crc32c : Crc32cCombine(crc, table[p].crc32c, layout.part_len);
  }
  crc = Crc32cCombine(crc, internal::Crc32c(table.data(), table.size() * sizeof(PartEntry)),
                      table.size() * sizeof(PartEntry));
  return region->CommitWrite(lease, &crc);
}

Status BeginLoadPart(Region* region, NamespaceId ns, const BlockKey& key,
                     const PartedLayout& layout, uint32_t part, ReadLease* lease,
                     const uint8_t** src) {
  CXLKV_RETURN_IF_ERROR(CheckLayout(layout, part));
  CXLKV_RETURN_IF_ERROR(region->BeginRead(ns, key, lease));
  if (lease->len() != layout.PayloadLen()) {
    const size_t len = lease->len();
    (void)region->EndRead(lease);
    return Status::Corruption("block of " + std::to_string(len) +
                              " bytes where the parted layout has " +
                              std::to_string(layout.PayloadLen()));
  }
  *src = static_cast<const uint8_t*>(lease->data()) + static_cast<uint64_t>(part) * layout.part_len;
  return Status::OK();
}

Status EndLoadPart(Region* region, ReadLease* lease, const PartedLayout& layout, uint32_t part,
                   uint64_t bytes, uint32_t crc, LoadInfo* info) {
  Status s = CheckLayout(layout, part);
  if (s.ok() && (!lease->open() || lease->len() != layout.PayloadLen()))
    s = Status::InvalidArgument("EndLoadPart on a lease that BeginLoadPart did not open");
  if (s.ok() && bytes > layout.part_len)
    s = Status::InvalidArgument("copied " + std::to_string(bytes) + " bytes of a part of " +
                                std::to_string(layout.part_len));
  if (!s.ok()) {
    if (lease->open()) (void)region->EndRead(lease);  // its verdict is moot
    return s;
  }
  const auto* data = static_cast<const uint8_t*>(lease->data());
  const uint8_t* src = data + static_cast<uint64_t>(part) * layout.part_len;
  if (bytes < layout.part_len) {
    const uint64_t rest = layout.part_len - bytes;
    crc = Crc32cCombine(crc, internal::Crc32c(src + bytes, rest), rest);
  }
  std::vector<PartEntry> table(layout.parts);
  std::memcpy(table.data(), data + static_cast<uint64_t>(layout.parts) * layout.part_len,
              table.size() * sizeof(PartEntry));
  uint32_t payload = PayloadCrc(table, layout, part, crc);
  const uint32_t writer = lease->writer_participant();
  CXLKV_RETURN_IF_ERROR(region->EndRead(lease, nullptr, &payload));
  if (info != nullptr) {
    info->len = bytes;
    info->writer_participant = writer;
    info->cross_participant = region->info().participant < 0 ||
                              writer != static_cast<uint32_t>(region->info().participant);
  }
  return Status::OK();
}

Status LoadPart(Region* region, NamespaceId ns, const BlockKey& key, const PartedLayout& layout,
                uint32_t part, const ChunkPages& pages, LoadInfo* info) {
  CXLKV_RETURN_IF_ERROR(CheckLayout(layout, part));
  CXLKV_RETURN_IF_ERROR(CheckPages(pages, layout));
  ReadLease lease;
  const uint8_t* src = nullptr;
  CXLKV_RETURN_IF_ERROR(BeginLoadPart(region, ns, key, layout, part, &lease, &src));
  uint32_t crc = internal::kCrc32cInit;
  uint64_t off = 0, copied = 0;
  for (size_t t = 0; t < pages.num_tensors; ++t) {
    const PageTensor& pt = pages.tensors[t];
    for (uint32_t j = 0; j < pages.blocks_per_chunk; ++j) {
      if (j >= pages.skip && j < pages.skip + pages.count) {
        uint8_t* dst = PageAddr(pt, pages.block_ids[j - pages.skip]);
        std::memcpy(dst, src + off, pt.page_bytes);
        // CRC of what landed: the region bytes may change under a zombie
        // writer, our copy cannot.
        crc = internal::Crc32cExtend(crc, dst, pt.page_bytes);
        copied += pt.page_bytes;
      } else {
        crc = internal::Crc32cExtend(crc, src + off, pt.page_bytes);
      }
      off += pt.page_bytes;
    }
  }
  CXLKV_RETURN_IF_ERROR(
      EndLoadPart(region, &lease, layout, part, off, internal::Crc32cFinish(crc), info));
  if (info != nullptr) info->len = copied;
  return Status::OK();
}

}  // namespace cxlkv
