// Copyright cxlkv authors.
//
// The `cxlkv` region commands on coherence=software regions (layout version
// 3, docs/coherence.md) through the real binary: the mode and partitions
// given where a region is created, reported where one is shown, the write
// partition where a command writes, and clear errors for a region of the
// other mode.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"
#include "cxlkv/region.h"

namespace {

namespace clitest = cxlkv::clitest;
using nlohmann::json;

using clitest::Cxlkv;  // out: stdout, or stderr when stdout is empty
using clitest::Json;
using clitest::Region;
using clitest::Result;

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
  EXPECT_EQ(j["layout_version"], 6);
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
  EXPECT_EQ(j["region"]["layout_version"], 6);
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
  // The wipe's attach as partition 1's new holder already frees the old
  // incarnation's blocks (its attach sweep): counted as dropped.
  EXPECT_EQ(Json(r)["dropped"].get<int>(), 1);
  EXPECT_EQ(Json(Cxlkv("inspect --region " + region + " --json"))["slots"]["ready"], 0);
  ::unlink(region.c_str());
}

// Blocks `first`.. `first + n - 1` stored by one holder of `partition` (one
// incarnation: a second attach would free the first's blocks).
void StoreManyAsPartition(const std::string& region, int32_t partition, uint64_t first,
                          uint64_t n) {
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
  for (uint64_t id = first; id < first + n; ++id) {
    s = reg->Store(ns, cxlkv::BlockKey::FromId(id), d.data(), d.size());
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
}

// A command that writes attaches as the write partition's new holder, and
// a new holder starts its partition empty (its attach sweep). `verify
// --drop --partition P` so dropped every intact block of P while it said
// "0 dropped" (and the stderr of a plain verify sent users there); it is
// refused now, naming what it would cost and `wipe`. `wipe --partition P`
// dropped them all too and said "dropped 0 blocks"; it counts them now.
TEST(CliCoherenceTest, VerifyDropNeverEmptiesAPartitionAndWipeCountsWhatItDropped) {
  const std::string region = Region("vdrop");
  ::unlink(region.c_str());
  const std::string geo = " --region " + region + " --region-size 16MiB --slot-size 64KiB";
  ASSERT_EQ(Cxlkv("format --coherence software --partitions 2" + geo).rc, 0);
  ASSERT_NO_FATAL_FAILURE(StoreManyAsPartition(region, 0, 100, 5));
  ASSERT_NO_FATAL_FAILURE(StoreManyAsPartition(region, 1, 200, 3));
  Result r = Cxlkv("verify --json --region " + region);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["verified"], 8);
  r = Cxlkv("verify --drop --partition 0 --region " + region);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(Has(r, "wipe --region " + region + " --partition 0")) << r.out;
  r = Cxlkv("verify --json --region " + region);
  EXPECT_EQ(Json(r)["verified"], 8) << "verify --drop dropped intact blocks";
  r = Cxlkv("wipe --json --partition 0 --region " + region);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["dropped"], 5) << r.out;
  r = Cxlkv("wipe --partition 1 --region " + region);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(Has(r, "dropped 3 blocks")) << r.out;
  EXPECT_EQ(Json(Cxlkv("verify --json --region " + region))["verified"], 0);
  ::unlink(region.c_str());
}

TEST(CliCoherenceTest, AHardwareRegionRefusesSoftwareModeAndPartitions) {
  const std::string region = Region("hw");
  ::unlink(region.c_str());
  const std::string geo = " --region " + region + " --region-size 8MiB --slot-size 4KiB";
  Result r = Cxlkv("format --json" + geo);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["coherence"], "hardware");
  EXPECT_EQ(Json(r)["layout_version"], 5);
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

// Two workers started separately, as two pods of a non-coherent claim on
// two nodes are (docs/dra.md): each takes its write partition from its
// host's environment ($CXL_SOFTWARE_PARTITION of $CXL_SOFTWARE_PARTITIONS),
// not from its replica index, reports it, and reads the other's blocks.
TEST(CliCoherenceTest, ReplayWorkersHoldTheirHostsPartitionFromTheEnvironment) {
  const std::string region = Region("workers");
  const std::string dir = region + ".d";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  const std::string common = " " + clitest::Bin() + " replay --region " + region +
                             " --region-size 64MiB --trace " + clitest::Trace() +
                             " --kv-bytes-per-token 2 --limit 600 --quiet --json --replica-count 2"
                             " --control " +
                             dir + "/ctl";
  const std::string env = "CXL_COHERENCE=software CXL_SOFTWARE_PARTITIONS=2 ";
  // Replica 0 on the host given partition 1, replica 1 on partition 0's.
  const std::string cmd = "(" + env + "CXL_SOFTWARE_PARTITION=1" + common + " --replica-index 0 >" +
                          dir + "/0.json 2>&1 & " + env + "CXL_SOFTWARE_PARTITION=0" + common +
                          " --replica-index 1 >" + dir + "/1.json 2>&1; wait $!)";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  uint64_t cross = 0;
  for (int i = 0; i < 2; ++i) {
    std::ifstream in(dir + "/" + std::to_string(i) + ".json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    json j;
    try {
      j = json::parse(text);
    } catch (...) {
      FAIL() << "worker " << i << ": " << text;
    }
    EXPECT_EQ(j["replica_index"], i);
    EXPECT_EQ(j["coherence"], "software");
    EXPECT_EQ(j["software_partition"], 1 - i) << "the host's partition, not the replica index";
    EXPECT_EQ(j["wrong_data"], 0);
    EXPECT_EQ(j["errors"], 0);
    cross += j["cross_replica_hits"].get<uint64_t>();
  }
  EXPECT_GT(cross, 0u) << "no worker read the other's partition";
  Result r = Cxlkv("inspect --region " + region + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["region"]["software_partitions"], 2);
  ASSERT_EQ(std::system(("rm -rf " + dir + " " + region).c_str()), 0);
}

// Two replay workers given one partition, as two pods of a non-coherent
// claim on one node are (one CDI spec: docs/dra.md): worker 0 starts alone
// (it formats, stores its first requests and waits for worker 1's, the
// trace's shared prefixes); once it is attached, worker 1 starts with the
// same environment plus `env`. The files <dir>/<i>.out, .err, .rc hold
// what each printed and its exit status.
struct TwoWorkers {
  std::string region, dir;
  explicit TwoWorkers(const std::string& tag) : region(Region(tag)), dir(region + ".d") {}
  ~TwoWorkers() { (void)std::system(("rm -rf " + dir + " " + region).c_str()); }
  std::string Slurp(const std::string& name) const {
    std::ifstream in(dir + "/" + name);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  void Run(const std::string& env) {
    ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
    const std::string worker = env +
                               " CXL_COHERENCE=software CXL_SOFTWARE_PARTITIONS=2 "
                               "CXL_SOFTWARE_PARTITION=0 " +
                               clitest::Bin() + " replay --region " + region +
                               " --region-size 64MiB --trace " + clitest::Trace() +
                               " --kv-bytes-per-token 2 --limit 600 --quiet --json "
                               "--replica-count 2 --control " +
                               dir + "/ctl --replica-index ";
    auto run = [&](const std::string& i) {
      return worker + i + " >" + dir + "/" + i + ".out 2>" + dir + "/" + i + ".err; echo $? >" +
             dir + "/" + i + ".rc";
    };
    ASSERT_EQ(std::system(("(" + run("0") + ") &").c_str()), 0);
    bool attached = false;
    for (int i = 0; i < 400 && !attached; ++i) {
      Result r = Cxlkv("inspect --region " + region + " --json");
      if (r.rc == 0) {
        json j = json::parse(r.out, nullptr, false);
        attached = j.is_object() && j["participants"].is_array() && !j["participants"].empty();
      }
      if (!attached) ::usleep(50'000);
    }
    ASSERT_TRUE(attached) << "worker 0 never attached: " << Slurp("0.err");
    ASSERT_EQ(std::system(run("1").c_str()), 0);
    for (int i = 0; i < 600 && Slurp("0.rc").empty(); ++i) ::usleep(50'000);
    for (const char* out : {"0.out", "1.out"}) {
      json j = json::parse(Slurp(out), nullptr, false);
      if (j.is_object()) {
        EXPECT_EQ(j["wrong_data"], 0) << out;
      }
    }
  }
};

// Without a partition lock (outside a pod): the later attach takes the
// partition over, as the lease's next holder would, and the earlier
// worker's next store is fenced. It stops with an error that says so
// instead of failing every store quietly; no worker serves a wrong byte.
TEST(CliCoherenceTest, TwoReplayWorkersGivenOnePartitionFailClearly) {
  TwoWorkers w("onepart");
  ASSERT_NO_FATAL_FAILURE(w.Run(""));
  EXPECT_NE(w.Slurp("0.rc"), "0\n") << "worker 0 went on after its partition was taken";
  EXPECT_NE(w.Slurp("0.err").find("was given to a newer process"), std::string::npos)
      << w.Slurp("0.err");
  EXPECT_NE(w.Slurp("0.err").find("two writers given one write partition"), std::string::npos);
}

// Separately started workers (the pods of a claim) wait for the requests
// that first store their prefixes, whichever worker has them. A worker
// killed mid-run (here: at its first commit, the failpoint) never marks
// its requests done, and the others waited for them for ever; they now
// notice it stopped (its heartbeat, in the region) and stop, saying which.
TEST(CliCoherenceTest, AWorkerKilledMidRunStopsTheOthersInsteadOfHangingThem) {
  const std::string region = Region("killedworker");
  const std::string dir = region + ".d";
  ASSERT_EQ(std::system(("rm -rf " + dir + " " + region + "; mkdir -p " + dir).c_str()), 0);
  auto slurp = [&](const std::string& name) {
    std::ifstream in(dir + "/" + name);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  auto worker = [&](const std::string& i, const std::string& env) {
    return "(" + env + " CXL_COHERENCE=software " + clitest::Bin() + " replay --region " + region +
           " --region-size 64MiB --trace " + clitest::Trace() +
           " --kv-bytes-per-token 2 --limit 600 --quiet --json --heartbeat-ms 25 "
           "--liveness-timeout-ms 300 --replica-count 2 --control " +
           dir + "/ctl --replica-index " + i + " >" + dir + "/" + i + ".out 2>" + dir + "/" + i +
           ".err & echo $! >" + dir + "/" + i + ".pid; wait $!; echo $? >" + dir + "/" + i +
           ".rc) &";
  };
  ASSERT_EQ(std::system(worker("0", "").c_str()), 0);
  ASSERT_EQ(std::system(worker("1", "CXLKV_FAILPOINT=sw.commit.before_ready:kill").c_str()), 0);
  // Worker 1's heartbeat stands still from its kill: worker 0 stops once it
  // stood for 3 x 300 ms + 1 s (and a stuck key of worker 1's, if it meets
  // one, costs it as long); 60 s is room for a loaded machine.
  for (int i = 0; i < 1200 && slurp("0.rc").empty(); ++i) ::usleep(50'000);
  const std::string rc0 = slurp("0.rc");
  if (rc0.empty()) {  // still waiting: end it (our own child, by its pid)
    const std::string pid = slurp("0.pid");
    if (!pid.empty()) ::kill(std::stoi(pid), SIGKILL);
  }
  EXPECT_EQ(slurp("1.rc"), "137\n") << "the failpoint did not kill worker 1: " << slurp("1.err");
  EXPECT_EQ(rc0, "1\n") << "worker 0 did not stop within 60 s: " << slurp("0.err");
  EXPECT_NE(slurp("0.err").find("replica 1"), std::string::npos) << slurp("0.err");
  EXPECT_NE(slurp("0.err").find("heartbeat"), std::string::npos) << slurp("0.err");
  for (int i = 0; i < 100 && slurp("0.rc").empty(); ++i) ::usleep(50'000);
  (void)std::system(("rm -rf " + dir + " " + region).c_str());
}

// With the node's partition lock (CXL_PARTITION_LOCK, which hostd's CDI
// spec gives every pod of the claim on the node): the second worker is
// refused before it attaches, naming the lock, and the first is never
// fenced (it stops only because its replica set cannot finish).
TEST(CliCoherenceTest, APartitionLockRefusesTheSecondWriterOnANode) {
  TwoWorkers w("onelock");
  const std::string lock = w.region + ".lock";
  ASSERT_EQ(std::system(("touch " + lock).c_str()), 0);
  ASSERT_NO_FATAL_FAILURE(w.Run("CXL_PARTITION_LOCK=" + lock));
  EXPECT_EQ(w.Slurp("1.rc"), "1\n");
  EXPECT_NE(w.Slurp("1.err").find("another process on this node already writes as its write "
                                  "partition (" +
                                  lock + " is locked)"),
            std::string::npos)
      << w.Slurp("1.err");
  EXPECT_EQ(w.Slurp("0.err").find("was given to a newer process"), std::string::npos)
      << "worker 0 was fenced: " << w.Slurp("0.err");
  EXPECT_NE(w.Slurp("0.err").find("another replica failed"), std::string::npos) << w.Slurp("0.err");
  ::unlink(lock.c_str());
}

}  // namespace
