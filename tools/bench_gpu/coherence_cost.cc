// Copyright cxlkv authors.
//
// The "coherence" section of cxlkv-bench-gpu (coherence_cost.h).
#include "coherence_cost.h"

#include <cuda.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "bench_util.h"
#include "cuda_status.h"
#include "cxlkv/region.h"
#include "region_gpu.h"
#include "region_internal.h"
#include "visibility/visibility.h"

namespace cxlkv::bench {
namespace {

const NamespaceDesc kNs{"bench", "bytes", "flat", 0, 0};

struct Opened {
  std::string path;
  std::unique_ptr<Region> region;
  std::unique_ptr<RegionGpu> gpu;
  NamespaceId ns = 0;
  ~Opened() {
    gpu.reset();
    region.reset();
    if (!path.empty()) ::unlink(path.c_str());
  }
};

RegionOptions Options(uint64_t size, uint64_t batch) {
  RegionOptions ro;
  ro.size = (batch * 5 / 2) * size * 2 + (64ull << 20);
  ro.config.slot_size = size;
  ro.config.hash_algorithm = "bench";
  ro.config.hash_seed_fingerprint = 1;
  return ro;
}

void OpenGpu(Opened* o) {
  Check(o->region->RegisterNamespace(kNs, &o->ns), "namespace");
  Check(RegionGpu::Open(o->region.get(), RegionGpuOptions{}, &o->gpu), "RegionGpu::Open");
  if (!o->gpu->direct()) Die("region could not be registered with CUDA");
}

}  // namespace

std::vector<CoherenceCostRow> RunCoherenceCost(const CoherenceCostFlags& f) {
  std::vector<CoherenceCostRow> rows;
  const uint64_t k = f.batch;
  for (const uint64_t size : f.sizes) {
    CoherenceCostRow r;
    r.size = size;
    r.batch = k;
    const uint64_t bytes = k * size;
    const double gb = double(bytes) / 1e9;
    CUdeviceptr gpu;
    CU(cuMemAlloc(&gpu, bytes));
    void* pinned;
    void* wc;
    CU(cuMemHostAlloc(&pinned, bytes, 0));
    CU(cuMemHostAlloc(&wc, bytes, CU_MEMHOSTALLOC_WRITECOMBINED));
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
    std::vector<BlockKey> keys(k);
    std::vector<uint64_t> ptr(k), len(k, size);
    std::vector<uint32_t> first(k + 1);
    for (uint64_t i = 0; i < k; ++i) {
      keys[i] = BlockKey::FromId(0xC0E0000 + i);
      ptr[i] = gpu + i * size;
      first[i] = static_cast<uint32_t>(i);
    }
    first[k] = static_cast<uint32_t>(k);
    const GpuBlocks blocks{ptr.data(), len.data(), first.data(), k};
    auto load = [&](Opened& o) {
      GpuLoadResult res;
      Check(o.gpu->Load(o.ns, keys.data(), blocks, GpuPath::kDirect, &res), "load");
      if (res.prefix != k)
        Die("load hit " + std::to_string(res.prefix) + " of " + std::to_string(k));
    };
    auto store = [&](Opened& o) {
      GpuStoreResult res;
      Check(o.gpu->Store(o.ns, keys.data(), blocks, GpuPath::kDirect, 0, &res), "store");
      if (res.stored != k) Die("store wrote " + std::to_string(res.stored));
    };
    const std::string base =
        f.dir + "/cxlkv-bench-gpu-coh-" + std::to_string(getpid()) + "-" + std::to_string(size);
    {
      Opened hw;
      hw.path = base + "-hw";
      Check(Region::Open(hw.path, Options(size, k), &hw.region), "open hardware region");
      OpenGpu(&hw);
      store(hw);
      r.hw_load = gb / Median(f.iters, [&] { load(hw); });
    }
    {
      // Partition 0 writes from the GPU; partition 1 (another "host" in
      // this process, with its own mapping) loads: every line invalidated.
      Opened w, rd;
      w.path = base + "-sw";
      RegionOptions so = Options(size, k);
      so.config.coherence = CoherenceMode::kSoftware;
      so.config.software_partitions = 2;
      so.software_partition = 0;
      Check(Region::Open(w.path, so, &w.region), "open software region (partition 0)");
      so.software_partition = 1;
      Check(Region::Open(w.path, so, &rd.region), "open software region (partition 1)");
      OpenGpu(&w);
      OpenGpu(&rd);
      store(w);
      r.sw_load = gb / Median(f.iters, [&] { load(rd); });
      internal::Visibility* vis = RegionInternal::GetVisibility(rd.region.get());
      if (vis == nullptr) Die("software region without a visibility layer");
      r.visibility = vis->Name();
      // The invalidate alone, over the same slots.
      std::vector<const void*> at(k);
      for (uint64_t i = 0; i < k; ++i) {
        const int64_t s = RegionInternal::FindReadySlot(rd.region.get(), rd.ns, keys[i]);
        if (s < 0) Die("block vanished");
        at[i] = RegionInternal::SlotData(rd.region.get(), static_cast<uint64_t>(s));
      }
      r.invalidate = gb / Median(f.iters, [&] {
                       for (uint64_t i = 0; i < k; ++i) vis->Invalidate(at[i], size);
                       vis->FullFence();
                     });
      // The writer's side: memcpy into cached pinned memory then flush,
      // vs memcpy into write-combining memory.
      std::vector<uint8_t> src(bytes, 0x5A);
      r.cpu_write_cached_flush = gb / Median(f.iters, [&] {
                                   std::memcpy(pinned, src.data(), bytes);
                                   vis->Flush(pinned, bytes);
                                   vis->StoreFence();
                                 });
      r.cpu_write_wc = gb / Median(f.iters, [&] {
                         std::memcpy(wc, src.data(), bytes);
                         vis->StoreFence();
                       });
    }
    r.dma_cached = gb / Median(f.iters, [&] { CU(cuMemcpyHtoD(gpu, pinned, bytes)); });
    r.dma_wc = gb / Median(f.iters, [&] { CU(cuMemcpyHtoD(gpu, wc, bytes)); });
    CU(cuMemFreeHost(wc));
    CU(cuMemFreeHost(pinned));
    CU(cuMemFree(gpu));
    std::printf("# coherence: block %llu bytes x %llu done\n", (unsigned long long)size,
                (unsigned long long)k);
    rows.push_back(r);
  }
  return rows;
}

void PrintCoherenceCost(const std::vector<CoherenceCostRow>& rows) {
  std::printf(
      "\n| block | batch | hw load GB/s | sw load GB/s (x hw) | invalidate GB/s | DMA cached GB/s "
      "| DMA WC (x cached) | CPU write+flush GB/s | CPU write WC (x) | visibility |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const CoherenceCostRow& r : rows) {
    std::printf(
        "| %llu | %llu | %.1f | %.1f (%.2f) | %.1f | %.1f | %.1f (%.2f) | %.1f | %.1f (%.2f) "
        "| %s |\n",
        (unsigned long long)r.size, (unsigned long long)r.batch, r.hw_load, r.sw_load,
        r.sw_load / r.hw_load, r.invalidate, r.dma_cached, r.dma_wc, r.dma_wc / r.dma_cached,
        r.cpu_write_cached_flush, r.cpu_write_wc, r.cpu_write_wc / r.cpu_write_cached_flush,
        r.visibility.c_str());
  }
}

void WriteCoherenceCostJson(const std::vector<CoherenceCostRow>& rows, FILE* out) {
  std::fprintf(out, "\"coherence\": [\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const CoherenceCostRow& r = rows[i];
    std::fprintf(out,
                 "  {\"block_bytes\": %llu, \"batch\": %llu, \"hw_load_gbps\": %.3f, "
                 "\"sw_load_gbps\": %.3f, \"sw_load_vs_hw\": %.3f, \"invalidate_gbps\": %.3f, "
                 "\"dma_cached_gbps\": %.3f, \"dma_wc_gbps\": %.3f, \"dma_wc_vs_cached\": %.3f, "
                 "\"cpu_write_cached_flush_gbps\": %.3f, \"cpu_write_wc_gbps\": %.3f, "
                 "\"visibility\": \"%s\"}%s\n",
                 (unsigned long long)r.size, (unsigned long long)r.batch, r.hw_load, r.sw_load,
                 r.sw_load / r.hw_load, r.invalidate, r.dma_cached, r.dma_wc,
                 r.dma_wc / r.dma_cached, r.cpu_write_cached_flush, r.cpu_write_wc,
                 r.visibility.c_str(), i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(out, "]\n");
}

}  // namespace cxlkv::bench
