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

template <typename ToScratch>
Status KvPieces::Emit(const KvLayerLayout& layout, const int64_t* ids, size_t n,
                      ToScratch to_scratch, uint64_t scratch, uint64_t scratch_bytes) {
  Clear();
  const uint32_t bpc = layout.blocks_per_chunk;
  if (layout.tensors.empty() || bpc == 0) {
    return Status::InvalidArgument("kv layout: no tensors, or blocks_per_chunk 0");
  }
  uint64_t row_bytes = 0;  // one GPU block's bytes over all tensors
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    const KvTensor& k = layout.tensors[t];
    if (k.stride == 0 || k.block_bytes == 0 || k.num_blocks == 0 || k.block_bytes > k.stride) {
      return Status::InvalidArgument("kv layout: tensor " + std::to_string(t) +
                                     " needs 0 < block_bytes <= stride and rows > 0");
    }
    row_bytes += k.block_bytes;
  }
  uint64_t scratched = 0;
  for (size_t i = 0; i < n; ++i) {
    if (to_scratch(i)) {
      ++scratched;
      continue;
    }
    for (size_t t = 0; t < layout.tensors.size(); ++t) {
      if (ids[i] < 0 || static_cast<uint64_t>(ids[i]) >= layout.tensors[t].num_blocks) {
        return Status::InvalidArgument("kv layout: GPU block id " + std::to_string(ids[i]) +
                                       " at " + std::to_string(i) + " outside [0, " +
                                       std::to_string(layout.tensors[t].num_blocks) +
                                       ") of tensor " + std::to_string(t));
      }
    }
  }
  if (scratched * row_bytes > scratch_bytes || (scratched > 0 && scratch == 0)) {
    return Status::InvalidArgument("kv layout: " + std::to_string(scratched) +
                                   " blocks outside the copy need " +
                                   std::to_string(scratched * row_bytes) +
                                   " bytes of scratch, given " + std::to_string(scratch_bytes));
  }
  const size_t chunks = (n + bpc - 1) / bpc;
  ptr_.reserve(n * layout.tensors.size());
  len_.reserve(n * layout.tensors.size());
  first_.reserve(chunks + 1);
  first_.push_back(0);
  uint64_t scratch_used = 0;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t b0 = c * bpc, b1 = std::min(n, b0 + bpc);
    for (const KvTensor& k : layout.tensors) {
      for (size_t i = b0; i < b1; ++i) {
        uint64_t at;
        if (to_scratch(i)) {
          at = scratch + scratch_used;  // distinct scratch: the CRC reads each one
          scratch_used += k.block_bytes;
        } else {
          at = k.base + static_cast<uint64_t>(ids[i]) * k.stride;
        }
        // A block that follows the previous piece in memory extends it (it
        // follows it in the slot by construction: same tensor, next j).
        if (i > b0 && ptr_.back() + len_.back() == at) {
          len_.back() += k.block_bytes;
        } else {
          ptr_.push_back(at);
          len_.push_back(k.block_bytes);
        }
      }
    }
    if (ptr_.size() > (1ull << 31)) {
      Clear();
      return Status::InvalidArgument("kv layout: more than 2^31 pieces in one call");
    }
    first_.push_back(static_cast<uint32_t>(ptr_.size()));
    chunk_len_.push_back(row_bytes * (b1 - b0));
  }
  return Status::OK();
}

Status KvPieces::Build(const KvLayerLayout& layout, const int64_t* ids, size_t n, uint32_t skip,
                       uint64_t scratch, uint64_t scratch_bytes) {
  if (skip > 0 && (skip >= layout.blocks_per_chunk || skip >= n)) {
    Clear();
    return Status::InvalidArgument("kv layout: skip " + std::to_string(skip) +
                                   " must be below blocks_per_chunk and the id count");
  }
  return Emit(
      layout, ids, n, [skip](size_t i) { return i < skip; }, scratch, scratch_bytes);
}

Status KvPieces::BuildWhole(const KvLayerLayout& layout, const int64_t* ids, size_t chunks,
                            uint64_t scratch, uint64_t scratch_bytes) {
  return Emit(
      layout, ids, chunks * layout.blocks_per_chunk, [ids](size_t i) { return ids[i] == -1; },
      scratch, scratch_bytes);
}

}  // namespace cxlkv
