// Copyright cxlkv authors.
#include "cxlkv/fabric/types.h"

#include <gtest/gtest.h>

#include "cxlkv/fabric/json_codec.h"

namespace cxlkv::fabric {
namespace {

TEST(TypesTest, StateEnumsRoundTripThroughTheirWireStrings) {
  for (Materialization m : {Materialization::kPending, Materialization::kMaterialized,
                            Materialization::kFailed, Materialization::kNoAgent}) {
    Materialization back = Materialization::kPending;
    ASSERT_TRUE(ParseMaterialization(ToString(m), &back)) << ToString(m);
    EXPECT_EQ(back, m);
  }
  for (RegionStatus s : {RegionStatus::kComposing, RegionStatus::kComposed}) {
    RegionStatus back = RegionStatus::kUnknown;
    ASSERT_TRUE(ParseRegionStatus(ToString(s), &back)) << ToString(s);
    EXPECT_EQ(back, s);
  }
  Materialization m;
  RegionStatus s;
  EXPECT_FALSE(ParseMaterialization("materialized", &m));
  EXPECT_FALSE(ParseMaterialization("", &m));
  EXPECT_FALSE(ParseRegionStatus("", &s));
  EXPECT_STREQ(ToString(RegionStatus::kUnknown), "");
}

TEST(TypesTest, ForeignRegionStatusReadsAsUnknownAndBadMaterializationIsRefused) {
  MemoryRegion r;
  ASSERT_TRUE(RegionFromJson({{"id", "m1"}, {"status", "Active"}}, &r).ok());
  EXPECT_EQ(r.status, RegionStatus::kUnknown);
  EXPECT_FALSE(RegionToJson(r).contains("status"));
  Status st = RegionFromJson(
      {{"id", "m1"}, {"mappings", {{{"appliancePort", "P1"}, {"materialization", "Done"}}}}}, &r);
  EXPECT_TRUE(st.IsInvalidArgument()) << st.ToString();
  EXPECT_NE(st.ToString().find("Done"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace cxlkv::fabric
