// Copyright cxlkv authors.
//
// RegionGpu on a real GPU: blocks stored from one process's GPU load
// bit-exact into another process's GPU; a corrupted slot is detected by the
// GPU CRC and dropped; a slot area larger than one registration segment
// works; direct and staged paths interoperate. Skips with the reason where
// there is no GPU.
#include "region_gpu.h"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cxlkv/lifecycle.h"
#include "gpu_testutil.h"
#include "testutil.h"

extern char** environ;

namespace cxlkv {
namespace {

using test::DeviceBuffer;
using test::FillPattern;

constexpr uint64_t kPage = 896 * 1024;  // one 16-token GPU page of Qwen2.5-7B
constexpr uint64_t kPagesPerSlot = 4;
constexpr uint64_t kSlot = kPage * kPagesPerSlot;
constexpr uint64_t kRegionBytes = 320ull << 20;

// A paged "KV cache": pages of kPage bytes; block i of a request is the
// pages table[i*4 .. i*4+3], scattered in the cache like vLLM's block table.
struct PagedBlocks {
  std::vector<uint64_t> ptr, len;
  std::vector<uint32_t> first_piece;
  GpuBlocks view() const {
    return GpuBlocks{ptr.data(), len.data(), first_piece.data(), first_piece.size() - 1};
  }
};

PagedBlocks Paged(const DeviceBuffer& cache, const std::vector<uint32_t>& table, size_t n) {
  PagedBlocks p;
  for (size_t i = 0; i < n; ++i) {
    p.first_piece.push_back(static_cast<uint32_t>(p.ptr.size()));
    for (uint64_t j = 0; j < kPagesPerSlot; ++j) {
      p.ptr.push_back(cache.get() + table[i * kPagesPerSlot + j] * kPage);
      p.len.push_back(kPage);
    }
  }
  p.first_piece.push_back(static_cast<uint32_t>(p.ptr.size()));
  return p;
}

std::vector<uint32_t> Shuffled(size_t pages, uint32_t seed) {
  std::vector<uint32_t> t(pages);
  std::iota(t.begin(), t.end(), 0);
  std::shuffle(t.begin(), t.end(), std::mt19937(seed));
  return t;
}

// Writes block ids first..first+n-1's patterns into their pages.
void FillCache(const DeviceBuffer& cache, const std::vector<uint32_t>& table, size_t n,
               uint64_t first) {
  std::vector<uint8_t> block(kSlot);
  for (size_t i = 0; i < n; ++i) {
    FillPattern(first + i, block.data(), kSlot);
    for (uint64_t j = 0; j < kPagesPerSlot; ++j)
      cache.Upload(block.data() + j * kPage, kPage, table[i * kPagesPerSlot + j] * kPage);
  }
}

// True if the pages of block i hold block id first+i's pattern.
::testing::AssertionResult CacheHolds(const DeviceBuffer& cache, const std::vector<uint32_t>& table,
                                      size_t i, uint64_t first) {
  std::vector<uint8_t> want(kSlot);
  FillPattern(first + i, want.data(), kSlot);
  for (uint64_t j = 0; j < kPagesPerSlot; ++j) {
    auto got = cache.Download(table[i * kPagesPerSlot + j] * kPage, kPage);
    if (std::memcmp(got.data(), want.data() + j * kPage, kPage) != 0)
      return ::testing::AssertionFailure() << "block " << i << " page " << j << " differs";
  }
  return ::testing::AssertionSuccess();
}

std::vector<BlockKey> Keys(uint64_t first, size_t n) {
  std::vector<BlockKey> k(n);
  for (size_t i = 0; i < n; ++i) k[i] = BlockKey::FromId(first + i);
  return k;
}

// n blocks, ids first..first+n-1, written into a paged cache of their own
// (pages shuffled by seed), and their keys: what each test stores.
struct CachedBlocks {
  CachedBlocks(size_t n, uint64_t first, uint32_t seed)
      : cache(n * kPagesPerSlot * kPage),
        table(Shuffled(n * kPagesPerSlot, seed)),
        keys(Keys(first, n)) {
    FillCache(cache, table, n, first);
  }
  // The first m blocks' pages in the cache.
  PagedBlocks paged(size_t m) const { return Paged(cache, table, m); }

  DeviceBuffer cache;
  std::vector<uint32_t> table;
  std::vector<BlockKey> keys;
};

class RegionGpuTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    opts_ = test::TestOptions(kRegionBytes, kSlot);
    region_ = test::MustOpen(scratch_.path(), opts_);
    ASSERT_TRUE(region_);
    ASSERT_TRUE(
        region_->RegisterNamespace(NamespaceDesc{"gpu-test", "bfloat16", "HND", 0, 0}, &ns_).ok());
  }
  void OpenGpu(RegionGpuOptions o = {}) {
    Status s = RegionGpu::Open(region_.get(), o, &gpu_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(gpu_->direct());
  }
  // Stores every block of b on path; asserts that each one was stored.
  void StoreAll(const CachedBlocks& b, GpuPath path = GpuPath::kDirect) {
    GpuStoreResult st;
    Status s = gpu_->Store(ns_, b.keys.data(), b.paged(b.keys.size()).view(), path, 0, &st);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(st.stored, b.keys.size());
  }

  test::ScratchRegion scratch_{"gpu"};
  RegionOptions opts_;
  std::unique_ptr<Region> region_;
  NamespaceId ns_ = 0;
  std::unique_ptr<RegionGpu> gpu_;
};

TEST_F(RegionGpuTest, BlocksStoredFromGpuLoadBitExactIntoAnotherProcessGpu) {
  OpenGpu();
  constexpr size_t n = 32;
  constexpr uint64_t first = 7000;
  const CachedBlocks b(n, first, 1);
  GpuStoreResult st;
  Status s = gpu_->Store(ns_, b.keys.data(), b.paged(n).view(), GpuPath::kDirect, 0, &st);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (size_t i = 0; i < n; ++i)
    ASSERT_TRUE(st.status[i].ok()) << i << ": " << st.status[i].ToString();
  EXPECT_EQ(st.stored, n);

  // The other process: a fresh program with its own CUDA context.
  const std::vector<std::string> args = {
      CXLKV_REGION_GPU_PEER, scratch_.path(),   std::to_string(kRegionBytes),
      std::to_string(kSlot), std::to_string(n), std::to_string(first)};
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  EXPECT_EQ(test::Reap(pid), 0) << "the peer process did not load the blocks bit-exact";
}

// Each block keeps the depth in its prefix chain it was stored with (the
// eviction hint of Region::Store: a chain leaves tail first).
TEST_F(RegionGpuTest, StoredBlocksKeepTheirChainDepths) {
  OpenGpu();
  constexpr size_t n = 4;
  const CachedBlocks b(n, 300, 3);
  const std::vector<BlockKey>& keys = b.keys;
  const std::vector<uint32_t> depths = {0, 1, 2, 40};
  GpuStoreResult st;
  ASSERT_TRUE(
      gpu_->Store(ns_, keys.data(), b.paged(n).view(), GpuPath::kDirect, 0, &st, depths.data())
          .ok());
  ASSERT_EQ(st.stored, n);
  std::vector<SlotView> slots;
  ASSERT_TRUE(ScanSlots(*region_, 0, region_->info().num_slots, &slots).ok());
  size_t seen = 0;
  for (const SlotView& v : slots) {
    if (v.state != SlotState::kReady) continue;
    for (size_t i = 0; i < n; ++i) {
      if (v.key != keys[i]) continue;
      EXPECT_EQ(v.depth, depths[i]) << "block " << i;
      ++seen;
    }
  }
  EXPECT_EQ(seen, n);
}

TEST_F(RegionGpuTest, CorruptedSlotIsDetectedOnGpuAndDropped) {
  OpenGpu();
  constexpr size_t n = 8;
  constexpr uint64_t first = 100;
  const CachedBlocks b(n, first, 2);
  const std::vector<BlockKey>& keys = b.keys;
  ASSERT_NO_FATAL_FAILURE(StoreAll(b));

  // Flip one bit of block 3's slot, as a stray write by another tenant would.
  ReadLease l;
  ASSERT_TRUE(region_->BeginRead(ns_, keys[3], &l).ok());
  const_cast<uint8_t*>(static_cast<const uint8_t*>(l.data()))[kSlot / 2 + 7] ^= 0x10;
  (void)region_->EndRead(&l);

  DeviceBuffer dst(n * kPagesPerSlot * kPage);
  dst.Fill(0);
  const auto table2 = Shuffled(n * kPagesPerSlot, 3);
  GpuLoadResult res;
  Status s = gpu_->Load(ns_, keys.data(), Paged(dst, table2, n).view(), GpuPath::kDirect, &res);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (size_t i = 0; i < n; ++i) {
    if (i == 3) {
      EXPECT_TRUE(res.status[i].IsCorruption()) << res.status[i].ToString();
    } else {
      EXPECT_TRUE(res.status[i].ok()) << i << ": " << res.status[i].ToString();
      EXPECT_TRUE(CacheHolds(dst, table2, i, first));
    }
  }
  EXPECT_EQ(res.loaded, n - 1);
  EXPECT_EQ(res.prefix, 3u);
  EXPECT_TRUE(region_->Lookup(ns_, keys[3]).IsNotFound()) << "corrupt slot still served";
  EXPECT_TRUE(region_->Lookup(ns_, keys[4]).ok());
}

TEST_F(RegionGpuTest, SlotAreaLargerThanOneRegistrationSegment) {
  RegionGpuOptions o;
  o.transfer.registration_segment_bytes = 32ull << 20;
  OpenGpu(o);
  EXPECT_GT(gpu_->engine()->RegisteredSegments(), 5u);
  const size_t n = region_->info().num_slots / 2;  // hashed over the whole slot area
  constexpr uint64_t first = 50000;
  const CachedBlocks b(n, first, 4);
  DeviceBuffer dst(n * kPagesPerSlot * kPage);
  ASSERT_NO_FATAL_FAILURE(StoreAll(b));
  dst.Fill(0xEE);
  GpuLoadResult res;
  ASSERT_TRUE(
      gpu_->Load(ns_, b.keys.data(), Paged(dst, b.table, n).view(), GpuPath::kDirect, &res).ok());
  EXPECT_EQ(res.prefix, n);
  for (size_t i = 0; i < n; ++i) EXPECT_TRUE(CacheHolds(dst, b.table, i, first));
}

TEST_F(RegionGpuTest, StagedAndDirectPathsInteroperate) {
  OpenGpu();
  constexpr size_t n = 12;
  constexpr uint64_t first = 900;
  const CachedBlocks b(n, first, 5);
  DeviceBuffer dst(n * kPagesPerSlot * kPage);
  ASSERT_NO_FATAL_FAILURE(StoreAll(b, GpuPath::kStaged));
  for (GpuPath p : {GpuPath::kDirect, GpuPath::kStaged}) {
    dst.Fill(0x11);
    GpuLoadResult res;
    ASSERT_TRUE(gpu_->Load(ns_, b.keys.data(), Paged(dst, b.table, n).view(), p, &res).ok());
    EXPECT_EQ(res.prefix, n) << GpuPathName(p);
    for (size_t i = 0; i < n; ++i)
      EXPECT_TRUE(CacheHolds(dst, b.table, i, first)) << GpuPathName(p);
  }
}

TEST_F(RegionGpuTest, MissesAndDuplicatesAreReportedPerBlock) {
  OpenGpu();
  constexpr size_t n = 4;
  const CachedBlocks b(n, 1, 6);
  auto keys = b.keys;
  GpuStoreResult st;
  ASSERT_TRUE(gpu_->Store(ns_, keys.data(), b.paged(2).view(), GpuPath::kDirect, 0, &st).ok());
  ASSERT_EQ(st.stored, 2u);
  ASSERT_TRUE(gpu_->Store(ns_, keys.data(), b.paged(n).view(), GpuPath::kDirect, 0, &st).ok());
  EXPECT_EQ(st.stored, 2u);
  EXPECT_EQ(st.outcome[0], StoreOutcome::kDuplicate);
  EXPECT_EQ(st.outcome[3], StoreOutcome::kStored);
  keys[1] = BlockKey::FromId(424242);  // never stored
  GpuLoadResult res;
  ASSERT_TRUE(gpu_->Load(ns_, keys.data(), b.paged(n).view(), GpuPath::kDirect, &res).ok());
  EXPECT_TRUE(res.status[0].ok());
  EXPECT_TRUE(res.status[1].IsNotFound()) << res.status[1].ToString();
  EXPECT_EQ(res.prefix, 1u);
  EXPECT_EQ(res.loaded, 3u);
}

}  // namespace
}  // namespace cxlkv
