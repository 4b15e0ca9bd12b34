// Copyright cxlkv authors.
//
// The non-coherence emulator's own semantics (emulator.h), on a real
// MAP_SHARED file and real processes: what one simulated host stores is
// invisible to another until flushed and invalidated; write-backs are whole
// lines that clobber other hosts' bytes; dirty lines land on their own; a
// stopped host's dirty lines still land; sites are recorded and can be
// dropped.
#include "emulator.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "testutil.h"

namespace cxlkv::internal {
namespace {

constexpr uint64_t kLen = 1 << 20;

// A region file mapped MAP_SHARED (the "shared memory") and a fresh
// emulator directory, both removed at the end.
class Machine {
 public:
  Machine() {
    char tmpl[] = "/dev/shm/cxlkv-emu-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    const std::string region = dir_ + "/region";
    const int fd = ::open(region.c_str(), O_RDWR | O_CREAT, 0600);
    EXPECT_EQ(::ftruncate(fd, kLen), 0);
    mem_ = static_cast<uint8_t*>(::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ::close(fd);
    EXPECT_NE(mem_, MAP_FAILED);
  }
  ~Machine() {
    ::munmap(mem_, kLen);
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<EmulatedHost> Host(uint32_t h, uint32_t writeback_every = 0,
                                     std::vector<uint64_t> drop = {}) {
    EmulatorOptions o;
    o.dir = dir_ + "/emu";
    o.host = h;
    o.seed = 7;
    o.writeback_every = writeback_every;
    o.drop_sites = std::move(drop);
    std::unique_ptr<EmulatedHost> e;
    Status s = EmulatedHost::Open(o, &e);
    EXPECT_TRUE(s.ok()) << s.ToString();
    e->Attach(mem_, kLen);
    return e;
  }
  uint64_t Shared64(uint64_t off) const {
    uint64_t v;
    std::memcpy(&v, mem_ + off, 8);
    return v;
  }
  uint8_t* mem() const { return mem_; }
  std::string emu_dir() const { return dir_ + "/emu"; }

 private:
  std::string dir_;
  uint8_t* mem_ = nullptr;
};

TEST(EmulatorTest, StoreIsInvisibleUntilFlushedAndInvalidated) {
  Machine m;
  auto a = m.Host(0), b = m.Host(1);
  uint8_t* w = m.mem() + 128;
  EXPECT_EQ(b->Load64(w), 0u);  // b caches the line
  a->Store64(w, 42);
  EXPECT_EQ(a->Load64(w), 42u);    // a sees its own store
  EXPECT_EQ(m.Shared64(128), 0u);  // memory does not
  EXPECT_EQ(b->Load64(w), 0u);
  a->Flush(w, 8);
  EXPECT_EQ(m.Shared64(128), 42u);
  EXPECT_EQ(b->Load64(w), 0u);  // b's stale copy: refreshed only on Invalidate
  b->Invalidate(w, 8);
  EXPECT_EQ(b->Load64(w), 42u);
}

TEST(EmulatorTest, WriteBackIsAWholeLineThatClobbersOtherHostsBytes) {
  Machine m;
  auto a = m.Host(0), b = m.Host(1);
  uint8_t* line = m.mem() + 4096;
  EXPECT_EQ(a->Load64(line), 0u);  // a caches the line while it is all zeros
  b->Store64(line + 8, 0xB);
  b->Flush(line, 64);
  EXPECT_EQ(m.Shared64(4096 + 8), 0xBu);
  a->Store64(line, 0xA);  // word 0 only, but the line goes back whole
  a->Flush(line, 64);
  EXPECT_EQ(m.Shared64(4096), 0xAu);
  EXPECT_EQ(m.Shared64(4096 + 8), 0u) << "a's stale copy of word 1 must clobber b's store";
  // Invalidating a dirty line writes it back first.
  b->Store64(line + 16, 0xC);
  b->Invalidate(line, 64);
  EXPECT_EQ(m.Shared64(4096 + 16), 0xCu);
}

TEST(EmulatorTest, DirtyLinesLandOnTheirOwn) {
  Machine m;
  auto a = m.Host(0, /*writeback_every=*/2);
  uint8_t* w = m.mem() + 8192;
  a->Store64(w, 7);
  for (int i = 0; i < 200 && m.Shared64(8192) != 7; i++) (void)a->Load64(m.mem() + 64 * i);
  EXPECT_EQ(m.Shared64(8192), 7u) << "no spontaneous write-back in 200 calls";
  EXPECT_GT(a->stats().random_writebacks, 0u);
}

TEST(EmulatorTest, AStoppedHostsDirtyLinesLandThroughTheSweeper) {
  Machine m;
  pid_t child = test::Spawn([&] {
    auto a = m.Host(2);
    a->Store64(m.mem() + 256, 99);
    a->CopyToRegion(m.mem() + 1000, "payload bytes", 14);
    ::raise(SIGSTOP);
    return 0;
  });
  ASSERT_TRUE(test::WaitStopped(child));
  EXPECT_EQ(m.Shared64(256), 0u);
  std::unique_ptr<EmulatorCacheSweeper> sw;
  ASSERT_TRUE(EmulatorCacheSweeper::Open(m.emu_dir(), m.mem(), kLen, 1, &sw).ok());
  EXPECT_EQ(sw->Sweep(1), 2u);  // one line of the word, one of the bytes
  EXPECT_EQ(m.Shared64(256), 99u);
  EXPECT_EQ(std::memcmp(m.mem() + 1000, "payload bytes", 14), 0);
  ::kill(child, SIGKILL);
  test::Reap(child);
  // A host whose process died keeps its cache: a later process of host 2
  // sees the line it left, not memory.
  auto again = m.Host(2);
  EXPECT_EQ(again->Load64(m.mem() + 256), 99u);
}

// Two distinct call sites, recorded; dropping one makes its Flush a no-op.
// (The empty asm after each call keeps it from becoming a tail call, whose
// return address would be the caller's; the two must differ, or the
// compiler folds them into one.)
__attribute__((noinline)) void FlushSiteOne(EmulatedHost* h, void* p) {
  h->Flush(p, 8);
  asm volatile("" ::: "memory");
}
__attribute__((noinline)) void FlushSiteTwo(EmulatedHost* h, void* p) {
  h->Flush(p, 16);  // not the same code as FlushSiteOne (identical code folding)
  asm volatile("" ::: "memory");
}

TEST(EmulatorTest, CallSitesAreRecordedAndCanBeDropped) {
  Machine m;
  {
    auto a = m.Host(0);
    a->Store64(m.mem(), 1);
    FlushSiteOne(a.get(), m.mem());
    a->Store64(m.mem() + 64, 2);
    FlushSiteTwo(a.get(), m.mem() + 64);
    a->Invalidate(m.mem(), 64);
  }
  std::vector<EmulatorSite> sites;
  ASSERT_TRUE(ReadEmulatorSites(m.emu_dir() + "/sites", &sites).ok());
  ASSERT_EQ(sites.size(), 3u);
  uint64_t one = 0;
  int flushes = 0;
  for (const auto& s : sites) {
    if (!s.invalidate) flushes++;
    if (!s.invalidate && one == 0) one = s.offset;
    EXPECT_EQ(s.calls, 1u);
  }
  EXPECT_EQ(flushes, 2);
  auto b = m.Host(1, 0, {one});
  b->Store64(m.mem() + 512, 5);
  b->Store64(m.mem() + 576, 6);
  FlushSiteOne(b.get(), m.mem() + 512);
  FlushSiteTwo(b.get(), m.mem() + 576);
  // Exactly one of the two flushes was dropped.
  EXPECT_EQ((m.Shared64(512) == 5) + (m.Shared64(576) == 6), 1);
  EXPECT_EQ(b->stats().dropped_calls, 1u);
}

TEST(EmulatorTest, BadInputIsRefused) {
  std::vector<uint64_t> v;
  EXPECT_TRUE(ParseEmulatorSites("0x10,32", &v).ok());
  EXPECT_EQ(v, (std::vector<uint64_t>{16, 32}));
  EXPECT_EQ(ParseEmulatorSites("0x10,zz", &v).code(), Status::Code::kInvalidArgument);
  EmulatorOptions o;
  std::unique_ptr<EmulatedHost> e;
  EXPECT_EQ(EmulatedHost::Open(o, &e).code(), Status::Code::kInvalidArgument);
  o.dir = "/dev/shm/cxlkv-emu-unused";
  o.host = kEmulatorMaxHosts;
  EXPECT_EQ(EmulatedHost::Open(o, &e).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace cxlkv::internal
