// Copyright cxlkv authors.
//
// Kubernetes quantities as the scheduler writes consumedCapacity.
#include <gtest/gtest.h>

#include "controller/controller.h"

namespace cxlkv::dra {
namespace {

TEST(QuantityTest, ParsesBinaryDecimalAndPlainBytes) {
  int64_t b = 0;
  ASSERT_TRUE(ParseQuantityBytes("2Gi", &b).ok());
  EXPECT_EQ(b, int64_t{2} << 30);
  ASSERT_TRUE(ParseQuantityBytes("1536Mi", &b).ok());
  EXPECT_EQ(b, int64_t{1536} << 20);
  ASSERT_TRUE(ParseQuantityBytes("2147483648", &b).ok());
  EXPECT_EQ(b, int64_t{2147483648});
  ASSERT_TRUE(ParseQuantityBytes("2G", &b).ok());
  EXPECT_EQ(b, int64_t{2000000000});
  ASSERT_TRUE(ParseQuantityBytes("1.5Gi", &b).ok());
  EXPECT_EQ(b, int64_t{3} << 29);
}

TEST(QuantityTest, RejectsWhatIsNotAWholeByteCount) {
  int64_t b = 0;
  for (const char* q : {"", "Gi", "2Xi", "0.5", "2m", "-1Gi", "1e3"}) {
    EXPECT_TRUE(ParseQuantityBytes(q, &b).IsInvalidArgument()) << q;
  }
}

}  // namespace
}  // namespace cxlkv::dra
