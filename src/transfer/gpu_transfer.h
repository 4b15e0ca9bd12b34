// Copyright cxlkv authors.
//
// GpuTransferEngine: moves batches of KV blocks between GPU memory and host
// memory (a mapped region) with the GPU's copy engines.
//
// Two paths:
//   kDirect  Straight between GPU memory and the host bytes, by the copy
//            engines (DMA) or by SM threads (small pieces; sm_copy.h). Needs
//            the host range registered (RegisterHost) — that is what makes the
//            copy run at the pinned-memory rate instead of the pageable one.
//   kStaged  [Fan26]'s path, kept as a fallback (a region that cannot be
//            registered, e.g. an fsdax file) and for comparison: a CPU memcpy
//            between the host bytes and a pinned staging buffer, overlapped
//            with the DMA of the other of two staging buffers.
// Both can compute the CRC32C of every block on the GPU (crc32c_gpu.h), over
// the bytes as they are on the GPU: after a load, what landed; before a
// store, what will be written. See docs/gpu.md for the integrity policy.
//
// A block is the concatenation of pieces: one host range of the block's
// length, and one or more device ranges (vLLM's offloaded chunk is several
// GPU pages that need not be adjacent).
//
// Every call is synchronous: it returns once the copies (and CRCs) are
// complete, so the caller may commit or release what it copied. Copies run
// on the engine's own non-blocking streams, ordered after work already
// submitted to `after_stream` when one is given.
//
// Thread-safety: safe for concurrent use; calls are serialized by a mutex
// (one engine drives one device's copy engines). Uses the device's primary
// context, the one PyTorch and the CUDA runtime use.
#ifndef CXLKV_SRC_TRANSFER_GPU_TRANSFER_H_
#define CXLKV_SRC_TRANSFER_GPU_TRANSFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cxlkv/status.h"

namespace cxlkv {

enum class GpuPath : uint8_t {
  kDirect = 0,  // DMA between GPU and the registered host bytes
  kStaged = 1,  // host bytes <-memcpy-> pinned staging <-DMA-> GPU
};
const char* GpuPathName(GpuPath p);

// Who moves the bytes of a direct copy (sm_copy.h says why there are two).
enum class GpuCopyMethod : uint8_t {
  kAuto = 0,  // per piece: SM threads up to sm_max_piece_bytes, copy engines above
  kDma = 1,   // the copy engines for every piece (cuMemcpyBatchAsync / cuMemcpyAsync)
  kSm = 2,    // SM threads for every piece
};
const char* GpuCopyMethodName(GpuCopyMethod m);

struct GpuTransferOptions {
  // CUDA device ordinal. Default 0.
  int device = 0;

  // Bytes per cuMemHostRegister call (rounded up to 2 MiB). Large single
  // registrations fail on some hosts; smaller ones cost more calls. Default
  // 32 GiB.
  uint64_t registration_segment_bytes = 32ull << 30;

  // Bytes of each of the two pinned staging buffers of the staged path.
  // Default 32 MiB.
  uint64_t staging_bytes = 32ull << 20;

  // Issue a group of copies with one cuMemcpyBatchAsync where the driver has
  // it (CUDA 12.8+); false, or if the driver refuses a batch: one
  // cuMemcpyAsync per piece. Default true.
  bool batch_api = true;

  // On loads, the CRC of a group of blocks runs while later groups are still
  // being copied; a group is at least this many bytes (and the batch is cut
  // into at most 32 groups). Smaller groups hide more of the CRC behind the
  // copies at the cost of more launches. Default 4 MiB.
  uint64_t pipeline_bytes = 4ull << 20;

  // Direct copies: copy engines or SM threads (see GpuCopyMethod). Pieces of
  // vLLM's per-layer layout (32 KiB) reach about 0.4 of PCIe through the
  // copy engines and over 0.9 through SM threads; pieces of a few hundred
  // KiB and up run near the ceiling either way, and the copy engines leave
  // the SMs to the model. Default kAuto with a 256 KiB cut (and see
  // dma_load_min_batch_bytes).
  GpuCopyMethod copy_method = GpuCopyMethod::kAuto;
  uint64_t sm_max_piece_bytes = 256 * 1024;
  // kAuto, loads only: a batch of at least this many bytes goes to the copy
  // engines whatever its piece size. Measured on the H200 with vLLM's layout
  // (docs/benchmarks.md): cuMemcpyBatchAsync loads 32 KiB pieces at 0.94 of
  // the ceiling from 8K tokens (448 MiB) up but 0.68 at 2K (112 MiB), SM
  // threads 0.85-0.89 at every size; stores by the copy engines stay near 0.5
  // at every size, so stores never switch. Default 256 MiB.
  uint64_t dma_load_min_batch_bytes = 256ull << 20;
  // Thread blocks of one SM copy launch (0: the copier's default, 64).
  unsigned sm_blocks = 0;
};

// A batch of blocks. Block b: host bytes host[b] .. + block_len(b), device
// pieces [first_piece[b], first_piece[b+1]) in order.
class GpuBatch {
 public:
  GpuBatch() { first_piece_.push_back(0); }
  void Clear() {
    host_.clear();
    gpu_.clear();
    len_.clear();
    first_piece_.assign(1, 0);
    block_len_.clear();
  }
  // Starts a block whose host bytes begin at `host`; add its pieces next.
  void AddBlock(void* host) {
    host_.push_back(static_cast<uint8_t*>(host));
    first_piece_.push_back(first_piece_.back());
    block_len_.push_back(0);
  }
  // Appends a device range to the last block. REQUIRES: a block was added.
  void AddPiece(uint64_t gpu, uint64_t len) {
    gpu_.push_back(gpu);
    len_.push_back(len);
    ++first_piece_.back();
    block_len_.back() += len;
  }
  size_t num_blocks() const { return host_.size(); }
  size_t num_pieces() const { return gpu_.size(); }
  uint64_t block_len(size_t b) const { return block_len_[b]; }
  uint64_t total_bytes() const;
  uint8_t* host(size_t b) const { return host_[b]; }
  const uint64_t* gpu() const { return gpu_.data(); }
  const uint64_t* len() const { return len_.data(); }
  const uint32_t* first_piece() const { return first_piece_.data(); }

 private:
  std::vector<uint8_t*> host_;
  std::vector<uint64_t> gpu_, len_;
  std::vector<uint32_t> first_piece_;
  std::vector<uint64_t> block_len_;
};

// What the engine did, cumulative since creation (for benches and stats).
struct GpuTransferStats {
  uint64_t batches = 0, blocks = 0, bytes = 0;
  uint64_t batch_api_calls = 0;      // cuMemcpyBatchAsync calls that succeeded
  uint64_t batch_api_fallbacks = 0;  // refused batches, redone per copy
  uint64_t single_copies = 0;        // cuMemcpyAsync calls
  uint64_t sm_launches = 0;          // SM copy kernel launches
  uint64_t sm_bytes = 0;             // bytes moved by SM threads
};

class GpuTransferEngine {
 public:
  // Initializes CUDA, retains the device's primary context, creates streams,
  // events and the staging buffers. kUnsupported: no such device, no driver,
  // or the device cannot register host memory (the direct path is then
  // unavailable: RegisterHost fails, staged copies work).
  static Status Create(const GpuTransferOptions& options, std::unique_ptr<GpuTransferEngine>* out);
  ~GpuTransferEngine();
  GpuTransferEngine(const GpuTransferEngine&) = delete;
  GpuTransferEngine& operator=(const GpuTransferEngine&) = delete;

  // Registers [base, base + len) for the direct path (see
  // host_registration.h for codes). Ranges may not overlap. The range must
  // stay mapped until UnregisterHost or the engine's destruction.
  Status RegisterHost(void* base, uint64_t len);
  // kNotFound if no registration starts at `base`.
  Status UnregisterHost(void* base);
  bool IsRegistered(const void* p, uint64_t len) const;
  size_t RegisteredSegments() const;

  // Host -> GPU for every block. With crc_out (num_blocks entries): the
  // CRC32C of each block as it landed on the GPU. kInvalidArgument for a
  // direct copy from unregistered host bytes; driver failures as CudaStatus.
  // On failure the GPU destinations hold unspecified bytes.
  Status Load(const GpuBatch& batch, GpuPath path, uint32_t* crc_out = nullptr);

  // GPU -> host for every block, after the work submitted so far to
  // `after_stream` (a CUstream/cudaStream_t as an integer; 0: none). With
  // crc_out: the CRC32C of each block's GPU bytes, computed concurrently.
  Status Store(const GpuBatch& batch, GpuPath path, uint32_t* crc_out = nullptr,
               uintptr_t after_stream = 0);

  // CRC32C of each block's GPU bytes (host pointers unused).
  Status Checksum(const GpuBatch& batch, uint32_t* crc_out, uintptr_t after_stream = 0);

  GpuTransferStats stats() const;
  int device() const;
  const std::string& device_name() const;

  struct Impl;

 private:
  explicit GpuTransferEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cxlkv

#endif  // CXLKV_SRC_TRANSFER_GPU_TRANSFER_H_
