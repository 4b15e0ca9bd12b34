// Copyright cxlkv authors.
//
// The lifecycle commands through the real `cxlkv` binary and real
// processes: a full filesystem, foreign bytes, the replay control file and
// --replace, gc against slow and dead participants, bench next to a live
// region, stuck keys and large trace ids.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cli_test_util.h"
#include "cxlkv/region.h"

namespace {

namespace clitest = cxlkv::clitest;
using nlohmann::json;

using clitest::Json;
using clitest::Result;

Result Sh(const std::string& cmd) { return clitest::Sh(cmd, "cli-lc"); }

Result Cxlkv(const std::string& args) { return Sh(clitest::Bin() + " " + args); }
// The same with a deadline: past `seconds` the command is killed and exits
// 124, which the caller's exit-status assertion reports. A deadline, not an
// elapsed-time measurement: the property is "answers at all in time".
Result CxlkvWithin(int seconds, const std::string& args) {
  return Sh("timeout " + std::to_string(seconds) + " " + clitest::Bin() + " " + args);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// A scratch directory under /dev/shm, removed at the end.
class Dir {
 public:
  explicit Dir(const std::string& tag)
      : path_("/dev/shm/cxlkv-test/lc-" + tag + "-" + std::to_string(::getpid())) {
    ::system(("rm -rf " + path_ + " && mkdir -p " + path_).c_str());
  }
  ~Dir() { ::system(("rm -rf " + path_).c_str()); }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const std::string kTrace = " --trace " + clitest::Trace() + " ";
const std::string kSmall = kTrace + " --kv-bytes-per-token 2 --quiet --json ";

// Stand-in for a participant on another host: a child process attached with
// the given heartbeat that drops the flock Region::Open took, so only its
// heartbeats show it. With `writing_id`, it also holds that trace id's block
// (the replay's namespace, 1 KiB) in WRITING. Killed on destruction.
class RemoteParticipant {
 public:
  RemoteParticipant(const std::string& path, uint64_t heartbeat_ns, uint64_t writing_id = 0) {
    int ready[2];
    EXPECT_EQ(::pipe(ready), 0);
    std::fflush(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      cxlkv::RegionOptions o;
      o.create_if_missing = false;
      o.prefault = cxlkv::Prefault::kNone;
      o.heartbeat_interval_ns = heartbeat_ns;
      o.liveness_timeout_ns = 5 * heartbeat_ns;
      std::unique_ptr<cxlkv::Region> r;
      if (!cxlkv::Region::Open(path, o, &r).ok()) ::_exit(10);
      DIR* d = ::opendir("/proc/self/fd");
      while (dirent* e = ::readdir(d)) {
        char target[4096];
        const ssize_t n = ::readlink(("/proc/self/fd/" + std::string(e->d_name)).c_str(), target,
                                     sizeof target - 1);
        if (n > 0 && path == std::string(target, n)) ::flock(std::atoi(e->d_name), LOCK_UN);
      }
      ::closedir(d);
      cxlkv::NamespaceId ns;
      cxlkv::WriteLease lease;
      if (writing_id != 0 &&
          (!r->RegisterNamespace({"Qwen/Qwen2.5-7B-Instruct", "bfloat16", "mooncake-trace", 0, 0},
                                 &ns)
                .ok() ||
           !r->BeginWrite(ns, cxlkv::BlockKey::FromId(writing_id), 1024, &lease).ok()))
        ::_exit(12);
      char c = 1;
      if (::write(ready[1], &c, 1) != 1) ::_exit(11);
      for (;;) ::pause();
    }
    char c;
    EXPECT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    ::close(ready[1]);
  }
  ~RemoteParticipant() { Kill(); }
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

TEST(CliLifecycleTest, FullFilesystemIsAnErrorAndAFailedCreateLeavesNoFile) {
  if (::getuid() != 0 || ::system("unshare -m true 2>/dev/null") != 0)
    GTEST_SKIP() << "needs root and unshare -m for a private size-limited tmpfs";
  const std::string mnt = "/tmp/cxlkv-cli-tmpfs-" + std::to_string(::getpid());
  // In a private mount namespace: an 8 MiB tmpfs, a 64 MiB sparse file.
  Result r =
      Sh("unshare -m sh -c 'mkdir -p " + mnt + " && mount -t tmpfs -o size=8m tmpfs " + mnt +
         " && truncate -s 64M " + mnt + "/sparse && " + clitest::Bin() + " format --region " + mnt +
         "/sparse --slot-size 4KiB; echo sparse=$?; " + clitest::Bin() + " format --region " + mnt +
         "/new --region-size 64MiB --slot-size 4KiB; " + "echo new=$?; ls " + mnt +
         "; stat -c size=%s " + mnt + "/sparse'");
  ::rmdir(mnt.c_str());
  EXPECT_NE(r.out.find("sparse=1"), std::string::npos) << r.out << r.err;  // 135: SIGBUS
  EXPECT_NE(r.out.find("new=1"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.out.find("\nnew\n"), std::string::npos) << "failed create left a file: " << r.out;
  EXPECT_NE(r.out.find("size=67108864"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
}

TEST(CliLifecycleTest, ZerosThenDataAreNeverFormattedNotEvenWithForceOrByReplay) {
  Dir d("iso");
  const std::string iso = d / "iso";
  std::string bytes(32 << 10, '\0');
  for (int i = 0; i < (1 << 20); ++i) bytes.push_back(static_cast<char>(i % 251 + 1));
  bytes.resize(64 << 20, '\0');
  { std::ofstream(iso, std::ios::binary) << bytes; }
  Result r = Cxlkv("format --region " + iso + " --slot-size 4KiB");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("offset 32768"), std::string::npos) << r.err;
  r = Cxlkv("format --force --region " + iso + " --slot-size 4KiB");
  EXPECT_EQ(r.rc, 1) << r.err;
  r = Cxlkv("replay --replace --region " + iso + " --region-size 64MiB --limit 20" + kSmall);
  EXPECT_EQ(r.rc, 1) << r.err;
  r = Cxlkv("gc " + d.path());
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(ReadAll(iso) == bytes) << "the file's bytes changed";
}

TEST(CliLifecycleTest, ReplayRefusesAnExistingRegionUnlessToldToReplaceIt) {
  Dir d("replace");
  const std::string region = d / "r";
  const std::string run = "replay --region " + region + " --region-size 64MiB --limit 200" + kSmall;
  ASSERT_EQ(Cxlkv(run).rc, 0);
  const auto epoch = Json(Cxlkv("inspect --json --region " + region))["region"]["format_epoch"];
  Result r = Cxlkv(run);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("pass --replace"), std::string::npos) << r.err;
  EXPECT_EQ(Json(Cxlkv("inspect --json --region " + region))["region"]["format_epoch"], epoch);
  EXPECT_NE(Cxlkv("replay --help").out.find("--replace"), std::string::npos);
  r = Cxlkv("replay --replace --region " + region + " --region-size 64MiB --limit 200" + kSmall);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(Json(Cxlkv("inspect --json --region " + region))["region"]["format_epoch"], epoch);
}

TEST(CliLifecycleTest, ControlFileOfAnotherPlanOrKindIsRefusedAndNeverShrunk) {
  Dir d("ctl");
  const std::string region = d / "r", ctl = d / "r.ctl";
  auto args = [&](const std::string& control, int limit, int index) {
    return "replay --region " + region + " --region-size 64MiB --replica-count 2" +
           " --replica-index " + std::to_string(index) + " --control " + control + " --limit " +
           std::to_string(limit) + kSmall;
  };
  auto worker = [&](const std::string& control, int limit, int index) {
    return Cxlkv(args(control, limit, index));
  };
  // Pointed at a live region: refused at once, the region untouched.
  ASSERT_EQ(Cxlkv("format --region " + d / "live" + " --region-size 8MiB --slot-size 4KiB").rc, 0);
  const std::string live_before = ReadAll(d / "live");
  {
    cxlkv::RegionOptions o;
    o.create_if_missing = false;
    o.prefault = cxlkv::Prefault::kNone;
    std::unique_ptr<cxlkv::Region> holder;
    ASSERT_TRUE(cxlkv::Region::Open(d / "live", o, &holder).ok());
    const uint64_t epoch = holder->info().format_epoch;
    Result r = worker(d / "live", 100, 0);
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("not a replay control file"), std::string::npos) << r.err;
    EXPECT_EQ(holder->info().format_epoch, epoch);
  }
  // A text file: refused, unchanged.
  { std::ofstream(d / "notes") << "not a control file\n"; }
  EXPECT_EQ(worker(d / "notes", 100, 0).rc, 1);
  EXPECT_EQ(ReadAll(d / "notes"), "not a control file\n");
  // The two workers of --limit 300 make and share the control file; a
  // worker of --limit 100 (a smaller file) is refused and the size stays.
  Result r = Sh(clitest::Bin() + " " + args(ctl, 300, 0) + " > /dev/null & " + clitest::Bin() +
                " " + args(ctl, 300, 1) + " > /dev/null & wait %1 && wait %2 && echo both-ok");
  ASSERT_NE(r.out.find("both-ok"), std::string::npos) << r.err;
  struct stat before {
  }, after{};
  ASSERT_EQ(::stat(ctl.c_str(), &before), 0);
  r = worker(ctl, 100, 1);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("another plan"), std::string::npos) << r.err;
  ASSERT_EQ(::stat(ctl.c_str(), &after), 0);
  EXPECT_EQ(after.st_size, before.st_size);
  // A control file of another format version (an older build's: version
  // 2 had no participant records), same plan otherwise: refused, unchanged.
  {
    const std::string old_ctl = d / "old.ctl";
    std::string bytes = ReadAll(ctl);
    ASSERT_GT(bytes.size(), 12u);
    bytes[8] = 2;  // Control::version, after the 8-byte stamp
    { std::ofstream(old_ctl, std::ios::binary) << bytes; }
    r = worker(old_ctl, 300, 0);
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("version 3"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("remove it"), std::string::npos) << r.err;
    EXPECT_EQ(ReadAll(old_ctl), bytes);
  }
  // A replica index that already ran with this control file: refused.
  r = worker(ctl, 300, 0);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("already ran"), std::string::npos) << r.err;
}

TEST(CliLifecycleTest, ARegionUsedFromAnotherHostWithAn8sHeartbeatIsKept) {
  Dir d("slowhb");
  const std::string region = d / "r";
  ASSERT_EQ(Cxlkv("format --region " + region + " --region-size 8MiB --slot-size 4KiB").rc, 0);
  RemoteParticipant user(region, 8'000'000'000);
  // Each answer must come within about one of the user's 8 s heartbeats, not
  // four of them (a watch of 4 x 8 s = 32 s would pass the deadline).
  Result r = CxlkvWithin(20, "gc " + d.path() + " --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = Json(r);
  EXPECT_TRUE(j["removed"].empty()) << r.out;
  ASSERT_EQ(j["kept"].size(), 1u) << r.out;
  EXPECT_NE(j["kept"][0]["reason"].get<std::string>().find("live participant"), std::string::npos);
  EXPECT_TRUE(Exists(region));
  r = CxlkvWithin(20, "format --force --region " + region + " --slot-size 8KiB");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("live participant"), std::string::npos) << r.err;
}

TEST(CliLifecycleTest, GcRemovesRegionsOfDeadParticipantsAndEmptyFiles) {
  Dir d("dead");
  const std::string region = d / "r";
  ASSERT_EQ(Cxlkv("format --region " + region + " --region-size 8MiB --slot-size 4KiB").rc, 0);
  {
    RemoteParticipant user(region, 20'000'000);
    Result r = Cxlkv("gc " + d.path() + " --liveness-timeout-ms 200 --json");
    EXPECT_EQ(Json(r)["kept"].size(), 1u) << r.out;
    user.Kill();  // its record stays ACTIVE, no longer beating
  }
  { std::ofstream(d / "empty"); }
  { std::ofstream(d / "other") << "keep me"; }
  Result r = Cxlkv("gc " + d.path() + " --liveness-timeout-ms 200 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json(r)["removed"].size(), 2u) << r.out;
  EXPECT_FALSE(Exists(region));
  EXPECT_FALSE(Exists(d / "empty"));
  EXPECT_EQ(ReadAll(d / "other"), "keep me");
}

// `cxlkv gc DIR` (the README's command) sweeps this user's abandoned
// regions only; another user's is kept with its uid until named or swept
// with --any-owner. Owners are real (chown, so root only).
TEST(CliLifecycleTest, GcSweepsOnlyThisUsersRegionsUnlessNamedOrAnyOwner) {
  Dir d("owner");
  const std::string mine = d / "mine", theirs = d / "theirs", theirs2 = d / "theirs2";
  for (const std::string& p : {mine, theirs, theirs2})
    ASSERT_EQ(Cxlkv("format --region " + p + " --region-size 8MiB --slot-size 4KiB").rc, 0);
  const uid_t other = ::geteuid() + 4242;
  if (::chown(theirs.c_str(), other, -1) != 0 || ::chown(theirs2.c_str(), other, -1) != 0)
    GTEST_SKIP() << "needs CAP_CHOWN (root) to give a file another owner";
  Result r = Cxlkv("gc " + d.path() + " --liveness-timeout-ms 200 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = Json(r);
  EXPECT_EQ(j["removed"], json::array({mine})) << r.out;
  ASSERT_EQ(j["kept"].size(), 2u) << r.out;
  EXPECT_NE(j["kept"][0]["reason"].get<std::string>().find("owned by uid " + std::to_string(other)),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(Exists(theirs) && Exists(theirs2));
  // Named: collected whoever owns it; the human output says so.
  r = Cxlkv("gc " + theirs + " --liveness-timeout-ms 200");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("removed " + theirs + " (region)"), std::string::npos) << r.out;
  EXPECT_FALSE(Exists(theirs));
  EXPECT_TRUE(Exists(theirs2));
  // A mistyped path is refused before anything is removed.
  r = Cxlkv("gc " + d.path() + " " + d / "no-such-file");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("no-such-file: No such file or directory"), std::string::npos) << r.err;
  EXPECT_TRUE(Exists(theirs2));
  r = Cxlkv("gc " + d.path() + " --any-owner --dry-run --liveness-timeout-ms 200 --json");
  EXPECT_EQ(Json(r)["removed"], json::array({theirs2})) << r.out;
  EXPECT_TRUE(Exists(theirs2));
  r = Cxlkv("gc " + d.path() + " --any-owner --liveness-timeout-ms 200 --json");
  EXPECT_EQ(Json(r)["removed"], json::array({theirs2})) << r.out;
  EXPECT_FALSE(Exists(theirs2));
}

TEST(CliLifecycleTest, BenchNeverRemovesALiveRegionInItsDirectory) {
  Dir d("bench");
  const std::string live = d / "bench-copy";
  ASSERT_EQ(Cxlkv("format --region " + live + " --region-size 8MiB --slot-size 4KiB").rc, 0);
  cxlkv::RegionOptions o;
  o.create_if_missing = false;
  o.prefault = cxlkv::Prefault::kNone;
  std::unique_ptr<cxlkv::Region> holder;
  ASSERT_TRUE(cxlkv::Region::Open(live, o, &holder).ok());
  cxlkv::NamespaceId ns;
  ASSERT_TRUE(holder->RegisterNamespace({"m", "bf16", "NHD", 0, 0}, &ns).ok());
  std::string data(4096, 'b'), back(4096, 0);
  ASSERT_TRUE(holder->Store(ns, cxlkv::BlockKey::FromId(1), data.data(), data.size()).ok());
  Result r = Cxlkv("bench --dir " + d.path() + " --region-size 32MiB --seconds 0.05 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(Exists(live));
  ASSERT_TRUE(holder->Load(ns, cxlkv::BlockKey::FromId(1), back.data(), back.size()).ok());
  EXPECT_EQ(back, data);
  // A fresh attach sees the same region (not one re-created at the path).
  cxlkv::RegionOptions obs = o;
  obs.register_participant = false;
  std::unique_ptr<cxlkv::Region> again;
  ASSERT_TRUE(cxlkv::Region::Open(live, obs, &again).ok());
  EXPECT_EQ(again->info().format_epoch, holder->info().format_epoch);
  // And bench left none of its own scratch regions behind.
  int files = 0;
  DIR* dir = ::opendir(d.path().c_str());
  while (dirent* e = ::readdir(dir)) files += e->d_name[0] != '.';
  ::closedir(dir);
  EXPECT_EQ(files, 1);
}

TEST(CliLifecycleTest, AStuckKeyIsAClearErrorNamingItWithinTheBound) {
  Dir d("stuck");
  const std::string region = d / "r", trace = d / "trace.jsonl";
  const uint64_t big = 18446744073709551615ull;  // 2^64 - 1: ids >= 2^63 are fine
  { std::ofstream(trace) << "{\"hash_ids\": [" << big << ", 5]}\n"; }
  // The replay's region, with a live participant holding block `big` in
  // WRITING forever (a writer that never commits, e.g. a hung DMA).
  // Live whatever the machine's load: the replay judges a participant dead
  // once its heartbeat has not moved for max(its own liveness timeout, 4 x
  // the participant's declared interval), and then reclaims its WRITING
  // slot and stores the block itself. With the default 100 ms interval that
  // is 400 ms, which a starved test process on a loaded CI machine missed
  // (the replay then stored both blocks and exited 0). A declared 1 s
  // interval gives 4 s; the replay's give-up bound honours it too (three
  // such judgements, AKeyHeldByADeadWriterWithASlowHeartbeatIsWaitedFor), so
  // it gives up after 3 x 4 s + 1.1 s while the holder stays live.
  cxlkv::RegionOptions o;
  o.size = 8 << 20;
  o.config.slot_size = 512 * 2;
  o.config.hash_algorithm = "mooncake-trace-id";
  o.prefault = cxlkv::Prefault::kNone;
  o.heartbeat_interval_ns = 1'000'000'000;
  o.liveness_timeout_ns = 4 * o.heartbeat_interval_ns;
  std::unique_ptr<cxlkv::Region> holder;
  ASSERT_TRUE(cxlkv::Region::Open(region, o, &holder).ok());
  cxlkv::NamespaceId ns;
  ASSERT_TRUE(
      holder
          ->RegisterNamespace({"Qwen/Qwen2.5-7B-Instruct", "bfloat16", "mooncake-trace", 0, 0}, &ns)
          .ok());
  cxlkv::WriteLease lease;
  ASSERT_TRUE(holder->BeginWrite(ns, cxlkv::BlockKey::FromId(big), 1024, &lease).ok());
  // The give-up bound is 3 x 4 s + 1.1 s plus startup: a deadline of 60 s
  // fails the exit-status check (124) if the retries were unbounded again.
  Result r =
      CxlkvWithin(60, "replay --region " + region + " --region-size 8MiB --replica-count 1" +
                          " --replica-index 0" + " --control " + d / "ctl" + " --trace " + trace +
                          " --kv-bytes-per-token 2 --quiet --json --heartbeat-ms 25 "
                          "--liveness-timeout-ms 300");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(cxlkv::BlockKey::FromId(big).ToHex()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("trace id 18446744073709551615"), std::string::npos) << r.err;
  json j = Json(r);
  EXPECT_EQ(j["stores"], 1);  // the other block was stored
  // Every attempt at the stuck key lost the race to the holder, and each
  // one counted in the region's lost-race counter, which the replay reports.
  const size_t at = r.err.find(" attempts; giving up");
  ASSERT_NE(at, std::string::npos) << r.err;
  const size_t from = r.err.rfind(' ', at - 1) + 1;
  const uint64_t attempts = std::stoull(r.err.substr(from, at - from));
  EXPECT_GE(attempts, 2u) << r.err;
  EXPECT_EQ(j["lost_races"], attempts) << r.out;
  // The holder was never judged dead: a reclaim frees its entry (and its
  // WRITING slot, which let the replay store the block).
  int live_self = 0;
  for (const cxlkv::ParticipantInfo& p : holder->Participants())
    live_self += p.self && !p.reclaiming;
  EXPECT_EQ(live_self, 1) << "the replay reclaimed the holder";
  holder->AbortWrite(&lease);
}

// A writer that declares a slow heartbeat and dies holding a key is judged
// dead only after 4 of its intervals (max with the judge's own liveness
// timeout). The replay's give-up on a key that keeps answering "lost race"
// waits that long too: a bound from its own timing alone (25 ms, 300 ms:
// 2 s) called the key stuck and failed the replay while the reclaim that
// frees it was still 2 s away.
TEST(CliLifecycleTest, AKeyHeldByADeadWriterWithASlowHeartbeatIsWaitedFor) {
  Dir d("slowhb");
  const std::string region = d / "r", trace = d / "trace.jsonl";
  { std::ofstream(trace) << "{\"hash_ids\": [5]}\n"; }
  {
    cxlkv::RegionOptions o;
    o.size = 8 << 20;
    o.config.slot_size = 512 * 2;
    o.config.hash_algorithm = "mooncake-trace-id";
    o.prefault = cxlkv::Prefault::kNone;
    std::unique_ptr<cxlkv::Region> created;
    ASSERT_TRUE(cxlkv::Region::Open(region, o, &created).ok());
  }
  // Declares 1 s, holds block 5 in WRITING, dies: silent for 4 s before it
  // may be reclaimed, counted from when the replay first watches it.
  RemoteParticipant writer(region, 1'000'000'000, 5);
  writer.Kill();
  Result r = CxlkvWithin(
      60, "replay --region " + region + " --region-size 8MiB --replica-count 1 --replica-index 0" +
              " --control " + d / "ctl" + " --trace " + trace +
              " --kv-bytes-per-token 2 --quiet --json --heartbeat-ms 25 --liveness-timeout-ms 300");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("stuck key"), std::string::npos) << r.err;
  EXPECT_EQ(Json(r)["stores"], 1) << r.out;
}

// A key another writer holds in WRITING answers the replay's store "lost
// race" until the writer lets go; the replay retries it, and every retry
// adds one to the region's lost-race counter. The table and the JSON report
// that count (the replay's own participants'): a slow writer shows there
// instead of only as a slow run. The holder here is live (this process) and
// gives up its write once the region has counted a lost race, so the
// replay then stores the key and exits 0; its count is then the region's
// whole lost-race total (the holder lost none, and a participant that
// detaches retires its counters into the region's).
TEST(CliLifecycleTest, TheReplayReportsTheLostRacesWhileAnotherWriterHoldsAKey) {
  Dir d("lostrace");
  const std::string region = d / "r", trace = d / "trace.jsonl";
  { std::ofstream(trace) << "{\"hash_ids\": [5]}\n"; }
  cxlkv::RegionOptions o;
  o.size = 8 << 20;
  o.config.slot_size = 512 * 2;
  o.config.hash_algorithm = "mooncake-trace-id";
  o.prefault = cxlkv::Prefault::kNone;
  // A declared 10 s heartbeat: the replay gives up on the key only after
  // 3 x 40 s, far past the moment the holder lets go, however loaded the
  // machine; the holder is never judged dead meanwhile.
  o.heartbeat_interval_ns = 10'000'000'000;
  o.liveness_timeout_ns = 4 * o.heartbeat_interval_ns;
  std::unique_ptr<cxlkv::Region> holder;
  ASSERT_TRUE(cxlkv::Region::Open(region, o, &holder).ok());
  cxlkv::NamespaceId ns;
  ASSERT_TRUE(
      holder
          ->RegisterNamespace({"Qwen/Qwen2.5-7B-Instruct", "bfloat16", "mooncake-trace", 0, 0}, &ns)
          .ok());
  cxlkv::WriteLease lease;
  ASSERT_TRUE(holder->BeginWrite(ns, cxlkv::BlockKey::FromId(5), 1024, &lease).ok());
  Result r;
  std::thread replay([&] {
    r = CxlkvWithin(300, "replay --region " + region +
                             " --region-size 8MiB --replica-count 1 --replica-index 0 --control " +
                             d / "ctl" + " --trace " + trace +
                             " --kv-bytes-per-token 2 --quiet --heartbeat-ms 25 "
                             "--liveness-timeout-ms 300");
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (holder->RegionCounters()[cxlkv::Counter::kStoreLostRace] == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  holder->AbortWrite(&lease);
  replay.join();
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const uint64_t region_lost = holder->RegionCounters()[cxlkv::Counter::kStoreLostRace];
  EXPECT_GE(region_lost, 1u);
  EXPECT_EQ(holder->ProcessCounters()[cxlkv::Counter::kStoreLostRace], 0u);
  EXPECT_NE(r.out.find("lost races " + std::to_string(region_lost) + ","), std::string::npos)
      << "region counted " << region_lost << ":\n"
      << r.out;
}

}  // namespace
