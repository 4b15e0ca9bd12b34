// Copyright cxlkv authors.
//
// The "vllm" section of cxlkv-bench-gpu: vLLM's real KV layout (one
// (num_blocks, 32 KiB) tensor per layer, 28 layers: Qwen2.5-7B with 16-token
// blocks), 256-token chunks of scattered GPU block ids, stored to and loaded
// from a registered region through RegionGpu with each copy method (copy
// engines, SM threads, auto), CRC on and off, against pinned host <-> GPU
// copies of the same bytes in the same run.
#ifndef CXLKV_TOOLS_BENCH_GPU_VLLM_LAYOUT_H_
#define CXLKV_TOOLS_BENCH_GPU_VLLM_LAYOUT_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace cxlkv::bench {

struct VllmLayoutFlags {
  std::vector<uint64_t> tokens = {2048, 8192, 16384, 32768};
  int iters = 7;
  std::string dir = "/dev/shm";
  unsigned sm_blocks = 0;  // GpuTransferOptions::sm_blocks (0: its default)
};

struct VllmLayoutRow {
  uint64_t tokens = 0, chunks = 0, pieces = 0;
  double h2d = 0, d2h = 0;                                 // ceilings, GB/s
  double load[3] = {}, load_nocrc[3] = {}, store[3] = {};  // by GpuCopyMethod, GB/s
  double build_us = 0;                                     // KvPieces::Build for the whole load
};

// Runs the section (prints progress lines starting with '#'). Dies on any
// failed or missed transfer.
std::vector<VllmLayoutRow> RunVllmLayout(const VllmLayoutFlags& f, const char* device_name);
void PrintVllmLayout(const std::vector<VllmLayoutRow>& rows);
void WriteVllmLayoutJson(const std::vector<VllmLayoutRow>& rows, FILE* out);

}  // namespace cxlkv::bench

#endif  // CXLKV_TOOLS_BENCH_GPU_VLLM_LAYOUT_H_
