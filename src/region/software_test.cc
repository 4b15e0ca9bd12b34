// Copyright cxlkv authors.
//
// coherence=software (layout version 6, docs/coherence.md) through the
// public API, in one process: several Region objects on one file stand for
// several hosts (each its own write partition and visibility layer). The
// machine is coherent, so these tests show the protocol's logic and where it
// flushes and invalidates (CountingVisibility); the non-coherence emulator
// suites make the hosts non-coherent. Multi-process runs:
// software_multiprocess_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "cxlkv/lifecycle.h"
#include "failpoint.h"
#include "geometry.h"
#include "region_impl.h"
#include "region_internal.h"
#include "software_testutil.h"
#include "testutil.h"
#include "visibility/visibility.h"

namespace cxlkv {
namespace {

using internal::CountingVisibility;
using test::FillPattern;
using test::MustOpen;
using test::ScratchRegion;
using test::SoftwareOptions;

const NamespaceDesc kNs{"m", "bf16", "NHD", 0, 0};

std::vector<uint8_t> Block(uint64_t id, size_t n) {
  std::vector<uint8_t> v(n);
  FillPattern(id, v.data(), n);
  return v;
}

struct Counted {
  std::unique_ptr<Region> r;
  CountingVisibility* vis = nullptr;
};

Counted OpenCounted(const std::string& path, const RegionOptions& o) {
  Counted c;
  auto v = std::make_unique<CountingVisibility>(internal::NewCpuVisibility());
  c.vis = v.get();
  Status s = RegionInternal::OpenWithVisibility(path, o, std::move(v), &c.r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c;
}

// Hosts 0 and 1 of a two-partition region (host 0 formats it), the test
// namespace registered by both (the same id).
struct TwoHosts {
  std::unique_ptr<Region> h0, h1;
  NamespaceId ns = 0;
};
TwoHosts OpenTwoHosts(const std::string& path, uint64_t size, uint64_t slot) {
  TwoHosts t;
  t.h0 = MustOpen(path, SoftwareOptions(size, slot, 2, 0));
  t.h1 = MustOpen(path, SoftwareOptions(size, slot, 2, 1));
  NamespaceId n1 = 0;
  EXPECT_TRUE(t.h0->RegisterNamespace(kNs, &t.ns).ok());
  EXPECT_TRUE(t.h1->RegisterNamespace(kNs, &n1).ok());
  EXPECT_EQ(n1, t.ns);
  return t;
}

TEST(Software, FormatsLayoutVersion6AndServesEveryPartitionsBlocks) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  auto h0 = MustOpen(tmp.path(), SoftwareOptions(8 << 20, 4096, 3, 0));
  auto h1 = MustOpen(tmp.path(), SoftwareOptions(8 << 20, 4096, 0, 1));  // 0: accept
  auto h2 = MustOpen(tmp.path(), SoftwareOptions(8 << 20, 4096, 3, 2));
  EXPECT_EQ(h0->info().layout_version, 6u);
  EXPECT_EQ(h1->info().config.software_partitions, 3u);
  EXPECT_EQ(h1->info().config.coherence, CoherenceMode::kSoftware);
  Region* hosts[3] = {h0.get(), h1.get(), h2.get()};
  NamespaceId ns[3];
  for (int h = 0; h < 3; ++h) ASSERT_TRUE(hosts[h]->RegisterNamespace(kNs, &ns[h]).ok());
  EXPECT_EQ(ns[1], ns[0]);  // registered by host 0 first: found by the others
  EXPECT_EQ(ns[2], ns[0]);
  for (int h = 0; h < 3; ++h) {
    for (uint64_t i = 0; i < 20; ++i) {
      const uint64_t id = h * 1000 + i;
      const auto b = Block(id, 1000 + i * 100);
      StoreOutcome o;
      ASSERT_TRUE(hosts[h]->Store(ns[h], BlockKey::FromId(id), b.data(), b.size(), &o).ok());
      EXPECT_EQ(o, StoreOutcome::kStored);
    }
  }
  for (int reader = 0; reader < 3; ++reader) {
    for (int h = 0; h < 3; ++h) {
      for (uint64_t i = 0; i < 20; ++i) {
        const uint64_t id = h * 1000 + i;
        const auto want = Block(id, 1000 + i * 100);
        std::vector<uint8_t> got(4096);
        LoadInfo info;
        Status s = hosts[reader]->Load(ns[reader], BlockKey::FromId(id), got.data(), got.size(), {},
                                       &info);
        ASSERT_TRUE(s.ok()) << s.ToString();
        ASSERT_EQ(info.len, want.size());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
        EXPECT_EQ(info.writer_participant, static_cast<uint32_t>(h));
        EXPECT_EQ(info.cross_participant, h != reader);
      }
    }
    BlockKey chain[3] = {BlockKey::FromId(0), BlockKey::FromId(1), BlockKey::FromId(999)};
    EXPECT_EQ(hosts[reader]->LookupPrefix(ns[reader], chain, 3), 2u);
    EXPECT_TRUE(hosts[reader]->Lookup(ns[reader], BlockKey::FromId(2001)).ok());
  }
  // A key stored by one host is a duplicate for every other.
  const auto b = Block(1, 1100);
  StoreOutcome o;
  ASSERT_TRUE(h2->Store(ns[2], BlockKey::FromId(1), b.data(), b.size(), &o).ok());
  EXPECT_EQ(o, StoreOutcome::kDuplicate);
  EXPECT_EQ(h0->Participants().size(), 3u);
  EXPECT_GE(h1->RegionCounters()[Counter::kStores], 20u);  // own, at least
}

// Quiet holders: their heartbeats (the sweep's and the payload check's
// invalidates and flushes) are a minute away, so the counts are the
// operations' own.
RegionOptions QuietSoftwareOptions(uint64_t size, uint64_t slot, uint32_t partitions,
                                   int32_t partition) {
  RegionOptions o = SoftwareOptions(size, slot, partitions, partition);
  o.heartbeat_interval_ns = kMaxHeartbeatIntervalNs;
  o.liveness_timeout_ns = 4 * kMaxHeartbeatIntervalNs;
  return o;
}

TEST(Software, StoreFlushesPayloadAndMetadataAndCrossLoadInvalidatesThem) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  Counted w = OpenCounted(tmp.path(), QuietSoftwareOptions(8 << 20, 1 << 16, 2, 0));
  Counted r = OpenCounted(tmp.path(), QuietSoftwareOptions(8 << 20, 1 << 16, 2, 1));
  NamespaceId ns;
  ASSERT_TRUE(w.r->RegisterNamespace(kNs, &ns).ok());
  const size_t n = 40000;  // 625 lines
  const auto b = Block(7, n);
  w.vis->Reset();
  ASSERT_TRUE(w.r->Store(ns, BlockKey::FromId(7), b.data(), b.size()).ok());
  auto k = w.vis->counts();
  // Payload lines, the meta line (READY: layout 6 publishes WRITING only
  // with it, SW2b having freed what the bytes were) and the tag line.
  EXPECT_GE(k.flush_lines, n / 64 + 2);
  EXPECT_GE(k.store_fences, 3u);
  EXPECT_EQ(k.copy_in_bytes, n);
  // The writer's own load invalidates nothing of its own block.
  std::vector<uint8_t> got(n);
  w.vis->Reset();
  ASSERT_TRUE(w.r->Load(ns, BlockKey::FromId(7), got.data(), got.size()).ok());
  EXPECT_LT(w.vis->counts().invalidate_lines, 8u);  // other partition's tag lines only
  // Another host's load invalidates the tag line, the meta line (before
  // and after the copy) and every payload line.
  ASSERT_TRUE(r.r->RegisterNamespace(kNs, &ns).ok());
  r.vis->Reset();
  ASSERT_TRUE(r.r->Load(ns, BlockKey::FromId(7), got.data(), got.size()).ok());
  EXPECT_EQ(got, b);
  k = r.vis->counts();
  EXPECT_GE(k.invalidate_lines, n / 64 + 3);
  EXPECT_GE(k.full_fences, 3u);
  EXPECT_EQ(k.copy_out_bytes, n);
}

TEST(Software, VersionAndModeMismatchesNameBoth) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion hw, sw;
  { auto r = MustOpen(hw.path(), test::TestOptions(4 << 20, 4096)); }
  { auto r = MustOpen(sw.path(), SoftwareOptions(4 << 20, 4096, 2, 0)); }
  std::unique_ptr<Region> r;
  Status s = Region::Open(hw.path(), SoftwareOptions(0, 0, 0, 0), &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.ToString().find("hardware"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("software"), std::string::npos) << s.ToString();
  RegionOptions plain = test::TestOptions(0, 0);
  s = Region::Open(sw.path(), plain, &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.ToString().find("hardware"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("software"), std::string::npos) << s.ToString();
  // Partition counts must agree; partitions must exist.
  s = Region::Open(sw.path(), SoftwareOptions(0, 0, 3, 1), &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  s = Region::Open(sw.path(), SoftwareOptions(0, 0, 0, 2), &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  // A participant needs a partition; hardware mode takes none.
  s = Region::Open(sw.path(), SoftwareOptions(0, 0, 0, -1), &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  RegionOptions hwp = test::TestOptions(0, 0);
  hwp.software_partition = 0;
  s = Region::Open(hw.path(), hwp, &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  // Formatting needs a partition count.
  ScratchRegion blank;
  s = Region::Open(blank.path(), SoftwareOptions(4 << 20, 4096, 0, 0), &r);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.ToString().find("software_partitions"), std::string::npos) << s.ToString();
  // A layout version 3 region (v0.1.0's software mode, whose readers could
  // serve a writer paused past its lease) is refused, naming the versions.
  {
    std::fstream f(sw.path(), std::ios::in | std::ios::out | std::ios::binary);
    const uint32_t v3 = 3;
    f.seekp(24);  // Superblock::layout_version
    f.write(reinterpret_cast<const char*>(&v3), sizeof v3);
  }
  s = Region::Open(sw.path(), SoftwareOptions(0, 0, 0, 1), &r);
  EXPECT_TRUE(s.IsUnsupported()) << s.ToString();
  for (const char* v : {"layout version 3", "layout version 5", "layout version 6"})
    EXPECT_NE(s.ToString().find(v), std::string::npos) << v << ": " << s.ToString();
  // Layout 4 (software mode choosing among a key's 32 ways) likewise: format
  // it again.
  {
    std::fstream f(sw.path(), std::ios::in | std::ios::out | std::ios::binary);
    const uint32_t v4 = 4;
    f.seekp(24);
    f.write(reinterpret_cast<const char*>(&v4), sizeof v4);
  }
  s = Region::Open(sw.path(), SoftwareOptions(0, 0, 0, 1), &r);
  EXPECT_TRUE(s.IsUnsupported()) << s.ToString();
  for (const char* v : {"layout version 4", "layout version 6", "format it again"})
    EXPECT_NE(s.ToString().find(v), std::string::npos) << v << ": " << s.ToString();
}

TEST(Software, OnlyPartitionZeroFormatsTheOthersWait) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  RegionOptions o = SoftwareOptions(4 << 20, 4096, 2, 1);
  o.format_wait_ns = 100'000'000;
  std::unique_ptr<Region> r;
  Status s = Region::Open(tmp.path(), o, &r);
  EXPECT_TRUE(s.IsBusy()) << s.ToString();
  o.create_if_missing = false;
  s = Region::Open(tmp.path(), o, &r);
  EXPECT_TRUE(s.IsNotFound() || s.IsIOError()) << s.ToString();
  // Partition 1 waiting in a thread attaches once partition 0 formats.
  RegionOptions waiting = SoftwareOptions(4 << 20, 4096, 2, 1);
  Status ws;
  std::unique_ptr<Region> late;
  std::thread t([&] { ws = Region::Open(tmp.path(), waiting, &late); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto h0 = MustOpen(tmp.path(), SoftwareOptions(4 << 20, 4096, 2, 0));
  t.join();
  ASSERT_TRUE(ws.ok()) << ws.ToString();
  EXPECT_EQ(late->info().format_epoch, h0->info().format_epoch);
}

TEST(Software, EvictsOnlyWithinItsOwnPartitionAndNeverServesWrongBytes) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  TwoHosts two = OpenTwoHosts(tmp.path(), 2 << 20, 4096);
  Region* h0 = two.h0.get();
  Region* h1 = two.h1.get();
  const NamespaceId ns = two.ns;
  const uint64_t slots = h0->info().num_slots;
  // Host 1's blocks, which host 0's stores must never evict.
  for (uint64_t i = 0; i < 16; ++i) {
    const auto b = Block(1'000'000 + i, 3000);
    ASSERT_TRUE(h1->Store(ns, BlockKey::FromId(1'000'000 + i), b.data(), b.size()).ok());
  }
  uint64_t full = 0;
  for (uint64_t i = 0; i < 3 * slots; ++i) {
    const auto b = Block(i, 2000);
    StoreOutcome o;
    Status s = h0->Store(ns, BlockKey::FromId(i), b.data(), b.size(), &o);
    if (s.IsNoSpace()) ++full;
    ASSERT_TRUE(s.ok() || s.IsNoSpace()) << s.ToString();
  }
  EXPECT_GT(h0->ProcessCounters()[Counter::kEvictions], 0u);
  uint64_t hits = 0;
  for (uint64_t i = 0; i < 3 * slots; ++i) {
    std::vector<uint8_t> got(4096);
    for (Region* r : {h0, h1}) {
      Status s = r->Load(ns, BlockKey::FromId(i), got.data(), got.size());
      if (s.IsNotFound()) continue;
      ASSERT_TRUE(s.ok()) << s.ToString();
      ++hits;
      EXPECT_EQ(std::memcmp(got.data(), Block(i, 2000).data(), 2000), 0) << i;
    }
  }
  EXPECT_GT(hits, 0u);
  EXPECT_LE(hits / 2, slots / 2);  // host 0 holds at most its partition
  for (uint64_t i = 0; i < 16; ++i) {
    std::vector<uint8_t> got(4096);
    ASSERT_TRUE(h0->Load(ns, BlockKey::FromId(1'000'000 + i), got.data(), got.size()).ok()) << i;
    EXPECT_EQ(std::memcmp(got.data(), Block(1'000'000 + i, 3000).data(), 3000), 0);
  }
  (void)full;
}

// SW2 evicts the least recently used of a key's candidate ways in its own
// partition: blocks stored a moment ago outlive older ones under store
// pressure, and the holder's own reads count as uses. CLOCK over its
// process-local reference bits (the code until this test) evicted at random
// among the unread blocks, so recently stored ones went as often as old ones.
// Prefix-aware eviction in the holder's partition (issue 24; region_test's
// AChainLeavesTailFirstAndItsHeadStays): depths live in the holder's
// process memory beside its last-use ticks.
TEST(Software, AChainLeavesTailFirstAndItsHeadStays) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  auto h0 = MustOpen(tmp.path(), SoftwareOptions(1 << 20, 4096, 1, 0));
  NamespaceId ns = 0;
  ASSERT_TRUE(h0->RegisterNamespace(kNs, &ns).ok());
  test::ExpectTailFirstAmongCandidates(test::AgeAChain(h0.get(), ns, 4096));
}

// Issue 24's second half, as RegionTest.NoChunkLeavesWhileAnOlderOneStays
// Anywhere (region_test.cc) checks it for the region, here for a write
// partition of at least 1,024 slots: layout 6 evicts the partition's least
// recently used block (software_state.h), wherever its key lives.
TEST(Software, NoChunkLeavesWhileAnOlderOneStaysAnywhere) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  auto h0 = MustOpen(tmp.path(), SoftwareOptions(6 << 20, 4096, 1, 0));
  NamespaceId ns = 0;
  ASSERT_TRUE(h0->RegisterNamespace(kNs, &ns).ok());
  test::ExpectNoChunkBeforeAnOlderBlock(test::AgeAChain(h0.get(), ns, 4096));
}

TEST(Software, EvictionTakesTheLeastRecentlyUsedBlocksOfItsPartition) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  auto h0 = MustOpen(tmp.path(), SoftwareOptions(1 << 20, 4096, 1, 0));
  NamespaceId ns = 0;
  ASSERT_TRUE(h0->RegisterNamespace(kNs, &ns).ok());
  const uint64_t n = h0->info().num_slots;  // one partition: all of them
  ASSERT_GE(n, 64u);
  const auto b = Block(5, 4096);
  const auto store_batch = [&](uint64_t first, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) {
      ASSERT_TRUE(h0->Store(ns, BlockKey::FromId(first + i), b.data(), b.size()).ok());
    }
    // Past the coarse clock's tick (4 ms at HZ=250), so batches differ in age.
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
  };
  const auto present = [&](uint64_t first, uint64_t count) {
    uint64_t k = 0;
    for (uint64_t i = 0; i < count; ++i) k += h0->Lookup(ns, BlockKey::FromId(first + i)).ok();
    return k;
  };
  store_batch(0, n);  // A: fills the partition
  // Load (not just look up) A's oldest eighth, those the fill left.
  uint64_t read = 0;
  std::vector<uint8_t> got(4096);
  for (uint64_t i = 0; i < n / 8; ++i) {
    read += h0->Load(ns, BlockKey::FromId(i), got.data(), got.size()).ok();
  }
  ASSERT_GE(read, n / 16);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  store_batch(1'000'000, n / 4);  // B: evicts A's unread blocks
  store_batch(2'000'000, n / 4);  // C: A's unread blocks again, not B's or the read ones
  EXPECT_GE(present(1'000'000, n / 4), n / 4 - n / 4 / 32) << "of " << n / 4;
  EXPECT_GE(present(2'000'000, n / 4), n / 4 - n / 4 / 32) << "of " << n / 4;
  EXPECT_GE(present(0, n / 8), read - read / 16) << "of " << read;
  EXPECT_GT(h0->ProcessCounters()[Counter::kEvictions], n / 4);
}

// The holder's order rests on a 32-bit millisecond tick (SwTick: the
// coarse monotonic clock modulo 2^32) that SwHolderState::Extend makes a
// 64-bit count. It must order uses whatever the clock reads at attach: a
// host up between 24.8 and 49.7 days (modulo 49.7) reads 2^31 or more, and
// an extension that starts from 0 took every such reading for a step back,
// so every block had the same tick and the lowest data slot went first
// (the block stored last, each time: a new block lived until the next
// store). The test build's held eviction clock stands at each reading.
TEST(Software, EvictionStaysLeastRecentlyUsedWhateverTheClockReads) {
  CXLKV_NEED_VISIBILITY();
  if (!internal::kFailpointsBuilt) GTEST_SKIP() << "needs the test build's eviction clock";
  for (const uint32_t at : {0x00100000u, 0x7FFFFF00u, 0x80000000u, 0xC0000000u, 0xFFFFFF00u}) {
    SCOPED_TRACE(testing::Message() << "clock at " << std::hex << at);
    internal::HoldEvictionClock(true);
    // The first reading after the hold fixes where the clock stands (the
    // process's skew is added to it).
    (void)internal::EvictionClock(internal::kSoftwareClock, at - internal::EvictionClockSkewMs());
    ScratchRegion tmp;
    auto h0 = MustOpen(tmp.path(), SoftwareOptions(1 << 20, 4096, 1, 0));
    NamespaceId ns = 0;
    ASSERT_TRUE(h0->RegisterNamespace(kNs, &ns).ok());
    const uint64_t n = h0->info().num_slots;
    ASSERT_GE(n, 64u);
    const auto b = Block(6, 4096);
    std::vector<uint8_t> got(4096);
    for (uint64_t i = 0; i < n; ++i) {  // fills the partition, oldest first
      ASSERT_TRUE(h0->Store(ns, BlockKey::FromId(i), b.data(), b.size()).ok());
      internal::AdvanceEvictionClock(10);
    }
    for (uint64_t i = 0; i < n / 8; ++i) {  // the oldest eighth, used again
      ASSERT_TRUE(h0->Load(ns, BlockKey::FromId(i), got.data(), got.size()).ok()) << i;
      internal::AdvanceEvictionClock(10);
    }
    for (uint64_t i = 0; i < n / 4; ++i) {  // evicts blocks n/8 .. 3n/8
      ASSERT_TRUE(h0->Store(ns, BlockKey::FromId(1'000'000 + i), b.data(), b.size()).ok());
      internal::AdvanceEvictionClock(10);
    }
    uint64_t read = 0, newer = 0, unread = 0;
    for (uint64_t i = 0; i < n / 8; ++i) read += h0->Lookup(ns, BlockKey::FromId(i)).ok();
    for (uint64_t i = 0; i < n / 4; ++i)
      newer += h0->Lookup(ns, BlockKey::FromId(1'000'000 + i)).ok();
    for (uint64_t i = n / 8; i < n / 8 + n / 4; ++i)
      unread += h0->Lookup(ns, BlockKey::FromId(i)).ok();
    internal::HoldEvictionClock(false);
    // Exact LRU, but for a store whose key's two index sets were both full
    // (it evicts the older of those sets' blocks instead): rare at two
    // entries per data slot.
    EXPECT_GE(read, n / 8 - n / 64) << "of " << n / 8;
    EXPECT_GE(newer, n / 4 - n / 64) << "of " << n / 4;
    EXPECT_LE(unread, n / 64) << "of " << n / 4;
  }
}

// Partition 0's holder formats only blank bytes, as hardware mode's opener
// does (region_test's ForeignNonBlankFileIsNeverFormattedOver): a non-zero
// word where the format lock goes is an abandoned format of ours only over
// an otherwise blank superblock or our own config, and a blank file must be
// blank over all of layout 6's metadata (its index is twice layout 4's, and
// the hint rings follow it). Both were formatted over: any file whose second
// word was not zero (a text file), and one with bytes past layout 4's
// metadata but inside layout 6's.
TEST(Software, ForeignBytesAreNeverFormattedOver) {
  CXLKV_NEED_VISIBILITY();
  const RegionOptions o = SoftwareOptions(4 << 20, 4096, 2, 0);
  {
    ScratchRegion sr;
    {
      std::ofstream f(sr.path(), std::ios::binary);
      for (int i = 0; i < (4 << 20) / 5; ++i) f << "data ";
      f << "data";
    }
    std::unique_ptr<Region> r;
    Status s = Region::Open(sr.path(), o, &r);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.message().find("neither a cxlkv region nor blank"), std::string::npos)
        << s.ToString();
    std::ifstream f(sr.path(), std::ios::binary);
    char buf[16] = {};
    f.read(buf, 15);
    EXPECT_STREQ(buf, "data data data ");
  }
  {
    internal::Geometry g;
    ASSERT_TRUE(
        internal::ComputeSoftwareGeometry(4 << 20, 4096, o.config.max_participants, 2, &g).ok());
    ScratchRegion sr;
    const uint64_t at = g.rings_off + 8;  // a hint ring's slot
    {
      std::ofstream f(sr.path(), std::ios::binary);
      std::vector<char> zero(4 << 20, 0);
      std::memcpy(zero.data() + at, "precious", 8);
      f.write(zero.data(), zero.size());
    }
    std::unique_ptr<Region> r;
    Status s = Region::Open(sr.path(), o, &r);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.message().find("offset " + std::to_string(at)), std::string::npos) << s.ToString();
    std::ifstream f(sr.path(), std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char buf[9] = {};
    f.read(buf, 8);
    EXPECT_STREQ(buf, "precious");
  }
}

// A damaged magic word over a finished format (its lock word says
// finished, its header checksum holds) is restored, as hardware mode does
// (corruption_test's DamagedMagicIsRepairedNeverReformatted), not taken for
// an abandoned format: partition 0's next holder reformatted the region,
// and every partition's blocks were lost.
TEST(Software, DamagedMagicIsRepairedNeverReformatted) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  uint64_t epoch = 0;
  {
    TwoHosts two = OpenTwoHosts(tmp.path(), 4 << 20, 4096);
    epoch = two.h0->info().format_epoch;
    for (uint64_t i = 0; i < 8; ++i) {
      const auto b = Block(i, 3000);
      Region* h = i % 2 ? two.h1.get() : two.h0.get();
      ASSERT_TRUE(h->Store(two.ns, BlockKey::FromId(i), b.data(), b.size()).ok());
    }
  }
  {
    std::fstream f(tmp.path(), std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    f.read(&c, 1);
    c ^= 1;
    f.seekp(0);  // Superblock::magic
    f.write(&c, 1);
  }
  auto h0 = MustOpen(tmp.path(), SoftwareOptions(4 << 20, 4096, 2, 0));
  EXPECT_EQ(h0->info().format_epoch, epoch);
  NamespaceId ns = 0;
  ASSERT_TRUE(h0->RegisterNamespace(kNs, &ns).ok());
  std::vector<uint8_t> got(4096);
  // Partition 0's blocks went with its lease (the attach sweep); partition
  // 1's stay readable while nobody holds it.
  for (uint64_t i = 1; i < 8; i += 2) {
    ASSERT_TRUE(h0->Load(ns, BlockKey::FromId(i), got.data(), got.size()).ok()) << i;
    EXPECT_EQ(std::memcmp(got.data(), Block(i, 3000).data(), 3000), 0) << i;
  }
}

// Only partition 0's holder writes the superblock of a coherence=software
// region, so only it restores a damaged magic word. Every other opener
// left it alone but said the wrong thing: an observer (`cxlkv inspect`)
// "is not formatted", another partition's holder waited its whole
// format_wait for a format, and an opener in hardware mode (the CLI's
// default for a region whose magic it cannot read) wrote the magic into
// partition 0's line itself, then refused the region as "expects
// hardware". Each now names the damaged magic and who restores it, and
// writes nothing.
TEST(Software, ADamagedMagicIsLeftToPartitionZeroAndNamedByEveryOtherOpener) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  {
    TwoHosts two = OpenTwoHosts(tmp.path(), 4 << 20, 4096);
    const auto b = Block(3, 3000);
    ASSERT_TRUE(two.h1->Store(two.ns, BlockKey::FromId(3), b.data(), b.size()).ok());
  }
  auto magic0 = [&] {
    std::ifstream f(tmp.path(), std::ios::binary);
    char c = 0;
    f.read(&c, 1);
    return c;
  };
  const char intact = magic0();
  {
    std::fstream f(tmp.path(), std::ios::in | std::ios::out | std::ios::binary);
    const char c = static_cast<char>(intact ^ 1);
    f.write(&c, 1);  // Superblock::magic
  }
  auto names_it = [](const Status& s) {
    return s.message().find("magic") != std::string::npos &&
           s.message().find("write partition 0") != std::string::npos &&
           s.message().find("--partitions 2") != std::string::npos;
  };
  std::unique_ptr<Region> r;
  RegionOptions obs = SoftwareOptions(0, 0, 0, -1);
  obs.register_participant = false;
  obs.create_if_missing = false;
  Status s = Region::Open(tmp.path(), obs, &r);
  EXPECT_TRUE(s.IsCorruption() && names_it(s)) << s.ToString();
  RegionOptions hw = test::TestOptions(0, 0);
  hw.create_if_missing = false;
  hw.register_participant = false;
  s = Region::Open(tmp.path(), hw, &r);
  EXPECT_TRUE(s.IsCorruption() && names_it(s)) << s.ToString();
  EXPECT_NE(magic0(), intact) << "a hardware-mode opener wrote partition 0's superblock line";
  RegionOptions p1 = SoftwareOptions(0, 0, 0, 1);
  p1.format_wait_ns = 50'000'000;
  s = Region::Open(tmp.path(), p1, &r);
  EXPECT_TRUE(s.IsBusy() && names_it(s)) << s.ToString();
  EXPECT_NE(magic0(), intact);
  auto h0 = MustOpen(tmp.path(), SoftwareOptions(0, 0, 0, 0));  // restores it
  EXPECT_EQ(magic0(), intact);
  ASSERT_TRUE(Region::Open(tmp.path(), obs, &r).ok());
}

// The holder's map (software_state.h) gives an entry one data slot. An
// entry whose line says FREE while the holder believes it holds a block
// (damage; or a zombie's late SW2b line, until the periodic sweep gets
// there) is taken by the next store of its set: the holder kept the entry's
// old data slot in its order under that entry, so once that slot was the
// oldest, evicting it evicted the entry's new block, the youngest of the
// partition (and the ghost went on to the next block the entry held).
TEST(Software, AnEntryFreedBehindTheHoldersBackIsReusedWithoutEvictingItsNewBlock) {
  CXLKV_NEED_VISIBILITY();
  if (!internal::kFailpointsBuilt) GTEST_SKIP() << "needs the test build's eviction clock";
  RegionOptions o = SoftwareOptions(1 << 20, 4096, 1, 0);
  o.heartbeat_interval_ns = 10'000'000'000;  // no periodic sweep repairs it first
  o.liveness_timeout_ns = 4 * o.heartbeat_interval_ns;
  const auto b = Block(8, 4096);
  // A key whose store lands on the entry block 0 gets (way 0 of its first
  // set): found in a region of the same geometry and hash, where a key
  // stored into an empty set takes way 0 of its first set.
  int64_t e0 = -1;
  uint64_t k = 0;
  {
    ScratchRegion probe;
    auto p = MustOpen(probe.path(), o);
    NamespaceId ns = 0;
    ASSERT_TRUE(p->RegisterNamespace(kNs, &ns).ok());
    ASSERT_TRUE(p->Store(ns, BlockKey::FromId(0), b.data(), b.size()).ok());
    e0 = RegionInternal::FindReadySlot(p.get(), ns, BlockKey::FromId(0));
    ASSERT_TRUE(p->Drop(ns, BlockKey::FromId(0)).ok());
    for (k = 1'000'000; k < 1'010'000; ++k) {
      ASSERT_TRUE(p->Store(ns, BlockKey::FromId(k), b.data(), b.size()).ok());
      if (RegionInternal::FindReadySlot(p.get(), ns, BlockKey::FromId(k)) == e0) break;
      ASSERT_TRUE(p->Drop(ns, BlockKey::FromId(k)).ok());
    }
    ASSERT_LT(k, 1'010'000u);
  }
  internal::HoldEvictionClock(true);
  ScratchRegion tmp;
  auto h0 = MustOpen(tmp.path(), o);
  NamespaceId ns = 0;
  ASSERT_TRUE(h0->RegisterNamespace(kNs, &ns).ok());
  const uint64_t n = h0->info().num_slots;
  for (uint64_t i = 0; i < n / 2; ++i) {
    ASSERT_TRUE(h0->Store(ns, BlockKey::FromId(i), b.data(), b.size()).ok());
    internal::AdvanceEvictionClock(10);
  }
  ASSERT_EQ(RegionInternal::FindReadySlot(h0.get(), ns, BlockKey::FromId(0)), e0);
  // Damage: block 0's entry says FREE (a later generation).
  std::atomic<uint64_t>& w = static_cast<internal::RegionImpl*>(h0.get())->Meta(e0).state;
  w.store(internal::PackWord(internal::WordGen(w.load()) + 1, 0, 0));
  ASSERT_TRUE(h0->Store(ns, BlockKey::FromId(k), b.data(), b.size()).ok());
  ASSERT_EQ(RegionInternal::FindReadySlot(h0.get(), ns, BlockKey::FromId(k)), e0);
  internal::AdvanceEvictionClock(10);
  // Fill the partition and evict a few: blocks 1, 2, ... go, the young one stays.
  for (uint64_t i = 0; i < n / 2 + 8; ++i) {
    ASSERT_TRUE(h0->Store(ns, BlockKey::FromId(2'000'000 + i), b.data(), b.size()).ok());
    internal::AdvanceEvictionClock(10);
  }
  internal::HoldEvictionClock(false);
  EXPECT_TRUE(h0->Lookup(ns, BlockKey::FromId(k)).ok()) << "the youngest block was evicted";
  EXPECT_FALSE(h0->Lookup(ns, BlockKey::FromId(1)).ok()) << "the oldest block stayed";
}

// A block of a partition nobody holds stays readable (docs/coherence.md,
// "Recovery and reclaim"), but one that fails its CRC there has nobody to
// drop it: it kept its key out of every other partition for as long (SW1
// took it for a duplicate, so no host stored the key again, and every load
// of the key failed). A host that found it corrupt now passes it over.
TEST(Software, ACorruptBlockOfAPartitionNobodyHoldsDoesNotKeepItsKeyOut) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  TwoHosts two = OpenTwoHosts(tmp.path(), 4 << 20, 4096);
  const NamespaceId ns = two.ns;
  const BlockKey key = BlockKey::FromId(44);
  const auto b = Block(44, 3000);
  ASSERT_TRUE(two.h1->Store(ns, key, b.data(), b.size()).ok());
  const int64_t slot = RegionInternal::FindReadySlot(two.h0.get(), ns, key);
  ASSERT_GE(slot, 0);
  two.h1.reset();  // partition 1's holder leaves; its blocks stay readable
  RegionInternal::SlotData(two.h0.get(), static_cast<uint64_t>(slot))[100] ^= 0x20;
  std::vector<uint8_t> got(4096);
  EXPECT_TRUE(two.h0->Load(ns, key, got.data(), got.size()).IsCorruption());
  StoreOutcome o;
  ASSERT_TRUE(two.h0->Store(ns, key, b.data(), b.size(), &o).ok());
  EXPECT_EQ(o, StoreOutcome::kStored) << "the corrupt copy counted as a duplicate";
  ASSERT_TRUE(two.h0->Load(ns, key, got.data(), got.size()).ok());
  EXPECT_EQ(std::memcmp(got.data(), b.data(), b.size()), 0);
  EXPECT_TRUE(two.h0->Lookup(ns, key).ok());
}

TEST(Software, LeasesZeroCopyReadsDropWipeAndVerify) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  TwoHosts two = OpenTwoHosts(tmp.path(), 4 << 20, 8192);
  Region* h0 = two.h0.get();
  Region* h1 = two.h1.get();
  const NamespaceId ns = two.ns;
  // BeginWrite / fill / CommitWrite without a CRC (computed from the slot).
  WriteLease wl;
  ASSERT_TRUE(h0->BeginWrite(ns, BlockKey::FromId(1), 5000, &wl).ok());
  ASSERT_TRUE(wl.open());
  FillPattern(1, wl.data(), 5000);
  EXPECT_FALSE(h1->Lookup(ns, BlockKey::FromId(1)).ok());  // WRITING: invisible
  ASSERT_TRUE(h0->CommitWrite(&wl).ok());
  // An aborted lease leaves nothing.
  ASSERT_TRUE(h0->BeginWrite(ns, BlockKey::FromId(2), 100, &wl).ok());
  h0->AbortWrite(&wl);
  EXPECT_FALSE(h0->Lookup(ns, BlockKey::FromId(2)).ok());
  // Zero-copy read by the other host, verified at EndRead.
  ReadLease rl;
  ASSERT_TRUE(h1->BeginRead(ns, BlockKey::FromId(1), &rl).ok());
  std::vector<uint8_t> copy(rl.len());
  std::memcpy(copy.data(), rl.data(), rl.len());
  ASSERT_TRUE(h1->EndRead(&rl, copy.data()).ok());
  EXPECT_EQ(copy, Block(1, 5000));
  // Pins are not offered.
  PinSet pins;
  BlockKey k1 = BlockKey::FromId(1);
  EXPECT_TRUE(h1->PinPrefix(ns, &k1, 1, &pins).IsUnsupported());
  // Only the owner drops; Wipe clears only its own partition.
  EXPECT_TRUE(h1->Drop(ns, k1).IsUnsupported());
  const auto b = Block(3, 700);
  ASSERT_TRUE(h1->Store(ns, BlockKey::FromId(3), b.data(), b.size()).ok());
  Region::WipeReport wr;
  ASSERT_TRUE(h0->Wipe(&wr).ok());
  EXPECT_EQ(wr.dropped, 1u);
  EXPECT_TRUE(h0->Lookup(ns, BlockKey::FromId(3)).ok());
  EXPECT_FALSE(h0->Lookup(ns, k1).ok());
  ASSERT_TRUE(h1->Drop(ns, BlockKey::FromId(3)).ok());
  EXPECT_TRUE(h0->Lookup(ns, BlockKey::FromId(3)).IsNotFound());
}

// Damage one payload byte of host 1's block: every reader gets kCorruption
// (CRC mandatory, verify_crc=false ignored), Verify finds it, and only host
// 1 drops it. Host 1's heartbeat (whose payload check would free the block
// itself: the next test) is a minute away.
TEST(Software, DamagedPayloadFailsEveryReadAndOnlyItsHolderDropsIt) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  auto h0 = MustOpen(tmp.path(), SoftwareOptions(4 << 20, 8192, 2, 0));
  auto h1 = MustOpen(tmp.path(), QuietSoftwareOptions(4 << 20, 8192, 2, 1));
  NamespaceId ns;
  ASSERT_TRUE(h1->RegisterNamespace(kNs, &ns).ok());
  const auto b = Block(3, 700);
  ASSERT_TRUE(h1->Store(ns, BlockKey::FromId(4), b.data(), b.size()).ok());
  const int64_t slot = RegionInternal::FindReadySlot(h0.get(), ns, BlockKey::FromId(4));
  ASSERT_GE(slot, 0);
  RegionInternal::SlotData(h0.get(), slot)[10] ^= 0x40;
  std::vector<uint8_t> got(8192);
  LoadOptions nov;
  nov.verify_crc = false;
  EXPECT_TRUE(h0->Load(ns, BlockKey::FromId(4), got.data(), got.size(), nov).IsCorruption());
  Region::ScrubReport sr;
  ASSERT_TRUE(h0->Verify(true, &sr).ok());
  EXPECT_EQ(sr.crc_failures, 1u);
  EXPECT_EQ(sr.dropped, 0u);  // not host 0's to drop
  ASSERT_TRUE(h1->Verify(true, &sr).ok());
  EXPECT_EQ(sr.dropped, 1u);
  EXPECT_TRUE(h0->Lookup(ns, BlockKey::FromId(4)).IsNotFound());
}

// The holder's heartbeat checks its READY blocks' payload as memory holds it
// (a paused old holder's late fill, or damage, can change it under a block
// whose lines are ours: noncoherent_test's
// OldHoldersLateTagLineAndFillDoNotHideTheHeirsBlocks): a block whose bytes
// no longer match its CRC is freed, counted as a CRC failure, and its key can
// be stored again; the other blocks stay.
TEST(Software, HoldersHeartbeatFreesItsBlockWhosePayloadWasDamaged) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  TwoHosts two = OpenTwoHosts(tmp.path(), 4 << 20, 8192);
  Region* h0 = two.h0.get();
  Region* h1 = two.h1.get();
  const NamespaceId ns = two.ns;
  for (uint64_t id = 1; id <= 8; ++id) {
    const auto b = Block(id, 700 + 100 * id);
    ASSERT_TRUE(h1->Store(ns, BlockKey::FromId(id), b.data(), b.size()).ok());
  }
  const int64_t slot = RegionInternal::FindReadySlot(h0, ns, BlockKey::FromId(5));
  ASSERT_GE(slot, 0);
  RegionInternal::SlotData(h0, slot)[10] ^= 0x40;
  EXPECT_TRUE(
      test::WaitFor([&] { return h0->Lookup(ns, BlockKey::FromId(5)).IsNotFound(); }, 20000))
      << "host 1's heartbeat never freed its damaged block";
  EXPECT_GE(h1->ProcessCounters()[Counter::kCrcFailures], 1u);
  std::vector<uint8_t> got(8192);
  for (uint64_t id = 1; id <= 8; ++id) {
    if (id == 5) continue;
    LoadInfo info;
    ASSERT_TRUE(h0->Load(ns, BlockKey::FromId(id), got.data(), got.size(), {}, &info).ok()) << id;
    EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.begin() + info.len), Block(id, 700 + 100 * id));
  }
  const auto b5 = Block(5, 1200);
  StoreOutcome o;
  ASSERT_TRUE(h1->Store(ns, BlockKey::FromId(5), b5.data(), b5.size(), &o).ok());
  EXPECT_EQ(o, StoreOutcome::kStored);
  ASSERT_TRUE(h0->Load(ns, BlockKey::FromId(5), got.data(), got.size()).ok());
}

TEST(Software, ObserverReadsButCannotWrite) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  auto h0 = MustOpen(tmp.path(), SoftwareOptions(4 << 20, 4096, 2, 0));
  NamespaceId ns;
  ASSERT_TRUE(h0->RegisterNamespace(kNs, &ns).ok());
  const auto b = Block(9, 300);
  ASSERT_TRUE(h0->Store(ns, BlockKey::FromId(9), b.data(), b.size()).ok());
  RegionOptions o = SoftwareOptions(0, 0, 0, -1);
  o.register_participant = false;
  auto obs = MustOpen(tmp.path(), o);
  NamespaceId ons;
  ASSERT_TRUE(obs->RegisterNamespace(kNs, &ons).ok());
  std::vector<uint8_t> got(4096);
  ASSERT_TRUE(obs->Load(ons, BlockKey::FromId(9), got.data(), got.size()).ok());
  StoreOutcome out;
  EXPECT_TRUE(obs->Store(ons, BlockKey::FromId(10), b.data(), b.size(), &out).IsInvalidArgument());
  EXPECT_EQ(out, StoreOutcome::kRefused);
  NamespaceId other;
  EXPECT_TRUE(obs->RegisterNamespace({"x", "bf16", "NHD", 0, 0}, &other).IsNotFound());
}

TEST(Software, ANewHolderOfThePartitionFencesTheOldOne) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  auto h0 = MustOpen(tmp.path(), SoftwareOptions(4 << 20, 4096, 2, 0));
  auto old1 = MustOpen(tmp.path(), SoftwareOptions(4 << 20, 4096, 2, 1));
  NamespaceId ns;
  ASSERT_TRUE(old1->RegisterNamespace(kNs, &ns).ok());
  WriteLease wl;
  ASSERT_TRUE(old1->BeginWrite(ns, BlockKey::FromId(5), 64, &wl).ok());
  FillPattern(5, wl.data(), 64);
  // The lease gives partition 1 to a new process (the old one paused): it
  // recovers the half-written slot at attach.
  auto new1 = MustOpen(tmp.path(), SoftwareOptions(4 << 20, 4096, 2, 1));
  EXPECT_EQ(new1->ProcessCounters()[Counter::kReclaimedSlots], 1u);
  StoreOutcome o;
  EXPECT_TRUE(old1->CommitWrite(&wl, nullptr, &o).IsBusy());
  EXPECT_EQ(o, StoreOutcome::kFenced);
  const auto b = Block(5, 64);
  EXPECT_TRUE(old1->Store(ns, BlockKey::FromId(5), b.data(), b.size(), &o).IsBusy());
  EXPECT_EQ(o, StoreOutcome::kFenced);
  ASSERT_TRUE(new1->Store(ns, BlockKey::FromId(5), b.data(), b.size(), &o).ok());
  EXPECT_EQ(o, StoreOutcome::kStored);
  std::vector<uint8_t> got(64);
  ASSERT_TRUE(h0->Load(ns, BlockKey::FromId(5), got.data(), got.size()).ok());
  EXPECT_EQ(got, b);
}

// Threads of one host store and load concurrently (the TSan stage runs it).
TEST(Software, ThreadsOfOneHostShareItsPartition) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion tmp;
  TwoHosts two = OpenTwoHosts(tmp.path(), 4 << 20, 4096);
  Region* h0 = two.h0.get();
  Region* h1 = two.h1.get();
  const NamespaceId ns = two.ns;
  std::atomic<uint64_t> wrong{0}, hits{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      Region* r = t % 2 ? h1 : h0;
      std::vector<uint8_t> got(4096);
      for (uint64_t i = 0; i < 300; ++i) {
        const uint64_t id = (i * 7 + t) % 200;
        const auto b = Block(id, 1024);
        Status s = r->Store(ns, BlockKey::FromId(id), b.data(), b.size());
        if (!s.ok() && !s.IsBusy() && !s.IsNoSpace()) ++wrong;
        s = r->Load(ns, BlockKey::FromId((id * 13) % 200), got.data(), got.size());
        if (s.ok()) {
          ++hits;
          if (std::memcmp(got.data(), Block((id * 13) % 200, 1024).data(), 1024) != 0) ++wrong;
        } else if (!s.IsNotFound()) {
          ++wrong;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(hits.load(), 0u);
}

}  // namespace
}  // namespace cxlkv
