// Copyright cxlkv authors.
//
// The `cxlkv` command through its real interface: a child process, its
// exit status, its --json output.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_test_util.h"
#include "cxlkv/lifecycle.h"
#include "cxlkv/region.h"

namespace {

namespace clitest = cxlkv::clitest;
using nlohmann::json;

using clitest::Cxlkv;  // out: stdout, or stderr when stdout is empty
using clitest::Json;
using clitest::Region;
using clitest::Result;

const std::string kTrace = " --trace " + clitest::Trace() + " ";
// 1 KiB blocks keep these runs small; 64 MiB holds every block of the first
// 1,500 requests (about 27,000 distinct) with room to spare.
const std::string kSmall = kTrace + " --kv-bytes-per-token 2 --limit 1500 --quiet --json ";

TEST(ReplayTest, HitRateEqualsBoundWhenTheRegionHoldsEverything) {
  for (int replicas : {1, 4}) {
    const std::string region = Region("bound");
    Result r = Cxlkv("replay --region " + region + " --region-size 64MiB --replicas " +
                     std::to_string(replicas) + kSmall);
    ASSERT_EQ(r.rc, 0) << r.out;
    json j = Json(r);
    EXPECT_EQ(j["evictions"], 0);
    EXPECT_EQ(j["blocks_hit"].get<uint64_t>(),
              static_cast<uint64_t>(std::llround(j["hit_rate_bound"].get<double>() *
                                                 j["blocks_requested"].get<double>())));
    EXPECT_DOUBLE_EQ(j["hit_rate"].get<double>(), j["hit_rate_bound"].get<double>()) << replicas;
    EXPECT_GT(j["hit_rate"].get<double>(), 0.1);
    EXPECT_EQ(j["wrong_data"], 0);
    EXPECT_EQ(j["store_failures"], 0);
    if (replicas > 1) {
      EXPECT_GT(j["cross_replica_hits"].get<uint64_t>(), 0u);
    }
    ::unlink(region.c_str());
  }
}

TEST(ReplayTest, CorruptedSlotsAreCountedExactlyAndNeverServed) {
  const std::string region = Region("corrupt");
  // One replica: every corrupted slot read fails verification exactly once.
  Result r = Cxlkv("replay --region " + region +
                   " --region-size 64MiB --replicas 1 --inject-corruption 0.05" + kSmall);
  ASSERT_EQ(r.rc, 0) << r.out;
  json j = Json(r);
  EXPECT_GT(j["corrupted_slots"].get<uint64_t>(), 100u);
  EXPECT_GT(j["corrupted_slots_read"].get<uint64_t>(), 10u);
  EXPECT_EQ(j["verify_failures"], j["corrupted_slots_read"]);
  EXPECT_EQ(j["unexpected_verify_failures"], 0);
  EXPECT_EQ(j["wrong_data"], 0);
  EXPECT_LT(j["hit_rate"].get<double>(), j["hit_rate_bound"].get<double>());
  // Four replicas: every failed verification is a read of a corrupted slot.
  r = Cxlkv("replay --replace --region " + region +
            " --region-size 64MiB --replicas 4 --inject-corruption 0.05" + kSmall);
  ASSERT_EQ(r.rc, 0) << r.out;
  j = Json(r);
  EXPECT_EQ(j["verify_failures"], j["corrupted_read_events"]);
  EXPECT_GE(j["corrupted_read_events"].get<uint64_t>(), j["corrupted_slots_read"].get<uint64_t>());
  EXPECT_EQ(j["unexpected_verify_failures"], 0);
  EXPECT_EQ(j["wrong_data"], 0);
  ::unlink(region.c_str());
}

TEST(ReplayTest, PrivateRegionsNeverHitAcrossReplicas) {
  const std::string region = Region("private");
  Result r = Cxlkv("replay --region " + region +
                   " --region-size 64MiB --replicas 2 --baseline private" + kSmall);
  ASSERT_EQ(r.rc, 0) << r.out;
  json j = Json(r);
  EXPECT_EQ(j["cross_replica_hits"], 0);
  EXPECT_LT(j["hit_rate"].get<double>(), j["hit_rate_bound"].get<double>());
  for (int i = 0; i < 2; ++i) ::unlink((region + ".r" + std::to_string(i)).c_str());
}

TEST(ReplayTest, SeparatelyStartedWorkersTogetherReachTheBound) {
  const std::string region = Region("workers");
  const std::string ctl = region + ".ctl";
  ::unlink(region.c_str());
  ::unlink(ctl.c_str());
  const std::string common = "replay --region " + region +
                             " --region-size 64MiB --replica-count 2 --control " + ctl + kSmall;
  // Two independent processes (as Kubernetes would start them).
  FILE* a = ::popen((clitest::Bin() + " " + common + " --replica-index 0").c_str(), "r");
  FILE* b = ::popen((clitest::Bin() + " " + common + " --replica-index 1").c_str(), "r");
  std::string oa, ob;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, a)) > 0) oa.append(buf, n);
  while ((n = std::fread(buf, 1, sizeof buf, b)) > 0) ob.append(buf, n);
  ASSERT_EQ(::pclose(a), 0);
  ASSERT_EQ(::pclose(b), 0);
  json ja = json::parse(oa), jb = json::parse(ob);
  const uint64_t hit = ja["blocks_hit"].get<uint64_t>() + jb["blocks_hit"].get<uint64_t>();
  const uint64_t req =
      ja["blocks_requested"].get<uint64_t>() + jb["blocks_requested"].get<uint64_t>();
  EXPECT_EQ(ja["requests"].get<uint64_t>() + jb["requests"].get<uint64_t>(), 1500u);
  EXPECT_DOUBLE_EQ(double(hit) / req, ja["hit_rate_bound"].get<double>());
  ::unlink(region.c_str());
  ::unlink(ctl.c_str());
}

TEST(ReplayTest, MalformedTraceIsAClearErrorNamingTheLine) {
  const std::string bad = "/tmp/cxlkv-bad-trace-" + std::to_string(::getpid()) + ".jsonl";
  {
    std::ofstream f(bad);
    f << "{\"hash_ids\": [1, 2]}\n{\"hash_ids\": [1, oops]}\n";
  }
  Result r =
      Cxlkv("replay --trace " + bad + " --region " + Region("bad") + " --region-size 8MiB --quiet");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("line 2"), std::string::npos) << r.out;
  ::unlink(bad.c_str());
}

TEST(CliTest, FormatInspectStatsVerifyWipeThroughTheCommand) {
  const std::string region = Region("admin");
  ::unlink(region.c_str());
  Result r = Cxlkv("format --region " + region +
                   " --region-size 16MiB --slot-size 64KiB --hash-algorithm sha256_cbor --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  json j = Json(r);
  EXPECT_EQ(j["slot_size"], 65536);
  EXPECT_EQ(j["hash_algorithm"], "sha256_cbor");
  // Formatting again alike is fine; with another slot size it is refused,
  // naming the field and both values.
  EXPECT_EQ(Cxlkv("format --region " + region + " --region-size 16MiB --slot-size 64KiB").rc, 0);
  r = Cxlkv("format --region " + region + " --region-size 16MiB --slot-size 128KiB");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("slot_size mismatch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("65536"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("131072"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;  // and how to go on
  // Store a block through the library, then look at it with the command.
  {
    std::unique_ptr<cxlkv::Region> reg;
    cxlkv::NamespaceId ns;
    ASSERT_NO_FATAL_FAILURE(clitest::AttachWithNamespace(region, &reg, &ns));
    std::string d(65536, 'x');
    ASSERT_TRUE(reg->Store(ns, cxlkv::BlockKey::FromId(1), d.data(), d.size()).ok());
  }
  r = Cxlkv("inspect --region " + region + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  j = Json(r);
  EXPECT_EQ(j["slots"]["ready"], 1);
  EXPECT_EQ(j["counters"]["stores"], 1);
  // Layout 5's data slots: the block's one HELD, the rest FREE, none left
  // for the orphan sweep.
  EXPECT_EQ(j["data_slots"]["held"], 1);
  EXPECT_EQ(j["data_slots"]["free"], j["region"]["num_slots"].get<uint64_t>() - 1);
  EXPECT_EQ(j["data_slots"]["unsettled"], 0);
  EXPECT_EQ(j["data_slots"]["ready_off_data"], 0);
  r = Cxlkv("inspect --region " + region);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("data slots    1 held, 0 moving"), std::string::npos) << r.out;
  // The CDI environment is the default for --region.
  r = Cxlkv("stats --json", "CXL_DAX_DEVICE=" + region);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["counters"]["stores"], 1);
  r = Cxlkv("verify --region " + region + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["verified"], 1);
  r = Cxlkv("wipe --region " + region + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["dropped"], 1);
  EXPECT_EQ(Json(Cxlkv("inspect --region " + region + " --json"))["slots"]["ready"], 0);
  ::unlink(region.c_str());
}

TEST(CliTest, BadInputGetsAClearErrorAndNonZeroExit) {
  Result r = Cxlkv("inspect --region /dev/shm/cxlkv-test/does-not-exist");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("does-not-exist"), std::string::npos) << r.out;
  // It says how to go on: no command but format creates a region.
  EXPECT_NE(r.out.find("cxlkv format --region /dev/shm/cxlkv-test/does-not-exist"),
            std::string::npos)
      << r.out;
  r = Cxlkv("format --region " + Region("sz") + " --region-size 12parsecs --slot-size 4KiB");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("unknown suffix"), std::string::npos) << r.out;
  r = Cxlkv("inspect");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("--region"), std::string::npos) << r.out;
  EXPECT_EQ(Cxlkv("no-such-command").rc, 2);
}

// A region too small for one slot names the exact minimum in bytes, and
// that size formats while one byte less does not (the figure is derived
// from the layout: a hard-coded one, or one at the wrong data alignment,
// fails here). With 4 write partitions the minimum is a set of slots per
// partition (it named the size of 4 slots, which did not format).
TEST(CliTest, TooSmallRegionNamesTheExactMinimumAndThatSizeFormats) {
  const std::string region = Region("min");
  for (const std::string slot : {"64", "4096", "896KiB"}) {
    for (const std::string mode :
         {"", " --coherence software --partitions 1", " --coherence software --partitions 4"}) {
      const std::string args = "format --region " + region + " --slot-size " + slot + mode;
      ::unlink(region.c_str());
      Result r = Cxlkv(args + " --region-size 64KiB");
      ASSERT_EQ(r.rc, 1) << r.out;
      const std::string tag = "need at least ";
      const size_t at = r.out.find(tag);
      ASSERT_NE(at, std::string::npos) << r.out;
      const uint64_t need = std::strtoull(r.out.c_str() + at + tag.size(), nullptr, 10);
      ASSERT_GT(need, 64u << 10) << r.out;
      EXPECT_NE(r.out.find("--region-size " + std::to_string(need)), std::string::npos) << r.out;
      ::unlink(region.c_str());
      r = Cxlkv(args + " --region-size " + std::to_string(need - 1));
      EXPECT_EQ(r.rc, 1) << slot << mode << ": " << r.out;
      ::unlink(region.c_str());
      r = Cxlkv(args + " --region-size " + std::to_string(need));
      EXPECT_EQ(r.rc, 0) << slot << mode << ": " << r.out;
    }
  }
  ::unlink(region.c_str());
}

// A region file truncated after its format is refused with what happened
// (recorded size, what is left) and a way on that works: reformat at the
// file's present size. A --region-size smaller than the region is told the
// size to give.
TEST(CliTest, TruncatedRegionSaysSoAndHowToReformat) {
  const std::string region = Region("trunc");
  ::unlink(region.c_str());
  ASSERT_EQ(Cxlkv("format --region " + region + " --region-size 4MiB --slot-size 4096").rc, 0);
  ASSERT_EQ(::truncate(region.c_str(), 2 << 20), 0);
  Result r = Cxlkv("inspect --region " + region);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("4194304"), std::string::npos) << r.out;  // recorded
  EXPECT_NE(r.out.find("2097152"), std::string::npos) << r.out;  // left
  const std::string advice = "format --force --slot-size 4096";
  ASSERT_NE(r.out.find(advice), std::string::npos) << r.out;
  r = Cxlkv("inspect --region " + region + " --region-size 1MiB");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("give --region-size 4194304, or none"), std::string::npos) << r.out;
  // The advice works.
  r = Cxlkv(advice + " --region " + region);
  EXPECT_EQ(r.rc, 0) << r.out;
  r = Cxlkv("inspect --region " + region + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["region"]["size"], 2 << 20);
  ::unlink(region.c_str());
}

// A file too small to hold a region header holds no blocks: attaching says
// so and how to format it, plain format refuses it (it is not blank) and
// leaves it as it was, format --force formats it (given a size).
TEST(CliTest, AFileTooSmallToBeARegionIsFormattedByForce) {
  const std::string region = Region("small");
  const std::string bytes(100, 'x');
  { std::ofstream(region, std::ios::binary | std::ios::trunc) << bytes; }
  Result r = Cxlkv("inspect --region " + region);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("too small to be a region, so it holds no blocks"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("cxlkv format --force --region-size N"), std::string::npos) << r.out;
  r = Cxlkv("format --region " + region + " --region-size 4MiB --slot-size 4096");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("too small to be a region"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("`cxlkv format --force` formats it"), std::string::npos) << r.out;
  std::ifstream in(region, std::ios::binary);
  const std::string after((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(after == bytes) << "the file was changed: now " << after.size() << " bytes";
  r = Cxlkv("format --force --region " + region + " --slot-size 4096");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("give --region-size N"), std::string::npos) << r.out;
  r = Cxlkv("format --force --region " + region + " --region-size 4MiB --slot-size 4096");
  ASSERT_EQ(r.rc, 0) << r.out;
  r = Cxlkv("inspect --region " + region + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["region"]["size"], 4 << 20);
  ::unlink(region.c_str());
}

// Foreign bytes where a format's lock word goes, over an otherwise blank
// header area, are not an abandoned format: format refuses them (it formatted
// over them after its stall timeout) and leaves the file as it was.
TEST(CliTest, FormatNeverTakesForeignBytesForAnAbandonedFormat) {
  const std::string region = Region("lockword");
  std::string bytes(100, 'x');
  bytes.resize(8192, '\0');
  { std::ofstream(region, std::ios::binary | std::ios::trunc) << bytes; }
  for (const char* force : {"", " --force"}) {
    Result r = Cxlkv(std::string("format") + force + " --region " + region +
                     " --region-size 4MiB --slot-size 4096");
    EXPECT_EQ(r.rc, 1) << force << ": " << r.out;
    EXPECT_NE(r.out.find("is not a cxlkv region"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("remove or zero the file yourself"), std::string::npos) << r.out;
    std::ifstream in(region, std::ios::binary);
    const std::string after((std::istreambuf_iterator<char>(in)), {});
    EXPECT_TRUE(after == bytes) << force << ": the file was changed: now " << after.size()
                                << " bytes";
  }
  ::unlink(region.c_str());
}

// A truncated region is never taken as intact: plain format at the recorded
// size refuses it (its open used to grow the file back with zeros and
// accept it as formatted alike, though its directory may name blocks past
// the cut) and leaves the file as it is; format --force at that size
// reformats it, growing the file.
TEST(CliTest, FormatRefusesATruncatedRegionAndForceReformatsItAtAnySize) {
  const std::string region = Region("trunc-fmt");
  ::unlink(region.c_str());
  ASSERT_EQ(Cxlkv("format --region " + region + " --region-size 4MiB --slot-size 4096").rc, 0);
  {
    std::unique_ptr<cxlkv::Region> reg;
    cxlkv::NamespaceId ns;
    ASSERT_NO_FATAL_FAILURE(clitest::AttachWithNamespace(region, &reg, &ns));
    const std::string d(4096, 'k');
    for (uint64_t id = 1; id <= 600; ++id) {  // past the cut too
      ASSERT_TRUE(reg->Store(ns, cxlkv::BlockKey::FromId(id), d.data(), d.size()).ok());
    }
  }
  ASSERT_EQ(::truncate(region.c_str(), 2 << 20), 0);
  Result r = Cxlkv("format --region " + region + " --region-size 4MiB --slot-size 4096");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("format --force --slot-size 4096"), std::string::npos) << r.out;
  struct stat st {};
  ASSERT_EQ(::stat(region.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 2 << 20);  // not grown
  r = Cxlkv("format --force --region " + region + " --region-size 4MiB --slot-size 4096");
  ASSERT_EQ(r.rc, 0) << r.out;
  r = Cxlkv("inspect --region " + region + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["region"]["size"], 4 << 20);
  EXPECT_EQ(Json(r)["slots"]["ready"], 0) << r.out;  // a fresh format
  // A region formatted smaller than the size asked is not grown either.
  r = Cxlkv("format --region " + region + " --region-size 8MiB --slot-size 4096");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("give --region-size 4194304"), std::string::npos) << r.out;
  ASSERT_EQ(::stat(region.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 4 << 20);
  ::unlink(region.c_str());
}

// A scrub that finds a damaged slot fails and says how to drop it; once
// dropped, the next scrub passes.
TEST(CliTest, VerifyNamesTheDropForADamagedSlot) {
  const std::string region = Region("scrub");
  ::unlink(region.c_str());
  ASSERT_EQ(Cxlkv("format --region " + region + " --region-size 8MiB --slot-size 64KiB").rc, 0);
  const std::string d(65536, 'q');
  {
    std::unique_ptr<cxlkv::Region> reg;
    cxlkv::NamespaceId ns;
    ASSERT_NO_FATAL_FAILURE(clitest::AttachWithNamespace(region, &reg, &ns));
    ASSERT_TRUE(reg->Store(ns, cxlkv::BlockKey::FromId(7), d.data(), d.size()).ok());
  }
  {  // one byte of the payload flipped, found by its pattern in the data area
    std::fstream f(region, std::ios::in | std::ios::out | std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t at = bytes.find(d.substr(0, 4096));
    ASSERT_NE(at, std::string::npos);
    f.seekp(static_cast<std::streamoff>(at + 100));
    f.put('r');
  }
  Result r = Cxlkv("verify --region " + region);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("1 CRC failures, 0 dropped"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("cxlkv verify --region " + region + " --drop"), std::string::npos) << r.err;
  r = Cxlkv("verify --region " + region + " --drop");
  EXPECT_EQ(r.rc, 1) << r.out;  // the scrub found damage, and reports it
  EXPECT_NE(r.out.find("1 CRC failures, 1 dropped"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("--drop"), std::string::npos) << r.err;
  r = Cxlkv("verify --region " + region);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("verified 0 of 0 ready slots"), std::string::npos) << r.out;
  ::unlink(region.c_str());
}

// Layout 5's data words, damaged in the file: one block's word zeroed (FREE:
// its READY entry is on a data slot it does not hold, and the next claim
// would overwrite its bytes) and the other's copied onto a free data slot
// (a word nothing would free). The bytes are intact, so the CRC alone
// finds nothing: verify reads the orphan sweep's rules, and --drop repairs.
TEST(CliTest, VerifyFindsAndSettlesDamagedDataWords) {
  const std::string region = Region("scrubdata");
  ::unlink(region.c_str());
  ASSERT_EQ(Cxlkv("format --region " + region + " --region-size 8MiB --slot-size 64KiB").rc, 0);
  const std::string a(65536, 'a'), b(65536, 'b');
  uint64_t data_a = 0, data_b = 0, num_slots = 0;
  {
    std::unique_ptr<cxlkv::Region> reg;
    cxlkv::NamespaceId ns;
    ASSERT_NO_FATAL_FAILURE(clitest::AttachWithNamespace(region, &reg, &ns));
    ASSERT_TRUE(reg->Store(ns, cxlkv::BlockKey::FromId(1), a.data(), a.size()).ok());
    ASSERT_TRUE(reg->Store(ns, cxlkv::BlockKey::FromId(2), b.data(), b.size()).ok());
    num_slots = reg->info().num_slots;
    std::vector<cxlkv::SlotView> v;
    ASSERT_TRUE(cxlkv::ScanSlots(*reg, 0, reg->info().num_entries, &v).ok());
    int ready = 0;
    for (const auto& sv : v) {
      if (sv.state != cxlkv::SlotState::kReady) continue;
      ++ready;
      (sv.key.lo == cxlkv::BlockKey::FromId(1).lo ? data_a : data_b) = sv.data;
    }
    ASSERT_EQ(ready, 2);
  }
  ASSERT_NE(data_a, data_b);
  // A free data slot: neither block's.
  uint64_t spare = 0;
  while (spare == data_a || spare == data_b) ++spare;
  ASSERT_LT(spare, num_slots);
  {
    std::fstream f(region, std::ios::in | std::ios::out | std::ios::binary);
    // The superblock's dwords_off (byte 232, layout 5): one 8-byte word per
    // data slot from there.
    uint64_t dwords_off = 0, word_b = 0;
    f.seekg(232);
    f.read(reinterpret_cast<char*>(&dwords_off), 8);
    ASSERT_GT(dwords_off, 0u);
    f.seekg(static_cast<std::streamoff>(dwords_off + 8 * data_b));
    f.read(reinterpret_cast<char*>(&word_b), 8);
    ASSERT_NE(word_b, 0u);
    const uint64_t zero = 0;
    f.seekp(static_cast<std::streamoff>(dwords_off + 8 * data_a));
    f.write(reinterpret_cast<const char*>(&zero), 8);
    f.seekp(static_cast<std::streamoff>(dwords_off + 8 * spare));
    f.write(reinterpret_cast<const char*>(&word_b), 8);
    ASSERT_TRUE(f.good());
  }
  Result r = Cxlkv("verify --region " + region + " --json");
  EXPECT_EQ(r.rc, 1) << r.out;
  json j = Json(r);
  EXPECT_EQ(j["verified"], 1);  // block 2; block 1's bytes are intact but not held
  EXPECT_EQ(j["crc_failures"], 1);
  EXPECT_EQ(j["dropped"], 0);
  EXPECT_EQ(j["data_slots"]["ready_off_data"], 1);
  EXPECT_EQ(j["data_slots"]["unsettled"], 1);  // the copied word
  EXPECT_EQ(j["data_slots"]["settled"], 0);
  r = Cxlkv("verify --region " + region);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("1 READY block(s) on a data slot they do not hold"), std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("cxlkv verify --region " + region + " --drop"), std::string::npos) << r.err;
  r = Cxlkv("verify --region " + region + " --drop --json");
  EXPECT_EQ(r.rc, 1) << r.out;  // it found damage, and reports it
  j = Json(r);
  EXPECT_EQ(j["dropped"], 1);
  EXPECT_EQ(j["data_slots"]["settled"], 1);
  // Repaired: block 2 stays, exact; block 1 is gone and storable again.
  r = Cxlkv("verify --region " + region + " --json");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  j = Json(r);
  EXPECT_EQ(j["verified"], 1);
  EXPECT_EQ(j["data_slots"]["unsettled"], 0);
  r = Cxlkv("inspect --region " + region + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  j = Json(r);
  EXPECT_EQ(j["data_slots"]["held"], 1);
  EXPECT_EQ(j["data_slots"]["unsettled"], 0);
  EXPECT_EQ(j["data_slots"]["ready_off_data"], 0);
  {
    std::unique_ptr<cxlkv::Region> reg;
    cxlkv::NamespaceId ns;
    ASSERT_NO_FATAL_FAILURE(clitest::AttachWithNamespace(region, &reg, &ns));
    std::string got(65536, '\0');
    ASSERT_TRUE(reg->Load(ns, cxlkv::BlockKey::FromId(2), got.data(), got.size()).ok());
    EXPECT_EQ(got, b);
    EXPECT_TRUE(reg->Load(ns, cxlkv::BlockKey::FromId(1), got.data(), got.size()).IsNotFound());
    ASSERT_TRUE(reg->Store(ns, cxlkv::BlockKey::FromId(1), a.data(), a.size()).ok());
    ASSERT_TRUE(reg->Load(ns, cxlkv::BlockKey::FromId(1), got.data(), got.size()).ok());
    EXPECT_EQ(got, a);
  }
  ::unlink(region.c_str());
}

TEST(CliTest, ForceFormatIsRefusedWhileTheRegionIsInUse) {
  const std::string region = Region("force");
  ::unlink(region.c_str());
  ASSERT_EQ(Cxlkv("format --region " + region + " --region-size 8MiB --slot-size 4KiB").rc, 0);
  cxlkv::RegionOptions o;
  o.create_if_missing = false;
  o.prefault = cxlkv::Prefault::kNone;
  std::unique_ptr<cxlkv::Region> holder;
  ASSERT_TRUE(cxlkv::Region::Open(region, o, &holder).ok());
  const uint64_t epoch = holder->info().format_epoch;
  // Even with another geometry (which the holder's region does not match).
  Result r = Cxlkv("format --force --region " + region + " --region-size 8MiB --slot-size 8KiB");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("in use"), std::string::npos) << r.out;
  holder.reset();
  r = Cxlkv("format --force --region " + region + " --region-size 8MiB --slot-size 8KiB --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(Json(r)["slot_size"], 8192);
  EXPECT_NE(Json(r)["format_epoch"].get<uint64_t>(), epoch);
  ::unlink(region.c_str());
}

TEST(CliTest, ReplayNeverOverwritesForeignFilesOrRegionsInUse) {
  const std::string text = Region("text");
  {
    std::ofstream f(text);
    f << "precious data\n";
  }
  Result r = Cxlkv("replay --region " + text + " --region-size 8MiB" + kSmall);
  EXPECT_EQ(r.rc, 1);
  std::ifstream in(text);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "precious data");
  ::unlink(text.c_str());
  const std::string region = Region("inuse");
  ::unlink(region.c_str());
  ASSERT_EQ(Cxlkv("format --region " + region + " --region-size 64MiB --slot-size 1KiB").rc, 0);
  cxlkv::RegionOptions o;
  o.create_if_missing = false;
  o.prefault = cxlkv::Prefault::kNone;
  std::unique_ptr<cxlkv::Region> holder;
  ASSERT_TRUE(cxlkv::Region::Open(region, o, &holder).ok());
  // An existing region is refused without --replace, and in use with it.
  r = Cxlkv("replay --region " + region + " --region-size 64MiB" + kSmall);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("--replace"), std::string::npos) << r.out;
  r = Cxlkv("replay --replace --region " + region + " --region-size 64MiB" + kSmall);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("in use"), std::string::npos) << r.out;
  EXPECT_EQ(holder->info().format_epoch,
            Json(Cxlkv("inspect --json --region " + region))["region"]["format_epoch"]);
  holder.reset();
  ::unlink(region.c_str());
}

// Whether a ratio printed to 2 decimals is one that the GB/s and ceiling,
// also printed to 2 decimals, can give: each printed number is within 0.005
// of the value it rounds, so the ratio of the values lies between
// (gbps - 0.005) / (ceiling + 0.005) and (gbps + 0.005) / (ceiling - 0.005),
// and the printed ratio within 0.005 of it. Exact whatever the speeds: a
// fixed tolerance around gbps / ceiling failed when a loaded machine made
// them small (0.71 / 0.35 = 2.03 beside a ratio of 1.99, 0.71 and 0.35
// being 0.7064 and 0.3545 rounded).
bool RatioFitsItsRoundedColumns(double ratio, double gbps, double ceiling) {
  const double h = 0.005 + 1e-9;  // half the last printed digit, and binary rounding
  const double lo = (gbps - h) / (ceiling + h);
  const double hi = ceiling > h ? (gbps + h) / (ceiling - h) : HUGE_VAL;
  return ratio + h >= lo && ratio - h <= hi;
}

// The bench table's ratio columns are the GB/s beside them over the memcpy
// ceiling of the same direction in the same row, and --json carries that
// ratio and the median of the per-round ratios. A check of arithmetic, not
// of speed: no threshold on any number.
TEST(CliTest, BenchRatiosAreTheGBsShownOverTheirCeiling) {
  const std::string dir = "/dev/shm/cxlkv-test/bench-" + std::to_string(::getpid());
  const std::string args = "bench --dir " + dir + " --region-size 32MiB --seconds 0.05";
  Result r = Cxlkv(args + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  json j = Json(r);
  ASSERT_EQ(j["copy"].size(), 2u) << r.out;
  for (const json& c : j["copy"]) {
    ASSERT_FALSE(c.contains("error")) << c.dump();
    struct Pair {
      const char* ratio;
      const char* engine;
      const char* ceiling;
    };
    for (const Pair& p : {Pair{"store_vs_memcpy", "store_gbps", "memcpy_store_gbps"},
                          Pair{"load_noverify_vs_memcpy", "load_noverify_gbps", "memcpy_load_gbps"},
                          Pair{"load_verify_vs_memcpy", "load_verify_gbps", "memcpy_load_gbps"}}) {
      EXPECT_DOUBLE_EQ(c[p.ratio].get<double>(),
                       c[p.engine].get<double>() / c[p.ceiling].get<double>())
          << p.ratio << " in " << c.dump();
      EXPECT_GT(c[std::string(p.ratio) + "_per_round"].get<double>(), 0) << p.ratio;
    }
  }
  r = Cxlkv(args);
  ASSERT_EQ(r.rc, 0) << r.out;
  int rows = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("(x):", 0) == 0) break;  // the copy table ends here
    const bool sized =
        line.find("KiB") != std::string::npos || line.find("MiB") != std::string::npos;
    if (line.find("GB/s") == std::string::npos || !sized) continue;
    std::istringstream in(line);
    std::string size, unit;
    double v[8];
    in >> size >> unit;
    for (double& x : v) in >> x;
    ASSERT_TRUE(in) << line;
    ++rows;
    // Columns: memcpy-in store (x) memcpy-out load (x) load+crc (x); 2 decimals.
    EXPECT_TRUE(RatioFitsItsRoundedColumns(v[2], v[1], v[0])) << "store (x): " << line;
    EXPECT_TRUE(RatioFitsItsRoundedColumns(v[5], v[4], v[3])) << "load (x): " << line;
    EXPECT_TRUE(RatioFitsItsRoundedColumns(v[7], v[6], v[3])) << "load+crc (x): " << line;
  }
  EXPECT_EQ(rows, 2) << r.out;
  ::system(("rm -rf " + dir).c_str());
}

TEST(CliTest, GcRemovesAbandonedRegionsAndKeepsLiveOnes) {
  const std::string dir = "/dev/shm/cxlkv-test/gc-" + std::to_string(::getpid());
  ::system(("mkdir -p " + dir).c_str());
  const std::string dead = dir + "/dead", live = dir + "/live", other = dir + "/not-a-region";
  ASSERT_EQ(Cxlkv("format --region " + dead + " --region-size 4MiB --slot-size 4KiB").rc, 0);
  ASSERT_EQ(Cxlkv("format --region " + live + " --region-size 4MiB --slot-size 4KiB").rc, 0);
  {
    std::ofstream f(other);
    f << "hello";
  }
  cxlkv::RegionOptions o;
  o.create_if_missing = false;
  o.prefault = cxlkv::Prefault::kNone;
  std::unique_ptr<cxlkv::Region> holder;
  ASSERT_TRUE(cxlkv::Region::Open(live, o, &holder).ok());
  Result r = Cxlkv("gc " + dir + " --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(::access(live.c_str(), F_OK), -1);
  EXPECT_EQ(::access(dead.c_str(), F_OK), -1);
  EXPECT_NE(::access(other.c_str(), F_OK), -1);
  holder.reset();
  ::system(("rm -rf " + dir).c_str());
}

// `cxlkv status` with a kubeconfig it cannot use says so once: the error's
// code is named once (it read "InvalidArgument: InvalidArgument: ...") and
// the message says how to go on.
TEST(CliTest, StatusKubeconfigErrorsNameTheirCodeOnce) {
  const std::string missing = "/tmp/cxlkv-cli-no-kubeconfig-" + std::to_string(::getpid());
  Result r = Cxlkv("status --kubeconfig " + missing);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(r.err.rfind("cxlkv status: InvalidArgument: load kubeconfig " + missing, 0), 0u)
      << r.err;
  EXPECT_NE(r.err.find("--kubeconfig or $KUBECONFIG"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("InvalidArgument", r.err.find("InvalidArgument") + 1), std::string::npos)
      << r.err;
  // The same through $KUBECONFIG, and for a file that is not a kubeconfig.
  r = Cxlkv("status", "KUBECONFIG=" + missing);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(r.err.find("InvalidArgument", r.err.find("InvalidArgument") + 1), std::string::npos)
      << r.err;
  { std::ofstream(missing) << "not: [a kubeconfig\n"; }
  r = Cxlkv("status --kubeconfig " + missing);
  ::unlink(missing.c_str());
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("InvalidArgument", r.err.find("InvalidArgument") + 1), std::string::npos)
      << r.err;
}

}  // namespace
