// Copyright cxlkv authors.
#include "cxlkv/base/size.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <regex>
#include <string>

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

TEST(SizeTest, ParseSizeRejectsMalformedSizesAndLeavesTheOutputAlone) {
  // Each of these once parsed as a prefix (std::stod stopped at the second
  // point and "1.2.3GiB" became 1.2 GiB) or would now if the scan were loose.
  for (const char* text : {"1.2.3GiB",
                           "1.2.3",
                           "1..5",
                           "1.5.GiB",
                           "..5",
                           ".",
                           "..",
                           "",
                           " ",
                           "GiB",
                           "-1",
                           "+1",
                           "-1GiB",
                           " 1",
                           "\t1",
                           "1e3",
                           "1E3",
                           "1.0e5GiB",
                           "0x10",
                           "nan",
                           "inf",
                           "1,5GiB",
                           "1 2",
                           "1GiBB",
                           "1 GiB B",
                           "1 gib",
                           "1Gi",
                           "1ZiB",
                           "1PiB",
                           "4096 bytes",
                           "1\n",
                           "4096 ",
                           "4096  ",
                           "4 KiB ",
                           "4KiB\t",
                           "1.5GiB ",
                           "99999999999999999999",
                           "9223372036854775808",
                           "18446744073709551616KiB",
                           "8388608TiB",
                           "9.3e18",
                           "9300000000000000000.5",
                           "1.5.5.5"}) {
    uint64_t v = 42;
    const Status s = ParseSize(text, &v);
    EXPECT_TRUE(s.IsInvalidArgument()) << "'" << text << "' -> " << s.ToString();
    EXPECT_EQ(v, 42u) << text;
    EXPECT_NE(s.message().find(std::string("'") + text + "'"), std::string::npos) << s.message();
  }
  uint64_t v = 0;
  EXPECT_NE(ParseSize("1.2.3GiB", &v).message().find("more than one decimal point"),
            std::string::npos);
  EXPECT_NE(ParseSize("4096 ", &v).message().find("ends in whitespace"), std::string::npos);
}

TEST(SizeTest, ParseSizeIsExactForIntegersUpToTheLargestOffset) {
  uint64_t v = 0;
  ASSERT_TRUE(ParseSize("9007199254740993", &v).ok());  // 2^53 + 1: not a double
  EXPECT_EQ(v, 9007199254740993ull);
  ASSERT_TRUE(ParseSize("9223372036854775807", &v).ok());  // 2^63 - 1
  EXPECT_EQ(v, 9223372036854775807ull);
  ASSERT_TRUE(ParseSize("8388607TiB", &v).ok());
  EXPECT_EQ(v, 8388607ull << 40);
  ASSERT_TRUE(ParseSize("1.", &v).ok());
  EXPECT_EQ(v, 1u);
  ASSERT_TRUE(ParseSize(".5KiB", &v).ok());
  EXPECT_EQ(v, 512u);
  ASSERT_TRUE(ParseSize("4 KiB", &v).ok());
  EXPECT_EQ(v, 4096u);
  ASSERT_TRUE(ParseSize("0", &v).ok());
  EXPECT_EQ(v, 0u);
}

// Random strings over the characters sizes are made of: ParseSize accepts
// exactly those the grammar in size.h allows (checked by a regular
// expression written from it), with the value in range.
TEST(SizeTest, ParseSizeAcceptsExactlyTheGrammarOnRandomText) {
  const std::regex grammar(
      R"(^([0-9]+\.?[0-9]*|\.[0-9]+)( *(B|KiB|K|k|MiB|M|GiB|G|TiB|T|KB|kB|MB|GB|TB))?$)");
  const std::string alphabet = "0123456789...  KMGTkiBbe-+x";
  std::mt19937_64 rng(20261201);
  int accepted = 0, rejected = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string text;
    const int len = static_cast<int>(rng() % 9);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    uint64_t v = 42;
    const Status s = ParseSize(text, &v);
    const bool grammatical = std::regex_match(text, grammar);
    if (s.ok()) {
      ++accepted;
      EXPECT_TRUE(grammatical) << "accepted '" << text << "' as " << v;
    } else {
      ++rejected;
      EXPECT_TRUE(s.IsInvalidArgument()) << text;
      EXPECT_EQ(v, 42u) << text;
      // Grammatical text is refused only as too large ("9999999T").
      EXPECT_TRUE(!grammatical || s.message().find("out of range") != std::string::npos)
          << "rejected '" << text << "': " << s.ToString();
    }
  }
  // The alphabet is chosen so that both outcomes are common.
  EXPECT_GT(accepted, 500);
  EXPECT_GT(rejected, 500);
}

TEST(SizeTest, ParseQuantityReadsKubernetesQuantitiesOfBytes) {
  int64_t b = 0;
  ASSERT_TRUE(ParseQuantity("2Gi", &b).ok());
  EXPECT_EQ(b, int64_t{2} << 30);
  ASSERT_TRUE(ParseQuantity("2G", &b).ok());  // decimal, unlike ParseSize's G
  EXPECT_EQ(b, int64_t{2000000000});
  ASSERT_TRUE(ParseQuantity("1.5Gi", &b).ok());
  EXPECT_EQ(b, int64_t{3} << 29);
  for (const char* q : {"", "Gi", "2GiB", "2 Gi", "0.5", "2m", "-1Gi", "1e3", "1.2.3Gi", "1..5Gi",
                        ".", "9223372036854775808", "8388608Ti"}) {
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
