// Copyright cxlkv authors.
//
// KvPieces: the GPU pieces of region blocks when a serving engine's KV cache
// is one (num_gpu_blocks, page_bytes) tensor per layer, as vLLM's
// OffloadingConnector hands it to its workers
// (../shared/reference/vllm-0.33-offloading.md §2.8: 28 tensors of 32 KiB
// pages for Qwen2.5-7B with 16-token blocks). Built natively so a 32K-token
// load does not cost Python 57,344 piece descriptors.
//
// Slot layout of one region block ("chunk" of blocks_per_chunk GPU blocks):
// layer by layer, the pages of the chunk's GPU blocks in order, i.e. the page
// of (layer l, j-th GPU block) is at slot offset (l * blocks_per_chunk + j) *
// page_bytes. Runs of consecutive GPU block ids become one piece per layer
// (adjacent in the tensor and in the slot).
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

struct KvLayerLayout {
  std::vector<uint64_t> layer_base;  // device address of each layer's tensor
  uint64_t page_bytes = 0;           // one GPU block's bytes in one layer
  uint64_t num_gpu_blocks = 0;       // rows of every layer tensor
  uint32_t blocks_per_chunk = 0;     // GPU blocks per region block
  // Bytes of one full region block in this layout.
  uint64_t chunk_bytes() const {
    return uint64_t(layer_base.size()) * blocks_per_chunk * page_bytes;
  }
};

class KvPieces {
 public:
  // Pieces of the chunks that hold GPU blocks ids[0..n): chunk c holds
  // ids[c * blocks_per_chunk ...], the last chunk may be shorter (its slot
  // is then shorter too). `skip` (< blocks_per_chunk, < n) leading ids of the
  // first chunk are copied to `scratch` instead (see above); their entries
  // in `ids` are not used and may be -1.
  // kInvalidArgument: an empty layout, page_bytes 0, an id out of
  // [0, num_gpu_blocks), a skip without enough scratch, or more than 2^31
  // pieces. On error *this is empty.
  Status Build(const KvLayerLayout& layout, const int64_t* ids, size_t n, uint32_t skip = 0,
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
  std::vector<uint64_t> ptr_, len_;
  std::vector<uint32_t> first_;  // num_chunks + 1 (absolute piece indices)
  std::vector<uint64_t> chunk_len_;
};

}  // namespace cxlkv

#endif  // CXLKV_SRC_TRANSFER_KV_LAYOUT_H_
