// Copyright cxlkv authors.
//
// cxlkv-bench-gpu: in one run, for each block size and batch size,
//   ceiling   pinned host <-> GPU copies of the same blocks (cuMemHostAlloc
//             buffer): the faster of one cuMemcpyAsync per block and one
//             cuMemcpyBatchAsync for the batch: what PCIe gives here;
//   direct    RegionGpu load/store through the registered region (the whole
//             path: BeginRead/EndRead or BeginWrite/CommitWrite, DMA, GPU
//             CRC32C of every block);
//   dma-only  the engine's direct DMA of the same slots, no CRC, no leases;
//   staged    RegionGpu through pinned staging buffers ([Fan26]'s path);
//   GPU CRC   the engine's CRC32C of the blocks in device memory alone;
//   w/o CRC   the direct RegionGpu load with verify_crc off (leases + DMA).
// Every rate is bytes / wall time of a synchronous call (enqueue to
// completion), median of --iters; ratios are to the ceiling of the same
// run, block size and batch. Loads that miss or fail abort the run.
//
// The "vllm" section (vllm_layout.h) does the same for vLLM's real layout:
// 32 KiB pieces, one per layer and GPU block, by each copy method.
// The "coherence" section (coherence_cost.h): a coherence=software load of
// 14 MiB chunks (invalidate before DMA) against hardware mode, the
// invalidate alone, and DMA from a write-combining buffer instead.
//
//   cxlkv-bench-gpu [--sections flat,vllm,coherence] [--sizes 917504,14680064]
//                   [--batches 1,2,4,8,16,32,64,128] [--tokens 2048,8192,16384,32768]
//                   [--sm-blocks N] [--iters 7] [--dir /dev/shm] [--json FILE]
#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "coherence_cost.h"
#include "cuda_status.h"
#include "cxlkv/region.h"
#include "region_gpu.h"
#include "vllm_layout.h"

using namespace cxlkv;
using namespace cxlkv::bench;

namespace {

struct Flags {
  std::vector<uint64_t> sizes = {917504, 14680064};
  std::vector<uint64_t> batches = {1, 2, 4, 8, 16, 32, 64, 128};
  int iters = 7;
  std::string dir = "/dev/shm";
  std::string json;
  bool flat = true, vllm = true, coherence = true;
  std::vector<uint64_t> tokens = {2048, 8192, 16384, 32768};
  unsigned sm_blocks = 0;
};

struct Row {
  uint64_t size = 0, batch = 0;
  double h2d = 0, d2h = 0, direct_load = 0, dma_load = 0, staged_load = 0;  // GB/s
  double direct_store = 0, staged_store = 0;
  double h2d_loop = 0, h2d_batch = 0, d2h_loop = 0, d2h_batch = 0;  // the ceilings' two methods
  double gpu_crc = 0;       // GPU CRC32C of the blocks in device memory
  double direct_nocrc = 0;  // RegionGpu load with verify_crc off (leases + DMA)
  double lease_us = 0;      // BeginRead + EndRead per block, no copy (microseconds)
};

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) Die("missing value for " + a);
      return argv[++i];
    };
    if (a == "--sizes")
      f.sizes = ParseList(next());
    else if (a == "--batches")
      f.batches = ParseList(next());
    else if (a == "--iters")
      f.iters = std::atoi(next());
    else if (a == "--dir")
      f.dir = next();
    else if (a == "--json")
      f.json = next();
    else if (a == "--sm-blocks")
      f.sm_blocks = static_cast<unsigned>(std::atoi(next()));
    else if (a == "--tokens")
      f.tokens = ParseList(next());
    else if (a == "--sections") {
      const std::string v = next();
      f.flat = v.find("flat") != std::string::npos;
      f.vllm = v.find("vllm") != std::string::npos;
      f.coherence = v.find("coherence") != std::string::npos;
      if (!f.flat && !f.vllm && !f.coherence)
        Die("--sections takes a comma-separated list of flat, vllm, coherence");
    } else
      Die("unknown flag " + a + " (see the header of tools/bench_gpu/bench_gpu.cc)");
  }
  const uint64_t max_batch = *std::max_element(f.batches.begin(), f.batches.end());

  CU(cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  char name[256] = {};
  CU(cuDeviceGetName(name, sizeof(name) - 1, dev));
  CUstream stream;
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  std::vector<Row> rows;
  uint64_t next_id = 1ull << 40;
  for (const uint64_t size : f.flat ? f.sizes : std::vector<uint64_t>{}) {
    const uint64_t bytes = max_batch * size;
    CUdeviceptr gpu;
    CU(cuMemAlloc(&gpu, bytes));
    void* pinned;
    CU(cuMemHostAlloc(&pinned, bytes, 0));
    {  // random bytes, never zeros
      auto* p = static_cast<uint64_t*>(pinned);
      uint64_t x = 0x9E3779B97F4A7C15ull ^ size;
      for (uint64_t i = 0; i < bytes / 8; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = x;
      }
      CU(cuMemcpyHtoD(gpu, pinned, bytes));
    }

    const std::string path =
        f.dir + "/cxlkv-bench-gpu-" + std::to_string(getpid()) + "-" + std::to_string(size);
    RegionOptions ro;
    ro.size = (max_batch * 5 / 2) * size + (64ull << 20);
    ro.config.slot_size = size;
    ro.config.hash_algorithm = "bench";
    ro.config.hash_seed_fingerprint = 1;
    std::unique_ptr<Region> region;
    Check(Region::Open(path, ro, &region), "open region");
    NamespaceId ns;
    Check(region->RegisterNamespace(NamespaceDesc{"bench", "bytes", "flat", 0, 0}, &ns),
          "namespace");
    std::unique_ptr<RegionGpu> rg;
    const auto t_reg = std::chrono::steady_clock::now();
    Check(RegionGpu::Open(region.get(), RegionGpuOptions{}, &rg), "RegionGpu::Open");
    const double reg_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_reg).count();
    if (!rg->direct()) Die("region could not be registered with CUDA");
    std::printf(
        "# %s, block %llu bytes: region %.2f GiB, slot area registered in %zu segment(s), "
        "%.2f s (engine creation included)\n",
        name, (unsigned long long)size, ro.size / double(1ull << 30),
        rg->engine()->RegisteredSegments(), reg_s);

    // Blocks used by the loads: keys 0..max_batch-1, each one GPU piece.
    std::vector<BlockKey> keys(max_batch);
    std::vector<uint64_t> ptr(max_batch), len(max_batch, size);
    std::vector<uint32_t> first(max_batch + 1);
    for (uint64_t i = 0; i < max_batch; ++i) {
      keys[i] = BlockKey::FromId(i);
      ptr[i] = gpu + i * size;
      first[i] = static_cast<uint32_t>(i);
    }
    first[max_batch] = static_cast<uint32_t>(max_batch);
    GpuStoreResult sr;
    Check(rg->Store(ns, keys.data(), GpuBlocks{ptr.data(), len.data(), first.data(), max_batch},
                    GpuPath::kDirect, 0, &sr),
          "store");
    if (sr.stored != max_batch) Die("initial store wrote " + std::to_string(sr.stored) + " blocks");

    for (const uint64_t k : f.batches) {
      Row r;
      r.size = size;
      r.batch = k;
      const double gb = double(k * size) / 1e9;
      const int iters = std::max<int>(f.iters, static_cast<int>(64 / k));
      const GpuBlocks blocks{ptr.data(), len.data(), first.data(), k};
      first[k] = static_cast<uint32_t>(k);  // (already so; blocks use first[0..k])

      // Ceiling: the faster of two ways to copy the same blocks from pinned
      // memory: one cuMemcpyAsync per block, or one cuMemcpyBatchAsync.
      auto pinned_loop = [&](bool h2d) {
        for (uint64_t i = 0; i < k; ++i) {
          uint8_t* h = static_cast<uint8_t*>(pinned) + i * size;
          if (h2d)
            CU(cuMemcpyHtoDAsync(gpu + i * size, h, size, stream));
          else
            CU(cuMemcpyDtoHAsync(h, gpu + i * size, size, stream));
        }
        CU(cuStreamSynchronize(stream));
      };
      // Descriptor arrays built before timing, so the ceiling pays nothing extra.
      std::vector<CUdeviceptr> host_at(k), dev_at(k);
      std::vector<size_t> sizes(k, size);
      for (uint64_t i = 0; i < k; ++i) {
        host_at[i] = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(pinned) + i * size);
        dev_at[i] = gpu + i * size;
      }
      auto pinned_batch = [&](bool h2d) {
        CUmemcpyAttributes attr;
        std::memset(&attr, 0, sizeof(attr));
        attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        size_t idx = 0;
        CUdeviceptr* dst = h2d ? dev_at.data() : host_at.data();
        CUdeviceptr* src = h2d ? host_at.data() : dev_at.data();
#if CUDA_VERSION >= 13000
        CU(cuMemcpyBatchAsync(dst, src, sizes.data(), k, &attr, &idx, 1, stream));
#else
        size_t fail = 0;
        CU(cuMemcpyBatchAsync(dst, src, sizes.data(), k, &attr, &idx, 1, &fail, stream));
#endif
        CU(cuStreamSynchronize(stream));
      };
      r.h2d_loop = gb / Median(iters, [&] { pinned_loop(true); });
      r.d2h_loop = gb / Median(iters, [&] { pinned_loop(false); });
      r.h2d_batch = gb / Median(iters, [&] { pinned_batch(true); });
      r.d2h_batch = gb / Median(iters, [&] { pinned_batch(false); });
      r.h2d = std::max(r.h2d_loop, r.h2d_batch);
      r.d2h = std::max(r.d2h_loop, r.d2h_batch);
      {
        GpuBatch b;
        for (uint64_t i = 0; i < k; ++i) {
          b.AddBlock(nullptr);
          b.AddPiece(ptr[i], size);
        }
        std::vector<uint32_t> crc(k);
        r.gpu_crc =
            gb / Median(iters, [&] { Check(rg->engine()->Checksum(b, crc.data()), "crc"); });
      }
      auto load = [&](GpuPath p, bool verify = true) {
        GpuLoadResult res;
        LoadOptions lo;
        lo.verify_crc = verify;
        Check(rg->Load(ns, keys.data(), blocks, p, &res, lo), "load");
        if (res.prefix != k)
          Die("load hit " + std::to_string(res.prefix) + " of " + std::to_string(k) + ": " +
              res.status[res.prefix].ToString());
      };
      r.direct_load = gb / Median(iters, [&] { load(GpuPath::kDirect); });
      r.staged_load = gb / Median(iters, [&] { load(GpuPath::kStaged); });
      r.direct_nocrc = gb / Median(iters, [&] { load(GpuPath::kDirect, false); });
      {
        std::vector<ReadLease> leases(k);
        r.lease_us = 1e6 / k * Median(iters, [&] {
                       for (uint64_t i = 0; i < k; ++i)
                         Check(region->BeginRead(ns, keys[i], &leases[i]), "BeginRead");
                       for (uint64_t i = 0; i < k; ++i)
                         Check(region->EndRead(&leases[i]), "EndRead");
                     });
      }
      {  // the engine's DMA alone, on the same slots (leases held meanwhile)
        std::vector<ReadLease> leases(k);
        GpuBatch b;
        for (uint64_t i = 0; i < k; ++i) {
          Check(region->BeginRead(ns, keys[i], &leases[i]), "BeginRead");
          b.AddBlock(const_cast<void*>(leases[i].data()));
          b.AddPiece(ptr[i], size);
        }
        r.dma_load =
            gb / Median(iters, [&] { Check(rg->engine()->Load(b, GpuPath::kDirect), "dma"); });
        for (auto& l : leases) Check(region->EndRead(&l), "EndRead");
      }
      // Stores write fresh keys; they are dropped (untimed) after each run
      // so the blocks the loads use are never evicted.
      std::vector<BlockKey> fresh(k);
      auto store = [&](GpuPath p) {
        for (auto& key : fresh) key = BlockKey::FromId(next_id++);
        GpuStoreResult res;
        Check(rg->Store(ns, fresh.data(), blocks, p, 0, &res), "store");
        if (res.stored != k)
          Die("store wrote " + std::to_string(res.stored) + " of " + std::to_string(k));
      };
      auto drop = [&] {
        for (auto& key : fresh) Check(region->Drop(ns, key), "drop");
      };
      r.direct_store = gb / Median(
                                iters, [&] { store(GpuPath::kDirect); }, drop);
      r.staged_store = gb / Median(
                                iters, [&] { store(GpuPath::kStaged); }, drop);
      rows.push_back(r);
    }
    const GpuTransferStats st = rg->engine()->stats();
    std::printf(
        "# engine: %llu batches, cuMemcpyBatchAsync calls %llu (refused %llu), "
        "cuMemcpyAsync calls %llu\n",
        (unsigned long long)st.batches, (unsigned long long)st.batch_api_calls,
        (unsigned long long)st.batch_api_fallbacks, (unsigned long long)st.single_copies);
    rg.reset();
    region.reset();
    ::unlink(path.c_str());
    CU(cuMemFreeHost(pinned));
    CU(cuMemFree(gpu));
  }

  std::vector<VllmLayoutRow> vrows;
  if (f.vllm) {
    VllmLayoutFlags vf;
    vf.tokens = f.tokens;
    vf.iters = f.iters;
    vf.dir = f.dir;
    vf.sm_blocks = f.sm_blocks;
    vrows = RunVllmLayout(vf, name);
  }
  std::vector<CoherenceCostRow> crows;
  if (f.coherence) {
    CoherenceCostFlags cf;
    cf.iters = f.iters;
    cf.dir = f.dir;
    cf.sizes.clear();
    for (uint64_t s : f.sizes)
      if (s >= (1ull << 20)) cf.sizes.push_back(s);  // big chunks: where the cost shows
    if (cf.sizes.empty()) cf.sizes.push_back(14680064);
    crows = RunCoherenceCost(cf);
  }

  if (f.flat)
    std::printf(
        "\n| block | batch | H2D ceiling GB/s | direct load GB/s (x ceil) | DMA only (x) | staged "
        "load (x) "
        "| D2H ceiling GB/s | direct store (x) | staged store (x) | GPU CRC32C GB/s | load w/o CRC "
        "(x) |\n");
  if (f.flat) std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf(
        "| %s | %llu | %.1f | %.1f (%.2f) | %.1f (%.2f) | %.1f (%.2f) | %.1f | %.1f (%.2f) | %.1f "
        "(%.2f) | %.0f | %.1f (%.2f) |\n",
        r.size == 917504     ? "896 KiB"
        : r.size == 14680064 ? "14 MiB"
                             : std::to_string(r.size).c_str(),
        (unsigned long long)r.batch, r.h2d, r.direct_load, r.direct_load / r.h2d, r.dma_load,
        r.dma_load / r.h2d, r.staged_load, r.staged_load / r.h2d, r.d2h, r.direct_store,
        r.direct_store / r.d2h, r.staged_store, r.staged_store / r.d2h, r.gpu_crc, r.direct_nocrc,
        r.direct_nocrc / r.h2d);
  }
  if (f.vllm) PrintVllmLayout(vrows);
  if (f.coherence) PrintCoherenceCost(crows);
  if (!f.json.empty()) {
    FILE* out = std::fopen(f.json.c_str(), "w");
    if (!out) Die("cannot write " + f.json);
    std::fprintf(out, "{\"device\": \"%s\", \"iters\": %d, \"rows\": [\n", name, f.iters);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(
          out,
          "  {\"block_bytes\": %llu, \"batch\": %llu, \"h2d_ceiling_gbps\": %.3f, "
          "\"d2h_ceiling_gbps\": %.3f, \"direct_load_gbps\": %.3f, \"dma_only_load_gbps\": %.3f, "
          "\"staged_load_gbps\": %.3f, \"direct_store_gbps\": %.3f, \"staged_store_gbps\": %.3f, "
          "\"h2d_pinned_loop_gbps\": %.3f, \"h2d_pinned_batch_gbps\": %.3f, "
          "\"d2h_pinned_loop_gbps\": %.3f, \"d2h_pinned_batch_gbps\": %.3f, \"gpu_crc32c_gbps\": "
          "%.3f, "
          "\"direct_load_no_crc_gbps\": %.3f, \"lease_us_per_block\": %.3f}%s\n",
          (unsigned long long)r.size, (unsigned long long)r.batch, r.h2d, r.d2h, r.direct_load,
          r.dma_load, r.staged_load, r.direct_store, r.staged_store, r.h2d_loop, r.h2d_batch,
          r.d2h_loop, r.d2h_batch, r.gpu_crc, r.direct_nocrc, r.lease_us,
          i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(out, "],\n");
    WriteVllmLayoutJson(vrows, out);
    std::fprintf(out, ",\n");
    WriteCoherenceCostJson(crows, out);
    std::fprintf(out, "}\n");
    std::fclose(out);
  }
  CU(cuStreamDestroy(stream));
  CU(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
