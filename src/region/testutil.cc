// Copyright cxlkv authors.
#include "testutil.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "failpoint.h"
#include "region_impl.h"
#include "region_internal.h"

namespace cxlkv::test {

ScratchRegion::ScratchRegion(const std::string& tag) {
  static std::atomic<int> counter{0};
  ::mkdir("/dev/shm/cxlkv-test", 0770);
  path_ = "/dev/shm/cxlkv-test/" + tag + "-" + std::to_string(::getpid()) + "-" +
          std::to_string(counter.fetch_add(1));
  ::unlink(path_.c_str());
}

ScratchRegion::~ScratchRegion() { ::unlink(path_.c_str()); }

RegionOptions TestOptions(uint64_t size, uint64_t slot_size) {
  RegionOptions o;
  o.size = size;
  o.config.slot_size = slot_size;
  o.config.hash_algorithm = "test";
  o.config.hash_seed_fingerprint = 42;
  o.heartbeat_interval_ns = 5'000'000;
  o.liveness_timeout_ns = 150'000'000;
  o.format_stall_ns = 300'000'000;
  o.prefault = Prefault::kNone;
  return o;
}

std::unique_ptr<Region> MustOpen(const std::string& path, const RegionOptions& o) {
  std::unique_ptr<Region> r;
  Status s = Region::Open(path, o, &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return r;
}

void FillPattern(uint64_t id, void* dst, size_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  uint64_t x = id * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(x >> (8 * (i % 8)));
}

pid_t Spawn(const std::function<int()>& fn) {
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // see the header: never a stopped job of the runner's group
    // Out of the runner's group, ^C and a kill of the group no longer reach
    // the child: it dies with the process that spawned it instead (one that
    // died before this line is seen as a new parent).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    int rc = 1;
    try {
      rc = fn();
    } catch (...) {
      rc = 99;
    }
    ::_exit(rc);
  }
  return pid;
}

int Reap(pid_t pid) {
  int st = 0;
  if (::waitpid(pid, &st, 0) != pid) return -1;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}

bool WaitStopped(pid_t pid) {
  int st = 0;
  for (;;) {
    if (::waitpid(pid, &st, WUNTRACED) != pid) return false;
    if (WIFSTOPPED(st)) return true;
    if (WIFEXITED(st) || WIFSIGNALED(st)) return false;
  }
}

void* SharedAnonBytes(size_t n) {
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  return p;
}

bool WaitFor(const std::function<bool()>& cond, int limit_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  while (!cond()) {
    if (std::chrono::steady_clock::now() >= end) return cond();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

ChainAging AgeAChain(Region* r, NamespaceId ns, uint64_t slot_bytes) {
  ChainAging a;
  const RegionInfo& info = r->info();
  const uint32_t parts = info.config.software_partitions;
  a.slots = parts > 0 ? info.num_slots / parts / info.ways * info.ways : info.num_slots;
  std::vector<uint8_t> b(slot_bytes);
  FillPattern(24, b.data(), b.size());
  auto there = [&](uint64_t id) {
    return RegionInternal::FindReadySlot(r, ns, BlockKey::FromId(id)) >= 0;
  };
  // In a test build the eviction clocks stand still for the whole test, so
  // only age_by moves them and every block's age is fixed by the steps below,
  // not by how long each step took (a run under ThreadSanitizer on a loaded
  // machine is many times slower than a quiet one).
  struct ClockHold {
    ClockHold() { internal::HoldEvictionClock(true); }
    ~ClockHold() { internal::HoldEvictionClock(false); }
  } hold;
  constexpr uint64_t kFill = 10'000'000, kChain = 20'000'000, kNewer = 30'000'000, kLen = 127;
  const uint64_t fill = a.slots * 95 / 100;
  for (uint64_t i = 0; i < fill; ++i) {
    EXPECT_TRUE(r->Store(ns, BlockKey::FromId(kFill + i), b.data(), b.size()).ok());
  }
  // Ages apart by more than the coarse clock's tick, and the fill much older
  // than the chain (a chain's depth counts at most about twice its age). In
  // a test build the held eviction clocks move forward instead of sleeping:
  // the fill 100 s older than the chain, the chain 10 s older than what
  // follows, whatever the run itself takes (ThreadSanitizer on a loaded
  // machine took longer than a 100 ms sleep, and the chain's deep chunks
  // outranked the fill). Without failpoints: real sleeps.
  auto age_by = [](uint32_t ms, uint32_t fallback_ms) {
    if (internal::kFailpointsBuilt) {
      internal::AdvanceEvictionClock(ms);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(fallback_ms));
    }
  };
  age_by(100'000, 100);
  for (uint32_t d = 0; d < kLen; ++d) {
    EXPECT_TRUE(r->Store(ns, BlockKey::FromId(kChain + d), b.data(), b.size(), nullptr, d).ok());
  }
  for (uint64_t d = 0; d < kLen; ++d) EXPECT_TRUE(there(kChain + d)) << "chunk " << d;
  age_by(10'000, 20);
  uint64_t present = kLen;
  std::vector<bool> chain_in(kLen, true);  // chain chunks there after the last store
  for (uint64_t k = 0; present > kLen * 2 / 3 && k < 64 * a.slots; ++k) {
    const BlockKey key = BlockKey::FromId(kNewer + k);
    // Which chain chunks and fill blocks sit among this store's candidates.
    std::vector<uint64_t> cand = RegionInternal::CandidateSlots(r, ns, key);
    std::sort(cand.begin(), cand.end());
    auto in_cand = [&](uint64_t id) {
      const int64_t s = RegionInternal::FindReadySlot(r, ns, BlockKey::FromId(id));
      return s >= 0 && std::binary_search(cand.begin(), cand.end(), static_cast<uint64_t>(s));
    };
    std::vector<uint64_t> chain_here;
    bool older_here = false;
    for (uint64_t d = 0; d < kLen; ++d) {
      if (in_cand(kChain + d)) chain_here.push_back(kChain + d);
    }
    for (uint64_t i = 0; i < fill && !older_here; ++i) older_here = in_cand(kFill + i);
    // Whether an older fill block is still anywhere, newest first (usually
    // the first looked at is there: cheap, so the chain ages no more than
    // the test assumes).
    bool older_anywhere = false;
    for (uint64_t i = fill; i > 0 && !older_anywhere; --i) older_anywhere = there(kFill + i - 1);
    EXPECT_TRUE(r->Store(ns, key, b.data(), b.size()).ok());
    for (uint64_t id : chain_here) a.out_of_order += older_here && !there(id);
    a.stored_after = k + 1;
    uint64_t now = 0;
    for (uint64_t d = 0; d < kLen; ++d) {
      const bool t = there(kChain + d);
      a.out_of_order_region += older_anywhere && chain_in[d] && !t;
      chain_in[d] = t;
      now += t;
    }
    if (now < kLen && present == kLen) {
      for (uint64_t d = 0; d < kLen; ++d) {
        if (!there(kChain + d)) a.deepest_lost_first = std::max(a.deepest_lost_first, d);
      }
      for (uint64_t i = 0; i < fill; ++i) a.older_left += there(kFill + i);
    }
    present = now;
  }
  a.present = present;
  while (a.leading < kLen && there(kChain + a.leading)) ++a.leading;
  for (uint64_t d = 0; d < 16; ++d) a.head_present += there(kChain + d);
  return a;
}

std::string DataSlotViolation(Region* r, bool quiescent) {
  auto* impl = static_cast<internal::RegionImpl*>(r);
  const internal::Geometry& g = impl->geometry();
  std::vector<int> named(g.num_slots, 0);
  for (uint64_t e = 0; e < g.num_entries; ++e) {
    if (internal::WordState(impl->Meta(e).state.load()) != internal::kReady) continue;
    const int64_t d = impl->EntryDataSlot(e);
    if (d < 0) return "READY entry " + std::to_string(e) + " names no data slot";
    ++named[d];
    const uint64_t dw = impl->DataWord(d).load();
    if (internal::WordState(dw) != internal::kDHeld) {
      return "READY entry " + std::to_string(e) + " on data slot " + std::to_string(d) +
             ", which is not HELD (word " + std::to_string(dw) + ")";
    }
    if (!internal::DataLeaseIs(dw, e, internal::WordGen(impl->Meta(e).state.load()))) {
      return "READY entry " + std::to_string(e) + " on data slot " + std::to_string(d) +
             ", whose word names another lease (word " + std::to_string(dw) + ")";
    }
  }
  for (uint64_t d = 0; d < g.num_slots; ++d) {
    const uint64_t w = impl->DataWord(d).load();
    const bool held = internal::WordState(w) == internal::kDHeld;
    if (held && named[d] != 1) {
      return "HELD data slot " + std::to_string(d) + " named by " + std::to_string(named[d]) +
             " READY entries";
    }
    if (quiescent && !held && internal::WordState(w) != internal::kDFree) {
      return "data slot " + std::to_string(d) + " is neither FREE nor HELD (word " +
             std::to_string(w) + ")";
    }
  }
  return "";
}

void ExpectTailFirstAmongCandidates(const ChainAging& a) {
  std::printf(
      "slots %llu, newer stores %llu, chain present %llu, leading %llu, head %llu/16, "
      "first loss at depth %llu with %llu older blocks left, out of order %llu\n",
      (unsigned long long)a.slots, (unsigned long long)a.stored_after,
      (unsigned long long)a.present, (unsigned long long)a.leading,
      (unsigned long long)a.head_present, (unsigned long long)a.deepest_lost_first,
      (unsigned long long)a.older_left, (unsigned long long)a.out_of_order);
  ASSERT_LE(a.present, 127u * 2 / 3);
  // No chain chunk went while an older block nobody read was among the
  // store's candidates.
  EXPECT_EQ(a.out_of_order, 0u);
  EXPECT_EQ(a.head_present, 16u);
  // How far the unbroken prefix reaches past the head is not fixed with a
  // key's 32 candidate ways (software mode's layout 4): a shallow chunk goes
  // when a newer store's ways hold no deeper chunk and no older block; with
  // the clocks held it reaches 50 chunks there, and the 84 left in hardware
  // mode's layout 5. The head and the depth of the first loss are what the
  // rank guarantees.
  EXPECT_GE(a.leading, 16u);
  EXPECT_GE(a.deepest_lost_first, 64u);
}

void ExpectNoChunkBeforeAnOlderBlock(const ChainAging& a) {
  std::printf(
      "slots %llu, chain chunks evicted while an older block stayed: %llu, older blocks left at "
      "the first loss %llu, head %llu/16, leading %llu\n",
      (unsigned long long)a.slots, (unsigned long long)a.out_of_order_region,
      (unsigned long long)a.older_left, (unsigned long long)a.head_present,
      (unsigned long long)a.leading);
  ASSERT_GE(a.slots, 1024u);
  ASSERT_LE(a.present, 127u * 2 / 3);
  EXPECT_EQ(a.out_of_order_region, 0u);
  EXPECT_EQ(a.older_left, 0u);
  EXPECT_EQ(a.head_present, 16u);
  EXPECT_GE(a.leading, 40u);
}

}  // namespace cxlkv::test
