// Copyright cxlkv authors.
#include "crc32c_gpu.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "crc32c_math.h"
#include "cuda_status.h"

namespace cxlkv::internal {
namespace {

constexpr int kThreads = 256;
constexpr uint64_t kChunk = kCrcSegmentBytes / kThreads;  // bytes per thread: 128
static_assert(kChunk % 16 == 0, "threads read 16-byte words");
constexpr int kWords = static_cast<int>(kChunk / 16);
constexpr int kTableWords = 8 * 256;
constexpr int kPowWords = 64;

// Advances raw CRC c over 8 bytes (lo, hi little-endian words): slicing-by-8.
__device__ __forceinline__ uint32_t Step8(uint32_t c, uint32_t lo, uint32_t hi,
                                          const uint32_t (*t)[256]) {
  lo ^= c;
  return t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
         t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
}

// Raw CRC (from 0, no inversion) of n bytes at p, slicing-by-8 on tables t.
__device__ uint32_t RawCrc(const uint8_t* p, uint64_t n, const uint32_t (*t)[256]) {
  uint32_t c = 0;
  const bool aligned = (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
  if (aligned && n == kChunk) {
    // The common case, fully unrolled. (ptxas still interleaves the loads
    // with the lookups, about two in flight per thread; the small segments
    // supply the parallelism that hides memory latency.)
    const uint4* w = reinterpret_cast<const uint4*>(p);
    uint4 v[kWords];
#pragma unroll
    for (int i = 0; i < kWords; ++i) v[i] = __ldg(w + i);
#pragma unroll
    for (int i = 0; i < kWords; ++i) {
      c = Step8(c, v[i].x, v[i].y, t);
      c = Step8(c, v[i].z, v[i].w, t);
    }
    return c;
  }
  if (aligned) {
    const uint4* w = reinterpret_cast<const uint4*>(p);
    const uint64_t words = n / 16;
    for (uint64_t i = 0; i < words; ++i) {
      const uint4 v = __ldg(w + i);
      c = Step8(c, v.x, v.y, t);
      c = Step8(c, v.z, v.w, t);
    }
    p += words * 16;
    n -= words * 16;
  }
  // Unaligned pieces and tails: a byte at a time.
  for (uint64_t i = 0; i < n; ++i) c = (c >> 8) ^ t[0][(c ^ p[i]) & 0xFF];
  return c;
}

// Largest i in [0, n) with first[i] <= g: the piece (or block) holding
// segment g (entries without segments share their successor's first).
__device__ uint32_t FindOwner(const uint64_t* first, uint32_t n, uint64_t g) {
  uint32_t lo = 0, hi = n;
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (first[mid] <= g) lo = mid; else hi = mid;
  }
  return lo;
}

struct Desc {
  const uint64_t* piece_ptr;
  const uint64_t* piece_len;
  const uint64_t* seg_first;        // per piece, + end
  const uint64_t* block_seg_first;  // per block, + end
  uint32_t* done;                   // per block: segments finished
  uint32_t num_pieces, num_blocks;
};

__device__ uint64_t SegmentLen(const Desc& d, uint64_t g, uint64_t* offset, uint32_t* piece) {
  const uint32_t p = FindOwner(d.seg_first, d.num_pieces, g);
  const uint64_t off = (g - d.seg_first[p]) * kCrcSegmentBytes;
  if (offset) *offset = off;
  if (piece) *piece = p;
  return min(kCrcSegmentBytes, d.piece_len[p] - off);
}

// Folds crc[0..kThreads) / len[0..kThreads) into crc[0] / len[0]:
// left * x^(8 |right|) ^ right, doubling the span each round.
__device__ void FoldTree(uint32_t* crc, uint32_t* len, const uint32_t* pow8) {
  const int tid = threadIdx.x;
  for (int s = 1; s < kThreads; s <<= 1) {
    if ((tid & (2 * s - 1)) == 0) {
      crc[tid] = GfMul(crc[tid], XPow8n(len[tid + s], pow8)) ^ crc[tid + s];
      len[tid] += len[tid + s];
    }
    __syncthreads();
  }
}

// One thread block per segment g in [seg_begin, seg_begin + gridDim.x):
// seg_crc[g] = raw CRC of the segment. The last thread block to finish a
// block's segments folds them and writes result[block] (mapped host memory).
__global__ void CrcKernel(Desc d, uint64_t seg_begin, const uint32_t* tables, uint32_t* seg_crc,
                          uint32_t* result) {
  __shared__ uint32_t t[8][256];
  __shared__ uint32_t pow8[kPowWords];
  __shared__ uint32_t crc[kThreads];
  __shared__ uint32_t len[kThreads];
  __shared__ bool last;
  __shared__ uint32_t block;
  const int tid = threadIdx.x;
  for (int i = tid; i < kTableWords; i += kThreads) t[i / 256][i % 256] = tables[i];
  if (tid < kPowWords) pow8[tid] = tables[kTableWords + tid];
  __syncthreads();

  const uint64_t g = seg_begin + blockIdx.x;
  uint64_t seg_off;
  uint32_t p;
  const uint64_t seg_len = SegmentLen(d, g, &seg_off, &p);
  const uint64_t start = static_cast<uint64_t>(tid) * kChunk;
  const uint64_t mine = start < seg_len ? min(kChunk, seg_len - start) : 0;
  const uint8_t* base = reinterpret_cast<const uint8_t*>(d.piece_ptr[p]) + seg_off + start;
  crc[tid] = mine ? RawCrc(base, mine, t) : 0u;
  len[tid] = static_cast<uint32_t>(mine);
  __syncthreads();
  FoldTree(crc, len, pow8);

  if (tid == 0) {
    seg_crc[g] = crc[0];
    // Publish the segment before counting it (the classic last-block
    // reduction: the finisher must see every segment's CRC).
    __threadfence();
    const uint32_t b = FindOwner(d.block_seg_first, d.num_blocks, g);
    const uint32_t nseg = static_cast<uint32_t>(d.block_seg_first[b + 1] - d.block_seg_first[b]);
    block = b;
    last = atomicAdd(&d.done[b], 1u) == nseg - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();

  const uint32_t b = block;
  const uint64_t first = d.block_seg_first[b], end = d.block_seg_first[b + 1];
  uint32_t acc = 0;
  uint64_t total = 0;
  for (uint64_t chunk = first; chunk < end; chunk += kThreads) {
    const uint64_t i = chunk + tid;
    // __ldcg: read through L2, not a possibly stale L1 line.
    crc[tid] = i < end ? __ldcg(seg_crc + i) : 0u;
    len[tid] = i < end ? static_cast<uint32_t>(SegmentLen(d, i, nullptr, nullptr)) : 0u;
    __syncthreads();
    FoldTree(crc, len, pow8);
    if (tid == 0) {
      acc = GfMul(acc, XPow8n(len[0], pow8)) ^ crc[0];
      total += len[0];
    }
    __syncthreads();
  }
  if (tid == 0) {
    result[b] = FinishRaw(acc, total, pow8);
    __threadfence_system();  // the host reads it after the stream synchronizes
  }
}

Status LaunchStatus(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::OK();
  return Status::IOError(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                         cudaGetErrorString(e) + ")");
}

}  // namespace

Status GpuCrc32c::Create(std::unique_ptr<GpuCrc32c>* out) {
  std::unique_ptr<GpuCrc32c> c(new GpuCrc32c());
  uint32_t host[kTableWords + kPowWords];
  FillSlicingTables(reinterpret_cast<uint32_t(*)[256]>(host));
  FillXPow8Table(host + kTableWords);
  CXLKV_CU(cuMemAlloc(&c->tables_, sizeof(host)));
  CXLKV_CU(cuMemcpyHtoD(c->tables_, host, sizeof(host)));
  *out = std::move(c);
  return Status::OK();
}

GpuCrc32c::~GpuCrc32c() {
  // Destructors cannot return a Status; a failure here means the context is
  // already gone, so report it and carry on.
  auto report = [](CUresult r, const char* what) {
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED)
      std::fprintf(stderr, "cxlkv: %s\n", CudaStatus(r, what).ToString().c_str());
  };
  if (tables_) report(cuMemFree(tables_), "cuMemFree(crc tables)");
  if (desc_) report(cuMemFree(desc_), "cuMemFree(crc descriptors)");
  if (seg_crc_) report(cuMemFree(seg_crc_), "cuMemFree(crc segments)");
  if (host_desc_) report(cuMemFreeHost(host_desc_), "cuMemFreeHost(crc descriptors)");
  if (host_result_) report(cuMemFreeHost(host_result_), "cuMemFreeHost(crc results)");
}

Status GpuCrc32c::Reserve(size_t pieces, size_t blocks, uint64_t segments) {
  const size_t need = 8 * (3 * pieces + 1) + 8 * (blocks + 1) + 4 * blocks + 64;
  if (need > desc_bytes_) {
    const size_t cap = std::max(need, desc_bytes_ * 2);
    if (desc_) CXLKV_CU(cuMemFree(desc_));
    desc_ = 0;
    if (host_desc_) CXLKV_CU(cuMemFreeHost(host_desc_));
    host_desc_ = nullptr;
    desc_bytes_ = 0;
    CXLKV_CU(cuMemAlloc(&desc_, cap));
    void* h = nullptr;
    CXLKV_CU(cuMemHostAlloc(&h, cap, 0));
    host_desc_ = static_cast<uint8_t*>(h);
    desc_bytes_ = cap;
  }
  if (blocks > result_capacity_) {
    if (host_result_) CXLKV_CU(cuMemFreeHost(host_result_));
    host_result_ = nullptr;
    dev_result_ = 0;
    result_capacity_ = 0;
    void* h = nullptr;
    const size_t cap = std::max<size_t>(blocks, 256);
    CXLKV_CU(cuMemHostAlloc(&h, cap * sizeof(uint32_t), CU_MEMHOSTALLOC_DEVICEMAP));
    host_result_ = static_cast<uint32_t*>(h);
    CXLKV_CU(cuMemHostGetDevicePointer(&dev_result_, h, 0));
    result_capacity_ = cap;
  }
  if (segments > seg_capacity_) {
    if (seg_crc_) CXLKV_CU(cuMemFree(seg_crc_));
    seg_crc_ = 0;
    seg_capacity_ = 0;
    const uint64_t cap = std::max<uint64_t>(segments, 4096);
    CXLKV_CU(cuMemAlloc(&seg_crc_, cap * sizeof(uint32_t)));
    seg_capacity_ = cap;
  }
  return Status::OK();
}

Status GpuCrc32c::Prepare(const uint64_t* piece_ptr, const uint64_t* piece_len,
                          const uint32_t* first_piece, size_t num_blocks, CUstream stream) {
  const size_t num_pieces = num_blocks ? first_piece[num_blocks] : 0;
  if (num_pieces > UINT32_MAX / 2 || num_blocks > UINT32_MAX / 2)
    return Status::InvalidArgument("crc32c: too many pieces or blocks in one batch");
  piece_seg_first_.assign(num_pieces + 1, 0);
  for (size_t p = 0; p < num_pieces; ++p) {
    piece_seg_first_[p + 1] =
        piece_seg_first_[p] + (piece_len[p] + kCrcSegmentBytes - 1) / kCrcSegmentBytes;
  }
  block_seg_first_.assign(num_blocks + 1, 0);
  for (size_t b = 0; b <= num_blocks; ++b) block_seg_first_[b] = piece_seg_first_[first_piece[b]];
  CXLKV_RETURN_IF_ERROR(Reserve(num_pieces, num_blocks, piece_seg_first_[num_pieces]));
  num_pieces_ = num_pieces;
  num_blocks_ = num_blocks;
  off_len_ = 8 * num_pieces;
  off_seg_first_ = 16 * num_pieces;
  off_block_seg_ = off_seg_first_ + 8 * (num_pieces + 1);
  off_done_ = off_block_seg_ + 8 * (num_blocks + 1);
  desc_used_ = off_done_ + 4 * num_blocks;
  std::memcpy(host_desc_, piece_ptr, 8 * num_pieces);
  std::memcpy(host_desc_ + off_len_, piece_len, 8 * num_pieces);
  std::memcpy(host_desc_ + off_seg_first_, piece_seg_first_.data(), 8 * (num_pieces + 1));
  std::memcpy(host_desc_ + off_block_seg_, block_seg_first_.data(), 8 * (num_blocks + 1));
  std::memset(host_desc_ + off_done_, 0, 4 * num_blocks);
  // An empty block has no segment to finish it: its CRC32C is 0.
  for (size_t b = 0; b < num_blocks; ++b) host_result_[b] = 0;
  CXLKV_CU(cuMemcpyHtoDAsync(desc_, host_desc_, desc_used_, stream));
  return Status::OK();
}

Status GpuCrc32c::Launch(size_t begin, size_t end, CUstream stream) {
  if (begin > end || end > num_blocks_) return Status::InvalidArgument("crc32c: block range");
  const uint64_t seg_begin = block_seg_first_[begin];
  const uint64_t seg_end = block_seg_first_[end];
  if (seg_end == seg_begin) return Status::OK();
  auto* d = reinterpret_cast<uint8_t*>(desc_);
  Desc desc;
  desc.piece_ptr = reinterpret_cast<const uint64_t*>(d);
  desc.piece_len = reinterpret_cast<const uint64_t*>(d + off_len_);
  desc.seg_first = reinterpret_cast<const uint64_t*>(d + off_seg_first_);
  desc.block_seg_first = reinterpret_cast<const uint64_t*>(d + off_block_seg_);
  desc.done = reinterpret_cast<uint32_t*>(d + off_done_);
  desc.num_pieces = static_cast<uint32_t>(num_pieces_);
  desc.num_blocks = static_cast<uint32_t>(num_blocks_);
  // Grid x may be up to 2^31 - 1 segments (256 TiB): no batch comes close.
  CrcKernel<<<static_cast<unsigned>(seg_end - seg_begin), kThreads, 0,
              reinterpret_cast<cudaStream_t>(stream)>>>(
      desc, seg_begin, reinterpret_cast<const uint32_t*>(tables_),
      reinterpret_cast<uint32_t*>(seg_crc_), reinterpret_cast<uint32_t*>(dev_result_));
  return LaunchStatus("crc32c kernel");
}

}  // namespace cxlkv::internal
