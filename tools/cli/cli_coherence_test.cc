// Copyright cxlkv authors.
//
// The `cxlkv` region commands on coherence=software regions (layout version
// 3, docs/coherence.md) through the real binary: the mode and partitions
// given where a region is created, reported where one is shown, the write
// partition where a command writes, and clear errors for a region of the
// other mode.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"
#include "cxlkv/region.h"

namespace {

namespace clitest = cxlkv::clitest;
using nlohmann::json;

using clitest::Result;  // out: stdout, or stderr when stdout is empty

Result Cxlkv(const std::string& args, const std::string& env = "") {
  Result r = clitest::Sh(env + " " + clitest::Bin() + " " + args, "cli-coh-test");
  if (r.out.empty()) r.out = r.err;
  return r;
}

json Json(const Result& r) {
  try {
    return json::parse(r.out);
  } catch (...) {
    ADD_FAILURE() << "not JSON: " << r.out;
    return json::object();
  }
}

std::string Region(const std::string& tag) {
  return "/dev/shm/cxlkv-test/cli-coh-" + tag + "-" + std::to_string(::getpid());
}

bool Has(const Result& r, const std::string& s) { return r.out.find(s) != std::string::npos; }

// A block stored by the holder of write partition `partition`, as another
// host's process would.
void StoreAsPartition(const std::string& region, int32_t partition, uint64_t id) {
  cxlkv::RegionOptions o;
  o.create_if_missing = false;
  o.prefault = cxlkv::Prefault::kNone;
  o.config.coherence = cxlkv::CoherenceMode::kSoftware;
  o.software_partition = partition;
  std::unique_ptr<cxlkv::Region> reg;
  cxlkv::Status s = cxlkv::Region::Open(region, o, &reg);
  ASSERT_TRUE(s.ok()) << s.ToString();
  cxlkv::NamespaceId ns;
  ASSERT_TRUE(reg->RegisterNamespace({"m", "bf16", "NHD", 0, 0}, &ns).ok());
  std::string d(65536, static_cast<char>('a' + partition));
  s = reg->Store(ns, cxlkv::BlockKey::FromId(id), d.data(), d.size());
  ASSERT_TRUE(s.ok()) << s.ToString();
}

TEST(CliCoherenceTest, FormatInspectStatsVerifyWipeOfASoftwareRegion) {
  const std::string region = Region("admin");
  ::unlink(region.c_str());
  const std::string geo = " --region " + region + " --region-size 16MiB --slot-size 64KiB";
  // Software mode needs the number of write partitions to format.
  Result r = Cxlkv("format --coherence software" + geo);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(Has(r, "--partitions")) << r.out;
  // Only partition 0's holder formats.
  r = Cxlkv("format --coherence software --partitions 2 --partition 1" + geo);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(Has(r, "partition 0")) << r.out;
  r = Cxlkv("format --coherence software --partitions 2 --json" + geo);
  ASSERT_EQ(r.rc, 0) << r.out;
  json j = Json(r);
  EXPECT_EQ(j["layout_version"], 4);
  EXPECT_EQ(j["coherence"], "software");
  EXPECT_EQ(j["software_partitions"], 2);
  EXPECT_EQ(j["participant"], -1) << "format gave partition 0 back";
  // Again alike: checked, not reformatted (same epoch); the environment the
  // DRA driver injects is the default.
  r = Cxlkv("format --json" + geo, "CXL_COHERENCE=software CXL_SOFTWARE_PARTITIONS=2");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["format_epoch"], j["format_epoch"]);
  r = Cxlkv("format --coherence software --partitions 4" + geo);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(Has(r, "software_partitions mismatch")) << r.out;
  // The other mode: refused, naming both.
  r = Cxlkv("format --coherence hardware" + geo);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(Has(r, "coherence mismatch: the region has software, this process expects hardware"))
      << r.out;

  StoreAsPartition(region, 1, 7);
  // Attaching commands take the region's own mode unless told.
  r = Cxlkv("inspect --region " + region + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  j = Json(r);
  EXPECT_EQ(j["region"]["coherence"], "software");
  EXPECT_EQ(j["region"]["layout_version"], 4);
  EXPECT_EQ(j["slots"]["ready"], 1);
  r = Cxlkv("inspect --region " + region);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(Has(r, "coherence=software, 2 write partitions")) << r.out;
  r = Cxlkv("stats --region " + region);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(Has(r, "coherence=software, 2 write partitions")) << r.out;
  r = Cxlkv("inspect --coherence hardware --region " + region);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(Has(r, "coherence mismatch: the region has software, this process expects hardware"))
      << r.out;
  r = Cxlkv("verify --json", "CXL_DAX_DEVICE=" + region + " CXL_COHERENCE=software");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["verified"], 1);
  // Commands that write need the partition this host holds.
  r = Cxlkv("wipe --region " + region);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(Has(r, "--partition")) << r.out;
  EXPECT_EQ(Json(Cxlkv("inspect --region " + region + " --json"))["slots"]["ready"], 1)
      << "the refused wipe dropped nothing";
  r = Cxlkv("wipe --region " + region + " --json", "CXL_SOFTWARE_PARTITION=1");
  ASSERT_EQ(r.rc, 0) << r.out;
  // Layout 4: the wipe's attach as partition 1's new holder already frees
  // the old incarnation's blocks (its attach sweep), so it drops at most 1.
  EXPECT_LE(Json(r)["dropped"].get<int>(), 1);
  EXPECT_EQ(Json(Cxlkv("inspect --region " + region + " --json"))["slots"]["ready"], 0);
  ::unlink(region.c_str());
}

TEST(CliCoherenceTest, AHardwareRegionRefusesSoftwareModeAndPartitions) {
  const std::string region = Region("hw");
  ::unlink(region.c_str());
  const std::string geo = " --region " + region + " --region-size 8MiB --slot-size 4KiB";
  Result r = Cxlkv("format --json" + geo);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["coherence"], "hardware");
  EXPECT_EQ(Json(r)["layout_version"], 2);
  r = Cxlkv("inspect --coherence software --region " + region);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(Has(r, "coherence mismatch: the region has hardware, this process expects software"))
      << r.out;
  r = Cxlkv("format --coherence software --partitions 2" + geo);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(Has(r, "coherence mismatch")) << r.out;
  r = Cxlkv("format --coherence hardware --partitions 2" + geo);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(Has(r, "for coherence=software only")) << r.out;
  r = Cxlkv("format --coherence sofware" + geo);
  EXPECT_EQ(r.rc, 2) << "an unknown mode is a usage error";
  // The software-mode environment of a non-coherent claim does not make a
  // hardware region unreadable: without an explicit mode, the region's own.
  r = Cxlkv("inspect --region " + region + " --json", "CXL_SOFTWARE_PARTITION=1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["region"]["coherence"], "hardware");
  ::unlink(region.c_str());
}

// Replicas as hosts: replica i holds write partition i and reads the
// others' partitions; every block served is the one stored.
TEST(CliCoherenceTest, ReplayInSoftwareModeSharesAcrossPartitionsWithNoWrongBytes) {
  const std::string region = Region("replay");
  Result r = Cxlkv("replay --coherence software --replicas 2 --region " + region +
                   " --region-size 64MiB --trace " + clitest::Trace() +
                   " --kv-bytes-per-token 2 --limit 1500 --quiet --json --replace");
  ASSERT_EQ(r.rc, 0) << r.out;
  json j = Json(r);
  EXPECT_EQ(j["wrong_data"], 0);
  EXPECT_EQ(j["errors"], 0);
  EXPECT_EQ(j["store_failures"], 0);
  EXPECT_GT(j["hit_rate"].get<double>(), 0.1);
  // The region holds every block, so no pin is missed: every reachable hit.
  EXPECT_DOUBLE_EQ(j["hit_rate"].get<double>(), j["hit_rate_bound"].get<double>());
  EXPECT_GT(j["cross_replica_hits"].get<uint64_t>(), 0u) << "hits in the other replica's partition";
  r = Cxlkv("inspect --region " + region + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["region"]["coherence"], "software");
  EXPECT_EQ(Json(r)["region"]["software_partitions"], 2);
  ::unlink(region.c_str());
}

}  // namespace
