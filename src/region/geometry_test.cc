// Copyright cxlkv authors.
#include "geometry.h"

#include <gtest/gtest.h>

namespace cxlkv::internal {
namespace {

// Both layouts: 5 (decoupled: 2 index entries per data slot, data words)
// and 4 (one entry per slot).
TEST(GeometryTest, EverythingFitsAndDoesNotOverlap) {
  for (bool decoupled : {true, false})
    for (uint64_t size : {1ull << 20, 64ull << 20, 4ull << 30, 512ull << 30}) {
      for (uint64_t slot : {64ull, 4096ull, 896ull << 10, 14ull << 20}) {
        Geometry g;
        Status s = ComputeGeometry(size, slot, 64, decoupled, &g);
        if (!s.ok()) {
          EXPECT_TRUE(s.IsInvalidArgument());
          continue;
        }
        EXPECT_LT(g.registry_off, g.namespaces_off);
        EXPECT_LT(g.namespaces_off, g.retired_off);
        EXPECT_LT(g.retired_off, g.tags_off);
        EXPECT_LE(g.tags_off + g.num_sets * 64, g.meta_off);
        EXPECT_LE(g.meta_off + g.num_entries * 64, g.pins_off);
        const uint64_t pins_end = g.pins_off + g.num_entries * 8 * g.pin_words;
        if (decoupled) {
          EXPECT_LE(pins_end, g.dwords_off);
          EXPECT_LE(g.dwords_off + g.num_slots * 8, g.data_off);
          EXPECT_EQ(g.num_entries, 2 * g.num_slots);
        } else {
          EXPECT_LE(pins_end, g.data_off);
          EXPECT_EQ(g.dwords_off, 0u);
          EXPECT_EQ(g.num_entries, g.num_slots);
        }
        EXPECT_LE(g.data_off + g.num_slots * g.slot_stride, size);
        EXPECT_EQ(g.data_off % g.data_align, 0u);
        EXPECT_EQ(g.num_entries, g.num_sets * g.ways);
        // Nearly all of a large region is data.
        if (size >= (4ull << 30) && slot >= 4096) {
          EXPECT_GT(double(g.num_slots * g.slot_stride) / size, 0.95) << size << " " << slot;
        }
      }
    }
}

// The figure is exact: that many bytes hold one slot, one byte less none,
// at either data alignment (4 KiB below 64 MiB, 2 MiB from there).
TEST(GeometryTest, TooSmallRegionSaysExactlyHowMuchIsNeeded) {
  for (bool decoupled : {true, false})
    for (uint64_t slot : {64ull, 4096ull, 896ull << 10, 1ull << 20, 63ull << 20, 64ull << 20}) {
      Geometry g;
      Status s = ComputeGeometry(64 << 10, slot, 64, decoupled, &g);
      ASSERT_TRUE(s.IsInvalidArgument());
      const std::string tag = "need at least ";
      const size_t at = s.message().find(tag);
      ASSERT_NE(at, std::string::npos) << s.ToString();
      const uint64_t need = std::stoull(s.message().substr(at + tag.size()));
      EXPECT_TRUE(ComputeGeometry(need, slot, 64, decoupled, &g).ok()) << slot << " " << need;
      EXPECT_EQ(g.num_slots, 1u) << slot;
      EXPECT_TRUE(ComputeGeometry(need - 1, slot, 64, decoupled, &g).IsInvalidArgument()) << slot;
    }
}

// coherence=software (layout 6): every write partition owns whole sets, so
// with more than one partition the smallest region holds one set of
// kMaxWays slots per partition, not one slot. The figure the message gives
// is exact there too: it formats, one byte less does not.
TEST(GeometryTest, TooSmallSoftwareRegionSaysExactlyHowMuchIsNeeded) {
  for (uint32_t partitions : {1u, 2u, 3u, 4u, 16u})
    for (uint64_t slot : {64ull, 4096ull, 896ull << 10, 64ull << 20}) {
      Geometry g;
      Status s = ComputeSoftwareGeometry(64 << 10, slot, 64, partitions, &g);
      ASSERT_TRUE(s.IsInvalidArgument());
      const std::string tag = "need at least ";
      const size_t at = s.message().find(tag);
      ASSERT_NE(at, std::string::npos) << s.ToString();
      const uint64_t need = std::stoull(s.message().substr(at + tag.size()));
      EXPECT_TRUE(ComputeSoftwareGeometry(need, slot, 64, partitions, &g).ok())
          << partitions << " " << slot << " " << need;
      EXPECT_GE(g.num_sets, partitions) << partitions << " " << slot;
      EXPECT_EQ(g.num_slots, partitions == 1 ? 1u : partitions * kMaxWays) << partitions;
      EXPECT_TRUE(ComputeSoftwareGeometry(need - 1, slot, 64, partitions, &g).IsInvalidArgument())
          << partitions << " " << slot;
      if (partitions > 1) {
        EXPECT_NE(s.message().find("--partitions"), std::string::npos) << s.message();
      }
    }
}

}  // namespace
}  // namespace cxlkv::internal
