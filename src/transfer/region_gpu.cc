// Copyright cxlkv authors.
#include "region_gpu.h"

#include <cstdio>
#include <string>

#include "region_internal.h"

namespace cxlkv {

Status RegionSlotArea(Region* region, uint8_t** base, uint64_t* len) {
  if (region == nullptr) return Status::InvalidArgument("region slot area: no region");
  RegionInternal::SlotArea(region, base, len);
  return Status::OK();
}

Status RegionGpu::Open(Region* region, const RegionGpuOptions& options,
                       std::unique_ptr<RegionGpu>* out) {
  std::unique_ptr<RegionGpu> g(new RegionGpu());
  g->region_ = region;
  g->opts_ = options;
  CXLKV_RETURN_IF_ERROR(GpuTransferEngine::Create(options.transfer, &g->engine_));
  uint8_t* base = nullptr;
  uint64_t len = 0;
  CXLKV_RETURN_IF_ERROR(RegionSlotArea(region, &base, &len));
  Status s = g->engine_->RegisterHost(base, len);
  if (!s.ok() && !options.fallback_to_staged) {
    return s.WithContext("register region " + region->info().path + " with CUDA");
  }
  g->direct_ = s.ok();
  *out = std::move(g);
  return Status::OK();
}

RegionGpu::~RegionGpu() = default;

Status RegionGpu::Store(NamespaceId ns, const BlockKey* keys, const GpuBlocks& blocks, GpuPath path,
                        uintptr_t after_stream, GpuStoreResult* result, const uint32_t* depths) {
  const size_t n = blocks.num_blocks;
  result->status.assign(n, Status::OK());
  result->outcome.assign(n, StoreOutcome::kStored);
  result->stored = 0;
  std::vector<WriteLease> leases(n);
  std::vector<size_t> which;  // batch block -> request block
  GpuBatch batch;
  for (size_t b = 0; b < n; ++b) {
    const uint64_t len = blocks.capacity(b);
    Status s = region_->BeginWrite(ns, keys[b], len, &leases[b], &result->outcome[b],
                                   depths != nullptr ? depths[b] : 0);
    if (!s.ok() || !leases[b].open()) {  // an error, or kDuplicate (OK, nothing to write)
      result->status[b] = std::move(s);
      continue;
    }
    batch.AddBlock(leases[b].data());
    blocks.AddPieces(b, len, &batch);
    which.push_back(b);
  }
  std::vector<uint32_t> crc(batch.num_blocks());
  Status s = engine_->Store(batch, path, opts_.gpu_crc ? crc.data() : nullptr, after_stream);
  if (!s.ok()) {
    for (size_t b : which) {
      region_->AbortWrite(&leases[b]);
      result->status[b] = s;
    }
    return s;
  }
  for (size_t i = 0; i < which.size(); ++i) {
    const size_t b = which[i];
    // With gpu_crc the CPU never reads the slot: the GPU checksummed the
    // very bytes the DMA wrote.
    Status c = region_->CommitWrite(&leases[b], opts_.gpu_crc ? &crc[i] : nullptr);
    if (c.ok()) ++result->stored;
    result->status[b] = std::move(c);
  }
  return Status::OK();
}

Status RegionGpu::Load(NamespaceId ns, const BlockKey* keys, const GpuBlocks& blocks, GpuPath path,
                       GpuLoadResult* result, const LoadOptions& options) {
  const bool verify = opts_.gpu_crc && options.verify_crc;
  const size_t n = blocks.num_blocks;
  result->status.assign(n, Status::OK());
  result->len.assign(n, 0);
  result->loaded = result->prefix = 0;
  std::vector<ReadLease> leases(n);
  std::vector<size_t> which;
  GpuBatch batch;
  for (size_t b = 0; b < n; ++b) {
    Status s = region_->BeginRead(ns, keys[b], &leases[b]);
    if (!s.ok()) {
      result->status[b] = std::move(s);
      continue;
    }
    const uint64_t cap = blocks.capacity(b);
    if (leases[b].len() > cap) {
      result->status[b] = Status::InvalidArgument("destination of " + std::to_string(cap) +
                                                  " bytes is smaller than the block (" +
                                                  std::to_string(leases[b].len()) + ")");
      // Closing the lease is all that is wanted; its verdict is moot.
      (void)region_->EndRead(&leases[b]);
      continue;
    }
    batch.AddBlock(const_cast<void*>(leases[b].data()));
    blocks.AddPieces(b, leases[b].len(), &batch);
    which.push_back(b);
  }
  std::vector<uint32_t> crc(batch.num_blocks());
  Status s = engine_->Load(batch, path, verify ? crc.data() : nullptr);
  if (!s.ok()) {
    for (size_t b : which) {
      (void)region_->EndRead(&leases[b]);
      result->status[b] = s;
    }
    return s;
  }
  for (size_t i = 0; i < which.size(); ++i) {
    const size_t b = which[i];
    const uint64_t len = leases[b].len();
    // EndRead checks the generation first (a slot replaced during the DMA
    // is a miss, whatever its bytes checksum to), then the CRC computed on
    // the GPU against the recorded one: a mismatch is kCorruption, counted
    // in the region's crc_failures, and the slot is dropped.
    Status e = region_->EndRead(&leases[b], nullptr, verify ? &crc[i] : nullptr);
    if (!e.ok()) {
      result->status[b] = std::move(e);
      continue;
    }
    result->len[b] = len;
    ++result->loaded;
  }
  while (result->prefix < n && result->status[result->prefix].ok()) {
    ++result->prefix;
  }
  return Status::OK();
}

}  // namespace cxlkv
