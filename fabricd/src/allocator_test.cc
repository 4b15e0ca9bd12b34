// Copyright cxlkv authors.
#include "allocator.h"

#include <gtest/gtest.h>

namespace cxlkv::fabric::internal {
namespace {

BladeGeometry Geo() { return {4, 4, 1024}; }  // 4 channels x 4 blocks x 1 GiB

TEST(AllocatorTest, RoundsUpToWholeBlocksPerChannel) {
  std::vector<bool> used(16, false);
  Allocation a;
  ASSERT_TRUE(AllocateByQoS(Geo(), used, 3000, 2, &a).ok());
  // ceil(3000 / 1024 / 2) = 2 blocks per channel, 2 channels: 4 GiB.
  EXPECT_EQ(a.qos, 2);
  EXPECT_EQ(a.size_mib, 4096);
  EXPECT_EQ(a.blocks.size(), 4u);
}

TEST(AllocatorTest, QosSpreadsOverDistinctChannelsWithConsecutiveBlocks) {
  std::vector<bool> used(16, false);
  Allocation a;
  ASSERT_TRUE(AllocateByQoS(Geo(), used, 8192, 4, &a).ok());
  std::vector<int> per_channel(4, 0);
  for (int b : a.blocks) per_channel[b / 4]++;
  for (int n : per_channel) EXPECT_EQ(n, 2);
  for (size_t i = 0; i + 1 < a.blocks.size(); i += 2) EXPECT_EQ(a.blocks[i] + 1, a.blocks[i + 1]);
}

TEST(AllocatorTest, QosAboveChannelCountMeansAllChannels) {
  std::vector<bool> used(16, false);
  Allocation a;
  ASSERT_TRUE(AllocateByQoS(Geo(), used, 1, 8, &a).ok());
  EXPECT_EQ(a.qos, 4);
  EXPECT_EQ(a.size_mib, 4096);
}

TEST(AllocatorTest, PrefersChannelsThatKeepTheLongestRun) {
  std::vector<bool> used(16, false);
  used[0] = used[1] = used[2] = true;  // channel 0 has one free block left
  Allocation a;
  ASSERT_TRUE(AllocateByQoS(Geo(), used, 1024, 1, &a).ok());
  ASSERT_EQ(a.blocks.size(), 1u);
  EXPECT_NE(a.blocks[0] / 4, 0) << "took the last block of the fragmented channel";
}

TEST(AllocatorTest, NoSpaceWhenNoConsecutiveRunFits) {
  std::vector<bool> used(16, false);
  for (int ch = 0; ch < 4; ++ch) used[ch * 4 + 1] = true;  // runs of 1 and 2 per channel
  Allocation a;
  EXPECT_TRUE(AllocateByQoS(Geo(), used, 3 * 1024, 1, &a).IsNoSpace());
  EXPECT_TRUE(AllocateByQoS(Geo(), used, 2 * 1024, 1, &a).ok());
}

TEST(AllocatorTest, RejectsBadArguments) {
  std::vector<bool> used(16, false);
  Allocation a;
  EXPECT_TRUE(AllocateByQoS(Geo(), used, 0, 1, &a).IsInvalidArgument());
  EXPECT_TRUE(AllocateByQoS(Geo(), used, 1, 3, &a).IsInvalidArgument());
  EXPECT_TRUE(AllocateByQoS(Geo(), used, 1LL << 40, 1, &a).IsNoSpace());
}

}  // namespace
}  // namespace cxlkv::fabric::internal
