// Copyright cxlkv authors.
#include "vllm_layout.h"

#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>

#include "bench_util.h"
#include "crc32c.h"
#include "cxlkv/region.h"
#include "kv_layout.h"
#include "region_gpu.h"

namespace cxlkv::bench {
namespace {

// Qwen2.5-7B in vLLM: 28 layers, 4 KV heads x 128 x (K, V) x bf16 x 16
// tokens = 32 KiB per block and layer; 256-token chunks of 16 blocks.
constexpr int kLayers = 28;
constexpr uint64_t kPage = 32 * 1024;
constexpr uint32_t kBlocksPerChunk = 16;
constexpr uint64_t kTokensPerChunk = 256;
constexpr GpuCopyMethod kMethods[3] = {GpuCopyMethod::kDma, GpuCopyMethod::kSm,
                                       GpuCopyMethod::kAuto};

void FillRandom(CUdeviceptr dst, uint64_t bytes, uint64_t seed, void* pinned, uint64_t pinned_len) {
  for (uint64_t off = 0; off < bytes; off += pinned_len) {
    const uint64_t n = std::min(pinned_len, bytes - off);
    auto* p = static_cast<uint64_t*>(pinned);
    uint64_t x = 0x9E3779B97F4A7C15ull ^ (seed + off);
    for (uint64_t i = 0; i < n / 8; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      p[i] = x;
    }
    CU(cuMemcpyHtoD(dst + off, pinned, n));
  }
}

}  // namespace

std::vector<VllmLayoutRow> RunVllmLayout(const VllmLayoutFlags& f, const char* device_name) {
  std::vector<VllmLayoutRow> rows;
  if (f.tokens.empty()) return rows;
  const uint64_t max_tokens = *std::max_element(f.tokens.begin(), f.tokens.end());
  const uint64_t max_chunks = std::max<uint64_t>(1, max_tokens / kTokensPerChunk);
  const uint64_t gpu_blocks =
      2 * max_chunks * kBlocksPerChunk;  // ids scattered over twice the used
  const uint64_t layer_bytes = gpu_blocks * kPage;
  const uint64_t chunk_bytes = kLayers * kBlocksPerChunk * kPage;  // 14 MiB
  const uint64_t flat_bytes = max_chunks * chunk_bytes;

  CUstream stream;
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr src_kv, dst_kv, flat;
  CU(cuMemAlloc(&src_kv, kLayers * layer_bytes));
  CU(cuMemAlloc(&dst_kv, kLayers * layer_bytes));
  CU(cuMemAlloc(&flat, flat_bytes));
  void* pinned;
  CU(cuMemHostAlloc(&pinned, flat_bytes, 0));
  FillRandom(src_kv, kLayers * layer_bytes, 1, pinned, flat_bytes);
  FillRandom(flat, flat_bytes, 2, pinned, flat_bytes);  // pinned keeps random bytes too

  std::vector<uint64_t> src_bases, dst_bases;
  for (int l = 0; l < kLayers; ++l) {
    src_bases.push_back(src_kv + l * layer_bytes);
    dst_bases.push_back(dst_kv + l * layer_bytes);
  }
  const KvLayerLayout src_layout =
      KvLayerLayout::Uniform(src_bases, kPage, gpu_blocks, kBlocksPerChunk);
  const KvLayerLayout dst_layout =
      KvLayerLayout::Uniform(dst_bases, kPage, gpu_blocks, kBlocksPerChunk);
  std::vector<int64_t> ids(gpu_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 rng(42);
  std::shuffle(ids.begin(), ids.end(), rng);  // vLLM's free list hands out scattered blocks

  const std::string path = f.dir + "/cxlkv-bench-gpu-vllm-" + std::to_string(getpid());
  RegionOptions ro;
  // Every row's load blocks stay stored (one slot per chunk) beside the
  // largest row's fresh stores; twice that keeps both candidate sets of
  // every key from filling up (an eviction would turn a load into a miss).
  uint64_t slots = max_chunks;
  for (uint64_t t : f.tokens) slots += std::max<uint64_t>(1, t / kTokensPerChunk);
  ro.size = 2 * slots * chunk_bytes + (64ull << 20);
  ro.config.slot_size = chunk_bytes;
  ro.config.hash_algorithm = "bench";
  ro.config.hash_seed_fingerprint = 1;
  std::unique_ptr<Region> region;
  Check(Region::Open(path, ro, &region), "open region");
  NamespaceId ns;
  Check(region->RegisterNamespace(NamespaceDesc{"bench-vllm", "bfloat16", "NHD", 0, 0}, &ns),
        "namespace");

  for (uint64_t t : f.tokens) {
    VllmLayoutRow r;
    r.tokens = t;
    r.chunks = std::max<uint64_t>(1, t / kTokensPerChunk);
    rows.push_back(r);
  }
  uint64_t next_id = 1ull << 40;
  for (int mi = 0; mi < 3; ++mi) {
    RegionGpuOptions go;
    go.transfer.copy_method = kMethods[mi];
    go.transfer.sm_blocks = f.sm_blocks;
    std::unique_ptr<RegionGpu> rg;
    Check(RegionGpu::Open(region.get(), go, &rg), "RegionGpu::Open");
    if (!rg->direct()) Die("region could not be registered with CUDA");
    for (VllmLayoutRow& r : rows) {
      const size_t n = r.chunks * kBlocksPerChunk;
      const double gb = double(r.chunks * chunk_bytes) / 1e9;
      const int iters = f.iters;
      KvPieces sp, dp;
      Check(sp.Build(src_layout, ids.data(), n), "pieces");
      Check(dp.Build(dst_layout, ids.data(), n), "pieces");
      r.pieces = dp.num_pieces();
      std::vector<BlockKey> keys(r.chunks);
      for (uint64_t c = 0; c < r.chunks; ++c) keys[c] = BlockKey::FromId(r.tokens * 100000 + c);
      if (mi == 0) {
        // The blocks the loads read, stored once (and the ceilings, once).
        GpuStoreResult sr;
        Check(rg->Store(ns, keys.data(), sp.blocks(), GpuPath::kDirect, 0, &sr), "store");
        if (sr.stored != r.chunks) Die("initial store wrote " + std::to_string(sr.stored));
        if (std::getenv("CXLKV_BENCH_DIAG")) {
          for (uint64_t c = 0; c < r.chunks; ++c) {
            ReadLease lease;
            Check(region->BeginRead(ns, keys[c], &lease), "diag BeginRead");
            const uint32_t slot_crc = internal::Crc32c(lease.data(), lease.len());
            const uint32_t recorded = lease.crc32c();
            const size_t len = lease.len();
            (void)region->EndRead(&lease);
            GpuBatch b;
            const GpuBlocks sb = sp.blocks(c, c + 1);
            b.AddBlock(nullptr);
            for (uint32_t p = sb.first_piece[0]; p < sb.first_piece[1]; ++p)
              b.AddPiece(sb.ptr[p], sb.len[p]);
            uint32_t src_crc = 0;
            Check(rg->engine()->Checksum(b, &src_crc), "checksum");
            std::printf(
                "# diag T=%llu chunk %llu len %zu: recorded 0x%08x slot 0x%08x source 0x%08x\n",
                (unsigned long long)r.tokens, (unsigned long long)c, len, recorded, slot_crc,
                src_crc);
          }
        }
        r.build_us = 1e6 * Median(iters, [&] { Check(dp.Build(dst_layout, ids.data(), n), "b"); });
        auto pinned_copy = [&](bool h2d) {
          for (uint64_t c = 0; c < r.chunks; ++c) {
            uint8_t* h = static_cast<uint8_t*>(pinned) + c * chunk_bytes;
            if (h2d)
              CU(cuMemcpyHtoDAsync(flat + c * chunk_bytes, h, chunk_bytes, stream));
            else
              CU(cuMemcpyDtoHAsync(h, flat + c * chunk_bytes, chunk_bytes, stream));
          }
          CU(cuStreamSynchronize(stream));
        };
        r.h2d = gb / Median(iters, [&] { pinned_copy(true); });
        r.d2h = gb / Median(iters, [&] { pinned_copy(false); });
      }
      auto load = [&](bool verify) {
        GpuLoadResult res;
        LoadOptions lo;
        lo.verify_crc = verify;
        Check(rg->Load(ns, keys.data(), dp.blocks(), GpuPath::kDirect, &res, lo), "load");
        if (res.prefix != r.chunks) {
          // Say which side is wrong: the slot's bytes (CPU CRC of the slot
          // against the recorded one) or the GPU source (its GPU CRC now).
          const size_t c = res.prefix;
          ReadLease lease;
          uint32_t slot_crc = 0, recorded = 0, src_crc = 0;
          if (region->BeginRead(ns, keys[c], &lease).ok()) {
            slot_crc = internal::Crc32c(lease.data(), lease.len());
            recorded = lease.crc32c();
            (void)region->EndRead(&lease);
          }
          GpuBatch b;
          const GpuBlocks sb = sp.blocks(c, c + 1);
          b.AddBlock(nullptr);
          for (uint32_t p = sb.first_piece[0]; p < sb.first_piece[1]; ++p)
            b.AddPiece(sb.ptr[p], sb.len[p]);
          Check(rg->engine()->Checksum(b, &src_crc), "checksum");
          std::fprintf(stderr,
                       "# chunk %zu: recorded 0x%08x, CPU CRC of slot 0x%08x, GPU CRC of source "
                       "0x%08x\n",
                       c, recorded, slot_crc, src_crc);
          Die("load hit " + std::to_string(res.prefix) + " of " + std::to_string(r.chunks) + ": " +
              res.status[res.prefix].ToString());
        }
      };
      // cuMemsetD8 is asynchronous on the legacy stream, which the engine's
      // non-blocking streams do not wait for: finish it before loading.
      CU(cuMemsetD8(dst_kv, 0xA5, kLayers * layer_bytes));
      CU(cuCtxSynchronize());
      load(true);
      {  // bit-exact: every page of the first chunk, as it landed
        std::vector<uint8_t> a(kPage), b(kPage);
        for (int l = 0; l < kLayers; ++l) {
          for (uint32_t j = 0; j < kBlocksPerChunk; ++j) {
            const uint64_t off = l * layer_bytes + ids[j] * kPage;
            CU(cuMemcpyDtoH(a.data(), src_kv + off, kPage));
            CU(cuMemcpyDtoH(b.data(), dst_kv + off, kPage));
            if (std::memcmp(a.data(), b.data(), kPage) != 0)
              Die(std::string("page mismatch after load by ") + GpuCopyMethodName(kMethods[mi]));
          }
        }
      }
      r.load[mi] = gb / Median(iters, [&] { load(true); });
      r.load_nocrc[mi] = gb / Median(iters, [&] { load(false); });
      std::vector<BlockKey> fresh(r.chunks);
      auto store = [&] {
        for (auto& k : fresh) k = BlockKey::FromId(next_id++);
        GpuStoreResult res;
        Check(rg->Store(ns, fresh.data(), sp.blocks(), GpuPath::kDirect, 0, &res), "store");
        if (res.stored != r.chunks)
          Die("store wrote " + std::to_string(res.stored) + " of " + std::to_string(r.chunks));
      };
      auto drop = [&] {
        for (auto& k : fresh) Check(region->Drop(ns, k), "drop");
      };
      r.store[mi] = gb / Median(iters, store, drop);
    }
    const GpuTransferStats st = rg->engine()->stats();
    std::printf(
        "# vllm layout, %s copies: %llu SM launches (%.2f GB by SM), %llu batched / %llu single "
        "DMA calls\n",
        GpuCopyMethodName(kMethods[mi]), (unsigned long long)st.sm_launches, st.sm_bytes / 1e9,
        (unsigned long long)st.batch_api_calls, (unsigned long long)st.single_copies);
  }
  std::printf("# %s; vLLM layout: %d layers x 32 KiB pages, %u blocks per chunk, ids shuffled\n",
              device_name, kLayers, kBlocksPerChunk);
  region.reset();
  ::unlink(path.c_str());
  CU(cuMemFreeHost(pinned));
  CU(cuMemFree(flat));
  CU(cuMemFree(dst_kv));
  CU(cuMemFree(src_kv));
  CU(cuStreamDestroy(stream));
  return rows;
}

void PrintVllmLayout(const std::vector<VllmLayoutRow>& rows) {
  std::printf(
      "\n| tokens | chunks | pieces | H2D ceiling GB/s | load DMA (x) | load SM (x) | load auto "
      "(x) "
      "| load auto w/o CRC (x) | D2H ceiling GB/s | store DMA (x) | store SM (x) | store auto (x) "
      "| piece list us |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const VllmLayoutRow& r : rows) {
    std::printf(
        "| %llu | %llu | %llu | %.1f | %.1f (%.2f) | %.1f (%.2f) | %.1f (%.2f) | %.1f (%.2f) | "
        "%.1f | %.1f (%.2f) | %.1f (%.2f) | %.1f (%.2f) | %.0f |\n",
        (unsigned long long)r.tokens, (unsigned long long)r.chunks, (unsigned long long)r.pieces,
        r.h2d, r.load[0], r.load[0] / r.h2d, r.load[1], r.load[1] / r.h2d, r.load[2],
        r.load[2] / r.h2d, r.load_nocrc[2], r.load_nocrc[2] / r.h2d, r.d2h, r.store[0],
        r.store[0] / r.d2h, r.store[1], r.store[1] / r.d2h, r.store[2], r.store[2] / r.d2h,
        r.build_us);
  }
}

void WriteVllmLayoutJson(const std::vector<VllmLayoutRow>& rows, FILE* out) {
  std::fprintf(out, "\"vllm_layout\": [\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const VllmLayoutRow& r = rows[i];
    std::fprintf(out,
                 "  {\"tokens\": %llu, \"chunks\": %llu, \"pieces\": %llu, "
                 "\"h2d_ceiling_gbps\": %.3f, \"d2h_ceiling_gbps\": %.3f, ",
                 (unsigned long long)r.tokens, (unsigned long long)r.chunks,
                 (unsigned long long)r.pieces, r.h2d, r.d2h);
    for (int m = 0; m < 3; ++m) {
      const char* n = GpuCopyMethodName(kMethods[m]);
      std::fprintf(out, "\"load_%s_gbps\": %.3f, \"load_%s_no_crc_gbps\": %.3f, ", n, r.load[m], n,
                   r.load_nocrc[m]);
      std::fprintf(out, "\"store_%s_gbps\": %.3f, ", n, r.store[m]);
    }
    std::fprintf(out, "\"piece_list_us\": %.1f}%s\n", r.build_us, i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(out, "]");
}

}  // namespace cxlkv::bench
