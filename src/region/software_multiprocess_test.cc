// Copyright cxlkv authors.
//
// coherence=software with real processes: each forked child is one host (its
// own write partition), mapping the same /dev/shm file. Format-or-attach with
// the formatter arriving last, every host reading every other's blocks,
// eviction while others read, a writer killed mid-write (its blocks stay
// readable; the next holder of its partition recovers the slot). On this
// machine the processes are coherent; the non-coherence emulator suites run
// the same kind of workload with each process's private cache emulated.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "failpoint.h"
#include "region_internal.h"
#include "software_testutil.h"
#include "testutil.h"
#include "visibility/visibility.h"

namespace cxlkv {
namespace {

using test::FillPattern;
using test::Reap;
using test::ScratchRegion;
using test::SharedAnon;
using test::SoftwareOptions;
using test::Spawn;

const NamespaceDesc kNs{"m", "bf16", "NHD", 0, 0};

size_t LenOf(uint64_t id) { return 512 + (id * 37) % 3500; }

// Loads `id`; 0 if it is a hit with the right bytes, 1 for a miss, 3 for a
// detected corruption (kCorruption: the CRC caught bytes that are not the
// block's), 2 for wrong bytes served or any other error.
int CheckLoad(Region* r, NamespaceId ns, uint64_t id) {
  std::vector<uint8_t> got(4096), want(LenOf(id));
  FillPattern(id, want.data(), want.size());
  LoadInfo info;
  Status s = r->Load(ns, BlockKey::FromId(id), got.data(), got.size(), {}, &info);
  if (s.IsNotFound()) return 1;
  if (s.IsCorruption()) return 3;
  if (!s.ok()) return 2;
  return info.len == want.size() && std::memcmp(got.data(), want.data(), want.size()) == 0 ? 0 : 2;
}

int StoreId(Region* r, NamespaceId ns, uint64_t id) {
  std::vector<uint8_t> b(LenOf(id));
  FillPattern(id, b.data(), b.size());
  return r->Store(ns, BlockKey::FromId(id), b.data(), b.size()).ok() ? 0 : 1;
}

// Attaches an existing region as the holder of `partition` and registers
// the test namespace: what every forked host does first. nullptr if either
// fails (the child then exits 10).
std::unique_ptr<Region> AttachHost(const std::string& path, int32_t partition, NamespaceId* ns) {
  std::unique_ptr<Region> r;
  if (!Region::Open(path, SoftwareOptions(0, 0, 0, partition), &r).ok()) return nullptr;
  if (!r->RegisterNamespace(kNs, ns).ok()) return nullptr;
  return r;
}

// Formats an 8 MiB region of `partitions` partitions as partition 0's
// holder (the test process itself), with the namespace registered.
std::unique_ptr<Region> FormatHost0(const std::string& path, uint32_t partitions, NamespaceId* ns) {
  std::unique_ptr<Region> r;
  if (!Region::Open(path, SoftwareOptions(8 << 20, 4096, partitions, 0), &r).ok()) return nullptr;
  if (!r->RegisterNamespace(kNs, ns).ok()) return nullptr;
  return r;
}

uint64_t Reclaimed(Region* r) { return r->ProcessCounters()[Counter::kReclaimedSlots]; }

// The next holder of `partition` after an earlier one was killed or stopped:
// attaches (AttachHost) and checks that its attach sweep freed exactly
// `reclaimed` slots of the earlier incarnation. nullptr if not (the child
// then exits 10; the sweep's count goes to stderr).
std::unique_ptr<Region> AttachHeir(const std::string& path, int32_t partition, uint64_t reclaimed,
                                   NamespaceId* ns) {
  auto r = AttachHost(path, partition, ns);
  if (r && Reclaimed(r.get()) != reclaimed) {
    std::fprintf(stderr, "heir of partition %d: the attach sweep freed %llu slots, not %llu\n",
                 partition, static_cast<unsigned long long>(Reclaimed(r.get())),
                 static_cast<unsigned long long>(reclaimed));
    return nullptr;
  }
  return r;
}

struct Shared {
  std::atomic<int> stored{0};
  std::atomic<int> done{0};
  std::atomic<int> leased{0};
  std::atomic<uint64_t> wrong{0}, misses{0}, hits{0};
};

// Every test: a scratch region file and the hosts' shared tallies; in some,
// host 0 is the test process itself (Format), which then reads what the
// forked hosts leave behind.
class SoftwareMultiProcess : public ::testing::Test {
 protected:
  void SetUp() override { CXLKV_NEED_VISIBILITY(); }

  // Formats tmp_ with `partitions` partitions as partition 0's holder: h0_,
  // with the namespace ns_ registered (ASSERT_NO_FATAL_FAILURE(Format(n))).
  void Format(uint32_t partitions) {
    h0_ = FormatHost0(tmp_.path(), partitions, &ns_);
    ASSERT_NE(h0_, nullptr);
  }

  ScratchRegion tmp_;
  Shared* sh_ = SharedAnon<Shared>();
  NamespaceId ns_ = 0;
  std::unique_ptr<Region> h0_;
};

TEST_F(SoftwareMultiProcess, ThreeHostsFormatAttachAndReadEachOthersBlocks) {
  constexpr int kHosts = 3, kBlocks = 150;
  std::vector<pid_t> kids;
  // Hosts 2 and 1 attach first and wait; host 0 formats last.
  for (int h = kHosts - 1; h >= 0; --h) {
    kids.push_back(Spawn([&, h] {
      std::unique_ptr<Region> r;
      if (!Region::Open(tmp_.path(), SoftwareOptions(16 << 20, 4096, kHosts, h), &r).ok())
        return 10;
      NamespaceId ns;
      if (!r->RegisterNamespace(kNs, &ns).ok()) return 11;
      for (int i = 0; i < kBlocks; ++i)
        if (StoreId(r.get(), ns, h * 100000 + i) != 0) return 12;
      sh_->stored.fetch_add(1);
      if (!test::WaitFor([&] { return sh_->stored.load() == kHosts; }, 20000)) return 13;
      if (r->Participants().size() != kHosts) return 14;  // all attached, none left yet
      for (int q = 0; q < kHosts; ++q) {
        for (int i = 0; i < kBlocks; ++i) {
          const int c = CheckLoad(r.get(), ns, q * 100000 + i);
          if (c == 1) sh_->misses.fetch_add(1);
          if (c >= 2) sh_->wrong.fetch_add(1);
        }
      }
      sh_->done.fetch_add(1);
      // Stay attached until everyone has read: Participants() above must
      // see all three (a closing host's blocks would stay readable anyway).
      return test::WaitFor([&] { return sh_->done.load() == kHosts; }, 20000) ? 0 : 15;
    }));
    if (h > 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  for (pid_t k : kids) EXPECT_EQ(Reap(k), 0);
  EXPECT_EQ(sh_->wrong.load(), 0u);
  EXPECT_EQ(sh_->misses.load(), 0u);
}

TEST_F(SoftwareMultiProcess, EvictionUnderCrossHostReadsServesNoWrongBytes) {
  {
    std::unique_ptr<Region> r;
    ASSERT_TRUE(Region::Open(tmp_.path(), SoftwareOptions(2 << 20, 4096, 3, 0), &r).ok());
  }
  constexpr uint64_t kIds = 4000;  // several times partition 0's capacity
  const pid_t writer = Spawn([&] {
    NamespaceId ns;
    auto r = AttachHost(tmp_.path(), 0, &ns);
    if (!r) return 10;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    for (uint64_t i = 0; std::chrono::steady_clock::now() < end; ++i) {
      (void)StoreId(r.get(), ns, i % kIds);
      if (i == 200) sh_->stored.store(1);
    }
    sh_->done.fetch_add(1);
    return r->ProcessCounters()[Counter::kEvictions] > 0 ? 0 : 12;
  });
  std::vector<pid_t> readers;
  for (int h = 1; h <= 2; ++h) {
    readers.push_back(Spawn([&, h] {
      std::unique_ptr<Region> r;
      if (!Region::Open(tmp_.path(), SoftwareOptions(0, 0, 0, h), &r).ok()) return 10;
      NamespaceId ns;
      if (!test::WaitFor([&] { return sh_->stored.load() == 1; }, 10000)) return 11;
      if (!r->RegisterNamespace(kNs, &ns).ok()) return 12;
      uint64_t x = h;
      while (sh_->done.load() == 0) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const int c = CheckLoad(r.get(), ns, (x >> 33) % kIds);
        if (c == 0) sh_->hits.fetch_add(1);
        if (c >= 2) sh_->wrong.fetch_add(1);
      }
      return 0;
    }));
  }
  EXPECT_EQ(Reap(writer), 0);
  for (pid_t k : readers) EXPECT_EQ(Reap(k), 0);
  EXPECT_EQ(sh_->wrong.load(), 0u);
  EXPECT_GT(sh_->hits.load(), 0u);
}

TEST_F(SoftwareMultiProcess, KilledWriterBlocksStayReadableAndItsPartitionIsRecovered) {
  ASSERT_NO_FATAL_FAILURE(Format(3));
  const pid_t victim = Spawn([&] {
    NamespaceId n;
    auto r = AttachHost(tmp_.path(), 1, &n);
    if (!r) return 10;
    for (int i = 0; i < 50; ++i)
      if (StoreId(r.get(), n, 500000 + i) != 0) return 12;
    WriteLease l;
    if (!r->BeginWrite(n, BlockKey::FromId(777), 1000, &l).ok()) return 13;
    std::memset(l.data(), 0xAB, 1000);
    sh_->leased.store(1);
    for (;;) pause();  // killed here, mid-write
  });
  ASSERT_TRUE(test::WaitFor([&] { return sh_->leased.load() == 1; }, 10000));
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  EXPECT_EQ(Reap(victim), 128 + SIGKILL);
  // Its READY blocks are still served, to this host and to a third one.
  for (int i = 0; i < 50; ++i) EXPECT_EQ(CheckLoad(h0_.get(), ns_, 500000 + i), 0) << i;
  EXPECT_TRUE(h0_->Lookup(ns_, BlockKey::FromId(777)).IsNotFound());  // never READY
  const pid_t third = Spawn([&] {
    NamespaceId n;
    auto r = AttachHost(tmp_.path(), 2, &n);
    if (!r) return 10;
    for (int i = 0; i < 50; ++i)
      if (CheckLoad(r.get(), n, 500000 + i) != 0) return 12;
    return 0;
  });
  EXPECT_EQ(Reap(third), 0);
  // The next holder of partition 1 frees, at attach, the half-written slot
  // and the 50 READY blocks of the earlier incarnation (layout 4: a zombie's
  // late commit cannot be told from them), and can store the key.
  const pid_t heir = Spawn([&] {
    NamespaceId n;
    auto r = AttachHeir(tmp_.path(), 1, 51, &n);
    if (!r) return 10;
    StoreOutcome o;
    std::vector<uint8_t> b(LenOf(777));
    FillPattern(777, b.data(), b.size());
    if (!r->Store(n, BlockKey::FromId(777), b.data(), b.size(), &o).ok()) return 13;
    return o == StoreOutcome::kStored ? 0 : 14;
  });
  EXPECT_EQ(Reap(heir), 0);
  EXPECT_EQ(CheckLoad(h0_.get(), ns_, 777), 0);
}

TEST_F(SoftwareMultiProcess, PausedWriterIsFencedByTheNextHolderOfItsPartition) {
  ASSERT_NO_FATAL_FAILURE(Format(2));
  // The old holder of partition 1 reserves a slot, half fills it, and is
  // stopped (SIGSTOP) there; the lease hands partition 1 to a new process,
  // which stores the same key; the old one resumes and tries to publish.
  const pid_t old_holder = Spawn([&] {
    NamespaceId n;
    auto r = AttachHost(tmp_.path(), 1, &n);
    if (!r) return 10;
    WriteLease l;
    if (!r->BeginWrite(n, BlockKey::FromId(888), LenOf(888), &l).ok()) return 12;
    std::memset(l.data(), 0xEE, LenOf(888) / 2);
    sh_->leased.store(1);
    if (!test::WaitFor([&] { return sh_->done.load() == 1; }, 20000)) return 13;
    std::memset(static_cast<uint8_t*>(l.data()) + LenOf(888) / 2, 0xEE, LenOf(888) / 2);
    StoreOutcome o;
    if (!r->CommitWrite(&l, nullptr, &o).IsBusy() || o != StoreOutcome::kFenced) return 14;
    std::vector<uint8_t> junk(LenOf(889), 0xEE);
    if (!r->Store(n, BlockKey::FromId(889), junk.data(), junk.size(), &o).IsBusy()) return 15;
    return o == StoreOutcome::kFenced ? 0 : 16;
  });
  ASSERT_TRUE(test::WaitFor([&] { return sh_->leased.load() == 1; }, 10000));
  ASSERT_EQ(::kill(old_holder, SIGSTOP), 0);
  ASSERT_TRUE(test::WaitStopped(old_holder));
  const pid_t heir = Spawn([&] {
    NamespaceId n;
    auto r = AttachHeir(tmp_.path(), 1, 1, &n);
    if (!r) return 10;
    if (StoreId(r.get(), n, 888) != 0) return 13;
    sh_->done.store(1);
    // Stay the holder while the old one resumes and fails.
    test::WaitFor([&] { return sh_->stored.load() == 1; }, 20000);
    return 0;
  });
  ASSERT_TRUE(test::WaitFor([&] { return sh_->done.load() == 1; }, 10000));
  ASSERT_EQ(::kill(old_holder, SIGCONT), 0);
  EXPECT_EQ(Reap(old_holder), 0);
  // The resumed writer's late memset may have landed in the slot the heir
  // reused for the key: then the CRC (bound to the heir's generation) fails
  // it. Either way no 0xEE byte is ever served.
  const int c888 = CheckLoad(h0_.get(), ns_, 888);
  EXPECT_TRUE(c888 == 0 || c888 == 3) << c888;
  EXPECT_TRUE(h0_->Lookup(ns_, BlockKey::FromId(889)).IsNotFound());
  sh_->stored.store(1);
  EXPECT_EQ(Reap(heir), 0);
}

// Two live processes given one partition (what two pods of a non-coherent
// claim on one node get: docs/dra.md): nothing refuses the second attach, it
// takes the partition over as the lease's next holder would. The first's
// blocks are freed by the second's attach sweep (other hosts miss them,
// never read them wrong) and its next store is fenced; the second stores
// and is read. The failure mode docs/coherence.md "Surfaces" states.
TEST_F(SoftwareMultiProcess, ASecondLiveHolderOfAPartitionFencesTheFirst) {
  ASSERT_NO_FATAL_FAILURE(Format(2));
  const pid_t first = Spawn([&] {
    NamespaceId n;
    auto r = AttachHost(tmp_.path(), 1, &n);
    if (!r) return 10;
    for (int i = 0; i < 20; ++i)
      if (StoreId(r.get(), n, 500000 + i) != 0) return 11;
    sh_->stored.store(1);
    if (!test::WaitFor([&] { return sh_->done.load() == 1; }, 20000)) return 12;
    std::vector<uint8_t> b(LenOf(500100));
    FillPattern(500100, b.data(), b.size());
    StoreOutcome o;
    if (!r->Store(n, BlockKey::FromId(500100), b.data(), b.size(), &o).IsBusy()) return 13;
    return o == StoreOutcome::kFenced ? 0 : 14;
  });
  ASSERT_TRUE(test::WaitFor([&] { return sh_->stored.load() == 1; }, 10000));
  for (int i = 0; i < 20; ++i) ASSERT_EQ(CheckLoad(h0_.get(), ns_, 500000 + i), 0) << i;
  const pid_t second = Spawn([&] {
    NamespaceId n;
    auto r = AttachHeir(tmp_.path(), 1, 20, &n);  // the first's 20 blocks freed
    if (!r) return 10;
    if (StoreId(r.get(), n, 600000) != 0) return 11;
    sh_->done.store(1);
    // Stay the holder until host 0 has read.
    return test::WaitFor([&] { return sh_->leased.load() == 1; }, 20000) ? 0 : 12;
  });
  ASSERT_TRUE(test::WaitFor([&] { return sh_->done.load() == 1; }, 10000));
  EXPECT_EQ(Reap(first), 0) << "the first holder's store after the takeover must be fenced";
  for (int i = 0; i < 20; ++i) EXPECT_EQ(CheckLoad(h0_.get(), ns_, 500000 + i), 1) << i;
  EXPECT_TRUE(h0_->Lookup(ns_, BlockKey::FromId(500100)).IsNotFound());
  EXPECT_EQ(CheckLoad(h0_.get(), ns_, 600000), 0);
  sh_->leased.store(1);
  EXPECT_EQ(Reap(second), 0);
}

// The hazard the software-mode model found in layout v3 (docs/model.md, case
// sw-v3): a holder stopped (SIGSTOP) after its last ownership check, before
// it publishes READY, resumes after the lease gave its partition to a new
// holder that has begun a write into the same slot, and publishes anyway:
// the slot then says READY with the zombie's key, CRC and payload, which
// agree, so the CRC cannot tell. Its bytes must never be served, and the
// slot must become FREE, then READY of the new holder, again.
TEST_F(SoftwareMultiProcess, HolderPausedPastItsLeaseNeverHasItsBytesServed) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ASSERT_NO_FATAL_FAILURE(Format(2));
  constexpr uint64_t kId = 900;
  const BlockKey key = BlockKey::FromId(kId);
  const pid_t zombie = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "sw.commit.before_ready:stop", 1);
    internal::ReloadFailpoints();
    NamespaceId n;
    auto r = AttachHost(tmp_.path(), 1, &n);
    if (!r) return 10;
    std::vector<uint8_t> junk(LenOf(kId), 0xEE);  // not the block's pattern
    StoreOutcome o;
    (void)r->Store(n, key, junk.data(), junk.size(), &o);
    return 0;  // whatever it was told: what matters is what readers get
  });
  ASSERT_TRUE(test::WaitStopped(zombie));
  const pid_t heir = Spawn([&] {
    NamespaceId n;
    // The attach sweep frees the zombie's WRITING slot ...
    auto r = AttachHeir(tmp_.path(), 1, 1, &n);
    if (!r) return 10;
    // ... and the same key's first free way is that slot again: the heir
    // takes it, and the zombie publishes over its WRITING word.
    WriteLease l;
    if (!r->BeginWrite(n, key, LenOf(kId), &l).ok() || !l.open()) return 13;
    sh_->leased.store(1);
    if (!test::WaitFor([&] { return sh_->done.load() == 1; }, 20000)) return 14;
    FillPattern(kId, l.data(), LenOf(kId));
    StoreOutcome o;
    if (r->CommitWrite(&l, nullptr, &o).ok()) return 15;  // the slot changed under it
    if (CheckLoad(r.get(), n, kId) != 1) return 16;       // ignores the zombie's READY
    // Its periodic sweep frees the zombie's slot; then the key stores.
    if (!test::WaitFor([&] { return Reclaimed(r.get()) >= 2; }, 20000)) return 17;
    if (StoreId(r.get(), n, kId) != 0) return 18;
    sh_->stored.store(1);
    return test::WaitFor([&] { return sh_->done.load() == 2; }, 20000) ? 0 : 19;
  });
  ASSERT_TRUE(test::WaitFor([&] { return sh_->leased.load() == 1; }, 10000));
  ASSERT_EQ(::kill(zombie, SIGCONT), 0);
  EXPECT_EQ(Reap(zombie), 0);
  // Another host, with the zombie's READY word in memory: a miss, never its
  // 0xEE bytes (CheckLoad's 2).
  EXPECT_EQ(CheckLoad(h0_.get(), ns_, kId), 1);
  sh_->done.store(1);
  ASSERT_TRUE(test::WaitFor([&] { return sh_->stored.load() == 1; }, 20000));
  EXPECT_EQ(CheckLoad(h0_.get(), ns_, kId), 0);  // the heir's block
  sh_->done.store(2);
  EXPECT_EQ(Reap(heir), 0);
}

}  // namespace
}  // namespace cxlkv
