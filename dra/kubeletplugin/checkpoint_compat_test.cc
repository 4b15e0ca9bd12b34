// Copyright cxlkv authors.
//
// The kubelet plugin's checkpoint across releases (docs/dra.md, "Upgrades"):
// this release reads the file v0.1.0 writes (testdata/checkpoint-v1.json,
// checked in) and writes it byte for byte, so v0.1.0's reader accepts what
// this one writes (a downgrade); it reads a file from a later release that
// added fields (the additive rule); it refuses a later incompatible version
// with Unsupported and leaves the file as it was.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "built_binary.h"
#include "kubeletplugin/checkpoint.h"
#include "kubeletplugin/checkpoint_fixture.h"

namespace cxlkv::dra {
namespace {

std::string FixturePath(const std::string& name) {
  return testutil::SourceFile("dra/kubeletplugin/testdata/" + name);
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "missing " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The content of checkpoint-v1.json.
Checkpoint V1() { return test::SampleCheckpoint(); }

void ExpectV1(const Checkpoint& cp) {
  EXPECT_EQ(cp.version, 1);
  EXPECT_EQ(cp.boot_id, "6f1c1c2e-0000-4000-8000-000000000001");
  EXPECT_EQ(cp.node_name, "node-a");
  ASSERT_EQ(cp.claims.size(), 2u);
  const ClaimEntry& a = cp.claims.at("uid-a");
  EXPECT_EQ(a.ns, "team-1");
  EXPECT_EQ(a.name, "kv");
  EXPECT_EQ(a.memory_id, "mem-7");
  EXPECT_EQ(a.state, PrepareState::kPrepareCompleted);
  EXPECT_EQ(a.updated_unix, 1764590000);
  ASSERT_EQ(a.devices.size(), 1u);
  EXPECT_EQ(a.devices[0].share_id, "share-1");
  EXPECT_EQ(a.devices[0].cdi_device_ids, std::vector<std::string>{"cxlkv.dev/region=mem-7"});
  const ClaimEntry& b = cp.claims.at("uid-b");
  EXPECT_EQ(b.state, PrepareState::kPrepareStarted);
  ASSERT_EQ(b.devices.size(), 1u);
  EXPECT_EQ(b.devices[0].request_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(b.devices[0].share_id, "");
}

TEST(CheckpointCompatTest, ReadsTheFileV010Writes) {
  Checkpoint cp;
  ASSERT_TRUE(LoadCheckpoint(FixturePath("checkpoint-v1.json"), &cp).ok());
  ExpectV1(cp);
}

TEST(CheckpointCompatTest, WritesTheFileV010WritesByteForByte) {
  EXPECT_EQ(EncodeCheckpoint(V1()), Slurp(FixturePath("checkpoint-v1.json")));
}

TEST(CheckpointCompatTest, ReadsAFileALaterReleaseWroteWithMoreFields) {
  Checkpoint cp;
  Status s = LoadCheckpoint(FixturePath("checkpoint-v1-newer-fields.json"), &cp);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectV1(cp);
}

TEST(CheckpointCompatTest, RefusesALaterIncompatibleVersionAndLeavesTheFile) {
  char tmpl[] = "/tmp/cxlkv-checkpoint-compat.XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string path = dir + "/checkpoint.json";
  const std::string v2 = Slurp(FixturePath("checkpoint-v2.json"));
  { std::ofstream(path) << v2; }
  Checkpoint cp;
  Status s = LoadCheckpoint(path, &cp);
  EXPECT_EQ(s.code(), Status::Code::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find("checkpoint version 2"), std::string::npos) << s.ToString();
  EXPECT_EQ(Slurp(path), v2);
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace cxlkv::dra
