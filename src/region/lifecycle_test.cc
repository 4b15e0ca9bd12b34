// Copyright cxlkv authors.
//
// Region lifecycle through real files, real processes and real mounts:
// reservation on full filesystems, a file truncated under an attached
// process, foreign bytes past the first 4 KiB, the format race, "is anyone
// attached", destroy/unformat, scans.
#include "cxlkv/lifecycle.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "failpoint.h"
#include "layout.h"
#include "testutil.h"

namespace cxlkv {
namespace {

using test::MustOpen;
using test::Reap;
using test::ScratchRegion;
using test::Spawn;
using test::TestOptions;

const NamespaceDesc kNs{"m", "bfloat16", "NHD", 0, 0};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : ~0ull;
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Stand-in for "attached from another host": this process drops the
// region file's flock that Region::Open took, so only its heartbeats show
// it (as they do for a participant on another host of a shared device).
void DropFlockOf(const std::string& path) {
  DIR* d = ::opendir("/proc/self/fd");
  while (dirent* e = ::readdir(d)) {
    char target[4096];
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = 0;
    if (path == target) ::flock(std::atoi(e->d_name), LOCK_UN);
  }
  ::closedir(d);
}

// A child attached to `path` with its flock dropped (DropFlockOf), so only
// its heartbeats show it; returns its pid once attached, or -1.
pid_t SpawnRemoteParticipant(const std::string& path) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t child = Spawn([&] {
    std::unique_ptr<Region> r;
    if (!Region::Open(path, TestOptions(0, 4096), &r).ok()) return 10;
    DropFlockOf(path);
    char c = 1;
    if (::write(ready[1], &c, 1) != 1) return 11;
    ::pause();
    return 0;
  });
  ::close(ready[1]);  // a child that fails to attach then ends the read
  char c;
  const bool attached = ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  return attached ? child : -1;
}

LifecycleOptions Quick() {
  LifecycleOptions o;
  o.liveness_timeout_ns = 300'000'000;
  return o;
}

// Runs `fn` in a child inside a private mount namespace with a 8 MiB tmpfs
// at `dir`; returns the child's exit status, or 77 if namespaces are not
// available (the caller skips).
int InSmallTmpfs(const std::string& dir, const std::function<int()>& fn) {
  return Reap(Spawn([&] {
    if (::unshare(CLONE_NEWNS) != 0) return 77;
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
    ::mkdir(dir.c_str(), 0700);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=8m") != 0) return 77;
    return fn();
  }));
}

TEST(LifecycleTest, SparseFileOnAFullFilesystemIsAnErrorNotSIGBUS) {
  const std::string dir = "/tmp/cxlkv-lifecycle-tmpfs-" + std::to_string(::getpid());
  const int rc = InSmallTmpfs(dir, [&] {
    // A pre-created sparse file (as fabric/src/compose.cc makes them) larger
    // than the filesystem: every way in reports an error, nothing faults.
    const std::string sparse = dir + "/sparse";
    int fd = ::open(sparse.c_str(), O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ::ftruncate(fd, 64 << 20) != 0) return 10;
    ::close(fd);
    RegionOptions o = TestOptions(0, 4096);
    o.prefault = Prefault::kAtAttach;
    std::unique_ptr<Region> r;
    Status s = Region::Open(sparse, o, &r);
    if (!s.IsIOError() || s.message().find("No space left") == std::string::npos) return 11;
    if (FileSize(sparse) != (64u << 20)) return 12;  // not ours to remove or shrink
    uint64_t magic = 1;
    fd = ::open(sparse.c_str(), O_RDONLY);
    if (::pread(fd, &magic, 8, 0) != 8 || magic != 0) return 13;  // nothing half-formatted
    ::close(fd);
    // A create that cannot be reserved leaves no file behind.
    const std::string fresh = dir + "/fresh";
    s = Region::Open(fresh, TestOptions(64 << 20, 4096), &r);
    if (!s.IsIOError() || Exists(fresh)) return 14;
    // A sparse file that fits is reserved on attach and works, prefault too.
    const std::string fits = dir + "/fits";
    fd = ::open(fits.c_str(), O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ::ftruncate(fd, 4 << 20) != 0) return 15;
    ::close(fd);
    s = Region::Open(fits, o, &r);
    if (!s.ok()) return 16;
    struct stat st {};
    if (::stat(fits.c_str(), &st) != 0 || uint64_t(st.st_blocks) * 512 < (4u << 20)) return 17;
    NamespaceId ns;
    std::string data(4096, 'x'), back(4096, 0);
    if (!r->RegisterNamespace(kNs, &ns).ok()) return 18;
    if (!r->Store(ns, BlockKey::FromId(1), data.data(), data.size()).ok()) return 19;
    if (!r->Load(ns, BlockKey::FromId(1), back.data(), back.size()).ok() || back != data) return 20;
    return 0;
  });
  if (rc == 77) GTEST_SKIP() << "no private mount namespace here (needs root for unshare -m)";
  EXPECT_EQ(rc, 0) << "child failed at check " << rc << " (135 would be SIGBUS)";
}

TEST(LifecycleTest, TruncatedUnderAnAttachedProcessIsIOErrorNotSIGBUS) {
  ScratchRegion reg("trunc");
  { MustOpen(reg.path(), TestOptions(8 << 20, 4096)); }
  int ready[2], go[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = Spawn([&] {
    RegionOptions o = TestOptions(0, 4096);
    o.create_if_missing = false;
    std::unique_ptr<Region> r;
    if (!Region::Open(reg.path(), o, &r).ok()) return 10;
    NamespaceId ns;
    std::string data(4096, 'y'), back(4096, 0);
    if (!r->RegisterNamespace(kNs, &ns).ok()) return 11;
    if (!r->Store(ns, BlockKey::FromId(7), data.data(), data.size()).ok()) return 12;
    char c = 1;
    if (::write(ready[1], &c, 1) != 1 || ::read(go[0], &c, 1) != 1) return 13;
    // The file is now 0 bytes: every access to the mapping faults.
    Status s = r->Load(ns, BlockKey::FromId(7), back.data(), back.size());
    if (!s.IsIOError()) return 14;
    if (!CheckMapping(*r).IsIOError()) return 15;
    if (CheckMapping(*r).message().find("truncated") == std::string::npos) return 16;
    // Store and Load say why: the mapping is gone (kIOError), not a miss or a fence.
    if (!r->Store(ns, BlockKey::FromId(8), data.data(), data.size()).IsIOError()) return 17;
    if (!r->Load(ns, BlockKey::FromId(8), data.data(), data.size()).IsIOError()) return 18;
    // The heartbeat thread keeps running over the replaced mapping.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    r.reset();
    return 0;
  });
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(::truncate(reg.path().c_str(), 0), 0);
  ASSERT_EQ(::write(go[1], &c, 1), 1);
  EXPECT_EQ(Reap(child), 0) << "135 = killed by SIGBUS";
}

TEST(LifecycleTest, ZerosThenDataInTheMetadataAreaAreNeverFormatted) {
  ScratchRegion reg("iso");
  std::string bytes(32 << 10, '\0');
  for (int i = 0; i < (1 << 20); ++i) bytes.push_back(static_cast<char>(i * 7 + 1));
  bytes.resize(16 << 20, '\0');
  { std::ofstream(reg.path(), std::ios::binary) << bytes; }
  std::unique_ptr<Region> r;
  Status s = Region::Open(reg.path(), TestOptions(0, 4096), &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("offset 32768"), std::string::npos) << s.ToString();
  EXPECT_EQ(ReadAll(reg.path()), bytes);
  // Nor destroyed or unformatted through the lifecycle API.
  EXPECT_TRUE(DestroyRegion(reg.path(), Quick()).IsInvalidArgument());
  EXPECT_TRUE(UnformatRegion(reg.path(), Quick()).IsInvalidArgument());
  EXPECT_EQ(ReadAll(reg.path()), bytes);
  ProbeReport p;
  ASSERT_TRUE(ProbeRegion(reg.path(), Quick(), &p).ok());
  EXPECT_EQ(p.kind, RegionKind::kBlank);  // the first 4 KiB are zero
}

TEST(LifecycleTest, LosingTheFormatRaceNeverRemovesTheWinnersRegion) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion reg("race");
  // The child creates the file and stops before formatting; meanwhile
  // another opener formats it with another slot size and leaves.
  const pid_t child = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "open.after_create:stop", 1);
    internal::ReloadFailpoints();
    std::unique_ptr<Region> r;
    Status s = Region::Open(reg.path(), TestOptions(8 << 20, 8192), &r);
    return s.IsInvalidArgument() ? 0 : 10;
  });
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, WUNTRACED), child);
  ASSERT_TRUE(WIFSTOPPED(st));
  {
    RegionOptions o = TestOptions(8 << 20, 4096);
    o.register_participant = false;
    MustOpen(reg.path(), o);
  }
  ::kill(child, SIGCONT);
  EXPECT_EQ(Reap(child), 0);
  ASSERT_TRUE(Exists(reg.path()));
  RegionOptions o = TestOptions(0, 4096);
  o.create_if_missing = false;
  auto r = MustOpen(reg.path(), o);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->info().slot_size, 4096u);
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Region::Open with create_if_missing (the default: the Python binding and
// the vLLM backend open this way) never grows an existing file that holds
// bytes. A region truncated under the size asked is refused (it was grown
// back with zeros and attached as intact, its directory naming blocks past
// the cut), and so is a region formatted smaller than the size asked (it
// was grown before the size mismatch was found); each message says how to
// go on, and the file is left as it was. A short file that holds nothing
// (zeros, or no bytes: a creator between its create and its growing it, a
// failed create) is still grown and formatted.
TEST(LifecycleTest, OpenNeverGrowsAnExistingFileThatHoldsBytes) {
  ScratchRegion reg("grow");
  {
    auto r = MustOpen(reg.path(), TestOptions(4 << 20, 4096));
    NamespaceId ns;
    ASSERT_TRUE(r->RegisterNamespace(kNs, &ns).ok());
    const std::string d(4096, 'k');
    for (uint64_t id = 1; id <= 600; ++id) {  // past the cut too
      ASSERT_TRUE(r->Store(ns, BlockKey::FromId(id), d.data(), d.size()).ok());
    }
  }
  ASSERT_EQ(::truncate(reg.path().c_str(), 2 << 20), 0);
  const std::string cut = ReadAll(reg.path());
  std::unique_ptr<Region> r;
  Status s = Region::Open(reg.path(), TestOptions(4 << 20, 4096), &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("cxlkv format --force --region-size 4194304 --slot-size 4096"),
            std::string::npos)
      << s.ToString();
  EXPECT_EQ(FileSize(reg.path()), 2u << 20);
  EXPECT_TRUE(ReadAll(reg.path()) == cut) << "the file was changed";
  // Without a size the whole file is mapped: truncated, says the header.
  s = Region::Open(reg.path(), TestOptions(0, 4096), &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.ToString();

  ScratchRegion small("grow-small");
  { MustOpen(small.path(), TestOptions(4 << 20, 4096)); }
  s = Region::Open(small.path(), TestOptions(8 << 20, 4096), &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("region_size mismatch: the region has 4194304, this process "
                             "expects 8388608"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("size 4194304 (or 0"), std::string::npos) << s.ToString();
  EXPECT_EQ(FileSize(small.path()), 4u << 20);
  EXPECT_TRUE(Region::Open(small.path(), TestOptions(4 << 20, 4096), &r).ok());
  r.reset();

  // Holding nothing, a short file is grown and formatted.
  for (const uint64_t bytes : {0u, 1u << 20}) {
    ScratchRegion blank("grow-blank");
    WriteAll(blank.path(), std::string(bytes, '\0'));
    s = Region::Open(blank.path(), TestOptions(4 << 20, 4096), &r);
    EXPECT_TRUE(s.ok()) << bytes << ": " << s.ToString();
    EXPECT_EQ(FileSize(blank.path()), 4u << 20);
    r.reset();
  }
}

// Foreign bytes where a format's lock word goes, over an otherwise blank
// first 4 KiB, are not a format of ours that died: Open refuses them at
// once in either coherence mode (hardware mode formatted over them once the
// format stall timeout passed; software mode's partition 0 did at once),
// and never grows such a file when it is short.
TEST(LifecycleTest, ForeignBytesOverAFormatLockWordAreNeverFormattedOver) {
  ScratchRegion reg("lockword");
  std::string bytes(100, 'x');
  bytes.resize(4 << 20, '\0');
  WriteAll(reg.path(), bytes);
  std::unique_ptr<Region> r;
  Status s = Region::Open(reg.path(), TestOptions(0, 4096), &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("neither a cxlkv region nor blank"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("remove or zero the file yourself"), std::string::npos)
      << s.ToString();
  EXPECT_TRUE(ReadAll(reg.path()) == bytes) << "the file was changed";
  RegionOptions sw = TestOptions(0, 4096);
  sw.config.coherence = CoherenceMode::kSoftware;
  sw.config.software_partitions = 1;
  sw.software_partition = 0;
  WriteAll(reg.path(), bytes);  // as it was, whatever happened above
  s = Region::Open(reg.path(), sw, &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("neither a cxlkv region nor blank"), std::string::npos)
      << s.ToString();
  EXPECT_TRUE(ReadAll(reg.path()) == bytes) << "the file was changed (coherence=software)";
  ProbeReport p;
  ASSERT_TRUE(ProbeRegion(reg.path(), Quick(), &p).ok());
  EXPECT_EQ(p.kind, RegionKind::kForeign) << p.detail;
  // Short, it is neither grown nor formatted.
  bytes.resize(8192);
  WriteAll(reg.path(), bytes);
  s = Region::Open(reg.path(), TestOptions(4 << 20, 4096), &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("not a cxlkv region"), std::string::npos) << s.ToString();
  EXPECT_TRUE(ReadAll(reg.path()) == bytes) << "the short file was changed";
}

TEST(LifecycleTest, AttachedMeansFlockOrHeartbeatsAndStaleRecordsAreNot) {
  ScratchRegion reg("attached");
  { MustOpen(reg.path(), TestOptions(8 << 20, 4096)); }
  AttachReport rep;
  ASSERT_TRUE(CheckAttached(reg.path(), Quick(), &rep).ok());
  EXPECT_FALSE(rep.attached) << rep.ToString();
  {
    auto holder = MustOpen(reg.path(), TestOptions(0, 4096));  // this process holds the flock
    ASSERT_TRUE(CheckAttached(reg.path(), Quick(), &rep).ok());
    EXPECT_TRUE(rep.attached && rep.locked_on_this_host) << rep.ToString();
    EXPECT_TRUE(DestroyRegion(reg.path(), Quick()).IsBusy());
  }
  // A participant seen only by its heartbeats (another host).
  const pid_t child = SpawnRemoteParticipant(reg.path());
  ASSERT_GT(child, 0);
  ASSERT_TRUE(CheckAttached(reg.path(), Quick(), &rep).ok());
  EXPECT_TRUE(rep.attached) << rep.ToString();
  EXPECT_FALSE(rep.locked_on_this_host);
  ASSERT_EQ(rep.live.size(), 1u);
  EXPECT_EQ(rep.live[0].pid, static_cast<uint32_t>(child));
  Status s = DestroyRegion(reg.path(), Quick());
  EXPECT_TRUE(s.IsBusy()) << s.ToString();
  EXPECT_NE(s.message().find("pid " + std::to_string(child)), std::string::npos) << s.ToString();
  // Killed, its record stays ACTIVE but stops changing: not attached once
  // the watch (max(liveness, 4 x 5 ms)) has passed, and destroy succeeds.
  ::kill(child, SIGKILL);
  Reap(child);
  ASSERT_TRUE(CheckAttached(reg.path(), Quick(), &rep).ok());
  EXPECT_FALSE(rep.attached) << rep.ToString();
  EXPECT_GE(rep.watched_ns, 300'000'000u);
  EXPECT_TRUE(DestroyRegion(reg.path(), Quick()).ok());
  EXPECT_FALSE(Exists(reg.path()));
  EXPECT_TRUE(DestroyRegion(reg.path(), Quick()).ok());  // idempotent
}

TEST(LifecycleTest, SlowHeartbeatsAreWatchedForFourOfTheirIntervals) {
  ScratchRegion reg("slow");
  { MustOpen(reg.path(), TestOptions(8 << 20, 4096)); }
  // A participant that beats every 400 ms: a 300 ms watch would miss it.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = Spawn([&] {
    RegionOptions o = TestOptions(0, 4096);
    o.heartbeat_interval_ns = 400'000'000;
    o.liveness_timeout_ns = 2'000'000'000;
    std::unique_ptr<Region> r;
    if (!Region::Open(reg.path(), o, &r).ok()) return 10;
    DropFlockOf(reg.path());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past its first beats
    char c = 1;
    if (::write(ready[1], &c, 1) != 1) return 11;
    ::pause();
    return 0;
  });
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  for (int i = 0; i < 3; ++i) {  // whatever the phase of its beat
    AttachReport rep;
    ASSERT_TRUE(CheckAttached(reg.path(), Quick(), &rep).ok());
    EXPECT_TRUE(rep.attached) << rep.ToString();
  }
  ::kill(child, SIGKILL);
  Reap(child);
}

TEST(LifecycleTest, HeartbeatIntervalsBeyondTheLongestWatchedAreRefused) {
  ScratchRegion reg("hb");
  RegionOptions o = TestOptions(8 << 20, 4096);
  o.heartbeat_interval_ns = kMaxHeartbeatIntervalNs + 1;
  o.liveness_timeout_ns = 4 * o.heartbeat_interval_ns;
  std::unique_ptr<Region> r;
  EXPECT_TRUE(Region::Open(reg.path(), o, &r).IsInvalidArgument());
}

TEST(LifecycleTest, UnformatLetsAnyGeometryFormatAfreshButNeverForeignBytes) {
  ScratchRegion reg("unformat");
  {
    auto r = MustOpen(reg.path(), TestOptions(16 << 20, 4096));
    NamespaceId ns;
    ASSERT_TRUE(r->RegisterNamespace(kNs, &ns).ok());
    std::string d(4096, 'z');
    for (int i = 0; i < 100; ++i)
      ASSERT_TRUE(r->Store(ns, BlockKey::FromId(i), d.data(), d.size()).ok());
  }
  // Smaller slots: the new metadata area covers old data slots.
  std::unique_ptr<Region> r;
  EXPECT_TRUE(Region::Open(reg.path(), TestOptions(16 << 20, 1024), &r).IsInvalidArgument());
  ASSERT_TRUE(UnformatRegion(reg.path(), Quick()).ok());
  ProbeReport p;
  ASSERT_TRUE(ProbeRegion(reg.path(), Quick(), &p).ok());
  EXPECT_EQ(p.kind, RegionKind::kBlank);
  r = MustOpen(reg.path(), TestOptions(16 << 20, 1024));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->info().slot_size, 1024u);
  EXPECT_EQ(ScanOccupancy(*r).ready, 0u);
  r.reset();
  // A damaged header is still recognizably ours: unformat takes it.
  {
    int fd = ::open(reg.path().c_str(), O_RDWR);
    const uint64_t junk = 0x1234;
    ASSERT_EQ(::pwrite(fd, &junk, 8, 0), 8);  // the magic
    ::close(fd);
  }
  ASSERT_TRUE(ProbeRegion(reg.path(), Quick(), &p).ok());
  EXPECT_EQ(p.kind, RegionKind::kDamaged) << p.detail;
  EXPECT_TRUE(UnformatRegion(reg.path(), Quick()).ok());
  // A text file is not.
  ScratchRegion text("text");
  { std::ofstream(text.path()) << "precious\n"; }
  EXPECT_TRUE(UnformatRegion(text.path(), Quick()).IsInvalidArgument());
  EXPECT_EQ(ReadAll(text.path()), "precious\n");
}

TEST(LifecycleTest, ScansReportTypedSlotStates) {
  ScratchRegion reg("scan");
  auto r = MustOpen(reg.path(), TestOptions(8 << 20, 4096));
  NamespaceId ns;
  ASSERT_TRUE(r->RegisterNamespace(kNs, &ns).ok());
  std::string d(1000, 'q');
  ASSERT_TRUE(r->Store(ns, BlockKey::FromId(1), d.data(), d.size(), nullptr, /*depth=*/5).ok());
  WriteLease lease;
  ASSERT_TRUE(r->BeginWrite(ns, BlockKey::FromId(2), 500, &lease, nullptr, /*depth=*/7).ok());
  const Occupancy o = ScanOccupancy(*r);
  EXPECT_EQ(o.ready, 1u);
  EXPECT_EQ(o.writing, 1u);
  EXPECT_EQ(o.ready_bytes, 1000u);
  EXPECT_EQ(o.free + o.ready + o.writing, r->info().num_slots);
  std::vector<SlotView> slots;
  ASSERT_TRUE(ScanSlots(*r, 0, r->info().num_entries, &slots).ok());
  int ready = 0, writing = 0;
  for (const SlotView& v : slots) {
    // The depth each writer told, read back bound to the slot's generation.
    if (v.state == SlotState::kWriting) {
      ++writing;
      EXPECT_EQ(v.depth, 7u);
    }
    if (v.state != SlotState::kReady) continue;
    ++ready;
    EXPECT_EQ(v.key, BlockKey::FromId(1));
    EXPECT_EQ(v.len, 1000u);
    EXPECT_EQ(v.depth, 5u);
    EXPECT_STREQ(SlotStateName(v.state), "ready");
  }
  EXPECT_EQ(ready, 1);
  EXPECT_EQ(writing, 1);
  EXPECT_TRUE(ScanSlots(*r, r->info().num_entries, 1, &slots).IsInvalidArgument());
  r->AbortWrite(&lease);
}

// gc removes only what is provably abandoned, and a directory sweep only
// this user's: another owner's unattached region stays (it may be a cache
// kept between runs) until named or swept with GcOwners::kAny. File owners
// are real (chown); a child process heartbeating with its flock dropped is
// the live attacher.
TEST(LifecycleTest, GcSweepsOnlyThisUsersAbandonedRegionsAndNamedOnes) {
  const std::string dir = "/dev/shm/cxlkv-test/gc-owner-" + std::to_string(::getpid());
  ASSERT_EQ(::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  const std::string mine = dir + "/mine", theirs = dir + "/theirs", live = dir + "/live";
  const std::string their_empty = dir + "/their-empty", foreign = dir + "/foreign";
  for (const std::string& p : {mine, theirs, live}) {
    MustOpen(p, TestOptions(4 << 20, 4096));
  }
  { std::ofstream(their_empty).flush(); }
  { std::ofstream(foreign) << "not a region"; }
  const uid_t other = ::geteuid() + 4242;
  if (::chown(theirs.c_str(), other, -1) != 0 || ::chown(their_empty.c_str(), other, -1) != 0) {
    ::system(("rm -rf " + dir).c_str());
    GTEST_SKIP() << "needs CAP_CHOWN (root) to give a file another owner: " << std::strerror(errno);
  }
  const pid_t child = SpawnRemoteParticipant(live);
  ASSERT_GT(child, 0);
  auto reason = [](const GcReport& rep, const std::string& path) {
    for (const GcEntry& e : rep.kept)
      if (e.path == path) return e.reason;
    return std::string("(not kept)");
  };

  GcReport rep;
  ASSERT_TRUE(GcDirectory(dir, Quick(), &rep).ok());
  ASSERT_EQ(rep.removed.size(), 1u);
  EXPECT_EQ(rep.removed[0].path, mine);
  EXPECT_NE(reason(rep, theirs).find("owned by uid " + std::to_string(other)), std::string::npos)
      << reason(rep, theirs);
  EXPECT_NE(reason(rep, their_empty).find("owned by uid"), std::string::npos);
  EXPECT_NE(reason(rep, live).find("in use"), std::string::npos) << reason(rep, live);
  EXPECT_EQ(reason(rep, foreign), "(not kept)");  // never reported in a sweep
  EXPECT_FALSE(Exists(mine));
  EXPECT_TRUE(Exists(theirs) && Exists(their_empty) && Exists(live) && Exists(foreign));

  // Named, another owner's region goes; a live one, foreign bytes and an
  // absent path stay, each with its reason.
  ASSERT_TRUE(GcFiles({theirs, live, foreign, dir + "/absent", dir}, Quick(), &rep).ok());
  ASSERT_EQ(rep.removed.size(), 1u);
  EXPECT_EQ(rep.removed[0].path, theirs);
  EXPECT_NE(reason(rep, live).find("in use"), std::string::npos) << reason(rep, live);
  EXPECT_NE(reason(rep, foreign).find("not a cxlkv region"), std::string::npos);
  EXPECT_NE(reason(rep, dir + "/absent").find("cannot stat"), std::string::npos);
  EXPECT_NE(reason(rep, dir).find("not a regular file"), std::string::npos);
  EXPECT_EQ(ReadAll(foreign), "not a region");

  // Any owner: the other user's empty file goes; the live region still stays,
  // until its participant dies and the watch sees its record stop changing.
  LifecycleOptions any = Quick();
  any.gc_owners = GcOwners::kAny;
  any.dry_run = true;
  ASSERT_TRUE(GcDirectory(dir, any, &rep).ok());
  ASSERT_EQ(rep.removed.size(), 1u);
  EXPECT_TRUE(Exists(their_empty));  // dry run
  any.dry_run = false;
  ASSERT_TRUE(GcDirectory(dir, any, &rep).ok());
  ASSERT_EQ(rep.removed.size(), 1u);
  EXPECT_EQ(rep.removed[0].path, their_empty);
  EXPECT_TRUE(Exists(live));
  ::kill(child, SIGKILL);
  Reap(child);
  ASSERT_TRUE(GcDirectory(dir, Quick(), &rep).ok());
  ASSERT_EQ(rep.removed.size(), 1u);
  EXPECT_EQ(rep.removed[0].path, live);
  EXPECT_EQ(ReadAll(foreign), "not a region");
  ::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace cxlkv
