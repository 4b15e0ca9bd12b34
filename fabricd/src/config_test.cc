// Copyright cxlkv authors.
#include "cxlkv/fabricd/config.h"

#include <gtest/gtest.h>

#include "built_binary.h"

namespace cxlkv::fabric {
namespace {

TEST(ConfigTest, ParsesTopologyCablingAndFaults) {
  FabricConfig c;
  Status s = ParseFabricConfig(R"(
stateDir: /tmp/s
appliances:
  - id: a
    blades:
      - id: b
        resourceBlockMiB: 512
        channels: 8
        blocksPerChannel: 3
        ports: [{id: P1, host: h1}, {id: P2, linkUp: false}]
hosts: [{id: h1, agent: "http://127.0.0.1:1"}]
faults: {failAssignPorts: [P2], crashAt: "compose:assigned",
         rules: [{method: GET, path: /cfm, status: 503, count: 2}]}
)",
                               &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(c.appliances.size(), 1u);
  const BladeConfig& b = c.appliances[0].blades[0];
  EXPECT_EQ(b.resource_block_mib, 512);
  EXPECT_EQ(b.channels, 8);
  EXPECT_EQ(b.ports[0].host, "h1");
  EXPECT_EQ(b.ports[0].host_port, "port0");
  EXPECT_FALSE(b.ports[1].link_up);
  EXPECT_EQ(c.faults.crash_at, "compose:assigned");
  EXPECT_EQ(c.faults.rules[0].status, 503);
  EXPECT_EQ(c.faults.rules[0].count, 2);
}

TEST(ConfigTest, BadInputGivesClearErrors) {
  FabricConfig c;
  Status s = ParseFabricConfig("appliances: [ {id: a", &c);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("parse config"), std::string::npos) << s.message();
  s = ParseFabricConfig("appliances: [{id: a, blades: [{id: b, ports: [{id: P1, host: nope}]}]}]",
                        &c);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("unknown host nope"), std::string::npos) << s.message();
  s = ParseFabricConfig("appliances: [{id: a, blades: [{id: b, channels: 0}]}]", &c);
  EXPECT_NE(s.message().find("channels"), std::string::npos) << s.message();
  s = ParseFabricConfig("auth: {username: u}", &c);
  EXPECT_TRUE(s.IsInvalidArgument());
  s = ParseFabricConfig("- just\n- a list\n", &c);
  EXPECT_TRUE(s.IsInvalidArgument());
}

TEST(ConfigTest, ExampleDeploymentIsOneEightGiBBladeCabledToTwoHosts) {
  FabricConfig c;
  Status s = LoadFabricConfig(testutil::SourceFile("deployments/examples/fabricd.yaml"), &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(c.appliances.size(), 1u);
  ASSERT_EQ(c.appliances[0].blades.size(), 1u);
  const BladeConfig& b = c.appliances[0].blades[0];
  EXPECT_EQ(b.resource_block_mib * b.channels * b.blocks_per_channel, 8 * 1024);
  ASSERT_EQ(b.ports.size(), 2u);
  EXPECT_EQ(b.ports[0].host, "node-a");
  EXPECT_EQ(b.ports[1].host, "node-b");
}

TEST(ConfigTest, MissingFileIsNotFound) {
  FabricConfig c;
  EXPECT_TRUE(LoadFabricConfig("/nonexistent/cxlkv.yaml", &c).IsNotFound());
}

}  // namespace
}  // namespace cxlkv::fabric
