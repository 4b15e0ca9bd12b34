// Copyright cxlkv authors.
//
// SmCopier: copies a list of byte ranges with GPU threads (loads and stores
// issued by the SMs) instead of the copy engines. Either side of a range may
// be host memory that is registered with CU_MEMHOSTREGISTER_DEVICEMAP (the
// region's slot area), addressed through its device pointer, or device
// memory.
//
// Why: vLLM's KV cache is one (num_blocks, page) tensor per layer, so one
// 256-token chunk of a 28-layer model is 448 scattered 32 KiB pieces. The
// copy engines pay a per-descriptor cost that holds such pieces to about
// 0.4 of the PCIe ceiling; SM threads keeping many 16-byte loads in flight
// reached 0.92-0.93 of it for the same pieces (docs/gpu.md, measured on the
// H200). Large pieces still go to the copy engines, which leave the SMs to
// the model; GpuTransferOptions::copy_method chooses per piece.
//
// Method: the ranges are cut into tiles of at most kSmTileBytes; a grid of
// thread blocks walks the tiles (grid-stride), each thread moving 16-byte
// words with several loads in flight before its stores. Ranges whose
// addresses or length are not 16-byte multiples are copied a byte at a time
// for their unaligned remainder (correct for any input, fast for vLLM's
// page-aligned pieces).
//
// Thread-safety: not thread-safe; the owner (GpuTransferEngine) serializes.
// All calls need the owning CUDA context current.
#ifndef CXLKV_SRC_TRANSFER_SM_COPY_H_
#define CXLKV_SRC_TRANSFER_SM_COPY_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "cxlkv/status.h"

namespace cxlkv::internal {

// One range: n bytes from device address src to device address dst (host
// memory by its device pointer).
struct SmRange {
  uint64_t dst, src, n;
};

class SmCopier {
 public:
  static Status Create(std::unique_ptr<SmCopier>* out);
  ~SmCopier();
  SmCopier(const SmCopier&) = delete;
  SmCopier& operator=(const SmCopier&) = delete;

  // Describes the ranges of the next computation and enqueues the upload of
  // that description on `stream`; the array is copied. kInvalidArgument for
  // more than 2^31 ranges. REQUIRES: every earlier Launch has completed (the
  // description buffer is reused).
  Status Prepare(const SmRange* ranges, size_t n, CUstream stream);

  // Enqueues on `stream` (after the Prepare upload: same stream, or one that
  // waits for it) the copy of prepared ranges [begin, end). The memory they
  // name must stay valid until the stream has passed this point.
  // `max_blocks` caps the grid (0: the default, enough to keep PCIe busy
  // while leaving most SMs to the model).
  Status Launch(size_t begin, size_t end, CUstream stream, unsigned max_blocks = 0);

  uint64_t launches() const { return launches_; }

 private:
  SmCopier() = default;
  Status Reserve(size_t ranges);

  CUdeviceptr desc_ = 0;              // ranges[n] then tile_first[n + 1] (u64 each)
  size_t desc_capacity_ = 0;          // in ranges
  uint8_t* host_desc_ = nullptr;      // pinned mirror
  std::vector<uint64_t> tile_first_;  // host copy of the prepared set's tile index
  size_t num_ranges_ = 0;
  uint64_t launches_ = 0;
};

// Bytes of one tile (the unit a thread block copies before taking the next).
inline constexpr uint64_t kSmTileBytes = 32 * 1024;

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_TRANSFER_SM_COPY_H_
