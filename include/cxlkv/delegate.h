// Copyright cxlkv authors.
//
// Delegated, parted writes: one process reserves a slot, other processes
// (one per tensor-parallel rank) fill one part each, and the reserving process
// commits. This is how vLLM's offloading connector works: the scheduler
// process (EngineCore) decides what to store and must know the outcome, while
// the bytes are in the worker processes' KV caches.
//
// Slot payload of a parted block (`PartedLayout{parts, part_len}`):
//   [part 0: part_len bytes] ... [part parts-1] [table: parts x PartEntry]
// Part p is written only by filler p. Its table entry records the CRC32C of
// the part and the reservation's WRITING word, so the committer can tell a
// part filled for *this* reservation from stale bytes of an earlier use of
// the slot or a late write from a reservation that was lost.
//
// Protocol (the reserving process R owns the slot throughout; no other
// process ever writes metadata):
//   R: BeginWrite(len = PayloadLen()) -> lease (WRITING word w)
//   R: ExportWriteToken(lease) -> token {format_epoch, slot, w, len}  (picklable;
//      layouts 5 and 6: len's high 32 bits carry the lease's data slot)
//   each filler p: FillPart(token, p, pages)  -> part p bytes + table[p] = {crc, w}
//   R, after every filler reported: CommitPartedWrite(lease)
//        table[p].word == w for all p -> CommitWrite(CRC32C(payload)) -> READY
//        else kCorruption, the lease is aborted (slot FREE)
// A filler that dies leaves R's lease WRITING; R aborts it (or R's own death
// frees it through reclaim). A filler that fills after R lost the slot writes
// into bytes it does not own; the table word (and readers' CRC check) keeps
// such bytes from ever being served.
//
// Readers of one part (LoadPart) verify the part they copy plus the table
// against the CRC recorded at commit, without reading the other parts.
//
// Pages: vLLM hands each worker KV tensors whose dim 0 is the block id, each
// block one page of `page_bytes` at `block_stride` bytes apart. A part holds,
// for each tensor in order, the pages of the chunk's `blocks_per_chunk`
// blocks in order, then zero padding up to part_len.
//
// Thread-safety: the functions are safe to call concurrently from any thread
// of any attached process, as the Region API is.
#ifndef CXLKV_DELEGATE_H_
#define CXLKV_DELEGATE_H_

#include <cstddef>
#include <cstdint>

#include "cxlkv/region.h"

namespace cxlkv {

// A reservation made by another process, as plain values (travels pickled).
struct WriteToken {
  uint64_t format_epoch = 0;  // RegionInfo::format_epoch of the region
  uint64_t slot = 0;
  uint64_t word = 0;  // the WRITING word the reservation installed
  // Low 32 bits: payload bytes reserved (a slot holds less than 2^32).
  // Layouts 5 and 6: high 32 bits, the data slot the reservation holds
  // (fewer than 2^32 data slots), so fillers write where the reservation's
  // data word says (layout 5), or only where token and index agree (layout
  // 6, coherence=software: no data words), never where a damaged index
  // alone would send them; 0 otherwise. Use TokenPayloadLen / TokenDataSlot.
  uint64_t len = 0;
};
inline uint64_t TokenPayloadLen(const WriteToken& t) { return t.len & 0xFFFFFFFFu; }
inline uint64_t TokenDataSlot(const WriteToken& t) { return t.len >> 32; }

struct PartedLayout {
  uint32_t parts = 1;     // fillers (tensor-parallel ranks)
  uint64_t part_len = 0;  // bytes per part
  // Payload bytes of a parted block: parts x (part_len + table entry).
  uint64_t PayloadLen() const;
};

// One tensor of pages (e.g. one layer's KV cache on one rank).
struct PageTensor {
  uint64_t base = 0;          // address of block 0's page (host memory)
  uint64_t block_stride = 0;  // bytes between consecutive blocks' pages
  uint64_t page_bytes = 0;    // bytes copied per block
  uint64_t num_blocks = 0;    // valid block ids are [0, num_blocks)
};

// Which pages of one chunk a transfer touches: the chunk's blocks
// [skip, skip + count) are GPU blocks block_ids[0 .. count).
struct ChunkPages {
  const PageTensor* tensors = nullptr;
  size_t num_tensors = 0;
  uint32_t blocks_per_chunk = 1;
  const int32_t* block_ids = nullptr;
  uint32_t skip = 0;
  uint32_t count = 0;
};

// CRC32C of A || B from CRC32C(A), CRC32C(B) and |B|.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// The token of an open lease of `region`. kInvalidArgument for a closed lease.
Status ExportWriteToken(const Region& region, const WriteLease& lease, WriteToken* token);

// Filler p: copies the chunk's pages into part `part` of the reserved slot
// and records its table entry. Stores need whole chunks: REQUIRES skip == 0
// and count == blocks_per_chunk (else kInvalidArgument).
// kInvalidArgument for a token of another region, a slot out of range, a
// layout whose payload differs from the token's length, pages that exceed
// part_len, a block id out of range, or a token from an older build that
// carries no data slot; kNotFound if the reservation no longer holds
// (aborted, reclaimed or committed) before or after the copy, or if the
// token's data slot is not the reservation's (coherence=software: or the
// reserved entry's index, damaged, names another).
Status FillPart(Region* region, const WriteToken& token, const PartedLayout& layout, uint32_t part,
                const ChunkPages& pages);

// The reserving process, after every filler reported: publishes the slot if
// every table entry was written for this reservation. kCorruption (lease
// aborted, slot freed) if a part was not; CommitWrite's codes otherwise.
// Closes the lease in all cases.
Status CommitPartedWrite(Region* region, WriteLease* lease, const PartedLayout& layout);

// Reader of part `part`: copies the chunk's blocks [skip, skip+count) into
// the pages and verifies the part (the copied bytes as they landed, the
// skipped pages and the padding as read) and the table against the CRC
// recorded at commit. OK only if the copy is valid; kNotFound on a miss or a
// slot that changed during the copy; kCorruption on a CRC mismatch or a slot
// whose length is not the layout's (the slot is then dropped and counted as a
// CRC failure, like Region::Load); kInvalidArgument for bad pages. `info`
// (optional) gets the writer participant and bytes copied.
Status LoadPart(Region* region, NamespaceId ns, const BlockKey& key, const PartedLayout& layout,
                uint32_t part, const ChunkPages& pages, LoadInfo* info = nullptr);

// ---- The same, for copies done by someone else (a GPU's DMA or SM copy) ----
//
// A filler or reader whose bytes move by DMA (src/transfer/region_gpu.h)
// cannot hand the engine a page list of host addresses: it asks for the
// part's bytes in the slot, copies (checksumming what it copied on the
// device), and then finishes with the CRC. The checks are the ones FillPart
// and LoadPart make; FillPart/LoadPart are these with a memcpy in between.

// Filler: checks the token, the layout and that the reservation holds, and
// sets *dst to part `part`'s part_len bytes in the slot. Codes as FillPart
// (kInvalidArgument, kNotFound). Nothing is written.
Status BeginFillPart(Region* region, const WriteToken& token, const PartedLayout& layout,
                     uint32_t part, uint8_t** dst);
// Filler, after writing the part's first `bytes` bytes (<= part_len) whose
// plain CRC32C is `crc`: zero-pads the rest of the part, records the part's
// table entry, and re-checks the reservation. kNotFound if it was lost
// (nothing of ours may then be committed); kInvalidArgument for bytes >
// part_len.
Status EndFillPart(Region* region, const WriteToken& token, const PartedLayout& layout,
                   uint32_t part, uint64_t bytes, uint32_t crc);

// Reader: BeginRead of the block plus the layout check; *src is part
// `part`'s part_len bytes (valid until EndLoadPart; untrusted until it
// returns OK). Codes as LoadPart: kNotFound on a miss, kCorruption for a
// block whose length is not the layout's (the lease is then closed).
Status BeginLoadPart(Region* region, NamespaceId ns, const BlockKey& key,
                     const PartedLayout& layout, uint32_t part, ReadLease* lease,
                     const uint8_t** src);
// Reader, after copying the part's first `bytes` bytes out, `crc` being the
// plain CRC32C of the copy as it landed: checksums the rest of the part from
// the region, combines it with the table, and closes the lease through
// EndRead. OK only if the copy is valid; kNotFound if the slot changed,
// kCorruption on a mismatch (the slot is dropped and counted, as LoadPart).
// `info` (optional) as LoadPart, with len = bytes.
Status EndLoadPart(Region* region, ReadLease* lease, const PartedLayout& layout, uint32_t part,
                   uint64_t bytes, uint32_t crc, LoadInfo* info = nullptr);

}  // namespace cxlkv

#endif  // CXLKV_DELEGATE_H_
