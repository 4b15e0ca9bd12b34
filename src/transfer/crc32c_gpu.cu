// Copyright cxlkv authors.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "crc32c_gpu.h"
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
constexpr int kShiftWords = kThreads;  // x^(8 * kChunk * (kThreads - 1 - t))

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
    if (first[mid] <= g)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

struct Desc {
  const uint64_t* piece_ptr;
  const uint64_t* piece_len;
  const uint64_t* piece_off;        // offset of the piece in its block
  const uint64_t* seg_first;        // per piece, + end
  const uint64_t* block_seg_first;  // per block, + end
  const uint64_t* block_len;        // per block
  uint32_t* done;                   // per block: segments finished
  uint32_t num_pieces, num_blocks;
};

// Piece, offset in the piece and length of segment g.
__device__ uint64_t SegmentLen(const Desc& d, uint64_t g, uint64_t* offset, uint32_t* piece) {
  const uint32_t p = FindOwner(d.seg_first, d.num_pieces, g);
  const uint64_t off = (g - d.seg_first[p]) * kCrcSegmentBytes;
  *offset = off;
  *piece = p;
  return min(kCrcSegmentBytes, d.piece_len[p] - off);
}

// XOR of v over the thread block, valid in thread 0. `warp_x` has one slot
// per warp.
__device__ uint32_t BlockXor(uint32_t v, uint32_t* warp_x) {
  for (int o = 16; o > 0; o >>= 1) v ^= __shfl_xor_sync(0xFFFFFFFFu, v, o);
  const int tid = threadIdx.x;
  if ((tid & 31) == 0) warp_x[tid >> 5] = v;
  __syncthreads();
  uint32_t x = 0;
  if (tid == 0) {
    for (int w = 0; w < kThreads / 32; ++w) x ^= warp_x[w];
  }
  __syncthreads();  // warp_x may be reused right after
  return x;
}

// One thread block per segment g in [seg_begin, seg_begin + gridDim.x):
// seg_crc[g] = raw CRC of the segment. The last thread block to finish a
// block's segments combines them and writes result[block] (mapped host
// memory).
//
// Combining without a serial fold: raw CRC is linear, so the raw CRC of a
// concatenation is the XOR of each part's raw CRC times x^(8 * bytes after
// that part). Each thread scales its own part (one GF(2) multiply; for full
// segments the factor comes from a table) and the block XORs the results.
__global__ void CrcKernel(Desc d, uint64_t seg_begin, const uint32_t* tables, uint32_t* seg_crc,
                          uint32_t* result) {
  __shared__ uint32_t t[8][256];
  __shared__ uint32_t pow8[kPowWords];
  __shared__ uint32_t warp_x[kThreads / 32];
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
  uint32_t v = 0;
  if (mine) {
    const uint8_t* base = reinterpret_cast<const uint8_t*>(d.piece_ptr[p]) + seg_off + start;
    const uint32_t c = RawCrc(base, mine, t);
    const uint32_t k = seg_len == kCrcSegmentBytes
                           ? tables[kTableWords + kPowWords + tid]  // x^(8*128*(255-tid))
                           : XPow8n(seg_len - start - mine, pow8);
    v = GfMul(c, k);
  }
  v = BlockXor(v, warp_x);

  if (tid == 0) {
    seg_crc[g] = v;
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
  const uint64_t len = d.block_len[b];
  uint32_t acc = 0;
  for (uint64_t i = first + tid; i < end; i += kThreads) {
    uint64_t off;
    uint32_t q;
    const uint64_t n = SegmentLen(d, i, &off, &q);
    const uint64_t after = len - (d.piece_off[q] + off + n);
    // __ldcg: read through L2, not a possibly stale L1 line.
    acc ^= GfMul(__ldcg(seg_crc + i), XPow8n(after, pow8));
  }
  acc = BlockXor(acc, warp_x);
  if (tid == 0) {
    result[b] = FinishRaw(acc, len, pow8);
    __threadfence_system();  // the host reads it after the stream synchronizes
  }
}

}  // namespace

Status GpuCrc32c::Create(std::unique_ptr<GpuCrc32c>* out) {
  std::unique_ptr<GpuCrc32c> c(new GpuCrc32c());
  uint32_t host[kTableWords + kPowWords + kShiftWords];
  FillSlicingTables(reinterpret_cast<uint32_t(*)[256]>(host));
  FillXPow8Table(host + kTableWords);
  for (int t = 0; t < kShiftWords; ++t) {
    host[kTableWords + kPowWords + t] = XPow8n(kChunk * (kThreads - 1 - t), host + kTableWords);
  }
  CXLKV_CU(cuMemAlloc(&c->tables_, sizeof(host)));
  CXLKV_CU(cuMemcpyHtoD(c->tables_, host, sizeof(host)));
  *out = std::move(c);
  return Status::OK();
}

GpuCrc32c::~GpuCrc32c() {
  // Destructors cannot return a Status; a failure here means the context is
  // already gone, so report it and carry on.
  if (tables_) ReportCudaFailure(cuMemFree(tables_), "cuMemFree(crc tables)");
  if (desc_) ReportCudaFailure(cuMemFree(desc_), "cuMemFree(crc descriptors)");
  if (seg_crc_) ReportCudaFailure(cuMemFree(seg_crc_), "cuMemFree(crc segments)");
  if (host_desc_) ReportCudaFailure(cuMemFreeHost(host_desc_), "cuMemFreeHost(crc descriptors)");
  if (host_result_) ReportCudaFailure(cuMemFreeHost(host_result_), "cuMemFreeHost(crc results)");
}

Status GpuCrc32c::Reserve(size_t pieces, size_t blocks, uint64_t segments) {
  const size_t need = 8 * (4 * pieces + 1) + 8 * (2 * blocks + 1) + 4 * blocks + 64;
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
  off_piece_off_ = 16 * num_pieces;
  off_seg_first_ = 24 * num_pieces;
  off_block_seg_ = off_seg_first_ + 8 * (num_pieces + 1);
  off_block_len_ = off_block_seg_ + 8 * (num_blocks + 1);
  off_done_ = off_block_len_ + 8 * num_blocks;
  desc_used_ = off_done_ + 4 * num_blocks;
  std::memcpy(host_desc_, piece_ptr, 8 * num_pieces);
  std::memcpy(host_desc_ + off_len_, piece_len, 8 * num_pieces);
  auto* piece_off = reinterpret_cast<uint64_t*>(host_desc_ + off_piece_off_);
  auto* block_len = reinterpret_cast<uint64_t*>(host_desc_ + off_block_len_);
  for (size_t b = 0; b < num_blocks; ++b) {
    uint64_t off = 0;
    for (uint32_t p = first_piece[b]; p < first_piece[b + 1]; ++p) {
      piece_off[p] = off;
      off += piece_len[p];
    }
    block_len[b] = off;
  }
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
  desc.piece_off = reinterpret_cast<const uint64_t*>(d + off_piece_off_);
  desc.seg_first = reinterpret_cast<const uint64_t*>(d + off_seg_first_);
  desc.block_seg_first = reinterpret_cast<const uint64_t*>(d + off_block_seg_);
  desc.block_len = reinterpret_cast<const uint64_t*>(d + off_block_len_);
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
