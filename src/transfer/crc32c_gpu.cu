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
constexpr uint64_t kChunk = kCrcSegmentBytes / kThreads;  // bytes per thread: 512
static_assert(kChunk % 16 == 0, "threads read 16-byte words");
constexpr int kTableWords = 8 * 256;
constexpr int kPowWords = 64;

// Raw CRC (from 0, no inversion) of n bytes at p, slicing-by-8 on tables t.
__device__ uint32_t RawCrc(const uint8_t* p, uint64_t n, const uint32_t (*t)[256]) {
  uint32_t c = 0;
  if ((reinterpret_cast<uintptr_t>(p) & 15u) == 0) {
    const uint4* w = reinterpret_cast<const uint4*>(p);
    const uint64_t words = n / 16;
    for (uint64_t i = 0; i < words; ++i) {
      const uint4 v = __ldg(w + i);
      uint32_t lo = v.x ^ c, hi = v.y;
      c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
          t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
      lo = v.z ^ c;
      hi = v.w;
      c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
          t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    }
    p += words * 16;
    n -= words * 16;
  }
  // Unaligned pieces and tails: a byte at a time.
  for (uint64_t i = 0; i < n; ++i) c = (c >> 8) ^ t[0][(c ^ p[i]) & 0xFF];
  return c;
}

// Largest p in [0, num_pieces) with seg_first[p] <= g: the piece holding
// segment g (pieces without segments share their successor's seg_first).
__device__ uint32_t FindPiece(const uint64_t* seg_first, uint32_t num_pieces, uint64_t g) {
  uint32_t lo = 0, hi = num_pieces;
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (seg_first[mid] <= g) lo = mid; else hi = mid;
  }
  return lo;
}

// One thread block per segment g in [seg_begin, seg_begin + gridDim.x):
// seg_crc[g] = raw CRC of the segment.
__global__ void SegmentKernel(const uint64_t* piece_ptr, const uint64_t* piece_len,
                              const uint64_t* seg_first, uint32_t num_pieces, uint64_t seg_begin,
                              const uint32_t* tables, uint32_t* seg_crc) {
  __shared__ uint32_t t[8][256];
  __shared__ uint32_t pow8[kPowWords];
  __shared__ uint32_t crc[kThreads];
  __shared__ uint32_t len[kThreads];
  const int tid = threadIdx.x;
  for (int i = tid; i < kTableWords; i += kThreads) t[i / 256][i % 256] = tables[i];
  if (tid < kPowWords) pow8[tid] = tables[kTableWords + tid];
  __syncthreads();

  const uint64_t g = seg_begin + blockIdx.x;
  const uint32_t p = FindPiece(seg_first, num_pieces, g);
  const uint64_t seg_off = (g - seg_first[p]) * kCrcSegmentBytes;
  const uint64_t seg_len = min(kCrcSegmentBytes, piece_len[p] - seg_off);
  const uint64_t start = static_cast<uint64_t>(tid) * kChunk;
  const uint64_t mine = start < seg_len ? min(kChunk, seg_len - start) : 0;
  const uint8_t* base = reinterpret_cast<const uint8_t*>(piece_ptr[p]) + seg_off + start;
  crc[tid] = mine ? RawCrc(base, mine, t) : 0u;
  len[tid] = static_cast<uint32_t>(mine);
  __syncthreads();
  // Fold neighbours: left * x^(8 |right|) ^ right, doubling the span each round.
  for (int s = 1; s < kThreads; s <<= 1) {
    if ((tid & (2 * s - 1)) == 0) {
      crc[tid] = GfMul(crc[tid], XPow8n(len[tid + s], pow8)) ^ crc[tid + s];
      len[tid] += len[tid + s];
    }
    __syncthreads();
  }
  if (tid == 0) seg_crc[g] = crc[0];
}

// One thread per block b in [begin, end): folds its segments in order and
// finishes the CRC (initial value and final inversion).
__global__ void BlockKernel(const uint64_t* piece_len, const uint64_t* seg_first,
                            const uint32_t* first_piece, uint32_t begin, uint32_t end,
                            const uint32_t* tables, const uint32_t* seg_crc, uint32_t* result) {
  const uint32_t b = begin + blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= end) return;
  const uint32_t* pow8 = tables + kTableWords;
  const uint32_t x_seg = XPow8n(kCrcSegmentBytes, pow8);
  uint32_t acc = 0;
  uint64_t total = 0;
  for (uint32_t p = first_piece[b]; p < first_piece[b + 1]; ++p) {
    uint64_t left = piece_len[p];
    for (uint64_t g = seg_first[p]; g < seg_first[p + 1]; ++g) {
      const uint64_t n = min(left, kCrcSegmentBytes);
      acc = GfMul(acc, n == kCrcSegmentBytes ? x_seg : XPow8n(n, pow8)) ^ seg_crc[g];
      total += n;
      left -= n;
    }
  }
  result[b] = FinishRaw(acc, total, pow8);
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
  const size_t need = 8 * (3 * pieces + 1) + 4 * (blocks + 1) + 4 * blocks + 64;
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
    result_capacity_ = 0;
    void* h = nullptr;
    const size_t cap = std::max<size_t>(blocks, 256);
    CXLKV_CU(cuMemHostAlloc(&h, cap * sizeof(uint32_t), 0));
    host_result_ = static_cast<uint32_t*>(h);
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
  first_piece_.assign(first_piece, first_piece + num_blocks + 1);
  if (num_blocks == 0) first_piece_.assign(1, 0);
  CXLKV_RETURN_IF_ERROR(Reserve(num_pieces, num_blocks, piece_seg_first_[num_pieces]));
  num_pieces_ = num_pieces;
  num_blocks_ = num_blocks;
  off_len_ = 8 * num_pieces;
  off_seg_first_ = 16 * num_pieces;
  off_first_piece_ = off_seg_first_ + 8 * (num_pieces + 1);
  off_result_ = off_first_piece_ + 4 * (num_blocks + 1);
  std::memcpy(host_desc_, piece_ptr, 8 * num_pieces);
  std::memcpy(host_desc_ + off_len_, piece_len, 8 * num_pieces);
  std::memcpy(host_desc_ + off_seg_first_, piece_seg_first_.data(), 8 * (num_pieces + 1));
  std::memcpy(host_desc_ + off_first_piece_, first_piece_.data(), 4 * (num_blocks + 1));
  CXLKV_CU(cuMemcpyHtoDAsync(desc_, host_desc_, off_result_, stream));
  return Status::OK();
}

Status GpuCrc32c::Launch(size_t begin, size_t end, CUstream stream) {
  if (begin > end || end > num_blocks_) return Status::InvalidArgument("crc32c: block range");
  if (begin == end) return Status::OK();
  const uint64_t seg_begin = piece_seg_first_[first_piece_[begin]];
  const uint64_t seg_end = piece_seg_first_[first_piece_[end]];
  auto* d = reinterpret_cast<uint8_t*>(desc_);
  const auto* ptrs = reinterpret_cast<const uint64_t*>(d);
  const auto* lens = reinterpret_cast<const uint64_t*>(d + off_len_);
  const auto* seg_first = reinterpret_cast<const uint64_t*>(d + off_seg_first_);
  const auto* first_piece = reinterpret_cast<const uint32_t*>(d + off_first_piece_);
  auto* result = reinterpret_cast<uint32_t*>(d + off_result_);
  const auto* tables = reinterpret_cast<const uint32_t*>(tables_);
  auto* seg_crc = reinterpret_cast<uint32_t*>(seg_crc_);
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  // Grid x may be up to 2^31 - 1 segments (256 TiB): no batch comes close.
  if (seg_end > seg_begin) {
    SegmentKernel<<<static_cast<unsigned>(seg_end - seg_begin), kThreads, 0, s>>>(
        ptrs, lens, seg_first, static_cast<uint32_t>(num_pieces_), seg_begin, tables, seg_crc);
    CXLKV_RETURN_IF_ERROR(LaunchStatus("crc32c segment kernel"));
  }
  const unsigned n = static_cast<unsigned>(end - begin);
  BlockKernel<<<(n + 127) / 128, 128, 0, s>>>(lens, seg_first, first_piece,
                                              static_cast<uint32_t>(begin),
                                              static_cast<uint32_t>(end), tables, seg_crc, result);
  return LaunchStatus("crc32c block kernel");
}

Status GpuCrc32c::Download(CUstream stream) {
  if (num_blocks_ == 0) return Status::OK();
  CXLKV_CU(cuMemcpyDtoHAsync(host_result_, desc_ + off_result_, 4 * num_blocks_, stream));
  return Status::OK();
}

}  // namespace cxlkv::internal
