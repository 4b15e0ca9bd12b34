// Copyright cxlkv authors.
//
// RegionGpu's parted calls on a real GPU (region_gpu_parts.cc): what vLLM's
// GPU worker does. A part filled from the GPU and a part filled by the CPU
// (delegate.h's FillPart) commit into one slot; each loads back bit-exact on
// the GPU and through the CPU's LoadPart; a load that enters and leaves the
// chunk mid-way touches only the blocks it was given; a flipped bit is
// kCorruption and the slot is dropped; a lost reservation is kNotFound.
// Skips with the reason where there is no GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cxlkv/delegate.h"
#include "gpu_testutil.h"
#include "kv_layout.h"
#include "region_gpu.h"
#include "testutil.h"

namespace cxlkv {
namespace {

using test::DeviceBuffer;
using test::FillPattern;

constexpr uint64_t kPage = 32 * 1024;       // one layer's page of a 16-token block (Qwen2.5-7B)
constexpr uint64_t kStride = kPage + 4096;  // padded rows: pages are not adjacent
constexpr uint32_t kLayers = 3;
constexpr uint32_t kBlocks = 64;  // rows per tensor
constexpr uint32_t kPerChunk = 4;
constexpr uint64_t kTensorBytes = kBlocks * kStride;
const PartedLayout kLayout{2, kLayers* kPerChunk* kPage + 256};  // with padding

// One rank's KV cache on the GPU: kLayers tensors of kBlocks padded rows.
struct GpuKv {
  explicit GpuKv(uint64_t seed) : buf(kLayers * kTensorBytes), host(buf.size()) {
    FillPattern(seed, host.data(), host.size());
    buf.Upload(host.data(), host.size());
    for (uint32_t t = 0; t < kLayers; ++t)
      layout.tensors.push_back(KvTensor{buf.get() + t * kTensorBytes, kStride, kPage, kBlocks});
    layout.blocks_per_chunk = kPerChunk;
  }
  // The page (layer t, block b) as it is on the GPU now.
  std::vector<uint8_t> Page(uint32_t t, int64_t b) const {
    return buf.Download(t * kTensorBytes + b * kStride, kPage);
  }
  // The page as uploaded.
  const uint8_t* Initial(uint32_t t, int64_t b) const {
    return host.data() + t * kTensorBytes + b * kStride;
  }
  DeviceBuffer buf;
  std::vector<uint8_t> host;
  KvLayerLayout layout;
};

class RegionGpuPartsTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    region_ = test::MustOpen(scratch_.path(), test::TestOptions(64 << 20, kLayout.PayloadLen()));
    ASSERT_TRUE(region_);
    ASSERT_TRUE(
        region_->RegisterNamespace(NamespaceDesc{"gpu-parts", "bfloat16", "HND", 0, 0}, &ns_).ok());
    Status s = RegionGpu::Open(region_.get(), {}, &gpu_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // Reserves n slots for keys first..first+n-1, as EngineCore does.
  void Reserve(uint64_t first, size_t n) {
    leases_.clear();
    leases_.resize(n);
    tokens_.assign(n, WriteToken{});
    for (size_t c = 0; c < n; ++c) {
      ASSERT_TRUE(
          region_->BeginWrite(ns_, BlockKey::FromId(first + c), kLayout.PayloadLen(), &leases_[c])
              .ok());
      ASSERT_TRUE(ExportWriteToken(*region_, leases_[c], &tokens_[c]).ok());
    }
  }

  test::ScratchRegion scratch_{"gpu-parts"};
  std::unique_ptr<Region> region_;
  NamespaceId ns_ = 0;
  std::unique_ptr<RegionGpu> gpu_;
  std::vector<WriteLease> leases_;
  std::vector<WriteToken> tokens_;
};

TEST_F(RegionGpuPartsTest, GpuAndCpuFilledPartsCommitAndLoadBackBothWays) {
  constexpr size_t n = 3;
  constexpr uint64_t first = 10;
  Reserve(first, n);
  GpuKv kv(1);
  // Part 0 from the GPU: chunk c holds blocks ids[c*4 .. c*4+3].
  const std::vector<int64_t> ids = {5, 9, 2, 40, 41, 42, 43, 0, 63, 17, 16, 15};
  KvPieces pieces;
  ASSERT_TRUE(pieces.BuildWhole(kv.layout, ids.data(), n).ok());
  GpuPartResult fill;
  Status s =
      gpu_->FillParts(tokens_.data(), kLayout, 0, pieces.blocks(), GpuPath::kDirect, 0, &fill);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(fill.ok, n);
  for (size_t c = 0; c < n; ++c) EXPECT_EQ(fill.len[c], kLayers * kPerChunk * kPage);
  // Part 1 by the CPU, from host pages.
  std::vector<uint8_t> host(kLayers * kBlocks * kPage);
  FillPattern(2, host.data(), host.size());
  std::vector<PageTensor> pt;
  for (uint32_t t = 0; t < kLayers; ++t)
    pt.push_back(PageTensor{reinterpret_cast<uint64_t>(host.data()) + t * kBlocks * kPage, kPage,
                            kPage, kBlocks});
  const int32_t host_ids[kPerChunk] = {1, 2, 3, 4};
  for (size_t c = 0; c < n; ++c) {
    ASSERT_TRUE(FillPart(region_.get(), tokens_[c], kLayout, 1,
                         ChunkPages{pt.data(), pt.size(), kPerChunk, host_ids, 0, kPerChunk})
                    .ok());
    ASSERT_TRUE(CommitPartedWrite(region_.get(), &leases_[c], kLayout).ok()) << c;
  }

  // Part 0 back onto the GPU, elsewhere.
  GpuKv dst(3);
  const std::vector<int64_t> back = {20, 21, 22, 23, 30, 32, 34, 36, 50, 51, 52, 53};
  KvPieces bp;
  ASSERT_TRUE(bp.BuildWhole(dst.layout, back.data(), n).ok());
  std::vector<BlockKey> keys;
  for (size_t c = 0; c < n; ++c) keys.push_back(BlockKey::FromId(first + c));
  GpuPartResult load;
  ASSERT_TRUE(
      gpu_->LoadParts(ns_, keys.data(), kLayout, 0, bp.blocks(), GpuPath::kDirect, &load).ok());
  ASSERT_EQ(load.ok, n);
  for (size_t i = 0; i < ids.size(); ++i)
    for (uint32_t t = 0; t < kLayers; ++t)
      ASSERT_EQ(std::memcmp(dst.Page(t, back[i]).data(), kv.Initial(t, ids[i]), kPage), 0)
          << "block " << i << " layer " << t;
  // The CPU's reader verifies the GPU-filled part too.
  std::vector<uint8_t> out(kLayers * kBlocks * kPage);
  std::vector<PageTensor> ot;
  for (uint32_t t = 0; t < kLayers; ++t)
    ot.push_back(PageTensor{reinterpret_cast<uint64_t>(out.data()) + t * kBlocks * kPage, kPage,
                            kPage, kBlocks});
  Status cpu = LoadPart(region_.get(), ns_, keys[1], kLayout, 0,
                        ChunkPages{ot.data(), ot.size(), kPerChunk, host_ids, 0, kPerChunk});
  ASSERT_TRUE(cpu.ok()) << cpu.ToString();
  // Chunk 1, block 1 (ids[5]) landed in row host_ids[1] = 2 of layer 0.
  EXPECT_EQ(std::memcmp(out.data() + 2 * kPage, kv.Initial(0, ids[5]), kPage), 0);
  // And the GPU's reader the CPU-filled part (over the same destination).
  GpuPartResult load1;
  ASSERT_TRUE(
      gpu_->LoadParts(ns_, keys.data(), kLayout, 1, bp.blocks(), GpuPath::kDirect, &load1).ok());
  ASSERT_EQ(load1.ok, n);
  const auto got = dst.Page(2, back[5]);  // layer 2, chunk 1's block 1 <- host block 2
  EXPECT_EQ(std::memcmp(got.data(), host.data() + (2 * kBlocks + 2) * kPage, kPage), 0);
}

TEST_F(RegionGpuPartsTest, MidChunkLoadTouchesOnlyItsBlocksAndStillVerifies) {
  Reserve(100, 2);
  GpuKv kv(5);
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  KvPieces pieces;
  ASSERT_TRUE(pieces.BuildWhole(kv.layout, ids.data(), 2).ok());
  GpuPartResult fill;
  ASSERT_TRUE(
      gpu_->FillParts(tokens_.data(), kLayout, 0, pieces.blocks(), GpuPath::kDirect, 0, &fill)
          .ok());
  ASSERT_EQ(fill.ok, 2u);
  // Fill part 1 from the GPU too (the same bytes), then commit.
  ASSERT_TRUE(
      gpu_->FillParts(tokens_.data(), kLayout, 1, pieces.blocks(), GpuPath::kDirect, 0, &fill)
          .ok());
  for (auto& l : leases_) ASSERT_TRUE(CommitPartedWrite(region_.get(), &l, kLayout).ok());

  // Enter chunk 0 at block 1 (the GPU holds block 0), leave chunk 1 after block 2.
  GpuKv dst(6);
  const std::vector<int64_t> want = {-1, 30, 31, 32, 40, 41, -1, -1};
  DeviceBuffer scratch(3 * kLayers * kPage);
  KvPieces lp;
  EXPECT_TRUE(lp.BuildWhole(dst.layout, want.data(), 2, scratch.get(), scratch.size() - 1)
                  .IsInvalidArgument());
  ASSERT_TRUE(lp.BuildWhole(dst.layout, want.data(), 2, scratch.get(), scratch.size()).ok());
  const std::vector<BlockKey> keys = {BlockKey::FromId(100), BlockKey::FromId(101)};
  GpuPartResult load;
  ASSERT_TRUE(
      gpu_->LoadParts(ns_, keys.data(), kLayout, 0, lp.blocks(), GpuPath::kDirect, &load).ok());
  ASSERT_EQ(load.ok, 2u) << load.status[0].ToString() << " " << load.status[1].ToString();
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] < 0) continue;
    for (uint32_t t = 0; t < kLayers; ++t)
      EXPECT_EQ(std::memcmp(dst.Page(t, want[i]).data(), kv.Initial(t, ids[i]), kPage), 0) << i;
  }
  // Rows not named were not written (their initial pattern is intact).
  for (int64_t b : {0, 29, 33, 39, 42, 63})
    for (uint32_t t = 0; t < kLayers; ++t)
      EXPECT_EQ(std::memcmp(dst.Page(t, b).data(), dst.Initial(t, b), kPage), 0) << b;
}

TEST_F(RegionGpuPartsTest, FlippedBitIsCorruptionAndLostReservationIsNotFound) {
  Reserve(200, 2);
  GpuKv kv(7);
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  KvPieces pieces;
  ASSERT_TRUE(pieces.BuildWhole(kv.layout, ids.data(), 2).ok());
  // Reservation 1 is lost before the fill (EngineCore aborted it).
  region_->AbortWrite(&leases_[1]);
  GpuPartResult fill;
  ASSERT_TRUE(
      gpu_->FillParts(tokens_.data(), kLayout, 0, pieces.blocks(), GpuPath::kDirect, 0, &fill)
          .ok());
  EXPECT_TRUE(fill.status[0].ok()) << fill.status[0].ToString();
  EXPECT_TRUE(fill.status[1].IsNotFound()) << fill.status[1].ToString();
  EXPECT_EQ(fill.ok, 1u);
  ASSERT_TRUE(
      gpu_->FillParts(tokens_.data(), kLayout, 1, pieces.blocks(0, 1), GpuPath::kDirect, 0, &fill)
          .ok());
  ASSERT_TRUE(CommitPartedWrite(region_.get(), &leases_[0], kLayout).ok());

  const BlockKey key = BlockKey::FromId(200);
  ReadLease l;
  ASSERT_TRUE(region_->BeginRead(ns_, key, &l).ok());
  const_cast<uint8_t*>(static_cast<const uint8_t*>(l.data()))[kPage + 77] ^= 0x04;  // part 0
  (void)region_->EndRead(&l);
  GpuKv dst(8);
  KvPieces lp;
  ASSERT_TRUE(lp.BuildWhole(dst.layout, ids.data(), 1).ok());
  GpuPartResult load;
  ASSERT_TRUE(gpu_->LoadParts(ns_, &key, kLayout, 0, lp.blocks(), GpuPath::kDirect, &load).ok());
  EXPECT_TRUE(load.status[0].IsCorruption()) << load.status[0].ToString();
  EXPECT_EQ(load.ok, 0u);
  EXPECT_TRUE(region_->Lookup(ns_, key).IsNotFound()) << "corrupt slot still served";
  // A miss is kNotFound, not an error of the batch.
  const BlockKey never = BlockKey::FromId(999);
  ASSERT_TRUE(gpu_->LoadParts(ns_, &never, kLayout, 0, lp.blocks(), GpuPath::kDirect, &load).ok());
  EXPECT_TRUE(load.status[0].IsNotFound());
}

}  // namespace
}  // namespace cxlkv
