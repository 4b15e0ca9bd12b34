// Copyright cxlkv authors.
//
// RegionGpu's parted calls (region_gpu.h): delegate.h's split fill and load
// (Begin*Part, a batched DMA with GPU CRCs, End*Part), so a vLLM worker on a
// GPU fills and reads its part of slots that EngineCore reserved, at the
// rate of the copy engines and without the CPU touching the KV bytes.
#include <string>

#include "region_gpu.h"

namespace cxlkv {

namespace {

void ResetResult(size_t n, GpuPartResult* r) {
  r->status.assign(n, Status::OK());
  r->len.assign(n, 0);
  r->writer.assign(n, 0);
  r->ok = 0;
}

Status TooLong(uint64_t bytes, const PartedLayout& layout) {
  return Status::InvalidArgument("chunk of " + std::to_string(bytes) +
                                 " bytes is longer than the part (" +
                                 std::to_string(layout.part_len) + ")");
}

}  // namespace

Status RegionGpu::FillParts(const WriteToken* tokens, const PartedLayout& layout, uint32_t part,
                            const GpuBlocks& blocks, GpuPath path, uintptr_t after_stream,
                            GpuPartResult* result) {
  const size_t n = blocks.num_blocks;
  ResetResult(n, result);
  std::vector<size_t> which;  // batch block -> chunk
  GpuBatch batch;
  for (size_t c = 0; c < n; ++c) {
    const uint64_t bytes = blocks.capacity(c);
    if (bytes > layout.part_len) {
      result->status[c] = TooLong(bytes, layout);
      continue;
    }
    uint8_t* dst = nullptr;
    Status s = BeginFillPart(region_, tokens[c], layout, part, &dst);
    if (!s.ok()) {
      result->status[c] = std::move(s);
      continue;
    }
    batch.AddBlock(dst);
    blocks.AddPieces(c, bytes, &batch);
    which.push_back(c);
  }
  std::vector<uint32_t> crc(batch.num_blocks());
  Status s = engine_->Store(batch, path, crc.data(), after_stream);
  if (!s.ok()) {
    // No table entry was written: EngineCore's commit finds these parts
    // unfilled and frees the slots.
    for (size_t c : which) result->status[c] = s;
    return s;
  }
  for (size_t i = 0; i < which.size(); ++i) {
    const size_t c = which[i];
    const uint64_t bytes = batch.block_len(i);
    Status e = EndFillPart(region_, tokens[c], layout, part, bytes, crc[i]);
    if (e.ok()) {
      result->len[c] = bytes;
      ++result->ok;
    }
    result->status[c] = std::move(e);
  }
  return Status::OK();
}

Status RegionGpu::LoadParts(NamespaceId ns, const BlockKey* keys, const PartedLayout& layout,
                            uint32_t part, const GpuBlocks& blocks, GpuPath path,
                            GpuPartResult* result) {
  const size_t n = blocks.num_blocks;
  ResetResult(n, result);
  std::vector<ReadLease> leases(n);
  std::vector<size_t> which;
  GpuBatch batch;
  for (size_t c = 0; c < n; ++c) {
    const uint64_t bytes = blocks.capacity(c);
    if (bytes > layout.part_len) {
      result->status[c] = TooLong(bytes, layout);
      continue;
    }
    const uint8_t* src = nullptr;
    Status s = BeginLoadPart(region_, ns, keys[c], layout, part, &leases[c], &src);
    if (!s.ok()) {
      result->status[c] = std::move(s);
      continue;
    }
    batch.AddBlock(const_cast<uint8_t*>(src));
    blocks.AddPieces(c, bytes, &batch);
    which.push_back(c);
  }
  std::vector<uint32_t> crc(batch.num_blocks());
  Status s = engine_->Load(batch, path, crc.data());
  if (!s.ok()) {
    for (size_t c : which) {
      (void)region_->EndRead(&leases[c]);  // closing is all that is wanted
      result->status[c] = s;
    }
    return s;
  }
  for (size_t i = 0; i < which.size(); ++i) {
    const size_t c = which[i];
    const uint64_t bytes = batch.block_len(i);
    LoadInfo info;
    // The generation check, then the CRC of what landed on the GPU combined
    // with the rest of the part and the table (delegate.h).
    Status e = EndLoadPart(region_, &leases[c], layout, part, bytes, crc[i], &info);
    if (e.ok()) {
      result->len[c] = bytes;
      result->writer[c] = info.writer_participant;
      ++result->ok;
    }
    result->status[c] = std::move(e);
  }
  return Status::OK();
}

}  // namespace cxlkv
