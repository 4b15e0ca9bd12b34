// Copyright cxlkv authors.
//
// GpuCrc32c: CRC32C (Castagnoli, the region's per-slot checksum) of blocks
// that live in GPU memory, computed by GPU kernels so that the data path
// never reads the bytes with a CPU. A block is the concatenation of one or
// more "pieces" (device byte ranges): vLLM's offloaded chunk is several GPU
// pages that need not be adjacent.
//
// Method: one kernel. Each thread block checksums one 32 KiB segment of a
// piece (slicing-by-8 per thread over 128 bytes); the parts are combined by
// scaling each part's CRC with x^(8 * bytes after it) mod P and XORing, in
// parallel (no serial fold). The last thread block to finish a block's
// segments combines them the same way and writes the block's CRC straight
// into mapped host memory (no second launch, no copy back). Results equal
// the CPU's CRC32C bit for bit.
//
// Thread-safety: not thread-safe; the owner (GpuTransferEngine) serializes.
// All calls need the owning CUDA context current.
#ifndef CXLKV_SRC_TRANSFER_CRC32C_GPU_H_
#define CXLKV_SRC_TRANSFER_CRC32C_GPU_H_

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cxlkv/status.h"

namespace cxlkv::internal {

class GpuCrc32c {
 public:
  // Uploads the tables. kNoSpace / kIOError from the driver.
  static Status Create(std::unique_ptr<GpuCrc32c>* out);
  ~GpuCrc32c();
  GpuCrc32c(const GpuCrc32c&) = delete;
  GpuCrc32c& operator=(const GpuCrc32c&) = delete;

  // Describes the blocks of the next computation and enqueues the upload of
  // that description on `stream`. Block b consists of pieces
  // [first_piece[b], first_piece[b+1]) in order; piece p is piece_len[p]
  // bytes at device address piece_ptr[p]. The arrays are copied; the device
  // memory they name must stay valid until the computation has completed.
  // REQUIRES: the previous computation has completed (stream synchronized).
  Status Prepare(const uint64_t* piece_ptr, const uint64_t* piece_len, const uint32_t* first_piece,
                 size_t num_blocks, CUstream stream);

  // Enqueues on `stream` the CRCs of blocks [begin, end) of the prepared set.
  // Result(b) is valid once `stream` has passed this point (synchronize it).
  Status Launch(size_t begin, size_t end, CUstream stream);
  uint32_t Result(size_t b) const { return host_result_[b]; }

 private:
  GpuCrc32c() = default;
  Status Reserve(size_t pieces, size_t blocks, uint64_t segments);

  CUdeviceptr tables_ = 0;  // 8 x 256 slicing table, then 64 powers x^(8*2^k)

  // Scratch, grown on demand. Device layout: piece_ptr[P], piece_len[P],
  // piece_off[P] (in its block), piece_seg_first[P+1], block_seg_first[B+1],
  // block_len[B] (u64 each), done[B] (u32, uploaded as zeros: segments
  // finished per block); segment CRCs separately (u32 each); results in
  // mapped pinned host memory.
  CUdeviceptr desc_ = 0;
  size_t desc_bytes_ = 0;
  CUdeviceptr seg_crc_ = 0;
  uint64_t seg_capacity_ = 0;
  uint8_t* host_desc_ = nullptr;     // pinned mirror of the description
  uint32_t* host_result_ = nullptr;  // pinned, mapped into the device
  CUdeviceptr dev_result_ = 0;       // its device address
  size_t result_capacity_ = 0;

  // The prepared set (host copies, for launch geometry).
  size_t num_pieces_ = 0, num_blocks_ = 0;
  std::vector<uint64_t> piece_seg_first_;
  std::vector<uint64_t> block_seg_first_;
  size_t off_len_ = 0, off_piece_off_ = 0, off_seg_first_ = 0, off_block_seg_ = 0;
  size_t off_block_len_ = 0, off_done_ = 0, desc_used_ = 0;
};

// Bytes each thread block of the first kernel checksums (one piece segment).
inline constexpr uint64_t kCrcSegmentBytes = 32 * 1024;

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_TRANSFER_CRC32C_GPU_H_
