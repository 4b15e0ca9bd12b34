// Copyright cxlkv authors.
//
// A participant paused past the liveness timeout (failpoint `stop`, i.e.
// SIGSTOP at an exact step) is judged dead and reclaimed while paused; its
// slot is reused; then it is resumed (SIGCONT). Whatever it does next, a
// reader that verifies CRCs gets the current owner's bytes or a miss, the
// key stays storable, and the zombie is told it was fenced. Real processes,
// one /dev/shm region, real signals.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "crc32c.h"
#include "cxlkv/region.h"
#include "failpoint.h"
#include "region_impl.h"
#include "testutil.h"

namespace cxlkv {
namespace {

using test::DataSlotViolation;
using test::MustOpen;
using test::Reap;
using test::ScratchRegion;
using test::SharedAnon;
using test::Spawn;
using test::TestOptions;
using test::WaitFor;
using test::WaitStopped;

constexpr uint64_t kSlot = 4096;
// Four data slots (and two index sets of four entries): a freed data slot is
// the next claim's first free one, so the zombie's data slot is the one the
// parent reuses.
constexpr uint64_t kTiny = 108 << 10;
const NamespaceDesc kNs{"model", "bfloat16", "NHD", 0, 0};

NamespaceId Ns(Region* r) {
  NamespaceId id = 0;
  if (!r->RegisterNamespace(kNs, &id).ok()) std::abort();
  return id;
}

// The zombie's and the owner's blocks share their first half, so a zombie
// that finishes a half-done copy over the owner's block makes exactly its
// own block: only the CRC's binding can tell them apart.
std::vector<uint8_t> Block(uint8_t second_half) {
  std::vector<uint8_t> v(kSlot, 0x11);
  std::memset(v.data() + kSlot / 2, second_half, kSlot / 2);
  return v;
}

uint64_t DataSlots(Region* r) {
  return static_cast<internal::RegionImpl*>(r)->geometry().num_slots;
}

// Stores blocks first .. first + n - 1 of `bytes`, each a new block
// (kStored); with a full region each store evicts one.
void StoreEach(Region* r, NamespaceId ns, uint64_t first, uint64_t n,
               const std::vector<uint8_t>& bytes) {
  for (uint64_t i = 0; i < n; ++i) {
    StoreOutcome out;
    ASSERT_TRUE(r->Store(ns, BlockKey::FromId(first + i), bytes.data(), kSlot, &out).ok()) << i;
    ASSERT_EQ(out, StoreOutcome::kStored) << i;
  }
}

// How the zombie writes.
enum class Path {
  kStore,      // Region::Store, paused at `failpoint`
  kLease,      // BeginWrite; paused where the DMA would run (no failpoint); fill; CommitWrite
  kLeaseStop,  // BeginWrite, fill, CommitWrite paused at `failpoint`
};

struct Case {
  const char* name;
  Path path;
  const char* failpoint;  // action `stop`
  bool same_key;
};

struct Shared {
  std::atomic<int> index{-1};
  std::atomic<int> code{-1};     // Status::Code of the zombie's last call
  std::atomic<int> outcome{-1};  // its StoreOutcome
};

std::string CaseName(const testing::TestParamInfo<Case>& i) { return i.param.name; }

class PausedWriterTest : public testing::TestWithParam<Case> {};

TEST_P(PausedWriterTest, ReaderGetsTheOwnersBytesOrAMissAndTheKeyStaysStorable) {
  const Case& c = GetParam();
  if (c.failpoint != nullptr) CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("pause");
  const RegionOptions opts = TestOptions(kTiny, kSlot);
  auto r = MustOpen(sr.path(), opts);
  ASSERT_EQ(r->info().num_slots, 4u);
  const NamespaceId ns = Ns(r.get());
  const BlockKey zkey = BlockKey::FromId(1);
  const BlockKey okey = c.same_key ? zkey : BlockKey::FromId(2);
  const std::vector<uint8_t> zombie_bytes = Block(0xAA), owner_bytes = Block(0xBB);
  auto* sh = SharedAnon<Shared>();
  pid_t z = Spawn([&] {
    if (c.failpoint != nullptr) {
      ::setenv("CXLKV_FAILPOINT", (std::string(c.failpoint) + ":stop").c_str(), 1);
      internal::ReloadFailpoints();
    }
    auto w = MustOpen(sr.path(), opts);
    sh->index = w->info().participant;
    StoreOutcome out = StoreOutcome::kStored;
    Status s;
    if (c.path == Path::kStore) {
      s = w->Store(ns, zkey, zombie_bytes.data(), kSlot, &out);
    } else {
      WriteLease lease;
      s = w->BeginWrite(ns, zkey, kSlot, &lease, &out);
      if (s.ok() && lease.open()) {
        if (c.path == Path::kLease) ::raise(SIGSTOP);  // a stalled DMA
        std::memcpy(lease.data(), zombie_bytes.data(), kSlot);
        const uint32_t crc = internal::Crc32c(zombie_bytes.data(), kSlot);
        s = w->CommitWrite(&lease, &crc, &out);
      }
    }
    sh->code = static_cast<int>(s.code());
    sh->outcome = static_cast<int>(out);
    return 0;
  });
  ASSERT_TRUE(WaitStopped(z));
  // Our heartbeat thread judges the paused process dead and reclaims it.
  ASSERT_TRUE(WaitFor([&] { return r->Participants().size() == 1; }));
  // The owner stores into the data slot the zombie held (the first free one).
  StoreOutcome out;
  ASSERT_TRUE(r->Store(ns, okey, owner_bytes.data(), kSlot, &out).ok());
  ASSERT_EQ(out, StoreOutcome::kStored);
  auto* impl = static_cast<internal::RegionImpl*>(r.get());
  ASSERT_EQ(impl->EntryDataSlot(impl->FindReadySlot(ns, okey)), 0);
  ::kill(z, SIGCONT);
  ASSERT_EQ(Reap(z), 0);
  // The zombie was told, with the one code for it, and it was counted
  // region-wide (seen from another participant).
  EXPECT_EQ(sh->code.load(), static_cast<int>(Status::Code::kBusy));
  EXPECT_EQ(sh->outcome.load(), static_cast<int>(StoreOutcome::kFenced));
  EXPECT_GE(r->RegionCounters()[Counter::kStoreFenced], 1u);
  // A hit is the owner's bytes; anything else is a clean miss.
  std::vector<uint8_t> buf(kSlot);
  Status s = r->Load(ns, okey, buf.data(), buf.size());
  if (s.ok()) {
    EXPECT_EQ(buf, owner_bytes) << "served bytes the current owner did not store";
  } else {
    EXPECT_TRUE(s.IsCorruption() || s.IsNotFound()) << s.ToString();
  }
  if (!c.same_key) {
    // The zombie's key was never committed by a live participant.
    EXPECT_FALSE(r->Load(ns, zkey, buf.data(), buf.size()).ok());
  }
  // The owner's key can be stored (again) and then loads exactly.
  ASSERT_TRUE(r->Store(ns, okey, owner_bytes.data(), kSlot, &out).ok()) << int(out);
  EXPECT_TRUE(out == StoreOutcome::kStored || out == StoreOutcome::kDuplicate);
  ASSERT_TRUE(r->Load(ns, okey, buf.data(), buf.size()).ok());
  EXPECT_EQ(buf, owner_bytes);
  // Nothing is left WRITING by the zombie.
  Region::ScrubReport rep;
  ASSERT_TRUE(r->Verify(false, &rep).ok());
  EXPECT_EQ(rep.crc_failures, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Steps, PausedWriterTest,
    testing::Values(Case{"StoreBeforeClaimSameKey", Path::kStore, "write.before_claim", true},
                    Case{"StoreBeforeClaimOtherKey", Path::kStore, "write.before_claim", false},
                    Case{"StoreAfterClaimSameKey", Path::kStore, "write.after_claim", true},
                    Case{"StoreAfterClaimOtherKey", Path::kStore, "write.after_claim", false},
                    Case{"StoreMidCopySameKey", Path::kStore, "write.mid_copy", true},
                    Case{"StoreMidCopyOtherKey", Path::kStore, "write.mid_copy", false},
                    Case{"StoreBeforeCommitSameKey", Path::kStore, "write.before_commit", true},
                    Case{"StoreBeforeCommitOtherKey", Path::kStore, "write.before_commit", false},
                    Case{"LeaseStalledDmaSameKey", Path::kLease, nullptr, true},
                    Case{"LeaseStalledDmaOtherKey", Path::kLease, nullptr, false},
                    Case{"LeaseBeforeCommitSameKey", Path::kLeaseStop, "write.before_commit", true},
                    Case{"LeaseBeforeCommitOtherKey", Path::kLeaseStop, "write.before_commit",
                         false}),
    CaseName);

// A writer holding a lease is reclaimed while paused and its slot reused for
// the same key; when it resumes and drops the lease (AbortWrite), it must not
// clear the new owner's tag (the key would then miss and answer "lost race"
// forever).
TEST(PauseTest, ResumedZombieAbortLeavesTheNewOwnersBlockFindable) {
  ScratchRegion sr("pabort");
  const RegionOptions opts = TestOptions(kTiny, kSlot);
  auto r = MustOpen(sr.path(), opts);
  const NamespaceId ns = Ns(r.get());
  const BlockKey key = BlockKey::FromId(7);
  const std::vector<uint8_t> bytes = Block(0xCC);
  pid_t z = Spawn([&] {
    auto w = MustOpen(sr.path(), opts);
    WriteLease lease;
    if (!w->BeginWrite(ns, key, kSlot, &lease).ok() || !lease.open()) return 1;
    ::raise(SIGSTOP);
    w->AbortWrite(&lease);
    return 0;
  });
  ASSERT_TRUE(WaitStopped(z));
  ASSERT_TRUE(WaitFor([&] { return r->Participants().size() == 1; }));
  ASSERT_TRUE(r->Store(ns, key, bytes.data(), kSlot).ok());
  auto* impl = static_cast<internal::RegionImpl*>(r.get());
  ASSERT_EQ(impl->EntryDataSlot(impl->FindReadySlot(ns, key)), 0);
  ::kill(z, SIGCONT);
  ASSERT_EQ(Reap(z), 0);
  std::vector<uint8_t> buf(kSlot);
  ASSERT_TRUE(r->Load(ns, key, buf.data(), buf.size()).ok());
  EXPECT_EQ(buf, bytes);
  StoreOutcome out;
  ASSERT_TRUE(r->Store(ns, key, bytes.data(), kSlot, &out).ok());
  EXPECT_EQ(out, StoreOutcome::kDuplicate);
}

// A pinner paused right before setting its pin bit is reclaimed (the sweep
// finds no bit); when it resumes, the bit it sets must not outlive it.
TEST(PauseTest, PinLandingAfterReclaimIsNotLeaked) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("ppin");
  const RegionOptions opts = TestOptions(kTiny, kSlot);
  auto r = MustOpen(sr.path(), opts);
  const NamespaceId ns = Ns(r.get());
  const BlockKey key = BlockKey::FromId(9);
  const std::vector<uint8_t> bytes = Block(0xDD);
  ASSERT_TRUE(r->Store(ns, key, bytes.data(), kSlot).ok());
  auto* sh = SharedAnon<Shared>();
  pid_t z = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "pin.before_pin:stop", 1);
    internal::ReloadFailpoints();
    auto w = MustOpen(sr.path(), opts);
    PinSet pins;
    Status s = w->PinPrefix(ns, &key, 1, &pins);
    sh->code = static_cast<int>(s.code());
    sh->outcome = static_cast<int>(pins.size());
    return 0;
  });
  ASSERT_TRUE(WaitStopped(z));
  ASSERT_TRUE(WaitFor([&] { return r->Participants().size() == 1; }));
  ::kill(z, SIGCONT);
  ASSERT_EQ(Reap(z), 0);
  EXPECT_EQ(sh->outcome.load(), 0) << "a fenced process holds a pin";
  // No pin bit is left behind: the block can be dropped.
  EXPECT_TRUE(WaitFor([&] { return r->Drop(ns, key).ok(); }, 3000));
}

// An evictor paused between taking a block (EVICTING) and checking its pins
// is reclaimed: the block goes back to READY with its writer, and when the
// evictor resumes it neither frees the block nor clears its tag.
TEST(PauseTest, EvictorPausedAfterTakeLeavesTheBlockWithItsWriter) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("pevict");
  const RegionOptions opts = TestOptions(kTiny, kSlot);
  auto r = MustOpen(sr.path(), opts);
  const NamespaceId ns = Ns(r.get());
  const BlockKey key = BlockKey::FromId(11);
  const std::vector<uint8_t> bytes = Block(0xEE);
  ASSERT_TRUE(r->Store(ns, key, bytes.data(), kSlot).ok());
  auto* sh = SharedAnon<Shared>();
  pid_t z = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "evict.after_take:stop", 1);
    internal::ReloadFailpoints();
    auto w = MustOpen(sr.path(), opts);
    sh->index = w->info().participant;
    Status s = w->Drop(ns, key);
    sh->code = static_cast<int>(s.code());
    return 0;
  });
  ASSERT_TRUE(WaitStopped(z));
  ASSERT_TRUE(WaitFor([&] { return r->Participants().size() == 1; }));
  std::vector<uint8_t> buf(kSlot);
  LoadInfo info;
  ASSERT_TRUE(r->Load(ns, key, buf.data(), buf.size(), {}, &info).ok());
  EXPECT_EQ(info.writer_participant, static_cast<uint32_t>(r->info().participant));
  ::kill(z, SIGCONT);
  ASSERT_EQ(Reap(z), 0);
  EXPECT_EQ(sh->code.load(), static_cast<int>(Status::Code::kBusy));
  ASSERT_TRUE(r->Load(ns, key, buf.data(), buf.size()).ok());
  EXPECT_EQ(buf, bytes);
  StoreOutcome out;
  ASSERT_TRUE(r->Store(ns, key, bytes.data(), kSlot, &out).ok());
  EXPECT_EQ(out, StoreOutcome::kDuplicate);
  // Nor its data slot (FreeTakenEntry: the entry is READY again, not ours).
  EXPECT_EQ(DataSlotViolation(r.get()), "");
}

// The model's F1 (docs/model.md, l5-f1): a mover paused after taking its
// victim (EVICTING) past the liveness timeout is reclaimed, which puts the
// victim back to READY; resumed, it must not take or free that READY
// block's data slot (the data word names the victim's lease, and the
// mover's steps name the lease they took). Every later victim it takes
// pauses it again; it is resumed each time.
TEST(PauseTest, MoverPausedAfterTakeLeavesTheVictimsDataSlot) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("pmove");
  const RegionOptions opts = TestOptions(kTiny, kSlot);
  auto r = MustOpen(sr.path(), opts);
  const NamespaceId ns = Ns(r.get());
  auto* impl = static_cast<internal::RegionImpl*>(r.get());
  const uint64_t nslots = impl->geometry().num_slots;
  const std::vector<uint8_t> bytes = Block(0x3C);
  // Every data slot taken: the zombie's store must evict.
  ASSERT_NO_FATAL_FAILURE(StoreEach(r.get(), ns, 200, nslots, bytes));
  ASSERT_EQ(DataSlotViolation(r.get()), "");
  pid_t z = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "evict.after_take:stop", 1);
    internal::ReloadFailpoints();
    auto w = MustOpen(sr.path(), opts);
    (void)w->Store(ns, BlockKey::FromId(300), bytes.data(), kSlot);
    return 0;
  });
  ASSERT_TRUE(WaitStopped(z));
  ASSERT_TRUE(WaitFor([&] { return r->Participants().size() == 1; }));
  int st = 0;
  for (int i = 0; i < 200; ++i) {
    ::kill(z, SIGCONT);
    ASSERT_EQ(::waitpid(z, &st, WUNTRACED), z);
    if (!WIFSTOPPED(st)) break;
  }
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  // The orphan sweep may settle words the zombie left; a READY block on a
  // FREE data slot is never settled.
  EXPECT_TRUE(WaitFor([&] { return DataSlotViolation(r.get()).empty(); }, 2000));
  EXPECT_EQ(DataSlotViolation(r.get()), "");
  // The blocks left read back whole.
  std::vector<uint8_t> buf(kSlot);
  for (uint64_t i = 0; i < nslots; ++i) {
    if (r->Load(ns, BlockKey::FromId(200 + i), buf.data(), buf.size()).ok()) {
      EXPECT_EQ(buf, bytes);
    }
  }
}

// A mover paused halfway through a move (its victim's entry freed, the
// victim's data word not yet moved: evict.mid_move) past the liveness
// timeout is reclaimed, and the data slot its victim left is reused. When
// it resumes it is fenced: it must not evict anyone else's block (a fenced
// participant acts on nothing as its old index), and its store ends
// kFenced. Every block stored by the live participant stays.
TEST(PauseTest, MoverPausedMidMoveEvictsNothingOnceFenced) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("pmidmove");
  const RegionOptions opts = TestOptions(kTiny, kSlot);
  auto r = MustOpen(sr.path(), opts);
  const NamespaceId ns = Ns(r.get());
  const uint64_t nslots = DataSlots(r.get());
  const std::vector<uint8_t> bytes = Block(0x6D);
  ASSERT_NO_FATAL_FAILURE(StoreEach(r.get(), ns, 400, nslots, bytes));
  auto* sh = SharedAnon<Shared>();
  pid_t z = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "evict.mid_move:stop", 1);
    internal::ReloadFailpoints();
    auto w = MustOpen(sr.path(), opts);
    StoreOutcome out = StoreOutcome::kStored;
    Status s = w->Store(ns, BlockKey::FromId(500), bytes.data(), kSlot, &out);
    sh->code = static_cast<int>(s.code());
    sh->outcome = static_cast<int>(out);
    return 0;
  });
  ASSERT_TRUE(WaitStopped(z));
  ASSERT_TRUE(WaitFor([&] { return r->Participants().size() == 1; }));
  // The victim's data slot is free again (its lease is over): ours now.
  StoreOutcome out;
  ASSERT_TRUE(r->Store(ns, BlockKey::FromId(600), bytes.data(), kSlot, &out).ok());
  ASSERT_EQ(out, StoreOutcome::kStored);
  std::vector<uint64_t> ours;
  std::vector<uint8_t> buf(kSlot);
  for (uint64_t id = 400; id <= 600; ++id) {
    if (r->Load(ns, BlockKey::FromId(id), buf.data(), buf.size()).ok()) ours.push_back(id);
  }
  ASSERT_EQ(ours.size(), nslots);
  int st = 0;
  for (int i = 0; i < 200; ++i) {
    ::kill(z, SIGCONT);
    ASSERT_EQ(::waitpid(z, &st, WUNTRACED), z);
    if (!WIFSTOPPED(st)) break;
  }
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(sh->code.load(), static_cast<int>(Status::Code::kBusy));
  EXPECT_EQ(sh->outcome.load(), static_cast<int>(StoreOutcome::kFenced));
  for (uint64_t id : ours) {
    Status s = r->Load(ns, BlockKey::FromId(id), buf.data(), buf.size());
    EXPECT_TRUE(s.ok()) << "block " << id
                        << " was evicted by a fenced participant: " << s.ToString();
    if (s.ok()) {
      EXPECT_EQ(buf, bytes);
    }
  }
  EXPECT_TRUE(WaitFor([&] { return DataSlotViolation(r.get(), true).empty(); }, 3000))
      << DataSlotViolation(r.get(), true);
}

// A writer paused between READY and settling its data word HELD
// (write.after_ready) is reclaimed: the reclaim settles the word HELD, the
// block is served, then evicted and its data slot reused while the writer
// is still paused. Resumed, its settle must not touch the slot's new lease.
TEST(PauseTest, WriterPausedBetweenReadyAndSettleLeavesTheSlotToItsNextLease) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("pready");
  const RegionOptions opts = TestOptions(kTiny, kSlot);
  auto r = MustOpen(sr.path(), opts);
  const NamespaceId ns = Ns(r.get());
  const uint64_t nslots = DataSlots(r.get());
  const std::vector<uint8_t> zbytes = Block(0x71), obytes = Block(0x72);
  ASSERT_NO_FATAL_FAILURE(StoreEach(r.get(), ns, 700, nslots, obytes));
  auto* sh = SharedAnon<Shared>();
  pid_t z = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "write.after_ready:stop", 1);
    internal::ReloadFailpoints();
    auto w = MustOpen(sr.path(), opts);
    StoreOutcome out = StoreOutcome::kRefused;
    Status s = w->Store(ns, BlockKey::FromId(800), zbytes.data(), kSlot, &out);
    sh->code = static_cast<int>(s.code());
    sh->outcome = static_cast<int>(out);
    return 0;
  });
  ASSERT_TRUE(WaitStopped(z));
  ASSERT_TRUE(WaitFor([&] { return r->Participants().size() == 1; }));
  // Committed before the pause: served, and its word settled HELD.
  std::vector<uint8_t> buf(kSlot);
  ASSERT_TRUE(r->Load(ns, BlockKey::FromId(800), buf.data(), buf.size()).ok());
  EXPECT_EQ(buf, zbytes);
  EXPECT_TRUE(WaitFor([&] { return DataSlotViolation(r.get(), true).empty(); }, 3000))
      << DataSlotViolation(r.get(), true);
  // Every block replaced (the paused writer's too), its data slot reused.
  ASSERT_NO_FATAL_FAILURE(StoreEach(r.get(), ns, 900, nslots, obytes));
  EXPECT_FALSE(r->Load(ns, BlockKey::FromId(800), buf.data(), buf.size()).ok());
  ::kill(z, SIGCONT);
  ASSERT_EQ(Reap(z), 0);
  EXPECT_EQ(sh->code.load(), static_cast<int>(Status::Code::kOk));
  EXPECT_EQ(DataSlotViolation(r.get(), true), "");
  for (uint64_t i = 0; i < nslots; ++i) {
    ASSERT_TRUE(r->Load(ns, BlockKey::FromId(900 + i), buf.data(), buf.size()).ok()) << i;
    EXPECT_EQ(buf, obytes);
  }
}

// A reader paused right after reading its entry's data slot index
// (read.after_data), pinned, is reclaimed (its pin cleared); the block is
// dropped and its data slot and entry reused for another key. Resumed, its
// copy must be a miss, never the new block's bytes.
TEST(PauseTest, ReaderPausedAfterItsDataIndexNeverReturnsTheSlotsNextBlock) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("pread");
  const RegionOptions opts = TestOptions(kTiny, kSlot);
  auto r = MustOpen(sr.path(), opts);
  const NamespaceId ns = Ns(r.get());
  const std::vector<uint8_t> old_bytes = Block(0x81), new_bytes = Block(0x82);
  const BlockKey key = BlockKey::FromId(31);
  ASSERT_TRUE(r->Store(ns, key, old_bytes.data(), kSlot).ok());
  auto* impl = static_cast<internal::RegionImpl*>(r.get());
  const int64_t data = impl->EntryDataSlot(impl->FindReadySlot(ns, key));
  // The other data slots taken, so the one this block frees is the next
  // store's.
  for (uint64_t id = 33; id < 33 + impl->geometry().num_slots - 1; ++id) {
    ASSERT_TRUE(r->Store(ns, BlockKey::FromId(id), new_bytes.data(), kSlot).ok());
  }
  struct ReadShared {
    std::atomic<int> code{-1};
    std::atomic<bool> wrong{false};
  };
  auto* sh = SharedAnon<ReadShared>();
  pid_t z = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "read.after_data:stop", 1);
    internal::ReloadFailpoints();
    auto w = MustOpen(sr.path(), opts);
    std::vector<uint8_t> buf(kSlot);
    Status s = w->Load(ns, key, buf.data(), buf.size());
    sh->code = static_cast<int>(s.code());
    sh->wrong = s.ok() && buf != old_bytes;
    return 0;
  });
  ASSERT_TRUE(WaitStopped(z));
  ASSERT_TRUE(WaitFor([&] { return r->Participants().size() == 1; }));
  // The reclaim cleared the paused reader's pin: the block can go, and
  // its data slot (the only free one then) takes the next key's bytes.
  ASSERT_TRUE(WaitFor([&] { return r->Drop(ns, key).ok(); }));
  StoreOutcome out;
  ASSERT_TRUE(r->Store(ns, BlockKey::FromId(32), new_bytes.data(), kSlot, &out).ok());
  ASSERT_EQ(out, StoreOutcome::kStored);
  ASSERT_EQ(impl->EntryDataSlot(impl->FindReadySlot(ns, BlockKey::FromId(32))), data);
  ::kill(z, SIGCONT);
  ASSERT_EQ(Reap(z), 0);
  EXPECT_FALSE(sh->wrong.load()) << "a reader was served another block's bytes";
  EXPECT_NE(sh->code.load(), static_cast<int>(Status::Code::kOk));
  std::vector<uint8_t> buf(kSlot);
  ASSERT_TRUE(r->Load(ns, BlockKey::FromId(32), buf.data(), buf.size()).ok());
  EXPECT_EQ(buf, new_bytes);
}

// Spin's l5-drop-evicting (docs/model.md): an evictor E has taken a block
// (READY -> EVICTING(E)) and not yet checked its pins; a reader P has set
// its pin bit; a Drop by D finds the block (Find returns EVICTING blocks:
// they are still readable). D must leave E's word alone. Taking it
// (EVICTING(E) -> EVICTING(D)), as Drop did, E's pin check finds P's pin
// and fails to restore a word no longer its own, then D's finds the pin and
// restores the word it took, EVICTING(E): the block stays EVICTING under an
// evictor that has moved on, unreadable, unstorable, and its data slot
// held, for as long as E lives. Every process here stays alive (the
// liveness timeout is long), so no reclaim or orphan sweep restores it.
TEST(PauseTest, DropLeavesABlockAnotherEvictorTookToThatEvictor) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("pdropev");
  RegionOptions opts = TestOptions(kTiny, kSlot);
  opts.liveness_timeout_ns = 60'000'000'000;  // nobody is judged dead while stopped
  auto r = MustOpen(sr.path(), opts);
  const NamespaceId ns = Ns(r.get());
  const BlockKey key = BlockKey::FromId(17);
  const std::vector<uint8_t> bytes = Block(0x6B);
  ASSERT_TRUE(r->Store(ns, key, bytes.data(), kSlot).ok());
  auto* impl = static_cast<internal::RegionImpl*>(r.get());
  const int64_t e = impl->FindReadySlot(ns, key);
  ASSERT_GE(e, 0);
  auto word = [&] { return impl->Meta(static_cast<uint64_t>(e)).state.load(); };
  constexpr uint8_t kEvicting = static_cast<uint8_t>(internal::SlotState::kEvicting);
  const uint64_t ready = word();
  struct Sh {
    std::atomic<int> e_index{-1}, e_code{-1}, d_code{-1}, p_pins{-1};
    std::atomic<bool> done{false};
  };
  auto* sh = SharedAnon<Sh>();
  // E: Drop (an evictor like any other: TakeReadySlot, then the pin check),
  // stopped right after its take; it stays registered until the end.
  pid_t ev = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "evict.after_take:stop", 1);
    internal::ReloadFailpoints();
    auto w = MustOpen(sr.path(), opts);
    sh->e_index = w->info().participant;
    sh->e_code = static_cast<int>(w->Drop(ns, key).code());
    while (!sh->done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return 0;
  });
  ASSERT_TRUE(WaitStopped(ev));
  ASSERT_EQ(internal::WordState(word()), kEvicting);
  ASSERT_EQ(internal::WordOwner(word()), static_cast<uint32_t>(sh->e_index.load()));
  // P: pins the block, stopped with its pin bit set (before it reads the
  // state word).
  pid_t p = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "pin.after_pin:stop", 1);
    internal::ReloadFailpoints();
    auto w = MustOpen(sr.path(), opts);
    PinSet pins;
    (void)w->PinPrefix(ns, &key, 1, &pins);
    sh->p_pins = static_cast<int>(pins.size());
    return 0;
  });
  ASSERT_TRUE(WaitStopped(p));
  // D: drops the key. Stopped only if it took E's word.
  pid_t d = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "evict.after_take:stop", 1);
    internal::ReloadFailpoints();
    auto w = MustOpen(sr.path(), opts);
    sh->d_code = static_cast<int>(w->Drop(ns, key).code());
    return 0;
  });
  const bool d_took = WaitStopped(d);
  EXPECT_FALSE(d_took) << "the Drop took the block another evictor holds";
  // E's pin check, then (if D took the word) D's.
  ::kill(ev, SIGCONT);
  ASSERT_TRUE(WaitFor([&] { return sh->e_code.load() >= 0; }));
  if (d_took) {
    ::kill(d, SIGCONT);
    EXPECT_EQ(Reap(d), 0);
  }
  EXPECT_EQ(sh->e_code.load(), static_cast<int>(Status::Code::kBusy));
  EXPECT_EQ(sh->d_code.load(), static_cast<int>(Status::Code::kBusy));
  // E found P's pin: the block is READY again, as it was.
  EXPECT_EQ(word(), ready) << "state " << int(internal::WordState(word())) << ", owner "
                           << internal::WordOwner(word());
  ::kill(p, SIGCONT);
  EXPECT_EQ(Reap(p), 0);
  EXPECT_EQ(sh->p_pins.load(), 1);
  std::vector<uint8_t> buf(kSlot);
  const bool loaded = r->Load(ns, key, buf.data(), buf.size()).ok();
  EXPECT_TRUE(loaded);
  if (loaded) {
    EXPECT_EQ(buf, bytes);
  }
  EXPECT_EQ(DataSlotViolation(r.get(), true), "");
  sh->done = true;
  EXPECT_EQ(Reap(ev), 0);
  EXPECT_TRUE(r->Drop(ns, key).ok());
}

// A load finds a damaged block EVICTING (an evictor between its take and its
// pin check), pins it, and waits: the evictor finds the pin and restores
// READY, the load's pin holds, its copy fails the CRC and it drops the
// block. The drop must take the word as it is now (READY, restored), not
// the EVICTING word the load found: with that one the drop's CAS failed and
// the damaged block stayed READY until a later read or the verify scrub.
TEST(PauseTest, LoadDropsADamagedBlockItFoundEvictingOnceRestored) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("pdamev");
  RegionOptions opts = TestOptions(kTiny, kSlot);
  opts.liveness_timeout_ns = 60'000'000'000;  // nobody is judged dead while stopped
  auto r = MustOpen(sr.path(), opts);
  const NamespaceId ns = Ns(r.get());
  const BlockKey key = BlockKey::FromId(19);
  const std::vector<uint8_t> bytes = Block(0x3C);
  ASSERT_TRUE(r->Store(ns, key, bytes.data(), kSlot).ok());
  auto* impl = static_cast<internal::RegionImpl*>(r.get());
  const int64_t e = impl->FindReadySlot(ns, key);
  ASSERT_GE(e, 0);
  const int64_t data = impl->EntryDataSlot(static_cast<uint64_t>(e));
  ASSERT_GE(data, 0);
  impl->EntryData(static_cast<uint64_t>(e))[100] ^= 0x5A;  // damage: the CRC no longer holds
  auto word = [&] { return impl->Meta(static_cast<uint64_t>(e)).state.load(); };
  constexpr uint8_t kEvicting = static_cast<uint8_t>(internal::SlotState::kEvicting);
  const uint64_t ready = word();
  struct Sh {
    std::atomic<int> e_code{-1}, l_code{-1};
    std::atomic<bool> done{false};
  };
  auto* sh = SharedAnon<Sh>();
  // E: Drop (an evictor: TakeReadySlot, then the pin check), stopped after
  // its take; it stays registered until the end.
  pid_t ev = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "evict.after_take:stop", 1);
    internal::ReloadFailpoints();
    auto w = MustOpen(sr.path(), opts);
    sh->e_code = static_cast<int>(w->Drop(ns, key).code());
    while (!sh->done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return 0;
  });
  ASSERT_TRUE(WaitStopped(ev));
  ASSERT_EQ(internal::WordState(word()), kEvicting);
  // L: loads the key (found EVICTING), stopped with its pin bit set.
  pid_t l = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "pin.after_pin:stop", 1);
    internal::ReloadFailpoints();
    auto w = MustOpen(sr.path(), opts);
    std::vector<uint8_t> buf(kSlot);
    sh->l_code = static_cast<int>(w->Load(ns, key, buf.data(), buf.size()).code());
    return 0;
  });
  ASSERT_TRUE(WaitStopped(l));
  // E finds L's pin and restores the READY word it took.
  ::kill(ev, SIGCONT);
  ASSERT_TRUE(WaitFor([&] { return sh->e_code.load() >= 0; }));
  EXPECT_EQ(sh->e_code.load(), static_cast<int>(Status::Code::kBusy));
  ASSERT_EQ(word(), ready);
  // L's pin holds (READY, same generation); its copy fails the CRC.
  ::kill(l, SIGCONT);
  EXPECT_EQ(Reap(l), 0);
  EXPECT_EQ(sh->l_code.load(), static_cast<int>(Status::Code::kCorruption));
  // The damaged block is gone, with its data slot, without another read.
  EXPECT_LT(impl->FindReadySlot(ns, key), 0)
      << "state " << int(internal::WordState(word())) << ", owner " << internal::WordOwner(word());
  EXPECT_EQ(int(internal::WordState(impl->DataWord(static_cast<uint64_t>(data)).load())),
            int(internal::DataState::kFree));
  EXPECT_EQ(DataSlotViolation(r.get(), true), "");
  sh->done = true;
  EXPECT_EQ(Reap(ev), 0);
  // Its key can be stored again and reads back exact.
  ASSERT_TRUE(r->Store(ns, key, bytes.data(), kSlot).ok());
  std::vector<uint8_t> buf(kSlot);
  ASSERT_TRUE(r->Load(ns, key, buf.data(), buf.size()).ok());
  EXPECT_EQ(buf, bytes);
}

// A process paused before its claim CAS is reclaimed (nothing to sweep yet),
// resumes, claims a slot under its stale index, and is killed right after:
// the slot names an owner that is not alive, which no reclaim sweep visits.
// The orphan sweep frees it, so the key becomes storable.
TEST(PauseTest, ClaimLandingAfterReclaimThenKillIsFreedByTheOrphanSweep) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("porphan");
  const RegionOptions opts = TestOptions(kTiny, kSlot);
  auto r = MustOpen(sr.path(), opts);
  const NamespaceId ns = Ns(r.get());
  const BlockKey key = BlockKey::FromId(13);
  const std::vector<uint8_t> bytes = Block(0x5A);
  pid_t z = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "write.before_claim:stop,write.after_claim:kill", 1);
    internal::ReloadFailpoints();
    auto w = MustOpen(sr.path(), opts);
    (void)w->Store(ns, key, bytes.data(), kSlot);
    return 0;
  });
  ASSERT_TRUE(WaitStopped(z));
  ASSERT_TRUE(WaitFor([&] { return r->Participants().size() == 1; }));
  ::kill(z, SIGCONT);
  ASSERT_EQ(Reap(z), 128 + SIGKILL);
  auto* impl = static_cast<internal::RegionImpl*>(r.get());
  // The entry an empty region's claim takes: the first way of the key's
  // first index set.
  const uint64_t e = RegionInternal::CandidateSlots(r.get(), ns, key)[0];
  ASSERT_EQ(internal::WordState(impl->Meta(e).state.load()),
            static_cast<uint8_t>(internal::SlotState::kWriting));
  // Freed within a few liveness timeouts (150 ms each here).
  EXPECT_TRUE(WaitFor(
      [&] {
        return internal::WordState(impl->Meta(e).state.load()) ==
               static_cast<uint8_t>(internal::SlotState::kFree);
      },
      3000));
  EXPECT_GE(r->RegionCounters()[Counter::kReclaimedSlots], 1u);
  StoreOutcome out;
  ASSERT_TRUE(r->Store(ns, key, bytes.data(), kSlot, &out).ok());
  EXPECT_EQ(out, StoreOutcome::kStored);
  EXPECT_EQ(impl->FindReadySlot(ns, key), static_cast<int64_t>(e));
}

// A reclaimer paused mid-sweep past the liveness timeout is itself reclaimed,
// its sweep taken over, and the dead entry's index reused by a newcomer that
// pins a block the paused sweep had not reached yet. When the old reclaimer
// resumes, it must not go on sweeping the newcomer's pin bit (or slots, or
// counters), which carry the same index.
TEST(PauseTest, ResumedReclaimerDoesNotSweepTheIndexsNextOwner) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  ScratchRegion sr("preclaim");
  const RegionOptions opts = TestOptions(kTiny, kSlot);
  NamespaceId ns;
  // Four keys whose two index sets are both the last one: stored in order,
  // the fourth (`late`) takes its last entry, past the sweep's pause at the
  // index's middle.
  std::vector<BlockKey> last_set;
  {
    auto setup = MustOpen(sr.path(), opts);
    ns = Ns(setup.get());
    const uint64_t first = setup->info().num_entries - setup->info().ways;
    for (uint64_t id = 30; last_set.size() < 4 && id < 100'000; ++id) {
      const auto c = RegionInternal::CandidateSlots(setup.get(), ns, BlockKey::FromId(id));
      if (std::all_of(c.begin(), c.end(), [&](uint64_t e) { return e >= first; }))
        last_set.push_back(BlockKey::FromId(id));
    }
    ASSERT_EQ(last_set.size(), 4u);
  }
  struct Sh {
    std::atomic<int> b_index{-1}, n_index{-1};
    std::atomic<bool> n_pinned{false}, done{false};
  };
  auto* sh = SharedAnon<Sh>();
  const BlockKey late = last_set[3];  // will live in the last entry, past the sweep's pause
  // B: dies (later) holding a lease, so that someone reclaims it.
  pid_t b = Spawn([&] {
    auto w = MustOpen(sr.path(), opts);
    sh->b_index = w->info().participant;
    WriteLease lease;
    if (!w->BeginWrite(ns, BlockKey::FromId(20), kSlot, &lease).ok()) return 1;
    ::raise(SIGSTOP);
    return 0;
  });
  ASSERT_TRUE(WaitStopped(b));
  // A: reclaims B and stops halfway through the sweep.
  pid_t a = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "reclaim.mid_sweep:stop", 1);
    internal::ReloadFailpoints();
    auto w = MustOpen(sr.path(), opts);
    while (!sh->done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return 0;
  });
  ASSERT_TRUE(WaitStopped(a));
  ::kill(b, SIGKILL);
  EXPECT_EQ(Reap(b), 128 + SIGKILL);
  // We reclaim A (stalled) and take over B's reclaim (stalled RECLAIMING).
  auto r = MustOpen(sr.path(), opts);
  ASSERT_TRUE(WaitFor([&] { return r->Participants().size() == 1; }));
  const auto bytes = Block(0x42);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(r->Store(ns, last_set[i], bytes.data(), kSlot).ok());
  ASSERT_TRUE(r->Store(ns, late, bytes.data(), kSlot).ok());
  auto* impl = static_cast<internal::RegionImpl*>(r.get());
  ASSERT_EQ(impl->FindReadySlot(ns, late), static_cast<int64_t>(r->info().num_entries - 1));
  // N takes B's old index and pins the block in the last entry.
  pid_t n = Spawn([&] {
    auto w = MustOpen(sr.path(), opts);
    sh->n_index = w->info().participant;
    PinSet pins;
    if (!w->PinPrefix(ns, &late, 1, &pins).ok() || pins.size() != 1) return 1;
    sh->n_pinned = true;
    while (!sh->done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return 0;
  });
  ASSERT_TRUE(WaitFor([&] { return sh->n_pinned.load(); }));
  ASSERT_EQ(sh->n_index.load(), sh->b_index.load());
  ::kill(a, SIGCONT);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // A finishes its stale sweep
  EXPECT_TRUE(r->Drop(ns, late).IsBusy()) << "the newcomer's pin was swept";
  sh->done = true;
  EXPECT_EQ(Reap(n), 0);
  EXPECT_EQ(Reap(a), 0);
  EXPECT_TRUE(WaitFor([&] { return r->Drop(ns, late).ok(); }));
}

// The paused children above are never stopped jobs of the test runner's
// process group (test::Spawn): each is in a group of its own, whose one
// process's parent (this test) is in another group of the same session, so
// the kernel's hang-up of an orphaned group with a stopped job (SIGHUP,
// then SIGCONT) cannot reach a paused child while the test runs.
TEST(PauseTest, APausedChildIsInAProcessGroupOfItsOwnInTheTestsSession) {
  pid_t z = Spawn([] {
    ::raise(SIGSTOP);
    return 0;
  });
  ASSERT_TRUE(WaitStopped(z));
  EXPECT_EQ(::getpgid(z), z);
  EXPECT_NE(::getpgid(z), ::getpgrp());
  EXPECT_EQ(::getsid(z), ::getsid(0));
  ::kill(z, SIGCONT);
  EXPECT_EQ(Reap(z), 0);
}

// Out of the runner's group a child no longer dies of a ^C or a kill of
// the group: it dies with the process that spawned it (test::Spawn), so a
// killed test leaves no paused or looping child behind.
TEST(PauseTest, ASpawnedChildDiesWithTheProcessThatSpawnedIt) {
  auto* grandchild = SharedAnon<std::atomic<pid_t>>();
  pid_t c = Spawn([&] {
    grandchild->store(Spawn([] {
      ::pause();
      return 0;
    }));
    ::pause();
    return 0;
  });
  ASSERT_TRUE(WaitFor([&] { return grandchild->load() > 0; }));
  const pid_t g = grandchild->load();
  ::kill(c, SIGKILL);
  EXPECT_EQ(Reap(c), 128 + SIGKILL);
  // Gone, or a zombie its new parent has not reaped yet.
  auto dead = [g] {
    std::ifstream stat("/proc/" + std::to_string(g) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return true;
    const size_t paren = line.rfind(')');
    return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
  };
  EXPECT_TRUE(WaitFor(dead)) << "grandchild " << g << " outlived its parent";
}

}  // namespace
}  // namespace cxlkv
