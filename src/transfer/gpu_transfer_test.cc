// Copyright cxlkv authors.
//
// GpuTransferEngine on a real GPU: GPU CRC32C equals the engine's CPU
// CRC32C, direct and staged copies are bit-exact in both directions
// (including blocks scattered over several GPU pieces and blocks that
// straddle registration segments), by the copy engines and by SM threads,
// unregistered memory is refused on the direct path. Skips with the reason
// where there is no GPU.
#include "gpu_transfer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "crc32c.h"
#include "gpu_testutil.h"
#include "testutil.h"

namespace cxlkv {
namespace {

using test::DeviceBuffer;
using test::FillPattern;
using test::ShmMapping;

constexpr uint64_t kMiB = 1ull << 20;

class GpuTransferTest : public test::GpuTest {};

std::unique_ptr<GpuTransferEngine> MakeEngine(GpuTransferOptions o = {}) {
  std::unique_ptr<GpuTransferEngine> e;
  Status s = GpuTransferEngine::Create(o, &e);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return e;
}

TEST_F(GpuTransferTest, GpuCrcEqualsCpuCrcForAnyLengthAlignmentAndSplit) {
  auto e = MakeEngine();
  ASSERT_TRUE(e);
  const std::vector<uint64_t> lens = {
      0,     1,      15,     16,     17,     4095,          32767,        32768,
      32769, 131071, 131072, 131073, 917504, 14 * kMiB + 3, 40 * kMiB + 5};
  uint64_t total = 0;
  for (uint64_t n : lens) total += n + 64;
  std::vector<uint8_t> host(total);
  FillPattern(99, host.data(), host.size());
  DeviceBuffer dev(total);
  dev.Upload(host.data(), total);

  std::mt19937 rng(5);
  GpuBatch batch;
  std::vector<uint32_t> want;
  uint64_t off = 0;
  for (uint64_t n : lens) {
    const uint64_t start = off + (rng() % 2 ? 1 : 0);  // misaligned half the time
    batch.AddBlock(nullptr);
    // Split into up to 4 pieces at random points.
    uint64_t pos = start, left = n;
    for (int k = 0; k < 3 && left > 0; ++k) {
      const uint64_t take = rng() % (left + 1);
      batch.AddPiece(dev.get() + pos, take);
      pos += take;
      left -= take;
    }
    batch.AddPiece(dev.get() + pos, left);
    want.push_back(internal::Crc32c(host.data() + start, n));
    off += n + 64;
  }
  std::vector<uint32_t> got(lens.size());
  Status s = e->Checksum(batch, got.data());
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (size_t i = 0; i < lens.size(); ++i) EXPECT_EQ(got[i], want[i]) << "len " << lens[i];
}

// Blocks of `block` bytes at host offsets i * (block + gap), each gathered
// from two GPU pieces that are not adjacent.
void RoundTrip(GpuTransferEngine* e, uint8_t* host, uint64_t block, uint64_t gap, size_t n,
               GpuPath path) {
  const uint64_t half = block / 2 + 5;
  DeviceBuffer src(n * (block + 4096)), dst(n * (block + 4096));
  std::vector<uint8_t> pattern(block);
  auto make = [&](const DeviceBuffer& d) {
    GpuBatch b;
    for (size_t i = 0; i < n; ++i) {
      b.AddBlock(host + i * (block + gap));
      // Second half first in device memory: the pieces are out of order.
      const CUdeviceptr base = d.get() + i * (block + 4096);
      b.AddPiece(base + (block - half) + 4096, half);
      b.AddPiece(base, block - half);
    }
    return b;
  };
  for (size_t i = 0; i < n; ++i) {
    FillPattern(1000 + i, pattern.data(), block);
    const uint64_t base = i * (block + 4096);
    src.Upload(pattern.data(), half, base + (block - half) + 4096);
    src.Upload(pattern.data() + half, block - half, base);
  }
  std::vector<uint32_t> crc_store(n), crc_load(n);
  const GpuBatch out = make(src);
  Status s = e->Store(out, path, crc_store.data());
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (size_t i = 0; i < n; ++i) {
    FillPattern(1000 + i, pattern.data(), block);
    ASSERT_EQ(std::memcmp(host + i * (block + gap), pattern.data(), block), 0) << "store " << i;
    EXPECT_EQ(crc_store[i], internal::Crc32c(pattern.data(), block)) << i;
  }
  dst.Fill(0xA5);
  const GpuBatch in = make(dst);
  s = e->Load(in, path, crc_load.data());
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (size_t i = 0; i < n; ++i) {
    FillPattern(1000 + i, pattern.data(), block);
    const uint64_t base = i * (block + 4096);
    auto a = dst.Download(base + (block - half) + 4096, half);
    auto b = dst.Download(base, block - half);
    ASSERT_EQ(std::memcmp(a.data(), pattern.data(), half), 0) << "load " << i;
    ASSERT_EQ(std::memcmp(b.data(), pattern.data() + half, block - half), 0) << "load " << i;
    EXPECT_EQ(crc_load[i], crc_store[i]) << i;
  }
}

TEST_F(GpuTransferTest, DirectRoundTripIsBitExactAcrossRegistrationSegments) {
  GpuTransferOptions o;
  o.registration_segment_bytes = 64 * kMiB;
  auto e = MakeEngine(o);
  ASSERT_TRUE(e);
  ShmMapping m(256 * kMiB);
  ASSERT_TRUE(m.base());
  Status s = e->RegisterHost(m.base(), m.size());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(e->RegisteredSegments(), 4u);
  // 17 blocks of 14 MiB + 4 KiB gaps: several straddle a 64 MiB boundary.
  RoundTrip(e.get(), m.base(), 14 * kMiB, 4096, 17, GpuPath::kDirect);
  const GpuTransferStats st = e->stats();
  std::printf("batch api calls %llu, fallbacks %llu, single copies %llu\n",
              (unsigned long long)st.batch_api_calls, (unsigned long long)st.batch_api_fallbacks,
              (unsigned long long)st.single_copies);
  EXPECT_GT(st.batch_api_calls + st.single_copies, 0u);
}

TEST_F(GpuTransferTest, PerCopyPathIsBitExactWithoutBatchApi) {
  GpuTransferOptions o;
  o.batch_api = false;
  auto e = MakeEngine(o);
  ASSERT_TRUE(e);
  ShmMapping m(64 * kMiB);
  ASSERT_TRUE(e->RegisterHost(m.base(), m.size()).ok());
  RoundTrip(e.get(), m.base(), 896 * 1024, 0, 64, GpuPath::kDirect);
  EXPECT_EQ(e->stats().batch_api_calls, 0u);
  EXPECT_GT(e->stats().single_copies, 0u);
}

TEST_F(GpuTransferTest, StagedRoundTripIsBitExact) {
  GpuTransferOptions o;
  o.staging_bytes = 3 * kMiB + 17;  // fragments split across staging chunks
  auto e = MakeEngine(o);
  ASSERT_TRUE(e);
  ShmMapping m(128 * kMiB);  // not registered: the staged path needs no registration
  RoundTrip(e.get(), m.base(), 14 * kMiB, 12345, 8, GpuPath::kStaged);
}

TEST_F(GpuTransferTest, DirectCopyOfUnregisteredBytesIsRefused) {
  auto e = MakeEngine();
  ASSERT_TRUE(e);
  ShmMapping m(8 * kMiB);
  DeviceBuffer d(kMiB);
  GpuBatch b;
  b.AddBlock(m.base());
  b.AddPiece(d.get(), kMiB);
  EXPECT_TRUE(e->Load(b, GpuPath::kDirect).IsInvalidArgument());
  EXPECT_TRUE(e->Load(b, GpuPath::kStaged).ok());
  ASSERT_TRUE(e->RegisterHost(m.base(), m.size()).ok());
  EXPECT_TRUE(e->Load(b, GpuPath::kDirect).ok());
  EXPECT_TRUE(e->UnregisterHost(m.base()).ok());
  EXPECT_TRUE(e->Load(b, GpuPath::kDirect).IsInvalidArgument());
}

TEST_F(GpuTransferTest, RegistersRegionLargerThanOneSegment) {
  GpuTransferOptions o;
  o.registration_segment_bytes = 1ull << 30;
  auto e = MakeEngine(o);
  ASSERT_TRUE(e);
  ShmMapping m(3ull << 30);
  ASSERT_TRUE(m.base());
  Status s = e->RegisterHost(m.base(), m.size());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(e->RegisteredSegments(), 3u);
  // 128 blocks of 14 MiB spread over the whole 3 GiB (stride 24 MiB).
  RoundTrip(e.get(), m.base(), 14 * kMiB, 10 * kMiB, 128, GpuPath::kDirect);
}

TEST_F(GpuTransferTest, SmCopiesAreBitExactForAnyLengthAndAlignment) {
  // Pieces of RoundTrip are block/2 + 5 bytes: odd lengths and addresses
  // off 16 bytes exercise the kernel's word and byte paths; 64 MiB segments
  // make 14 MiB blocks straddle registrations.
  GpuTransferOptions o;
  o.copy_method = GpuCopyMethod::kSm;
  o.registration_segment_bytes = 64 * kMiB;
  auto e = MakeEngine(o);
  ASSERT_TRUE(e);
  ShmMapping m(256 * kMiB);
  ASSERT_TRUE(e->RegisterHost(m.base(), m.size()).ok());
  for (uint64_t block :
       {uint64_t{33}, uint64_t{4097}, uint64_t{32768}, uint64_t{32768 + 16}, uint64_t{917504}}) {
    SCOPED_TRACE(block);
    RoundTrip(e.get(), m.base(), block, 4096 + 3, 16, GpuPath::kDirect);
  }
  RoundTrip(e.get(), m.base(), 14 * kMiB + 3, 4096, 17, GpuPath::kDirect);
  const GpuTransferStats st = e->stats();
  EXPECT_GT(st.sm_launches, 0u);
  EXPECT_EQ(st.single_copies + st.batch_api_calls, 0u) << "kSm must not use the copy engines";
}

// vLLM's layout (docs/upstream/vllm-offloading.md): one (num_blocks, page)
// tensor per layer; a chunk of `per_chunk` GPU blocks is stored as one region
// block holding, layer by layer, the pages of those GPU blocks.
struct LayeredKv {
  static constexpr int kLayers = 28;
  static constexpr uint64_t kPage = 32 * 1024;
  uint64_t num_blocks;
  DeviceBuffer kv;  // kLayers tensors, one after another
  explicit LayeredKv(uint64_t n) : num_blocks(n), kv(kLayers * n * kPage) {}
  CUdeviceptr page(int layer, uint64_t block) const {
    return kv.get() + (layer * num_blocks + block) * kPage;
  }
  void AddChunk(GpuBatch* b, void* host, const std::vector<uint64_t>& ids) const {
    b->AddBlock(host);
    for (int l = 0; l < kLayers; ++l)
      for (uint64_t id : ids) b->AddPiece(page(l, id), kPage);
  }
};

TEST_F(GpuTransferTest, VllmLayerLayoutRoundTripIsBitExactByEachMethod) {
  constexpr uint64_t kBlocks = 512, kPerChunk = 16, kChunks = 8;
  const uint64_t chunk_bytes = LayeredKv::kLayers * kPerChunk * LayeredKv::kPage;  // 14 MiB
  std::mt19937 rng(11);
  std::vector<uint64_t> perm(kBlocks);
  for (uint64_t i = 0; i < kBlocks; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);  // scattered GPU block ids
  for (GpuCopyMethod method : {GpuCopyMethod::kDma, GpuCopyMethod::kSm, GpuCopyMethod::kAuto}) {
    SCOPED_TRACE(GpuCopyMethodName(method));
    GpuTransferOptions o;
    o.copy_method = method;
    auto e = MakeEngine(o);
    ASSERT_TRUE(e);
    ShmMapping m(kChunks * chunk_bytes);
    ASSERT_TRUE(e->RegisterHost(m.base(), m.size()).ok());
    LayeredKv src(kBlocks), dst(kBlocks);
    std::vector<uint8_t> all(LayeredKv::kLayers * kBlocks * LayeredKv::kPage);
    FillPattern(77, all.data(), all.size());
    src.kv.Upload(all.data(), all.size());
    dst.kv.Fill(0x5A);
    GpuBatch out, in;
    for (uint64_t c = 0; c < kChunks; ++c) {
      std::vector<uint64_t> ids(perm.begin() + c * kPerChunk, perm.begin() + (c + 1) * kPerChunk);
      src.AddChunk(&out, m.base() + c * chunk_bytes, ids);
      dst.AddChunk(&in, m.base() + c * chunk_bytes, ids);
    }
    std::vector<uint32_t> crc_store(kChunks), crc_load(kChunks);
    Status s = e->Store(out, GpuPath::kDirect, crc_store.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    s = e->Load(in, GpuPath::kDirect, crc_load.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (uint64_t c = 0; c < kChunks; ++c) {
      EXPECT_EQ(crc_store[c], internal::Crc32c(m.base() + c * chunk_bytes, chunk_bytes)) << c;
      EXPECT_EQ(crc_load[c], crc_store[c]) << c;
    }
    const uint64_t used = kChunks * kPerChunk;
    for (int l = 0; l < LayeredKv::kLayers; ++l) {
      for (uint64_t i = 0; i < used; ++i) {
        const uint64_t id = perm[i];
        auto got = dst.kv.Download((l * kBlocks + id) * LayeredKv::kPage, LayeredKv::kPage);
        ASSERT_EQ(std::memcmp(got.data(), all.data() + (l * kBlocks + id) * LayeredKv::kPage,
                              LayeredKv::kPage),
                  0)
            << "layer " << l << " block " << id;
      }
    }
    const GpuTransferStats st = e->stats();
    if (method == GpuCopyMethod::kDma) {
      EXPECT_EQ(st.sm_launches, 0u);
    } else {
      EXPECT_GT(st.sm_launches, 0u);
    }
  }
}

TEST_F(GpuTransferTest, AutoSendsSmallPiecesToSmAndLargeOnesToTheCopyEngines) {
  auto e = MakeEngine();
  ASSERT_TRUE(e);
  ShmMapping m(64 * kMiB);
  ASSERT_TRUE(e->RegisterHost(m.base(), m.size()).ok());
  RoundTrip(e.get(), m.base(), 64 * 1024, 0, 8, GpuPath::kDirect);  // 32 KiB pieces
  const GpuTransferStats small = e->stats();
  EXPECT_GT(small.sm_launches, 0u);
  EXPECT_EQ(small.single_copies + small.batch_api_calls, 0u);
  RoundTrip(e.get(), m.base(), 4 * kMiB, 0, 8, GpuPath::kDirect);  // 2 MiB pieces
  const GpuTransferStats both = e->stats();
  EXPECT_EQ(both.sm_launches, small.sm_launches);
  EXPECT_GT(both.single_copies + both.batch_api_calls, 0u);
}

TEST_F(GpuTransferTest, AutoLoadsLargeBatchesByCopyEnginesAndStoresThemBySm) {
  GpuTransferOptions o;
  o.dma_load_min_batch_bytes = 256 * 1024;  // the batches below are 512 KiB
  auto e = MakeEngine(o);
  ASSERT_TRUE(e);
  ShmMapping m(64 * kMiB);
  ASSERT_TRUE(e->RegisterHost(m.base(), m.size()).ok());
  // RoundTrip stores (SM: small pieces) then loads (copy engines: big batch).
  RoundTrip(e.get(), m.base(), 64 * 1024, 0, 8, GpuPath::kDirect);
  const GpuTransferStats st = e->stats();
  EXPECT_EQ(st.sm_launches, 1u) << "the store only";
  EXPECT_GT(st.single_copies + st.batch_api_calls, 0u) << "the load";
}

}  // namespace
}  // namespace cxlkv
