// Copyright cxlkv authors.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "cuda_status.h"
#include "sm_copy.h"

namespace cxlkv::internal {
namespace {

constexpr int kThreads = 256;
constexpr uint64_t kTileWords = kSmTileBytes / 16;      // 2048 16-byte words
constexpr int kWordsPerThread = kTileWords / kThreads;  // 8 loads in flight
static_assert(kTileWords % kThreads == 0, "a tile is a whole number of rounds");
// 64 thread blocks kept 0.92 of PCIe busy with 32 KiB pieces on the H200;
// more only takes SMs from the model.
constexpr unsigned kDefaultBlocks = 64;

// Largest i in [0, n) with first[i] <= t: the range holding tile t.
__device__ uint32_t OwnerOf(const uint64_t* first, uint32_t n, uint64_t t) {
  uint32_t lo = 0, hi = n;
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (first[mid] <= t)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

// Each thread block takes tiles t_begin + blockIdx.x, + gridDim.x, ... Per
// tile, thread t moves words t, t + 256, ...: each warp's load instruction
// covers 512 contiguous bytes, and every thread has 8 loads outstanding
// before its first store, which is what hides the PCIe round trip.
__global__ void SmCopyKernel(const SmRange* ranges, const uint64_t* tile_first, uint32_t r_begin,
                             uint32_t r_end, uint64_t t_begin, uint64_t t_end) {
  for (uint64_t t = t_begin + blockIdx.x; t < t_end; t += gridDim.x) {
    // Ranges without tiles (n == 0) share their successor's first tile, and
    // OwnerOf picks the last of equal entries, so r always has bytes at t.
    const uint32_t r = r_begin + OwnerOf(tile_first + r_begin, r_end - r_begin, t);
    const SmRange rg = ranges[r];
    const uint64_t off = (t - tile_first[r]) * kSmTileBytes;
    const uint64_t len = min(kSmTileBytes, rg.n - off);
    const uint8_t* src = reinterpret_cast<const uint8_t*>(rg.src) + off;
    uint8_t* dst = reinterpret_cast<uint8_t*>(rg.dst) + off;
    const bool aligned = ((rg.src | rg.dst | off) & 15u) == 0;
    const uint64_t words = aligned ? len / 16 : 0;
    if (words == kTileWords) {
      const uint4* s = reinterpret_cast<const uint4*>(src);
      uint4* d = reinterpret_cast<uint4*>(dst);
      uint4 v[kWordsPerThread];
#pragma unroll
      for (int i = 0; i < kWordsPerThread; ++i) v[i] = s[threadIdx.x + i * kThreads];
#pragma unroll
      for (int i = 0; i < kWordsPerThread; ++i) d[threadIdx.x + i * kThreads] = v[i];
      continue;
    }
    // A partial tile (a range's tail, or unaligned): words, then bytes.
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (uint64_t i = threadIdx.x; i < words; i += kThreads) d[i] = s[i];
    for (uint64_t i = words * 16 + threadIdx.x; i < len; i += kThreads) dst[i] = src[i];
  }
}

}  // namespace

Status SmCopier::Create(std::unique_ptr<SmCopier>* out) {
  out->reset(new SmCopier());
  return Status::OK();
}

SmCopier::~SmCopier() {
  // A failure here means the context is already gone: report and carry on.
  if (desc_) ReportCudaFailure(cuMemFree(desc_), "cuMemFree(sm copy descriptors)");
  if (host_desc_)
    ReportCudaFailure(cuMemFreeHost(host_desc_), "cuMemFreeHost(sm copy descriptors)");
}

Status SmCopier::Reserve(size_t ranges) {
  if (ranges <= desc_capacity_) return Status::OK();
  const size_t cap = std::max(ranges, desc_capacity_ * 2);
  const size_t bytes = cap * sizeof(SmRange) + (cap + 1) * sizeof(uint64_t);
  if (desc_) CXLKV_CU(cuMemFree(desc_));
  desc_ = 0;
  if (host_desc_) CXLKV_CU(cuMemFreeHost(host_desc_));
  host_desc_ = nullptr;
  desc_capacity_ = 0;
  CXLKV_CU(cuMemAlloc(&desc_, bytes));
  void* h = nullptr;
  CXLKV_CU(cuMemHostAlloc(&h, bytes, 0));
  host_desc_ = static_cast<uint8_t*>(h);
  desc_capacity_ = cap;
  return Status::OK();
}

Status SmCopier::Prepare(const SmRange* ranges, size_t n, CUstream stream) {
  if (n > UINT32_MAX / 2) return Status::InvalidArgument("sm copy: too many ranges in one call");
  tile_first_.resize(n + 1);
  tile_first_[0] = 0;
  for (size_t i = 0; i < n; ++i) {
    tile_first_[i + 1] = tile_first_[i] + (ranges[i].n + kSmTileBytes - 1) / kSmTileBytes;
  }
  num_ranges_ = n;
  if (n == 0) return Status::OK();
  CXLKV_RETURN_IF_ERROR(Reserve(n));
  std::memcpy(host_desc_, ranges, n * sizeof(SmRange));
  std::memcpy(host_desc_ + n * sizeof(SmRange), tile_first_.data(), (n + 1) * sizeof(uint64_t));
  const size_t used = n * sizeof(SmRange) + (n + 1) * sizeof(uint64_t);
  CXLKV_CU(cuMemcpyHtoDAsync(desc_, host_desc_, used, stream));
  return Status::OK();
}

Status SmCopier::Launch(size_t begin, size_t end, CUstream stream, unsigned max_blocks) {
  if (begin > end || end > num_ranges_) return Status::InvalidArgument("sm copy: range span");
  const uint64_t t_begin = tile_first_[begin], t_end = tile_first_[end];
  if (t_end == t_begin) return Status::OK();
  const unsigned cap = max_blocks ? max_blocks : kDefaultBlocks;
  const unsigned grid = static_cast<unsigned>(std::min<uint64_t>(t_end - t_begin, cap));
  auto* d = reinterpret_cast<uint8_t*>(desc_);
  SmCopyKernel<<<grid, kThreads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const SmRange*>(d),
      reinterpret_cast<const uint64_t*>(d + num_ranges_ * sizeof(SmRange)),
      static_cast<uint32_t>(begin), static_cast<uint32_t>(end), t_begin, t_end);
  ++launches_;
  return LaunchStatus("sm copy kernel");
}

}  // namespace cxlkv::internal
