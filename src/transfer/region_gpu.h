// Copyright cxlkv authors.
//
// RegionGpu: the Region API for blocks that live in GPU memory. Stores DMA
// GPU -> slot between BeginWrite and CommitWrite; loads DMA slot -> GPU
// between BeginRead and EndRead. The region's slot area is registered with
// CUDA once, at Open, so the direct path needs no staging buffer.
//
// Integrity (docs/gpu.md): every block is checksummed on the GPU. A store
// passes the GPU's CRC32C of the source bytes to CommitWrite, so the CPU
// never reads the block; a load compares the GPU's CRC32C of the bytes that
// landed with the CRC recorded at commit, and EndRead confirms the slot's
// generation did not change during the DMA. A load that fails either check
// is reported per block (kCorruption or kNotFound) and the corrupt slot is
// dropped; the caller decides what a failed block means (vLLM: recompute or
// fail the request).
//
// Thread-safety: safe for concurrent use (the engine serializes the DMA).
// Must not outlive the Region.
#ifndef CXLKV_SRC_TRANSFER_REGION_GPU_H_
#define CXLKV_SRC_TRANSFER_REGION_GPU_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "cxlkv/delegate.h"
#include "cxlkv/region.h"
#include "gpu_transfer.h"

namespace cxlkv {

struct RegionGpuOptions {
  GpuTransferOptions transfer;

  // If registering the region with CUDA fails (e.g. an fsdax file, or a
  // driver that refuses the mapping), keep working through the staged path
  // instead of failing Open. direct() then reports false. Default true.
  bool fallback_to_staged = true;

  // Checksum blocks on the GPU (see above). Turning it off leaves only the
  // generation check on loads, and CommitWrite then has the CPU checksum
  // the slot. Default true.
  bool gpu_crc = true;
};

// Device ranges of the blocks of one call: block b is the concatenation of
// pieces [first_piece[b], first_piece[b+1]) of (ptr, len).
struct GpuBlocks {
  const uint64_t* ptr = nullptr;
  const uint64_t* len = nullptr;
  const uint32_t* first_piece = nullptr;  // num_blocks + 1 entries
  size_t num_blocks = 0;

  // Bytes of block b's pieces.
  uint64_t capacity(size_t b) const {
    uint64_t c = 0;
    for (uint32_t p = first_piece[b]; p < first_piece[b + 1]; ++p) c += len[p];
    return c;
  }
  // Appends block b's pieces to the last block of `batch`, cut to `n` bytes.
  void AddPieces(size_t b, uint64_t n, GpuBatch* batch) const {
    for (uint32_t p = first_piece[b]; p < first_piece[b + 1] && n > 0; ++p) {
      const uint64_t take = n < len[p] ? n : len[p];
      batch->AddPiece(ptr[p], take);
      n -= take;
    }
  }
};

// Per-chunk outcome of the parted calls below.
struct GpuPartResult {
  std::vector<Status> status;    // per chunk: OK, or as delegate.h's Begin/End*Part
  std::vector<uint64_t> len;     // per chunk: bytes copied (0 unless OK)
  std::vector<uint32_t> writer;  // loads: the participant that stored the chunk
  size_t ok = 0;                 // chunks with OK
};

struct GpuStoreResult {
  std::vector<Status> status;         // per block: as Region::BeginWrite/CommitWrite
  std::vector<StoreOutcome> outcome;  // per block
  size_t stored = 0;                  // blocks written (kStored)
};

struct GpuLoadResult {
  std::vector<Status> status;  // per block: OK, kNotFound (miss / changed), kCorruption, ...
  std::vector<uint64_t> len;   // per block: bytes loaded (0 unless OK)
  size_t loaded = 0;           // blocks with OK
  size_t prefix = 0;           // leading blocks with OK
};

class RegionGpu {
 public:
  // Creates the transfer engine on options.transfer.device and registers
  // the region's slot area. Codes as GpuTransferEngine::Create and
  // RegisterHost (unless fallback_to_staged).
  static Status Open(Region* region, const RegionGpuOptions& options,
                     std::unique_ptr<RegionGpu>* out);
  ~RegionGpu();

  // True if the slot area is registered and kDirect copies are possible.
  bool direct() const { return direct_; }
  GpuPath default_path() const { return direct_ ? GpuPath::kDirect : GpuPath::kStaged; }
  GpuTransferEngine* engine() const { return engine_.get(); }

  // Stores each block under keys[b]. Returns OK if the batch ran (per-block
  // outcomes in *result); an error only if the DMA itself failed, in which
  // case every write of the batch was aborted. `after_stream`: copies start
  // after work already queued there (e.g. torch.cuda.current_stream()).
  // `depths` (num_blocks entries, or null: all 0): block b's depth in its
  // prefix chain, the eviction hint of Region::Store.
  // REQUIRES: this process is a participant of the region.
  Status Store(NamespaceId ns, const BlockKey* keys, const GpuBlocks& blocks, GpuPath path,
               uintptr_t after_stream, GpuStoreResult* result, const uint32_t* depths = nullptr);

  // Loads each block of keys[b] into its device pieces (which must hold at
  // least the stored length; a shorter stored block fills a prefix). OK if
  // the batch ran, per-block results in *result; an error only if the DMA
  // failed (all leases are then closed and nothing counts as loaded).
  // options.verify_crc (default true) checks each block's GPU CRC32C; false
  // leaves only the generation check (also when the Open options turned
  // gpu_crc off).
  Status Load(NamespaceId ns, const BlockKey* keys, const GpuBlocks& blocks, GpuPath path,
              GpuLoadResult* result, const LoadOptions& options = {});

  // ---- Parted writes and reads (cxlkv/delegate.h) of GPU-resident KV ----
  // What vLLM's worker does on a GPU (region_gpu_parts.cc): EngineCore
  // reserved the slots and holds the leases; this rank fills, or reads, its
  // part of each. Chunk c of `blocks` (at most part_len bytes) is part
  // `part` of the slot of tokens[c] / keys[c]. The GPU checksums every part
  // (always: the part table needs the CRC), so the CPU never reads the bytes.

  // Fills part `part` of each reserved slot and records its table entry.
  // OK if the batch ran (per-chunk outcome in *result: kNotFound if that
  // reservation was lost, kInvalidArgument for a bad token or a chunk larger
  // than part_len); an error only if the DMA failed, and then no part was
  // recorded (EngineCore's commit refuses those slots). `after_stream` as
  // Store.
  Status FillParts(const WriteToken* tokens, const PartedLayout& layout, uint32_t part,
                   const GpuBlocks& blocks, GpuPath path, uintptr_t after_stream,
                   GpuPartResult* result);

  // Loads part `part` of each block keys[c] into chunk c's pieces and
  // verifies it (as LoadPart: the bytes as they landed, the rest of the part
  // and the table against the committed CRC). Per chunk: OK, kNotFound (a
  // miss, or the slot changed during the copy), kCorruption (the slot is
  // dropped). An error only if the DMA failed (nothing then counts as
  // loaded; every lease is closed). Bytes the caller does not want on the
  // GPU still have to land somewhere for the CRC: KvPieces::BuildWhole sends
  // them to scratch.
  Status LoadParts(NamespaceId ns, const BlockKey* keys, const PartedLayout& layout, uint32_t part,
                   const GpuBlocks& blocks, GpuPath path, GpuPartResult* result);

 private:
  RegionGpu() = default;
  Region* region_ = nullptr;
  RegionGpuOptions opts_;
  std::unique_ptr<GpuTransferEngine> engine_;
  bool direct_ = false;
};

// The region's slot area (the bytes DMA touches): [*base, *base + *len), as
// RegionInternal::SlotArea (src/region/region_internal.h) documents it.
// kInvalidArgument for a null `region`.
Status RegionSlotArea(Region* region, uint8_t** base, uint64_t* len);

}  // namespace cxlkv

#endif  // CXLKV_SRC_TRANSFER_REGION_GPU_H_
