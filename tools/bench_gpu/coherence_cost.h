// Copyright cxlkv authors.
//
// The "coherence" section of cxlkv-bench-gpu (docs/coherence.md, "GPU
// path"): what coherence=software costs a GPU load of big chunks. A DMA
// reads host memory through this host's caches, so a software-mode load
// invalidates the slot's lines before the DMA (Region::BeginRead does it);
// this measures, per block size and in one run:
//   hw load       RegionGpu direct load from a coherence=hardware region;
//   sw load       the same from a coherence=software region, the blocks
//                 written by the other write partition (so every payload
//                 line is invalidated before the DMA and the CRC verified);
//   invalidate    the CPU's invalidate of the same bytes alone
//                 (CLFLUSHOPT/CLFLUSH over the slots, then MFENCE);
//   DMA cached    H2D from ordinary pinned host memory (cuMemHostAlloc);
//   DMA WC        H2D from write-combining pinned memory
//                 (CU_MEMHOSTALLOC_WRITECOMBINED): never cached by the CPU,
//                 so nothing to invalidate; a stand-in for an uncached
//                 mapping of the data area, which a /dev/shm region cannot
//                 have from user space;
//   CPU write WC  memcpy into that WC buffer vs into cached pinned memory
//                 followed by a flush of its lines (the writer's side of
//                 "never cache" vs "cache and flush").
// Ratios: sw/hw, and each DMA and CPU-write variant to its cached one.
#ifndef CXLKV_TOOLS_BENCH_GPU_COHERENCE_COST_H_
#define CXLKV_TOOLS_BENCH_GPU_COHERENCE_COST_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace cxlkv::bench {

struct CoherenceCostFlags {
  std::vector<uint64_t> sizes = {14680064};  // block bytes
  uint64_t batch = 8;                        // blocks per load
  int iters = 7;
  std::string dir = "/dev/shm";
};

struct CoherenceCostRow {
  uint64_t size = 0, batch = 0;
  double hw_load = 0, sw_load = 0;                      // GB/s, RegionGpu direct loads
  double invalidate = 0;                                // GB/s of bytes invalidated
  double dma_cached = 0, dma_wc = 0;                    // GB/s, H2D
  double cpu_write_cached_flush = 0, cpu_write_wc = 0;  // GB/s
  std::string visibility;                               // Visibility::Name()
};

// Runs the section (progress lines start with '#'). Dies on any failed or
// missed transfer.
std::vector<CoherenceCostRow> RunCoherenceCost(const CoherenceCostFlags& f);
void PrintCoherenceCost(const std::vector<CoherenceCostRow>& rows);
void WriteCoherenceCostJson(const std::vector<CoherenceCostRow>& rows, FILE* out);

}  // namespace cxlkv::bench

#endif  // CXLKV_TOOLS_BENCH_GPU_COHERENCE_COST_H_
