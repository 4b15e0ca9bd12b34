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

TEST(SizeTest, ParseQuantityReadsKubernetesQuantitiesOfBytes) {
  int64_t b = 0;
  ASSERT_TRUE(ParseQuantity("2Gi", &b).ok());
  EXPECT_EQ(b, int64_t{2} << 30);
  ASSERT_TRUE(ParseQuantity("2G", &b).ok());  // decimal, unlike ParseSize's G
  EXPECT_EQ(b, int64_t{2000000000});
  ASSERT_TRUE(ParseQuantity("1.5Gi", &b).ok());
  EXPECT_EQ(b, int64_t{3} << 29);
  for (const char* q : {"", "Gi", "2GiB", "2 Gi", "0.5", "2m", "-1Gi", "1e3"}) {
    b = 42;
    EXPECT_TRUE(ParseQuantity(q, &b).IsInvalidArgument()) << q;
    EXPECT_EQ(b, 42) << q;
  }
}

TEST(SizeTest, FormatBytesPicksTheLargestEvenUnit) {
  EXPECT_EQ(FormatBytes(4096), "4 KiB");
  EXPECT_EQ(FormatBytes(896ull << 10), "896 KiB");
  EXPECT_EQ(FormatBytes(3ull << 29), "1.50 GiB");
  EXPECT_EQ(FormatBytes(1000), "1000 B");
}

}  // namespace
}  // namespace cxlkv::base
