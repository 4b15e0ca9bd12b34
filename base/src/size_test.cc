// Copyright cxlkv authors.
#include "cxlkv/base/size.h"

#include <gtest/gtest.h>

namespace cxlkv::base {
namespace {

TEST(SizeTest, ParseSizeAcceptsBytesAndSuffixes) {
  uint64_t v;
  ASSERT_TRUE(ParseSize("4096", &v).ok());
  EXPECT_EQ(v, 4096u);
  ASSERT_TRUE(ParseSize("512MiB", &v).ok());
  EXPECT_EQ(v, 512ull << 20);
  ASSERT_TRUE(ParseSize("2GiB", &v).ok());
  EXPECT_EQ(v, 2ull << 30);
  ASSERT_TRUE(ParseSize("1.5GiB", &v).ok());
  EXPECT_EQ(v, 3ull << 29);
  ASSERT_TRUE(ParseSize("10GB", &v).ok());
  EXPECT_EQ(v, 10'000'000'000ull);
  EXPECT_TRUE(ParseSize("lots", &v).IsInvalidArgument());
  EXPECT_TRUE(ParseSize("5 parsecs", &v).IsInvalidArgument());
}

TEST(SizeTest, FormatBytesPicksTheLargestEvenUnit) {
  EXPECT_EQ(FormatBytes(4096), "4 KiB");
  EXPECT_EQ(FormatBytes(896ull << 10), "896 KiB");
  EXPECT_EQ(FormatBytes(3ull << 29), "1.50 GiB");
  EXPECT_EQ(FormatBytes(1000), "1000 B");
}

}  // namespace
}  // namespace cxlkv::base
