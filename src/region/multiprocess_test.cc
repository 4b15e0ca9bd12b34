// Copyright cxlkv authors.
//
// Multi-process tests: real processes (fork), real mmap of one /dev/shm
// file, real SIGKILL at exact points (failpoints).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cxlkv/lifecycle.h"
#include "cxlkv/region.h"
#include "failpoint.h"
#include "mapping.h"
#include "region_impl.h"
#include "testutil.h"

namespace cxlkv {
namespace {

using namespace std::chrono_literals;
using test::DataSlotViolation;
using test::FillPattern;
using test::MustOpen;
using test::Reap;
using test::ScratchRegion;
using test::Spawn;
using test::TestOptions;

constexpr uint64_t kSlot = 4096;
const NamespaceDesc kNs{"model", "bfloat16", "NHD", 0, 0};

NamespaceId Ns(Region* r) {
  NamespaceId id = 0;
  Status s = r->RegisterNamespace(kNs, &id);
  if (!s.ok()) std::abort();
  return id;
}

// Shared scratch memory for parent/children coordination (not the region).
template <typename T>
T* SharedAnon() {
  void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return new (p) T();
}

void WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!cond() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(2ms);
}

// No process dies or pauses here, so none may be presumed dead. The flake
// this test had under load was Open's (a child that read the format lock as
// free, was descheduled, and then found the winner's bytes refused them as
// foreign: fixed in open.cc). TestOptions' 300 ms format stall and 150 ms
// liveness timeout would add takeovers of live processes on loaded cores
// (a resumed formatter in the check-then-write window docs/region_format.md
// leaves open, a live child's Store fenced); taking over a dead formatter is
// FormatterKilledMidFormat's test, so this one keeps the default timeouts.
RegionOptions RaceOptions() {
  RegionOptions o = TestOptions(8 << 20, kSlot);
  o.format_stall_ns = RegionOptions().format_stall_ns;
  o.liveness_timeout_ns = RegionOptions().liveness_timeout_ns;
  return o;
}

// How many formats ran on the region at `path`: each format advances the
// superblock's format_progress once per 1 MiB chunk of metadata it zeroes
// (open.cc), and nothing else writes it, so one format leaves exactly its
// chunk count there.
uint64_t FormatsRun(const std::string& path, uint64_t data_offset) {
  uint64_t progress = ~0ull;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    if (::pread(fd, &progress, 8, offsetof(internal::Superblock, format_progress)) != 8) {
      progress = ~0ull;
    }
    ::close(fd);
  }
  const uint64_t chunks = (data_offset - internal::kSuperblockBytes + (1 << 20) - 1) >> 20;
  return progress % chunks == 0 ? progress / chunks : ~0ull;
}

TEST(MultiProcessTest, EightProcessesRacingToFormatAgreeOnOneLayout) {
  for (int round = 0; round < 3; ++round) {
    ScratchRegion sr("race");
    struct Shared {
      std::atomic<int> ready{0};
      std::atomic<bool> go{false};
      std::atomic<uint64_t> epoch[8];
    };
    auto* sh = SharedAnon<Shared>();
    std::vector<pid_t> kids;
    for (int i = 0; i < 8; ++i) {
      kids.push_back(Spawn([&, i] {
        sh->ready++;
        while (!sh->go.load()) {
        }
        std::unique_ptr<Region> r;
        Status s = Region::Open(sr.path(), RaceOptions(), &r);
        if (!s.ok()) {
          std::fprintf(stderr, "child %d: %s\n", i, s.ToString().c_str());
          return 1;
        }
        sh->epoch[i] = r->info().format_epoch;
        // Prove the layout works for everyone: store and find our own block.
        std::vector<uint8_t> d(kSlot);
        FillPattern(i, d.data(), d.size());
        s = r->Store(Ns(r.get()), BlockKey::FromId(i), d.data(), d.size());
        if (!s.ok()) {
          std::fprintf(stderr, "child %d: store: %s\n", i, s.ToString().c_str());
          return 2;
        }
        return 0;
      }));
    }
    WaitFor([&] { return sh->ready.load() == 8; });
    sh->go = true;
    for (pid_t k : kids) EXPECT_EQ(Reap(k), 0);
    for (int i = 1; i < 8; ++i) EXPECT_EQ(sh->epoch[i].load(), sh->epoch[0].load());
    auto r = MustOpen(sr.path(), RaceOptions());
    EXPECT_EQ(FormatsRun(sr.path(), r->info().data_offset), 1u);
    std::vector<BlockKey> keys;
    for (int i = 0; i < 8; ++i) keys.push_back(BlockKey::FromId(i));
    const NamespaceId ns = Ns(r.get());
    for (auto& k : keys) EXPECT_TRUE(r->Lookup(ns, k).ok());
  }
}

// Creators racing on a file that exists but is still empty: its creator
// stopped between its O_EXCL create and growing it (the failpoint), as a
// failed create also leaves it. The others grow the empty file (it holds
// nothing; a file that holds bytes is never grown), exactly one of them
// formats, and everyone attaches to that format, the stopped creator too
// once resumed.
TEST(MultiProcessTest, CreatorsRacingOnAnEmptyFileFormatOnceAndAllAttach) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  for (int round = 0; round < 2; ++round) {
    ScratchRegion sr("emptyrace");
    struct Shared {
      std::atomic<int> ready{0};
      std::atomic<bool> go{false};
      std::atomic<uint64_t> epoch[8];
    };
    auto* sh = SharedAnon<Shared>();
    auto attach = [&](int i) {
      std::unique_ptr<Region> r;
      Status s = Region::Open(sr.path(), RaceOptions(), &r);
      if (!s.ok()) {
        std::fprintf(stderr, "child %d: %s\n", i, s.ToString().c_str());
        return 1;
      }
      sh->epoch[i] = r->info().format_epoch;
      std::vector<uint8_t> d(kSlot);
      FillPattern(i, d.data(), d.size());
      return r->Store(Ns(r.get()), BlockKey::FromId(i), d.data(), d.size()).ok() ? 0 : 2;
    };
    const pid_t creator = Spawn([&] {
      ::setenv("CXLKV_FAILPOINT", "open.after_create:stop", 1);
      internal::ReloadFailpoints();
      return attach(7);
    });
    int st = 0;
    ASSERT_EQ(::waitpid(creator, &st, WUNTRACED), creator);
    ASSERT_TRUE(WIFSTOPPED(st));
    struct stat fst {};
    ASSERT_EQ(::stat(sr.path().c_str(), &fst), 0);
    ASSERT_EQ(fst.st_size, 0);
    std::vector<pid_t> kids;
    for (int i = 0; i < 7; ++i) {
      kids.push_back(Spawn([&, i] {
        sh->ready++;
        while (!sh->go.load()) {
        }
        return attach(i);
      }));
    }
    WaitFor([&] { return sh->ready.load() == 7; });
    sh->go = true;
    for (pid_t k : kids) EXPECT_EQ(Reap(k), 0);
    ::kill(creator, SIGCONT);
    EXPECT_EQ(Reap(creator), 0);
    for (int i = 1; i < 8; ++i) EXPECT_EQ(sh->epoch[i].load(), sh->epoch[0].load());
    auto r = MustOpen(sr.path(), RaceOptions());
    EXPECT_EQ(FormatsRun(sr.path(), r->info().data_offset), 1u);
    const NamespaceId ns = Ns(r.get());
    for (int i = 0; i < 8; ++i) EXPECT_TRUE(r->Lookup(ns, BlockKey::FromId(i)).ok()) << i;
  }
}

TEST(MultiProcessTest, FormatterKilledMidFormatDoesNotWedgeTheRegion) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("fmtkill");
  pid_t k = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "format.mid_zero:kill", 1);
    internal::ReloadFailpoints();
    std::unique_ptr<Region> r;
    (void)Region::Open(sr.path(), TestOptions(8 << 20, kSlot), &r);
    return 0;
  });
  EXPECT_EQ(Reap(k), 128 + SIGKILL);
  // The half-formatted region is taken over after the stall timeout.
  std::unique_ptr<Region> r;
  Status s = Region::Open(sr.path(), TestOptions(8 << 20, kSlot), &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<uint8_t> d(kSlot, 7);
  EXPECT_TRUE(r->Store(Ns(r.get()), BlockKey::FromId(1), d.data(), d.size()).ok());
}

TEST(MultiProcessTest, WriterKilledMidStoreIsNeverServedAndIsReclaimed) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("wkill");
  auto r = MustOpen(sr.path(), TestOptions(8 << 20, kSlot));
  const NamespaceId ns = Ns(r.get());
  const BlockKey key = BlockKey::FromId(77);
  pid_t k = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "write.mid_copy:kill", 1);
    internal::ReloadFailpoints();
    auto w = MustOpen(sr.path(), TestOptions(8 << 20, kSlot));
    std::vector<uint8_t> d(kSlot, 0xAB);
    (void)w->Store(Ns(w.get()), key, d.data(), d.size());
    return 0;
  });
  EXPECT_EQ(Reap(k), 128 + SIGKILL);
  // Half-written: not READY, so not found, and a store of the same key is
  // refused as a lost race while the dead writer still owns it.
  std::vector<uint8_t> buf(kSlot);
  EXPECT_TRUE(r->Load(ns, key, buf.data(), buf.size()).IsNotFound());
  std::vector<uint8_t> d(kSlot);
  FillPattern(77, d.data(), d.size());
  StoreOutcome out;
  EXPECT_TRUE(r->Store(ns, key, d.data(), d.size(), &out).IsBusy());
  // Our heartbeat thread judges the writer dead and reclaims its slot.
  WaitFor([&] { return r->RegionCounters()[Counter::kReclaimedSlots] >= 1; });
  EXPECT_EQ(r->RegionCounters()[Counter::kReclaimedSlots], 1u);
  EXPECT_EQ(r->Participants().size(), 1u);
  ASSERT_TRUE(r->Store(ns, key, d.data(), d.size(), &out).ok());
  EXPECT_EQ(out, StoreOutcome::kStored);
  ASSERT_TRUE(r->Load(ns, key, buf.data(), buf.size()).ok());
  EXPECT_EQ(buf, d);
}

TEST(MultiProcessTest, WriterKilledBeforeCommitIsReclaimedByAnotherProcess) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  // Same window, but the reclaimer is a third process (not the test).
  ScratchRegion sr("wkill2");
  {
    auto setup = MustOpen(sr.path(), TestOptions(8 << 20, kSlot));
    Ns(setup.get());
  }
  pid_t w = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "write.before_commit:kill", 1);
    internal::ReloadFailpoints();
    auto r = MustOpen(sr.path(), TestOptions(8 << 20, kSlot));
    std::vector<uint8_t> d(kSlot, 1);
    (void)r->Store(Ns(r.get()), BlockKey::FromId(5), d.data(), d.size());
    return 0;
  });
  EXPECT_EQ(Reap(w), 128 + SIGKILL);
  pid_t reaper = Spawn([&] {
    auto r = MustOpen(sr.path(), TestOptions(8 << 20, kSlot));
    WaitFor([&] { return r->RegionCounters()[Counter::kReclaimedSlots] >= 1; });
    return r->RegionCounters()[Counter::kReclaimedSlots] == 1 ? 0 : 3;
  });
  EXPECT_EQ(Reap(reaper), 0);
  RegionOptions o = TestOptions(8 << 20, kSlot);
  o.register_participant = false;
  auto r = MustOpen(sr.path(), o);
  EXPECT_TRUE(r->Lookup(0, BlockKey::FromId(5)).IsNotFound());
  EXPECT_TRUE(r->Participants().empty());
}

TEST(MultiProcessTest, ReaderKilledWhilePinningHasItsPinsReleased) {
  ScratchRegion sr("rkill");
  auto r = MustOpen(sr.path(), TestOptions(8 << 20, kSlot));
  const NamespaceId ns = Ns(r.get());
  std::vector<BlockKey> keys;
  std::vector<uint8_t> d(kSlot, 3);
  for (int i = 0; i < 5; ++i) {
    keys.push_back(BlockKey::FromId(i));
    ASSERT_TRUE(r->Store(ns, keys.back(), d.data(), d.size()).ok());
  }
  struct Shared {
    std::atomic<int> pinned{0};
  };
  auto* sh = SharedAnon<Shared>();
  pid_t k = Spawn([&] {
    auto rr = MustOpen(sr.path(), TestOptions(8 << 20, kSlot));
    PinSet pins;
    if (!rr->PinPrefix(Ns(rr.get()), keys.data(), keys.size(), &pins).ok()) return 1;
    sh->pinned = static_cast<int>(pins.size());
    ::raise(SIGSTOP);  // parked holding its pins; the parent kills it
    return 0;
  });
  WaitFor([&] { return sh->pinned.load() == 5; });
  ASSERT_EQ(sh->pinned.load(), 5);
  EXPECT_TRUE(r->Drop(ns, keys[0]).IsBusy());
  ::kill(k, SIGKILL);
  EXPECT_EQ(Reap(k), 128 + SIGKILL);
  WaitFor([&] { return r->Drop(ns, keys[0]).ok(); });
  EXPECT_TRUE(r->Lookup(ns, keys[0]).IsNotFound());
  EXPECT_EQ(r->RegionCounters()[Counter::kReleasedPins], 5u);
  EXPECT_TRUE(r->Drop(ns, keys[4]).ok());
}

TEST(MultiProcessTest, PausedParticipantIsFencedAfterReclaim) {
  ScratchRegion sr("fence");
  auto r = MustOpen(sr.path(), TestOptions(8 << 20, kSlot));
  const NamespaceId ns = Ns(r.get());
  struct Shared {
    std::atomic<int> stage{0};
    std::atomic<int> result{-1};
  };
  auto* sh = SharedAnon<Shared>();
  pid_t k = Spawn([&] {
    auto w = MustOpen(sr.path(), TestOptions(8 << 20, kSlot));
    sh->stage = 1;
    ::raise(SIGSTOP);
    // Resumed after being reclaimed: every write must be refused.
    std::this_thread::sleep_for(50ms);  // let our heartbeat thread notice
    std::vector<uint8_t> d(kSlot, 9);
    Status s = w->Store(Ns(w.get()), BlockKey::FromId(1), d.data(), d.size());
    sh->result = s.IsBusy() ? 1 : 0;
    return 0;
  });
  WaitFor([&] { return sh->stage.load() == 1; });
  WaitFor([&] { return r->Participants().size() == 1; });
  ASSERT_EQ(r->Participants().size(), 1u);  // the paused one was reclaimed
  ::kill(k, SIGCONT);
  EXPECT_EQ(Reap(k), 0);
  EXPECT_EQ(sh->result.load(), 1);
  EXPECT_TRUE(r->Lookup(ns, BlockKey::FromId(1)).IsNotFound());
}

// A paused reader is reclaimed, its index reused by a newcomer that pins the
// same block; when the old reader resumes and releases its pins it must not
// clear the newcomer's pin bit.
TEST(MultiProcessTest, ResumedReclaimedReaderDoesNotReleaseANewcomersPin) {
  ScratchRegion sr("zpin");
  auto r = MustOpen(sr.path(), TestOptions(8 << 20, kSlot));
  const NamespaceId ns = Ns(r.get());
  const BlockKey key = BlockKey::FromId(3);
  std::vector<uint8_t> d(kSlot, 3);
  ASSERT_TRUE(r->Store(ns, key, d.data(), d.size()).ok());
  struct Shared {
    std::atomic<int> zombie_index{-1}, newcomer_index{-1};
    std::atomic<bool> done{false};
  };
  auto* sh = SharedAnon<Shared>();
  pid_t z = Spawn([&] {
    auto rr = MustOpen(sr.path(), TestOptions(8 << 20, kSlot));
    PinSet pins;
    if (!rr->PinPrefix(Ns(rr.get()), &key, 1, &pins).ok() || pins.size() != 1) return 1;
    sh->zombie_index = rr->info().participant;
    ::raise(SIGSTOP);
    pins.Release();  // after being reclaimed
    return 0;
  });
  WaitFor([&] { return sh->zombie_index.load() >= 0; });
  WaitFor([&] { return r->Participants().size() == 1; });  // reclaimed
  ASSERT_EQ(r->Participants().size(), 1u);
  pid_t n = Spawn([&] {
    auto rr = MustOpen(sr.path(), TestOptions(8 << 20, kSlot));
    PinSet pins;
    if (!rr->PinPrefix(Ns(rr.get()), &key, 1, &pins).ok() || pins.size() != 1) return 1;
    sh->newcomer_index = rr->info().participant;
    while (!sh->done.load()) std::this_thread::sleep_for(2ms);
    return 0;
  });
  WaitFor([&] { return sh->newcomer_index.load() >= 0; });
  EXPECT_EQ(sh->newcomer_index.load(), sh->zombie_index.load());  // the index was reused
  ::kill(z, SIGCONT);
  EXPECT_EQ(Reap(z), 0);
  EXPECT_TRUE(r->Drop(ns, key).IsBusy());  // the newcomer's pin holds
  sh->done = true;
  EXPECT_EQ(Reap(n), 0);
  EXPECT_TRUE(r->Drop(ns, key).ok());
}

// Every participant entry held by a dead process: the next opener watches
// them for a liveness timeout, reclaims them and registers.
TEST(MultiProcessTest, RegistryFullOfDeadProcessesIsReclaimedByTheNextOpener) {
  ScratchRegion sr("full");
  { auto r = MustOpen(sr.path(), TestOptions(8 << 20, kSlot)); }
  std::vector<pid_t> kids;
  struct Shared {
    std::atomic<int> attached{0};
  };
  auto* sh = SharedAnon<Shared>();
  for (int i = 0; i < 64; ++i) {
    kids.push_back(Spawn([&] {
      auto r = MustOpen(sr.path(), TestOptions(8 << 20, kSlot));
      sh->attached++;
      ::raise(SIGSTOP);
      return 0;
    }));
  }
  WaitFor([&] { return sh->attached.load() == 64; }, 20000ms);
  ASSERT_EQ(sh->attached.load(), 64);
  for (pid_t k : kids) {
    ::kill(k, SIGKILL);
    Reap(k);
  }
  std::unique_ptr<Region> r;
  Status s = Region::Open(sr.path(), TestOptions(8 << 20, kSlot), &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r->Participants().size(), 1u);
}

// >= 4 processes storing and loading the same keys for >= 10 s, with heavy
// eviction (the region holds a fraction of the keys) and two extra
// processes that are disturbed at random and restarted: SIGKILLed, or
// (with pauses) SIGSTOPped past the liveness timeout (so they are reclaimed
// while paused) or for less than it, then SIGCONTed. Every loaded byte is
// compared with the block's pattern. A worker told that it was fenced
// (judged dead) reopens the region, as a real client would.
struct StressShared {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> hits{0}, stores{0}, wrong{0}, crc{0}, reopens{0};
  std::atomic<uint64_t> store_errors{0}, load_errors{0}, pinned_misses{0}, pinned_misses_fenced{0};
};

int StressWorker(const std::string& path, const RegionOptions& opts, uint64_t block,
                 StressShared* sh, int seed) {
  std::unique_ptr<Region> r;
  if (!Region::Open(path, opts, &r).ok()) return 1;
  NamespaceId ns = Ns(r.get());
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> buf(block), want(block);
  auto reopen = [&] {
    r.reset();
    sh->reopens++;
    if (!Region::Open(path, opts, &r).ok()) return false;
    ns = Ns(r.get());
    return true;
  };
  while (!sh->stop.load()) {
    const uint64_t id = rng() % 1000;
    const BlockKey key = BlockKey::FromId(id);
    const int op = rng() % 3;
    if (op == 0) {
      FillPattern(id, want.data(), want.size());
      StoreOutcome out;
      Status s = r->Store(ns, key, want.data(), want.size(), &out);
      if (s.ok()) {
        sh->stores++;
      } else if (out == StoreOutcome::kFenced) {
        if (!s.IsBusy() || !reopen()) return 2;
      } else if (!s.IsBusy() && !s.IsNoSpace()) {
        sh->store_errors++;
      }
    } else if (op == 1) {
      Status s = r->Load(ns, key, buf.data(), buf.size());
      if (s.ok()) {
        FillPattern(id, want.data(), want.size());
        if (buf != want) sh->wrong++;
        sh->hits++;
      } else if (s.IsCorruption()) {
        sh->crc++;
      } else if (!s.IsNotFound()) {
        sh->load_errors++;
      }
    } else {
      std::vector<BlockKey> chain;
      for (int j = 0; j < 4; ++j) chain.push_back(BlockKey::FromId((id + j) % 1000));
      PinSet pins;
      Status ps = r->PinPrefix(ns, chain.data(), chain.size(), &pins);
      if (ps.IsBusy()) {  // fenced
        if (!reopen()) return 3;
        continue;
      }
      if (ps.ok() && pins.size() > 0) {
        Status s = r->Load(ns, chain[0], buf.data(), buf.size());
        FillPattern(id, want.data(), want.size());  // chain[0] is `key`
        if (s.ok()) {
          if (buf != want) sh->wrong++;
        } else {
          // A pinned block cannot be evicted, unless we were judged dead
          // (and our pins released) since we pinned it.
          PinSet probe;
          if (r->PinPrefix(ns, chain.data(), 1, &probe).IsBusy()) {
            sh->pinned_misses_fenced++;
          } else {
            sh->pinned_misses++;
          }
        }
      }
    }
  }
  return 0;
}

class StressTest : public testing::TestWithParam<bool> {};

TEST_P(StressTest, SameKeysUnderKillsAndPausesServeOnlyExactBytes) {
  const bool pauses = GetParam();
  ScratchRegion sr("stress");
  const uint64_t kBlock = 8192;
  const RegionOptions opts = TestOptions(2 << 20, kBlock);
  {
    auto r = MustOpen(sr.path(), opts);
    Ns(r.get());
  }
  auto* sh = SharedAnon<StressShared>();
  std::vector<pid_t> steady;
  for (int i = 0; i < 4; ++i) {
    steady.push_back(Spawn([&, i] { return StressWorker(sr.path(), opts, kBlock, sh, i + 1); }));
  }
  std::mt19937 rng(7);
  const auto end = std::chrono::steady_clock::now() + 10s;
  int spawned = 0;
  auto spawn_victim = [&] {
    const int seed = 100 + spawned++;
    return Spawn([&, seed] { return StressWorker(sr.path(), opts, kBlock, sh, seed); });
  };
  pid_t victims[2] = {spawn_victim(), spawn_victim()};
  int kills = 0, long_pauses = 0, short_pauses = 0;
  // Ten seconds, and then on until the run has had the disturbances it is
  // meant to have: on a loaded machine ten seconds can hold too few of them
  // (seen: 3 long pauses), and the checks below would test less. The cap
  // keeps a starved run finite; the counts are then checked below.
  const auto cap = end + 50s;
  auto enough = [&] { return kills > (pauses ? 3 : 10) && (!pauses || long_pauses > 3); };
  while (std::chrono::steady_clock::now() < end ||
         (!enough() && std::chrono::steady_clock::now() < cap)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 300));
    const int v = rng() % 2;
    const int action = pauses ? rng() % 3 : 0;
    if (action == 0) {
      ::kill(victims[v], SIGKILL);
      Reap(victims[v]);
      ++kills;
      victims[v] = spawn_victim();
    } else {
      // Past the liveness timeout (150 ms): reclaimed while paused. Or
      // well under it: it must simply carry on.
      const int ms = action == 1 ? 250 + rng() % 250 : 20;
      ::kill(victims[v], SIGSTOP);
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      ::kill(victims[v], SIGCONT);
      ++(action == 1 ? long_pauses : short_pauses);
    }
  }
  sh->stop = true;
  for (pid_t v : victims) EXPECT_EQ(Reap(v), 0);
  for (pid_t p : steady) EXPECT_EQ(Reap(p), 0);
  EXPECT_EQ(sh->wrong.load(), 0u);
  EXPECT_EQ(sh->store_errors.load(), 0u);
  EXPECT_EQ(sh->load_errors.load(), 0u);
  // A pin keeps a block from eviction, not from a CRC drop: with pauses, a
  // resumed zombie's late bytes or fields can land in a pinned slot, and the
  // first reader to check it drops it (pins do not protect corrupt blocks).
  // So with pauses every pinned miss of a live worker must be explained by
  // such a drop; without pauses there are none.
  //
  // A loaded machine pauses processes too: a worker the scheduler starves
  // past the liveness timeout is judged dead and fenced (it reopens), and
  // its late stores are a zombie's. Without our pauses and without such a
  // fence nothing ever writes into a slot it does not own, so there is no
  // CRC failure and no pinned miss; with a fence the run is held to the
  // pauses rule below instead. (Seen at load 13 on 2 cores: 15 reopens, one
  // pinned miss of a live worker explained by a CRC drop, on the CLOCK and
  // the LRU eviction alike.)
  const bool paused = pauses || sh->reopens.load() > 0;
  if (!paused) {
    EXPECT_EQ(sh->pinned_misses.load(), 0u);
    EXPECT_EQ(sh->crc.load(), 0u);
  }
  EXPECT_GT(sh->hits.load(), 1000u);
  EXPECT_GT(kills, pauses ? 3 : 10);
  if (pauses) {
    EXPECT_GT(long_pauses, 3);
  }
  // Every killed participant is eventually reclaimed; nothing stays WRITING.
  auto r = MustOpen(sr.path(), opts);
  WaitFor([&] { return r->Participants().size() == 1; }, 3000ms);
  EXPECT_EQ(r->Participants().size(), 1u);
  if (paused) {
    EXPECT_LE(sh->pinned_misses.load(), r->RegionCounters()[Counter::kCrcFailures])
        << "a pinned block of a live worker vanished without a CRC drop";
  }
  Region::ScrubReport rep;
  ASSERT_TRUE(r->Verify(true, &rep).ok());
  if (!paused) {
    EXPECT_EQ(rep.crc_failures, 0u);
  }
  // Layout 5: no data slot leaked by the dead, the reclaimed or the
  // resumed (every data word FREE, or HELD by exactly one READY entry).
  WaitFor([&] { return DataSlotViolation(r.get(), true).empty(); }, 3000ms);
  EXPECT_EQ(DataSlotViolation(r.get(), true), "");
  // After the scrub dropped what zombies left, every key is storable and
  // loads exactly.
  const NamespaceId ns = Ns(r.get());
  std::vector<uint8_t> want(kBlock), buf(kBlock);
  for (uint64_t id = 0; id < 1000; id += 37) {
    FillPattern(id, want.data(), want.size());
    StoreOutcome out;
    ASSERT_TRUE(r->Store(ns, BlockKey::FromId(id), want.data(), want.size(), &out).ok())
        << "id " << id << " outcome " << int(out);
    ASSERT_TRUE(r->Load(ns, BlockKey::FromId(id), buf.data(), buf.size()).ok()) << id;
    EXPECT_EQ(buf, want);
  }
  std::printf(
      "stress%s: %llu hits, %llu stores, %d kills, %d long + %d short pauses, %llu reopens "
      "(fenced), %llu crc misses, %llu pinned misses of fenced workers, %llu of live ones, "
      "%llu evictions, %llu "
      "reclaimed slots, %llu fenced stores, scrub dropped %llu\n",
      pauses ? " with pauses" : "", (unsigned long long)sh->hits.load(),
      (unsigned long long)sh->stores.load(), kills, long_pauses, short_pauses,
      (unsigned long long)sh->reopens.load(), (unsigned long long)sh->crc.load(),
      (unsigned long long)sh->pinned_misses_fenced.load(),
      (unsigned long long)sh->pinned_misses.load(),
      (unsigned long long)r->RegionCounters()[Counter::kEvictions],
      (unsigned long long)r->RegionCounters()[Counter::kReclaimedSlots],
      (unsigned long long)r->RegionCounters()[Counter::kStoreFenced],
      (unsigned long long)rep.dropped);
}

INSTANTIATE_TEST_SUITE_P(Disturbances, StressTest, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "KillsAndPauses" : "Kills");
                         });

// Kill -9 at every failpoint of the hardware engine's write, eviction, read
// and pin paths, over and over, while other processes store and read the
// same keys in a full region (nearly every store evicts): each short-lived
// process dies at the first hit of its one failpoint (`name:kill`),
// holding whatever that step holds (a WRITING entry, a MOVING data word,
// an EVICTING victim, a freed victim whose data word is not moved yet, a
// READY entry whose data word is still MOVING, a pin bit), and the next
// one is started with the next failpoint. Every loaded byte is checked,
// and at the end, once the dead are reclaimed, no data slot is leaked:
// every data word is FREE or HELD by exactly one READY entry. Until every
// failpoint has killed a process and for at least 1.5 s (30 s under
// CXLKV_FULL=1, `scripts/test.sh --full`).
constexpr const char* kKillPoints[] = {
    "write.before_claim", "write.after_claim", "write.mid_copy", "write.before_commit",
    "write.after_ready",  "evict.after_take",  "evict.mid_move", "read.after_data",
    "read.mid_copy",      "pin.before_pin",    "pin.after_pin",
};

TEST(MultiProcessTest, FullRegionWithKillsAtEveryFailpointServesExactBytesAndLeaksNoDataSlot) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("fpkill");
  const uint64_t kBlock = 8192;
  const RegionOptions opts = TestOptions(1 << 20, kBlock);
  {
    auto r = MustOpen(sr.path(), opts);
    Ns(r.get());
    ASSERT_LT(r->info().num_slots, 200u);  // keys 0..999: a full region
  }
  auto* sh = SharedAnon<StressShared>();
  std::vector<pid_t> steady;
  for (int i = 0; i < 3; ++i) {
    steady.push_back(Spawn([&, i] { return StressWorker(sr.path(), opts, kBlock, sh, i + 1); }));
  }
  constexpr int kPoints = sizeof kKillPoints / sizeof kKillPoints[0];
  const char* full = std::getenv("CXLKV_FULL");
  const auto min_run = full != nullptr && std::string(full) == "1" ? 30s : 800ms;
  const auto start = std::chrono::steady_clock::now();
  const auto cap = start + min_run + 40s;
  int deaths[kPoints] = {};
  int spawned = 0, outlived = 0, other_exits = 0;
  struct Victim {
    pid_t pid = -1;
    int point = 0;
    std::chrono::steady_clock::time_point since;
  };
  auto spawn_victim = [&](Victim* v) {
    v->point = spawned++ % kPoints;
    const std::string fp = std::string(kKillPoints[v->point]) + ":kill";
    const int seed = 1000 + spawned;
    v->pid = Spawn([&, fp, seed] {
      ::setenv("CXLKV_FAILPOINT", fp.c_str(), 1);
      internal::ReloadFailpoints();
      return StressWorker(sr.path(), opts, kBlock, sh, seed);
    });
    v->since = std::chrono::steady_clock::now();
  };
  Victim victims[2];
  for (Victim& v : victims) spawn_victim(&v);
  auto done = [&] {
    const auto now = std::chrono::steady_clock::now();
    if (now > cap) return true;
    if (now - start < min_run) return false;
    for (int d : deaths)
      if (d == 0) return false;
    return true;
  };
  while (!done()) {
    std::this_thread::sleep_for(25ms);  // a bounded number of dead at once
    for (Victim& v : victims) {
      int st = 0;
      const pid_t got = ::waitpid(v.pid, &st, WNOHANG);
      if (got == 0) {
        // A process that never reached its step (no hit of it yet) is
        // killed anywhere and replaced by the next failpoint's.
        if (std::chrono::steady_clock::now() - v.since < 500ms) continue;
        ::kill(v.pid, SIGKILL);
        Reap(v.pid);
        ++outlived;
      } else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) {
        ++deaths[v.point];
      } else {
        ++other_exits;
      }
      spawn_victim(&v);
    }
  }
  sh->stop = true;
  for (Victim& v : victims) {
    ::kill(v.pid, SIGKILL);
    Reap(v.pid);
  }
  for (pid_t p : steady) EXPECT_EQ(Reap(p), 0);
  std::string per_point;
  for (int i = 0; i < kPoints; ++i) {
    EXPECT_GT(deaths[i], 0) << "no process died at " << kKillPoints[i];
    per_point += std::string(i ? ", " : "") + kKillPoints[i] + " " + std::to_string(deaths[i]);
  }
  EXPECT_EQ(other_exits, 0);
  EXPECT_EQ(sh->wrong.load(), 0u);
  EXPECT_EQ(sh->store_errors.load(), 0u);
  EXPECT_EQ(sh->load_errors.load(), 0u);
  EXPECT_GT(sh->hits.load(), 0u);
  // Every dead process reclaimed; then every data word FREE or HELD by
  // exactly one READY entry (MOVING words of the dead settled, none lost).
  auto r = MustOpen(sr.path(), opts);
  WaitFor([&] { return r->Participants().size() == 1; }, 3000ms);
  EXPECT_EQ(r->Participants().size(), 1u);
  WaitFor([&] { return DataSlotViolation(r.get(), true).empty(); }, 3000ms);
  EXPECT_EQ(DataSlotViolation(r.get(), true), "");
  // The same as `cxlkv inspect` counts it: HELD words = READY entries.
  const Occupancy occ = ScanOccupancy(*r);
  EXPECT_EQ(occ.data_held, occ.ready);
  EXPECT_EQ(occ.data_moving + occ.data_unsettled + occ.ready_off_data, 0u);
  EXPECT_EQ(occ.data_held + occ.data_free, r->info().num_slots);
  // No process was paused, so no late write of a fenced one can exist,
  // unless the machine starved a worker past the liveness timeout.
  Region::ScrubReport rep;
  ASSERT_TRUE(r->Verify(true, &rep).ok());
  if (sh->reopens.load() == 0) {
    EXPECT_EQ(rep.crc_failures, 0u);
    EXPECT_EQ(sh->crc.load(), 0u);
    EXPECT_EQ(sh->pinned_misses.load(), 0u);
  }
  const NamespaceId ns = Ns(r.get());
  std::vector<uint8_t> want(kBlock), buf(kBlock);
  for (uint64_t id = 0; id < 1000; id += 37) {
    FillPattern(id, want.data(), want.size());
    StoreOutcome out;
    ASSERT_TRUE(r->Store(ns, BlockKey::FromId(id), want.data(), want.size(), &out).ok())
        << "id " << id << " outcome " << int(out);
    ASSERT_TRUE(r->Load(ns, BlockKey::FromId(id), buf.data(), buf.size()).ok()) << id;
    EXPECT_EQ(buf, want);
  }
  EXPECT_EQ(DataSlotViolation(r.get(), true), "");
  std::printf(
      "failpoint kills: %s; %d outlived their step; %llu hits, %llu stores, %llu evictions, "
      "%llu reclaimed slots, %llu reopens\n",
      per_point.c_str(), outlived, (unsigned long long)sh->hits.load(),
      (unsigned long long)sh->stores.load(),
      (unsigned long long)r->RegionCounters()[Counter::kEvictions],
      (unsigned long long)r->RegionCounters()[Counter::kReclaimedSlots],
      (unsigned long long)sh->reopens.load());
}

// A reclaimer killed halfway through its sweep of a dead writer (which died
// between READY and settling its data word HELD, its victim's entry freed):
// the next reclaimer takes the sweep over, and the data words end settled.
TEST(MultiProcessTest, ReclaimerKilledMidSweepIsTakenOverAndDataWordsSettle) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("rsweep");
  const RegionOptions opts = TestOptions(256 << 10, kSlot);
  uint64_t n = 0;
  {
    auto r = MustOpen(sr.path(), opts);
    const NamespaceId ns = Ns(r.get());
    n = r->info().num_slots;
    std::vector<uint8_t> d(kSlot);
    for (uint64_t i = 0; i < n; ++i) {
      FillPattern(i, d.data(), d.size());
      ASSERT_TRUE(r->Store(ns, BlockKey::FromId(i), d.data(), d.size()).ok());
    }
  }
  // Two writers die holding what they held: one mid-move (its victim freed,
  // the victim's data word not yet moved), one between READY and settle.
  uint64_t id = 5000;
  for (const char* fp : {"evict.mid_move:kill", "write.after_ready:kill"}) {
    pid_t w = Spawn([&] {
      ::setenv("CXLKV_FAILPOINT", fp, 1);
      internal::ReloadFailpoints();
      auto r = MustOpen(sr.path(), opts);
      std::vector<uint8_t> d(kSlot);
      FillPattern(id, d.data(), d.size());
      (void)r->Store(Ns(r.get()), BlockKey::FromId(id), d.data(), d.size());
      return 0;
    });
    ++id;
    EXPECT_EQ(Reap(w), 128 + SIGKILL) << fp;
  }
  pid_t reclaimer = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "reclaim.mid_sweep:kill", 1);
    internal::ReloadFailpoints();
    auto r = MustOpen(sr.path(), opts);
    std::this_thread::sleep_for(5s);  // killed by its first sweep
    return 0;
  });
  EXPECT_EQ(Reap(reclaimer), 128 + SIGKILL);
  auto r = MustOpen(sr.path(), opts);
  WaitFor([&] { return r->Participants().size() == 1; }, 3000ms);
  EXPECT_EQ(r->Participants().size(), 1u);
  WaitFor([&] { return DataSlotViolation(r.get(), true).empty(); }, 3000ms);
  EXPECT_EQ(DataSlotViolation(r.get(), true), "");
  // The block committed before its writer died reads back whole.
  const NamespaceId ns = Ns(r.get());
  std::vector<uint8_t> want(kSlot), buf(kSlot);
  FillPattern(5001, want.data(), want.size());
  ASSERT_TRUE(r->Load(ns, BlockKey::FromId(5001), buf.data(), buf.size()).ok());
  EXPECT_EQ(buf, want);
  for (uint64_t i = 0; i < n; ++i) {
    if (r->Load(ns, BlockKey::FromId(i), buf.data(), buf.size()).ok()) {
      FillPattern(i, want.data(), want.size());
      EXPECT_EQ(buf, want) << i;
    }
  }
}

// A vandal with write access to the region damages layout 5's index and
// data words while processes store and read the same keys in a full region
// (every store evicts): it flips bits of entries' data slot indexes and
// generations, of data words and tags, copies data words onto other data
// slots and points entries at other entries' data slots. Every loaded byte
// must still be exact (the CRC binds the data slot and the generation), no
// process may crash, and once the vandal stops, the orphan sweep of the
// participants left repairs the accounting: every data word FREE or HELD
// by exactly one READY entry, and every key storable again.
TEST(MultiProcessTest, VandalDamagingIndexAndDataWordsUnderLoadCostsOnlyMisses) {
  ScratchRegion sr("vandal");
  const uint64_t kBlock = 8192;
  const RegionOptions opts = TestOptions(1 << 20, kBlock);
  auto r = MustOpen(sr.path(), opts);
  Ns(r.get());
  auto* sh = SharedAnon<StressShared>();
  std::vector<pid_t> workers;
  for (int i = 0; i < 3; ++i) {
    workers.push_back(Spawn([&, i] { return StressWorker(sr.path(), opts, kBlock, sh, 50 + i); }));
  }
  std::unique_ptr<internal::Mapping> map;
  ASSERT_TRUE(internal::Mapping::Open(sr.path(), 0, 0, false, "/sys", &map).ok());
  const auto* sb = reinterpret_cast<const internal::Superblock*>(map->base());
  auto* meta = reinterpret_cast<internal::SlotMeta*>(map->base() + sb->meta_off);
  auto* tags = reinterpret_cast<internal::SetTags*>(map->base() + sb->tags_off);
  auto* dwords = reinterpret_cast<std::atomic<uint64_t>*>(map->base() + sb->dwords_off);
  const uint64_t slots = sb->num_slots, entries = sb->num_entries;
  std::mt19937_64 rng(99);
  uint64_t acts = 0;
  auto act = [&] {
    const uint64_t e = rng() % entries, d = rng() % slots;
    switch (rng() % 6) {
      case 0:
        meta[e].data.fetch_xor(1u << (rng() % 32));
        break;
      case 1:
        meta[e].data.store(meta[rng() % entries].data.load());
        break;
      case 2:
        dwords[d].fetch_xor(1ull << (rng() % 64));
        break;
      case 3:
        dwords[d].store(dwords[rng() % slots].load());
        break;
      case 4:
        tags[e / sb->ways].tag[e % sb->ways].fetch_xor(1u << (rng() % 32));
        break;
      case 5: {
        // A READY entry's generation (bits 16..63): a block reused
        // under its readers, as far as they can tell.
        uint64_t w = meta[e].state.load();
        if (internal::WordState(w) == static_cast<uint8_t>(internal::SlotState::kReady)) {
          meta[e].state.compare_exchange_strong(w, w ^ (1ull << (16 + rng() % 48)));
        }
        break;
      }
    }
    ++acts;
  };
  const auto end = std::chrono::steady_clock::now() + 1s;
  while (std::chrono::steady_clock::now() < end) {
    act();
    std::this_thread::sleep_for(200us);
  }
  sh->stop = true;
  for (pid_t p : workers) EXPECT_EQ(Reap(p), 0);
  // Then damage the region at rest, where no store or eviction replaces
  // what was damaged: what is left is the sweep's to repair.
  for (int i = 0; i < 300; ++i) act();
  EXPECT_EQ(sh->wrong.load(), 0u) << "bytes served that were not the key's";
  EXPECT_EQ(sh->store_errors.load(), 0u);
  EXPECT_EQ(sh->load_errors.load(), 0u);
  EXPECT_GT(sh->hits.load(), 0u);
  EXPECT_GT(acts, 500u);
  // Our sweep repairs it (a few liveness timeouts).
  WaitFor([&] { return DataSlotViolation(r.get(), true).empty(); }, 5000ms);
  EXPECT_EQ(DataSlotViolation(r.get(), true), "");
  const NamespaceId ns = Ns(r.get());
  std::vector<uint8_t> want(kBlock), buf(kBlock);
  for (uint64_t id = 0; id < 1000; id += 37) {
    FillPattern(id, want.data(), want.size());
    StoreOutcome out = StoreOutcome::kRefused;
    bool stored = false;
    WaitFor(
        [&] {
          stored = r->Store(ns, BlockKey::FromId(id), want.data(), want.size(), &out).ok() &&
                   (out == StoreOutcome::kStored || out == StoreOutcome::kDuplicate);
          return stored;
        },
        3000ms);
    ASSERT_TRUE(stored) << "id " << id << " outcome " << int(out);
    Status s = r->Load(ns, BlockKey::FromId(id), buf.data(), buf.size());
    if (s.ok()) {
      EXPECT_EQ(buf, want);
    } else {
      // A kDuplicate of a copy the vandal damaged: that load dropped it.
      EXPECT_TRUE(s.IsCorruption() || s.IsNotFound()) << id << ": " << s.ToString();
      ASSERT_TRUE(r->Store(ns, BlockKey::FromId(id), want.data(), want.size(), &out).ok());
      ASSERT_TRUE(r->Load(ns, BlockKey::FromId(id), buf.data(), buf.size()).ok()) << id;
      EXPECT_EQ(buf, want);
    }
  }
  EXPECT_EQ(DataSlotViolation(r.get(), true), "");
  std::printf("vandal: %llu acts; %llu hits, %llu stores, %llu crc misses, %llu evictions\n",
              (unsigned long long)acts, (unsigned long long)sh->hits.load(),
              (unsigned long long)sh->stores.load(), (unsigned long long)sh->crc.load(),
              (unsigned long long)r->RegionCounters()[Counter::kEvictions]);
}

}  // namespace
}  // namespace cxlkv
