// Copyright cxlkv authors.
//
// KvPieces: the GPU pieces of region blocks when a serving engine's KV cache
// is one (num_gpu_blocks, page_bytes) tensor per layer, as vLLM's
// OffloadingConnector hands it to its workers
// (docs/upstream/vllm-offloading.md, "The KV tensors": 28 tensors of 32 KiB
// pages for Qwen2.5-7B with 16-token blocks). Built natively so a 32K-token
// load does not cost Python 57,344 piece descriptors.
//
// Slot layout of one region block ("chunk" of blocks_per_chunk GPU blocks):
// tensor by tensor, the blocks of the chunk's GPU block ids in order (with
// equal tensors: the page of (layer l, j-th GPU block) is at slot offset
// (l * blocks_per_chunk + j) * page_bytes), as vLLM's CPU offloading lays out
// a chunk. Runs of consecutive GPU block ids of a tensor whose rows are
// contiguous (block_bytes == stride) become one piece.
//
// A load may start mid-chunk (vLLM: the GPU prefix cache already holds the
// chunk's first blocks). The slot is still copied whole, so the GPU CRC
// covers every byte; the pages of the `skip` leading GPU blocks land in
// `scratch` (device memory of at least skip * layers * page_bytes bytes)
// instead of over the blocks the GPU already holds.
//
// Thread-safety: a KvPieces is a value; concurrent Builds need separate
// objects. No CUDA calls (usable and tested without a GPU).
#ifndef CXLKV_SRC_TRANSFER_KV_LAYOUT_H_
#define CXLKV_SRC_TRANSFER_KV_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cxlkv/status.h"
#include "region_gpu.h"

namespace cxlkv {

// One KV tensor: rows are GPU blocks; row b starts at base + b * stride and
// its first block_bytes bytes are the block's (block_bytes <= stride).
struct KvTensor {
  uint64_t base = 0;
  uint64_t stride = 0;
  uint64_t block_bytes = 0;
  uint64_t num_blocks = 0;
};

struct KvLayerLayout {
  std::vector<KvTensor> tensors;  // in slot order (vLLM: one per layer, or one cross-layer)
  uint32_t blocks_per_chunk = 0;  // GPU blocks per region block
  // Bytes of one full region block in this layout.
  uint64_t chunk_bytes() const {
    uint64_t n = 0;
    for (const KvTensor& t : tensors) n += t.block_bytes;
    return n * blocks_per_chunk;
  }
  // The common case: `layers` equal tensors of contiguous pages.
  static KvLayerLayout Uniform(const std::vector<uint64_t>& bases, uint64_t page_bytes,
                               uint64_t num_blocks, uint32_t blocks_per_chunk) {
    KvLayerLayout l;
    for (uint64_t b : bases) l.tensors.push_back(KvTensor{b, page_bytes, page_bytes, num_blocks});
    l.blocks_per_chunk = blocks_per_chunk;
    return l;
  }
};

class KvPieces {
 public:
  // Pieces of the chunks that hold GPU blocks ids[0..n): chunk c holds
  // ids[c * blocks_per_chunk ...], the last chunk may be shorter (its slot
  // is then shorter too). `skip` (< blocks_per_chunk, < n) leading ids of the
  // first chunk are copied to `scratch` instead (see above); their entries
  // in `ids` are not used and may be -1. Scratch must hold skip times the
  // sum of the tensors' block_bytes.
  // kInvalidArgument: no tensors, a tensor with zero stride, block bytes or
  // rows or block_bytes > stride, an id outside a tensor's rows, a skip
  // without enough scratch, or more than 2^31 pieces. On error *this is empty.
  Status Build(const KvLayerLayout& layout, const int64_t* ids, size_t n, uint32_t skip = 0,
               uint64_t scratch = 0, uint64_t scratch_bytes = 0);

  // Pieces of `chunks` whole chunks: ids holds chunks * blocks_per_chunk
  // entries, chunk c's j-th block at ids[c * blocks_per_chunk + j]; an id of
  // -1 marks a block the copy must not touch on the GPU (a load that starts
  // or ends mid-chunk): its pages go to their own part of `scratch`, which
  // must hold (number of -1 ids) times the sum of the tensors' block_bytes.
  // Every chunk then spans its whole slot part, so a GPU CRC covers it.
  // Errors as Build.
  Status BuildWhole(const KvLayerLayout& layout, const int64_t* ids, size_t chunks,
                    uint64_t scratch = 0, uint64_t scratch_bytes = 0);

  size_t num_chunks() const { return first_.empty() ? 0 : first_.size() - 1; }
  size_t num_pieces() const { return ptr_.size(); }
  // Bytes of chunk c (as stored in its slot).
  uint64_t chunk_bytes(size_t c) const { return chunk_len_[c]; }
  // Valid until the next Build or destruction.
  GpuBlocks blocks() const {
    return GpuBlocks{ptr_.data(), len_.data(), first_.data(), num_chunks()};
  }
  // Blocks [c0, c1) of the chunks, e.g. one call's share. REQUIRES: c0 <= c1 <= num_chunks().
  GpuBlocks blocks(size_t c0, size_t c1) const {
    return GpuBlocks{ptr_.data(), len_.data(), first_.data() + c0, c1 - c0};
  }

 private:
  void Clear();
  // Both builds: ids [0, n) in chunks of blocks_per_chunk (the last may be
  // shorter); ids with to_scratch(i) go to distinct scratch pages.
  template <typename ToScratch>
  Status Emit(const KvLayerLayout& layout, const int64_t* ids, size_t n, ToScratch to_scratch,
              uint64_t scratch, uint64_t scratch_bytes);
  std::vector<uint64_t> ptr_, len_;
  std::vector<uint32_t> first_;  // num_chunks + 1 (absolute piece indices)
  std::vector<uint64_t> chunk_len_;
};

}  // namespace cxlkv

#endif  // CXLKV_SRC_TRANSFER_KV_LAYOUT_H_
