// Copyright cxlkv authors.
//
// KvPieces: the piece list of vLLM's per-layer layout equals the one a
// caller would write by hand (page of layer l, j-th block at slot offset
// (l * blocks_per_chunk + j) * page), merges runs of consecutive block ids,
// sends skipped leading blocks to distinct scratch pages, and refuses ids out
// of range. CPU only: no GPU needed.
#include "kv_layout.h"

#include <gtest/gtest.h>

#include <random>

namespace cxlkv {
namespace {

constexpr uint64_t kPage = 32 * 1024;

KvLayerLayout Layout(size_t layers, uint64_t blocks, uint32_t bpc) {
  std::vector<uint64_t> bases;
  for (size_t i = 0; i < layers; ++i) bases.push_back((1ull << 40) + i * (blocks * kPage + 4096));
  return KvLayerLayout::Uniform(bases, kPage, blocks, bpc);
}

// Expands the pieces of chunk c into one device address per page.
std::vector<uint64_t> Pages(const KvPieces& p, size_t c) {
  const GpuBlocks b = p.blocks();
  std::vector<uint64_t> out;
  for (uint32_t i = b.first_piece[c]; i < b.first_piece[c + 1]; ++i) {
    EXPECT_EQ(b.len[i] % kPage, 0u);
    for (uint64_t off = 0; off < b.len[i]; off += kPage) out.push_back(b.ptr[i] + off);
  }
  return out;
}

TEST(KvPiecesTest, ScatteredIdsGiveOnePiecePerLayerAndBlockInSlotOrder) {
  const KvLayerLayout l = Layout(28, 1000, 16);
  std::vector<int64_t> ids(40);
  std::mt19937 rng(3);
  for (auto& id : ids) id = static_cast<int64_t>(rng() % 500) * 2;  // never adjacent
  KvPieces p;
  ASSERT_TRUE(p.Build(l, ids.data(), ids.size()).ok());
  ASSERT_EQ(p.num_chunks(), 3u);  // 16 + 16 + 8
  EXPECT_EQ(p.chunk_bytes(0), 28 * 16 * kPage);
  EXPECT_EQ(p.chunk_bytes(2), 28 * 8 * kPage);
  for (size_t c = 0; c < 3; ++c) {
    const auto pages = Pages(p, c);
    const size_t nb = c < 2 ? 16 : 8;
    ASSERT_EQ(pages.size(), 28 * nb);
    for (size_t layer = 0; layer < 28; ++layer)
      for (size_t j = 0; j < nb; ++j)
        EXPECT_EQ(pages[layer * nb + j], l.tensors[layer].base + ids[c * 16 + j] * kPage);
  }
}

TEST(KvPiecesTest, ConsecutiveIdsMergeWithinALayerOnly) {
  const KvLayerLayout l = Layout(4, 100, 8);
  std::vector<int64_t> ids = {10, 11, 12, 13, 14, 15, 16, 17};
  KvPieces p;
  ASSERT_TRUE(p.Build(l, ids.data(), ids.size()).ok());
  EXPECT_EQ(p.num_pieces(), 4u);  // one 256 KiB piece per layer
  const GpuBlocks b = p.blocks();
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(b.ptr[i], l.tensors[i].base + 10 * kPage);
    EXPECT_EQ(b.len[i], 8 * kPage);
  }
}

TEST(KvPiecesTest, SkippedLeadingBlocksLandInDistinctScratchPages) {
  const KvLayerLayout l = Layout(3, 100, 4);
  std::vector<int64_t> ids = {-1, -1, 7, 9, 20, 22, 24, 26};
  const uint64_t scratch = 1ull << 44;
  KvPieces p;
  EXPECT_TRUE(
      p.Build(l, ids.data(), ids.size(), 2, scratch, 2 * 3 * kPage - 1).IsInvalidArgument());
  ASSERT_TRUE(p.Build(l, ids.data(), ids.size(), 2, scratch, 2 * 3 * kPage).ok());
  const auto pages = Pages(p, 0);
  ASSERT_EQ(pages.size(), 12u);
  std::vector<uint64_t> seen;
  for (size_t layer = 0; layer < 3; ++layer) {
    for (size_t j = 0; j < 2; ++j) {
      const uint64_t a = pages[layer * 4 + j];
      EXPECT_GE(a, scratch);
      EXPECT_LT(a, scratch + 6 * kPage);
      for (uint64_t s : seen) EXPECT_NE(s, a);
      seen.push_back(a);
    }
    EXPECT_EQ(pages[layer * 4 + 2], l.tensors[layer].base + 7 * kPage);
    EXPECT_EQ(pages[layer * 4 + 3], l.tensors[layer].base + 9 * kPage);
  }
  EXPECT_EQ(Pages(p, 1)[0], l.tensors[0].base + 20 * kPage);
}

// BuildWhole: every chunk spans its whole slot part; blocks marked -1 (at
// either end of a load, or in the middle) go to distinct scratch pages.
TEST(KvPiecesTest, WholeChunksSendMarkedBlocksToScratchAtEitherEnd) {
  const KvLayerLayout l = Layout(3, 100, 4);
  // Chunk 0 entered at block 1, chunk 1 left after block 2.
  std::vector<int64_t> ids = {-1, 7, 9, 11, 20, 22, -1, -1};
  const uint64_t scratch = 1ull << 44;
  KvPieces p;
  EXPECT_TRUE(p.BuildWhole(l, ids.data(), 2, scratch, 3 * 3 * kPage - 1).IsInvalidArgument());
  EXPECT_EQ(p.num_chunks(), 0u);
  ASSERT_TRUE(p.BuildWhole(l, ids.data(), 2, scratch, 3 * 3 * kPage).ok());
  ASSERT_EQ(p.num_chunks(), 2u);
  EXPECT_EQ(p.chunk_bytes(1), 3 * 4 * kPage);
  std::vector<uint64_t> seen;
  for (size_t c = 0; c < 2; ++c) {
    const auto pages = Pages(p, c);
    ASSERT_EQ(pages.size(), 12u);
    for (size_t layer = 0; layer < 3; ++layer) {
      for (size_t j = 0; j < 4; ++j) {
        const uint64_t a = pages[layer * 4 + j];
        const int64_t id = ids[c * 4 + j];
        if (id >= 0) {
          EXPECT_EQ(a, l.tensors[layer].base + id * kPage);
          continue;
        }
        EXPECT_GE(a, scratch);
        EXPECT_LT(a, scratch + 9 * kPage);
        for (uint64_t s : seen) EXPECT_NE(s, a);
        seen.push_back(a);
      }
    }
  }
  EXPECT_EQ(seen.size(), 9u);
  // Ids out of range other than -1 are refused.
  std::vector<int64_t> bad = {0, 1, 2, -2};
  EXPECT_TRUE(p.BuildWhole(l, bad.data(), 1, scratch, 1 << 30).IsInvalidArgument());
  bad[3] = 100;
  EXPECT_TRUE(p.BuildWhole(l, bad.data(), 1, scratch, 1 << 30).IsInvalidArgument());
}

TEST(KvPiecesTest, PaddedRowsCopyTheirBlockBytesOnlyAndNeverMerge) {
  KvLayerLayout l;
  l.tensors.push_back(KvTensor{1ull << 40, 2 * kPage, kPage, 50});  // rows padded to 2 pages
  l.tensors.push_back(KvTensor{1ull << 41, 4096, 4096, 50});
  l.blocks_per_chunk = 2;
  std::vector<int64_t> ids = {3, 4};
  KvPieces p;
  ASSERT_TRUE(p.Build(l, ids.data(), ids.size()).ok());
  EXPECT_EQ(p.chunk_bytes(0), 2 * (kPage + 4096));
  const GpuBlocks b = p.blocks();
  ASSERT_EQ(p.num_pieces(), 3u);  // two padded rows, then one merged 8 KiB piece
  EXPECT_EQ(b.ptr[0], (1ull << 40) + 3 * 2 * kPage);
  EXPECT_EQ(b.len[0], kPage);
  EXPECT_EQ(b.ptr[1], (1ull << 40) + 4 * 2 * kPage);
  EXPECT_EQ(b.ptr[2], (1ull << 41) + 3 * 4096);
  EXPECT_EQ(b.len[2], 2 * 4096u);
}

TEST(KvPiecesTest, BadInputIsRefusedAndLeavesNothing) {
  const KvLayerLayout l = Layout(2, 10, 4);
  KvPieces p;
  std::vector<int64_t> ok = {1, 2, 3, 4}, high = {1, 2, 10}, neg = {0, -3};
  ASSERT_TRUE(p.Build(l, ok.data(), ok.size()).ok());
  EXPECT_TRUE(p.Build(l, high.data(), high.size()).IsInvalidArgument());
  EXPECT_EQ(p.num_chunks(), 0u);
  EXPECT_TRUE(p.Build(l, neg.data(), neg.size()).IsInvalidArgument());
  EXPECT_TRUE(p.Build(KvLayerLayout{}, ok.data(), ok.size()).IsInvalidArgument());
  EXPECT_TRUE(p.Build(l, ok.data(), ok.size(), 4, 1 << 20, 1 << 30).IsInvalidArgument());
}

}  // namespace
}  // namespace cxlkv
