// Copyright cxlkv authors.
#include "kv_layout.h"

#include <algorithm>
#include <string>

namespace cxlkv {

void KvPieces::Clear() {
  ptr_.clear();
  len_.clear();
  first_.clear();
  chunk_len_.clear();
}

Status KvPieces::Build(const KvLayerLayout& layout, const int64_t* ids, size_t n, uint32_t skip,
                       uint64_t scratch, uint64_t scratch_bytes) {
  Clear();
  const size_t layers = layout.layer_base.size();
  const uint64_t page = layout.page_bytes;
  const uint32_t bpc = layout.blocks_per_chunk;
  if (layers == 0 || page == 0 || bpc == 0 || layout.num_gpu_blocks == 0) {
    return Status::InvalidArgument(
        "kv layout: layers, page_bytes, num_gpu_blocks and blocks_per_chunk must be non-zero");
  }
  if (skip > 0 && (skip >= bpc || skip >= n)) {
    return Status::InvalidArgument("kv layout: skip " + std::to_string(skip) +
                                   " must be below blocks_per_chunk and the id count");
  }
  if (uint64_t(skip) * layers * page > scratch_bytes || (skip > 0 && scratch == 0)) {
    return Status::InvalidArgument("kv layout: skipping " + std::to_string(skip) +
                                   " blocks needs " +
                                   std::to_string(uint64_t(skip) * layers * page) +
                                   " bytes of scratch, given " + std::to_string(scratch_bytes));
  }
  for (size_t i = skip; i < n; ++i) {
    if (ids[i] < 0 || static_cast<uint64_t>(ids[i]) >= layout.num_gpu_blocks) {
      return Status::InvalidArgument("kv layout: GPU block id " + std::to_string(ids[i]) + " at " +
                                     std::to_string(i) + " outside [0, " +
                                     std::to_string(layout.num_gpu_blocks) + ")");
    }
  }
  const size_t chunks = (n + bpc - 1) / bpc;
  ptr_.reserve(chunks * layers * bpc);
  len_.reserve(chunks * layers * bpc);
  first_.reserve(chunks + 1);
  first_.push_back(0);
  uint64_t scratch_used = 0;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t b0 = c * bpc, b1 = std::min(n, b0 + bpc);
    for (size_t l = 0; l < layers; ++l) {
      const uint64_t base = layout.layer_base[l];
      for (size_t i = b0; i < b1; ++i) {
        uint64_t at;
        if (c == 0 && i < skip) {
          at = scratch + scratch_used;  // distinct scratch pages: the CRC reads each one
          scratch_used += page;
        } else {
          at = base + static_cast<uint64_t>(ids[i]) * page;
        }
        // A page that follows the previous one on the GPU extends its piece
        // (it follows it in the slot by construction: same layer, next j).
        if (i > b0 && !ptr_.empty() && ptr_.back() + len_.back() == at) {
          len_.back() += page;
        } else {
          ptr_.push_back(at);
          len_.push_back(page);
        }
      }
    }
    if (ptr_.size() > (1ull << 31)) {
      Clear();
      return Status::InvalidArgument("kv layout: more than 2^31 pieces in one call");
    }
    first_.push_back(static_cast<uint32_t>(ptr_.size()));
    chunk_len_.push_back(uint64_t(layers) * (b1 - b0) * page);
  }
  return Status::OK();
}

}  // namespace cxlkv
