// Copyright cxlkv authors.
//
// The cxlkv.dev/region annotation across releases (docs/dra.md,
// "Upgrades"): this release reads what v0.1.0 wrote (testdata/*-v1.txt,
// checked in) and what a later additive release writes, and writes exactly
// what v0.1.0 wrote, which v0.1.0's reader therefore accepts.
#include "controller/annotations.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "built_binary.h"

namespace cxlkv::dra {
namespace {

std::string Fixture(const std::string& name) {
  std::ifstream f(testutil::SourceFile("dra/controller/testdata/" + name));
  EXPECT_TRUE(f.good()) << "missing fixture " << name;
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

RegionRef V1Ref() {
  RegionRef r;
  r.appliance_id = "cma-0";
  r.blade_id = "blade-0";
  r.memory_id = "mem-42";
  r.allocation_timestamp = "2026-12-01T16:00:00Z";
  r.size_mib = 2048;
  return r;
}

void ExpectV1(const RegionRef& r) {
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.appliance_id, "cma-0");
  EXPECT_EQ(r.blade_id, "blade-0");
  EXPECT_EQ(r.memory_id, "mem-42");
  EXPECT_EQ(r.allocation_timestamp, "2026-12-01T16:00:00Z");
  EXPECT_EQ(r.size_mib, 2048);
}

TEST(RegionAnnotationTest, ReadsWhatV010Wrote) {
  ExpectV1(ParseRegionAnnotation(Fixture("region-annotation-v1.txt")));
}

TEST(RegionAnnotationTest, WritesExactlyWhatV010Wrote) {
  EXPECT_EQ(EncodeRegionAnnotation(V1Ref()), Fixture("region-annotation-v1.txt"));
}

TEST(RegionAnnotationTest, KeysAddedByALaterReleaseAreIgnored) {
  ExpectV1(ParseRegionAnnotation(Fixture("region-annotation-v1-newer-keys.txt")));
}

TEST(RegionAnnotationTest, AMissingKeyReadsEmpty) {
  // An annotation without sizeMiB (the writer of a release that had none).
  RegionRef r = ParseRegionAnnotation(
      R"({"allocationTimestamp":"t","applianceId":"a","bladeId":"b","memoryId":"m"})");
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.size_mib, 0);
  EXPECT_EQ(r.memory_id, "m");
}

TEST(RegionAnnotationTest, ValuesThisDriverDidNotWriteNameNoRegion) {
  for (const char* bad : {"", "not json", "[1,2]", "\"mem-1\"", R"({"memoryId":7})",
                          R"({"memoryId":"m","sizeMiB":"big"})", R"({"applianceId":"a"})"}) {
    EXPECT_FALSE(ParseRegionAnnotation(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace cxlkv::dra
