// Copyright cxlkv authors.
#include "state.h"

#include <gtest/gtest.h>

#include "cxlkv/base/json.h"
#include "cxlkv/fabric/json_codec.h"

namespace cxlkv::fabric::internal {
namespace {

FabricConfig Cfg() {
  FabricConfig c;
  EXPECT_TRUE(ParseFabricConfig(R"(
appliances: [{id: a, blades: [{id: b, channels: 2, blocksPerChannel: 2, ports: [{id: P1, host: h}]}]}]
hosts: [{id: h}]
)",
                                &c)
                  .ok());
  return c;
}

TEST(StateTest, RoundTripKeepsRegionsRenamesAndDerivesUsage) {
  FabricState s;
  ASSERT_TRUE(BuildState(Cfg(), "", &s).ok());
  MemoryRegion r;
  r.id = "r1";
  r.appliance_id = "a";
  r.blade_id = "b";
  r.status = RegionStatus::kComposed;
  r.size_mib = 2048;
  r.qos = 2;
  r.share_count = 1;
  r.claim_uid = "uid";
  r.blocks = {0, 2};
  r.backing_path = "/x/r1.region";
  r.mappings.push_back({"P1", "h", "port0", Materialization::kMaterialized, "", "/dev/x"});
  s.regions["r1"] = r;
  s.hosts[0].managed = false;
  ASSERT_TRUE(s.RebuildUsage().ok());
  std::string text = SerializeState(s);

  FabricState t;
  ASSERT_TRUE(BuildState(Cfg(), text, &t).ok());
  ASSERT_EQ(t.regions.count("r1"), 1u);
  const MemoryRegion& u = t.regions["r1"];
  EXPECT_EQ(u.blocks, (std::vector<int>{0, 2}));
  EXPECT_EQ(u.qos, 2);
  EXPECT_EQ(u.claim_uid, "uid");
  EXPECT_EQ(u.mappings.at(0).device, "/dev/x");
  EXPECT_FALSE(t.hosts[0].managed);
  EXPECT_EQ(t.appliances[0].blades[0].AllocatedMiB(), 2 * 1024);
}

TEST(StateTest, CorruptStateIsRefused) {
  FabricState s;
  EXPECT_TRUE(BuildState(Cfg(), "{not json", &s).IsCorruption());
  EXPECT_TRUE(BuildState(Cfg(), R"({"version": 9})", &s).IsCorruption());
  // Two regions on one block.
  std::string two = R"({"version":1,"appliances":[],"hosts":[],"regions":[
    {"id":"x","type":"MemoryTypeRegion","sizeMiB":1024,"memoryApplianceId":"a","memoryBladeId":"b","blocks":[1]},
    {"id":"y","type":"MemoryTypeRegion","sizeMiB":1024,"memoryApplianceId":"a","memoryBladeId":"b","blocks":[1]}]})";
  Status st = BuildState(Cfg(), two, &s);
  EXPECT_TRUE(st.IsCorruption());
  EXPECT_NE(st.message().find("used twice"), std::string::npos);
}

TEST(JsonCodecTest, ComposeRequestValidatesLikeTheSchema) {
  nlohmann::json j;
  ComposeRequest r;
  ASSERT_TRUE(base::ParseJson(R"({"memorySizeMiB": 10, "QoS": 4, "shareCount": 2,
                            "candidateHosts": ["h"], "claimUid": "c"})",
                              &j)
                  .ok());
  ASSERT_TRUE(ComposeRequestFromJson(j, &r).ok());
  EXPECT_EQ(r.share_count, 2);
  EXPECT_EQ(r.candidate_hosts.at(0), "h");
  for (const char* bad :
       {R"({"QoS": 4})", R"({"memorySizeMiB": 1})", R"({"memorySizeMiB": 1, "QoS": 3})",
        R"({"memorySizeMiB": 0, "QoS": 1})", R"({"memorySizeMiB": "1", "QoS": 1})",
        R"({"memorySizeMiB": 1, "QoS": 1, "shareCount": 0})",
        R"({"memorySizeMiB": 1, "QoS": 1, "candidateHosts": [1]})", "[]"}) {
    ASSERT_TRUE(base::ParseJson(bad, &j).ok());
    EXPECT_TRUE(ComposeRequestFromJson(j, &r).IsInvalidArgument()) << bad;
  }
}

TEST(JsonCodecTest, RegionFromPlainCfmHasOneMapping) {
  nlohmann::json j;
  ASSERT_TRUE(base::ParseJson(R"({"id": "m1", "type": "MemoryTypeRegion", "sizeMiB": 8192,
      "memoryAppliancePort": "P1", "mappedHostId": "h", "mappedHostPort": "port0"})",
                              &j)
                  .ok());
  MemoryRegion r;
  ASSERT_TRUE(RegionFromJson(j, &r).ok());
  ASSERT_EQ(r.mappings.size(), 1u);
  EXPECT_EQ(r.mappings[0].host_id, "h");
  EXPECT_EQ(r.share_count, 1);
}

}  // namespace
}  // namespace cxlkv::fabric::internal
