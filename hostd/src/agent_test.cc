// Copyright cxlkv authors.
//
// HostAgent with the file backend: materialize/remove, CDI spec contents,
// state across a restart, orphan specs, bad requests.
#include "cxlkv/hostd/agent.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace cxlkv::hostd {
namespace {

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cxlkv-agent-test.XXXXXX";
    root_ = mkdtemp(tmpl);
    backing_ = root_ + "/r1.region";
    std::ofstream(backing_).close();
    ASSERT_EQ(truncate(backing_.c_str(), 4 << 20), 0);
    opt_.host_id = "node-a";
    opt_.state_dir = root_ + "/state";
    opt_.cdi.cdi_dir = root_ + "/cdi";
    opt_.cdi.container_dir = "/dev/cxlkv";
  }
  void TearDown() override { std::system(("rm -rf " + root_).c_str()); }
  std::unique_ptr<HostAgent> Open() {
    std::unique_ptr<HostAgent> a;
    Status s = HostAgent::Open(
        opt_, std::make_unique<FileMaterializer>(root_ + "/dev", std::vector<std::string>{root_}),
        &a);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return a;
  }
  static bool Exists(const std::string& p) {
    struct stat st;
    return lstat(p.c_str(), &st) == 0;
  }
  std::string root_, backing_;
  AgentOptions opt_;
};

// The DRA plugin's re-check: a lost spec comes back, and an absent region is
// NotFound with nothing created.
TEST_F(AgentTest, RewriteSpecRestoresALostSpecAndNeverMaterializes) {
  auto a = Open();
  Device d;
  EXPECT_TRUE(a->RewriteSpec("r1", &d).IsNotFound());
  EXPECT_FALSE(Exists(root_ + "/cdi/r1.json"));
  EXPECT_TRUE(a->List().empty());

  ASSERT_TRUE(a->Materialize(RegionRequest{"r1", 4 << 20, 0, backing_}, &d).ok());
  ASSERT_EQ(unlink((root_ + "/cdi/r1.json").c_str()), 0);  // a reboot wiped /var/run/cdi
  Device again;
  ASSERT_TRUE(a->RewriteSpec("r1", &again).ok());
  EXPECT_TRUE(Exists(root_ + "/cdi/r1.json"));
  EXPECT_EQ(again.path, d.path);
  EXPECT_EQ(again.size_bytes, d.size_bytes);
}

TEST_F(AgentTest, MaterializeWritesSpecAndRemoveDeletesEverything) {
  auto a = Open();
  RegionRequest req{"r1", 4 << 20, 0, backing_};
  Device d;
  ASSERT_TRUE(a->Materialize(req, &d).ok());
  EXPECT_EQ(d.path, root_ + "/dev/r1");
  char target[512] = {0};
  ASSERT_GT(readlink(d.path.c_str(), target, sizeof(target) - 1), 0);
  EXPECT_EQ(std::string(target), backing_);

  std::ifstream f(root_ + "/cdi/r1.json");
  nlohmann::json spec = nlohmann::json::parse(f);
  EXPECT_EQ(spec["kind"], "cxlkv.dev/region");
  const auto& dev = spec["devices"][0];
  EXPECT_EQ(dev["name"], "r1");
  std::vector<std::string> env = dev["containerEdits"]["env"];
  EXPECT_EQ(env, (std::vector<std::string>{"CXL_DAX_DEVICE=/dev/cxlkv/r1", "CXL_DAX_SIZE=4194304",
                                           "CXL_DAX_OFFSET=0"}));
  EXPECT_EQ(dev["containerEdits"]["mounts"][0]["hostPath"], d.path);
  EXPECT_EQ(dev["containerEdits"]["mounts"][0]["containerPath"], "/dev/cxlkv/r1");

  // Idempotent.
  ASSERT_TRUE(a->Materialize(req, &d).ok());
  EXPECT_EQ(a->List().size(), 1u);

  ASSERT_TRUE(a->Remove("r1").ok());
  EXPECT_FALSE(Exists(root_ + "/cdi/r1.json"));
  EXPECT_FALSE(Exists(root_ + "/dev/r1"));
  EXPECT_TRUE(Exists(backing_)) << "the agent must never delete the region's bytes";
  EXPECT_TRUE(a->Remove("r1").IsNotFound());
}

// A host without hardware coherence with the blade's other hosts: every
// spec tells the workload to use coherence=software as this host's write
// partition (its index among the blade's hosts).
TEST_F(AgentTest, NonCoherentHostsSpecsCarryTheModeAndTheHostsPartition) {
  opt_.cdi.coherence = "software";
  opt_.cdi.software_hosts = {"node-z", "node-a", "node-b"};
  auto a = Open();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->options().cdi.software_partition, 1);
  Device d;
  ASSERT_TRUE(a->Materialize(RegionRequest{"r1", 4 << 20, 0, backing_}, &d).ok());
  std::ifstream f(root_ + "/cdi/r1.json");
  nlohmann::json spec = nlohmann::json::parse(f);
  std::vector<std::string> env = spec["devices"][0]["containerEdits"]["env"];
  EXPECT_EQ(env, (std::vector<std::string>{"CXL_DAX_DEVICE=/dev/cxlkv/r1", "CXL_DAX_SIZE=4194304",
                                           "CXL_DAX_OFFSET=0", "CXL_COHERENCE=software",
                                           "CXL_SOFTWARE_PARTITIONS=3", "CXL_SOFTWARE_PARTITION=1",
                                           "CXL_PARTITION_LOCK=/dev/cxlkv/r1.lock"}));
  // The node's partition lock: created beside the spec, bind-mounted at the
  // path the environment names, removed with the spec.
  const std::string lock = root_ + "/cdi/r1.lock";
  EXPECT_TRUE(std::filesystem::exists(lock));
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["mounts"].back(),
            (nlohmann::json{{"hostPath", lock},
                            {"containerPath", "/dev/cxlkv/r1.lock"},
                            {"options", {"bind", "rw"}}}));
  ASSERT_TRUE(a->Remove("r1").ok());
  EXPECT_FALSE(std::filesystem::exists(lock));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/cdi/r1.json"));
}

TEST_F(AgentTest, BadCoherenceSettingsAreRefusedAtStart) {
  auto refused = [&](const std::string& mode, std::vector<std::string> hosts,
                     const std::string& want) {
    AgentOptions o = opt_;
    o.cdi.coherence = mode;
    o.cdi.software_hosts = std::move(hosts);
    std::unique_ptr<HostAgent> a;
    Status s = HostAgent::Open(
        o, std::make_unique<FileMaterializer>(root_ + "/dev", std::vector<std::string>{root_}), &a);
    EXPECT_TRUE(s.IsInvalidArgument()) << mode << ": " << s.ToString();
    EXPECT_NE(s.message().find(want), std::string::npos) << s.ToString();
  };
  refused("sofware", {}, "hardware or software");
  refused("software", {}, "1 to 16");
  refused("software", {"node-b", "node-c"}, "node-a is not among the software hosts");
  refused("software", {"node-a", "node-a"}, "listed twice");
  refused("hardware", {"node-a"}, "coherence=software only");
  std::vector<std::string> many;
  for (int i = 0; i < 17; ++i) many.push_back("node-" + std::to_string(i));
  refused("software", many, "got 17");
}

TEST_F(AgentTest, StateSurvivesRestartAndOrphanSpecsAreRemoved) {
  {
    auto a = Open();
    Device d;
    ASSERT_TRUE(a->Materialize({"r1", 4 << 20, 0, backing_}, &d).ok());
  }
  // A spec of ours the state does not know (crash between spec and state),
  // and a spec of another vendor that must be left alone.
  std::ofstream(root_ + "/cdi/ghost.json")
      << R"({"cdiVersion":"0.5.0","kind":"cxlkv.dev/region","devices":[]})";
  std::ofstream(root_ + "/cdi/other.json")
      << R"({"cdiVersion":"0.5.0","kind":"example.com/gpu","devices":[]})";
  auto a = Open();
  ASSERT_EQ(a->List().size(), 1u);
  EXPECT_EQ(a->List()[0].allocation_id, "r1");
  EXPECT_FALSE(Exists(root_ + "/cdi/ghost.json"));
  EXPECT_TRUE(Exists(root_ + "/cdi/other.json"));
  EXPECT_TRUE(Exists(root_ + "/cdi/r1.json"));
}

TEST_F(AgentTest, BadRequestsFailCleanly) {
  auto a = Open();
  Device d;
  EXPECT_TRUE(a->Materialize({"../etc", 4 << 20, 0, backing_}, &d).IsInvalidArgument());
  EXPECT_TRUE(a->Materialize({"r2", 0, 0, backing_}, &d).IsInvalidArgument());
  EXPECT_TRUE(a->Materialize({"r2", 4 << 20, 0, root_ + "/missing"}, &d).IsNotFound());
  EXPECT_TRUE(a->Materialize({"r2", 8 << 20, 0, backing_}, &d).IsInvalidArgument())
      << "a backing file smaller than the region";
  EXPECT_TRUE(a->Materialize({"r2", 4096, ~uint64_t{0} - 4095, backing_}, &d).IsInvalidArgument())
      << "an offset whose sum with the size wraps past 2^64 (it passed the bounds check)";
  EXPECT_TRUE(a->Materialize({"r2", 4096, 0, "/etc/passwd"}, &d).IsInvalidArgument())
      << "a host file outside the backing directories";
  std::string sneaky = root_ + "/sneaky";
  ASSERT_EQ(symlink("/etc/passwd", sneaky.c_str()), 0);
  EXPECT_TRUE(a->Materialize({"r2", 4096, 0, sneaky}, &d).IsInvalidArgument())
      << "a link that leads outside";
  EXPECT_TRUE(a->List().empty());
  EXPECT_FALSE(Exists(root_ + "/cdi/r2.json"));
}

TEST_F(AgentTest, CorruptStateFileIsRefusedAndKept) {
  ASSERT_EQ(mkdir((root_ + "/state").c_str(), 0755), 0);
  std::ofstream(root_ + "/state/hostd-state.json") << "{garbage";
  std::unique_ptr<HostAgent> a;
  Status s = HostAgent::Open(
      opt_, std::make_unique<FileMaterializer>(root_ + "/dev", std::vector<std::string>{root_}),
      &a);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  std::ifstream f(root_ + "/state/hostd-state.json");
  std::string text((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(text, "{garbage");
}

TEST_F(AgentTest, ResyncWithoutFabricIsUnsupportedAndUnreachableIsIOError) {
  auto a = Open();
  ResyncResult r;
  EXPECT_TRUE(a->Resync(&r).IsUnsupported());
  opt_.fabric.base_url = "http://127.0.0.1:1";
  auto b = Open();
  Device d;
  ASSERT_TRUE(b->Materialize({"r1", 4 << 20, 0, backing_}, &d).ok());
  EXPECT_TRUE(b->Resync(&r).IsIOError());
  EXPECT_EQ(b->List().size(), 1u) << "an unreachable manager must not remove anything";
}

}  // namespace
}  // namespace cxlkv::hostd
