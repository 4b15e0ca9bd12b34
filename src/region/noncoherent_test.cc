// Copyright cxlkv authors.
//
// coherence=software under the non-coherence emulator (visibility/
// emulator.h): every forked child is one simulated host with a private cache
// of 64-byte lines over the region's real MAP_SHARED file; lines reach the
// file only when flushed, invalidated, or written back at random (seeded)
// moments, whole; a killed or SIGSTOPped host's dirty lines are written back
// later by a sweeper in the parent. Suites: store/load across three hosts
// (after every host cached the empty lines, so stale copies are around),
// format-or-attach with the formatter last, drops seen from other hosts,
// eviction under cross-host reads, a writer killed mid-store, a writer paused
// and replaced by the next holder of its partition. The property everywhere:
// zero wrong bytes served; where no host failed, also no CRC failure and no
// miss of a block that was stored and not evicted.
//
// Environment (test/coherence/mutants.sh sets them): CXLKV_EMU_SEED (the
// emulator's seed, default 1), CXLKV_EMU_SITES (record Flush/Invalidate call
// sites in this file), CXLKV_EMU_DROP_SITES (sites to turn into no-ops),
// CXLKV_EMU_WRITEBACK_EVERY (spontaneous write-backs, one per N calls;
// default 8, 0 = none), CXLKV_EMU_QUICK=1 (shorter phases: a mutant only has
// to be caught once).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "emulator.h"
#include "failpoint.h"
#include "layout.h"
#include "region_internal.h"
#include "testutil.h"

namespace cxlkv {
namespace {

using internal::EmulatedHost;
using internal::EmulatorCacheSweeper;
using internal::EmulatorOptions;
using test::Reap;
using test::ScratchRegion;
using test::SharedAnon;
using test::Spawn;
using Clock = std::chrono::steady_clock;

const NamespaceDesc kNs{"m", "bf16", "NHD", 0, 0};
constexpr uint64_t kRegionBytes = 8 << 20;

bool Quick() {
  const char* q = std::getenv("CXLKV_EMU_QUICK");
  return q != nullptr && q[0] == '1';
}
int Ms(int full) { return Quick() ? full / 3 : full; }

RegionOptions Soft(uint32_t partitions, int32_t partition) {
  RegionOptions o = test::TestOptions(kRegionBytes, 4096);
  o.config.coherence = CoherenceMode::kSoftware;
  o.config.software_partitions = partitions;
  o.software_partition = partition;
  return o;
}

// A block's bytes: 8 bytes of the writer's version, then a pattern of (id,
// version). A reader can tell whole, right bytes from anything else.
size_t LenOf(uint64_t id) { return 600 + (id * 37) % 3000; }
void Fill(uint64_t id, uint64_t version, uint8_t* b) {
  std::memcpy(b, &version, 8);
  test::FillPattern(id * 1000003 + version, b + 8, LenOf(id) - 8);
}

struct Tally {
  std::atomic<uint64_t> hits{0}, misses{0}, wrong{0}, corrupt{0}, stale{0}, errors{0};
  std::atomic<int> phase{0}, arrived{0}, done{0};
};

enum class Got { kHit, kMiss, kWrong, kCorrupt, kError };

// Loads `id`: a hit must be a whole block of one writer version.
Got Check(Region* r, NamespaceId ns, uint64_t id, uint64_t* version = nullptr) {
  std::vector<uint8_t> got(8192), want(LenOf(id));
  LoadInfo info;
  Status s = r->Load(ns, BlockKey::FromId(id), got.data(), got.size(), {}, &info);
  if (s.IsNotFound()) return Got::kMiss;
  if (s.IsCorruption()) return Got::kCorrupt;
  if (!s.ok()) return Got::kError;
  uint64_t v;
  std::memcpy(&v, got.data(), 8);
  Fill(id, v, want.data());
  if (info.len != want.size() || std::memcmp(got.data(), want.data(), want.size()) != 0)
    return Got::kWrong;
  if (version) *version = v;
  return Got::kHit;
}

// The same through a zero-copy read lease, its bytes read as this host's CPU
// would, through its cache (a DMA engine reads them alike).
Got CheckLease(Region* r, NamespaceId ns, uint64_t id, uint64_t version) {
  ReadLease l;
  Status b = r->BeginRead(ns, BlockKey::FromId(id), &l);
  if (b.IsNotFound()) return Got::kMiss;
  if (!b.ok()) return Got::kError;
  std::vector<uint8_t> got(l.len()), want(LenOf(id));
  RegionInternal::GetVisibility(r)->CopyFromRegion(got.data(), l.data(), l.len());
  Status e = r->EndRead(&l, got.data(), nullptr);
  if (e.IsNotFound()) return Got::kMiss;
  if (e.IsCorruption()) return Got::kCorrupt;
  if (!e.ok()) return Got::kError;
  Fill(id, version, want.data());
  return got == want ? Got::kHit : Got::kWrong;
}

void Count(Tally* t, Got g) {
  // In Got's order.
  std::atomic<uint64_t>* const of[] = {&t->hits, &t->misses, &t->wrong, &t->corrupt, &t->errors};
  (*of[static_cast<int>(g)])++;
}

bool StoreBlock(Region* r, NamespaceId ns, uint64_t id, uint64_t version, StoreOutcome* o) {
  std::vector<uint8_t> b(LenOf(id));
  Fill(id, version, b.data());
  return r->Store(ns, BlockKey::FromId(id), b.data(), b.size(), o).ok();
}

// One emulated machine: the region file, the emulator's directory, and
// (parent side) a mapping of the file for the sweeper.
class Machine {
 public:
  Machine() {
    char tmpl[] = "/dev/shm/cxlkv-noncoherent-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  ~Machine() {
    sweeper_stop_ = true;
    if (sweeper_.joinable()) sweeper_.join();
    sw_.reset();
    if (shared_) ::munmap(shared_, kRegionBytes);
    std::filesystem::remove_all(dir_);
  }
  const std::string& path() const { return region_.path(); }

  // Opens the region as host `host` holding `partition`, behind an emulated
  // private cache. Returns a Status so a child can exit with a code.
  // `heartbeat_ns`: the holder's heartbeat interval, if not the tests' 5 ms
  // (its periodic sweep runs once per beat). `format_wait_ns`: how long a
  // holder of another partition waits for the magic, if not the default.
  Status Open(uint32_t host, int32_t partition, uint32_t partitions, std::unique_ptr<Region>* r,
              uint64_t heartbeat_ns = 0, uint64_t format_wait_ns = 0) const {
    EmulatorOptions eo;
    eo.dir = dir_;
    eo.host = host;
    const char* seed = std::getenv("CXLKV_EMU_SEED");
    eo.seed = (seed ? std::strtoull(seed, nullptr, 0) : 1) * 131 + host;
    if (const char* every = std::getenv("CXLKV_EMU_WRITEBACK_EVERY"))
      eo.writeback_every = static_cast<uint32_t>(std::strtoul(every, nullptr, 10));
    if (const char* sites = std::getenv("CXLKV_EMU_SITES")) eo.sites_path = sites;
    if (const char* drop = std::getenv("CXLKV_EMU_DROP_SITES")) {
      Status s = internal::ParseEmulatorSites(drop, &eo.drop_sites);
      if (!s.ok()) return s;
    }
    std::unique_ptr<EmulatedHost> e;
    Status s = EmulatedHost::Open(eo, &e);
    if (!s.ok()) return s;
    RegionOptions o = Soft(partitions, partition);
    o.register_participant = partition >= 0;  // -1: an observer that only reads
    if (heartbeat_ns != 0) {
      o.heartbeat_interval_ns = heartbeat_ns;
      o.liveness_timeout_ns = 4 * heartbeat_ns;  // must exceed the interval
    }
    if (format_wait_ns != 0) o.format_wait_ns = format_wait_ns;
    return RegionInternal::OpenWithVisibility(path(), o, std::move(e), r);
  }

  // Open(host, partition, 3 partitions), retried for up to 5 s while the
  // region's format (by another process) is still under way.
  Status OpenFormatted(uint32_t host, int32_t partition, std::unique_ptr<Region>* r) const {
    Status s = Open(host, partition, 3, r);
    for (int i = 0; i < 500 && s.IsBusy(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      s = Open(host, partition, 3, r);
    }
    return s;
  }

  // Open(host, partition, 3 partitions) plus the test namespace registered:
  // what most hosts of the suites do first. nullptr if either fails.
  std::unique_ptr<Region> Attach(uint32_t host, int32_t partition, NamespaceId* ns) const;

  // Writes back random dirty lines of every host from this process, every
  // millisecond, until destruction: a stopped or dead host's lines land.
  void StartSweeper() {
    const int fd = ::open(path().c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    shared_ = static_cast<uint8_t*>(
        ::mmap(nullptr, kRegionBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ::close(fd);
    ASSERT_NE(shared_, MAP_FAILED);
    Status s = EmulatorCacheSweeper::Open(dir_, shared_, kRegionBytes, 99, &sw_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    sweeper_ = std::thread([this] {
      while (!sweeper_stop_) {
        sw_->Sweep(16);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }

 private:
  ScratchRegion region_{"nc"};
  std::string dir_;
  uint8_t* shared_ = nullptr;
  std::unique_ptr<EmulatorCacheSweeper> sw_;
  std::thread sweeper_;
  std::atomic<bool> sweeper_stop_{false};
};

std::unique_ptr<Region> Machine::Attach(uint32_t host, int32_t partition, NamespaceId* ns) const {
  std::unique_ptr<Region> r;
  if (!Open(host, partition, 3, &r).ok()) return nullptr;
  if (!r->RegisterNamespace(kNs, ns).ok()) return nullptr;
  return r;
}

// Everyone arrives, then phase `to` begins (n participants).
bool Barrier(Tally* t, int n, int to) {
  if (t->arrived.fetch_add(1) + 1 == n * to) t->phase.store(to);
  return test::WaitFor([&] { return t->phase.load() >= to; }, 30000);
}

// The property every suite closes with, checked in the parent once its hosts
// exited: no host was served wrong bytes, and none failed a CRC. A CRC
// failure is a true answer only where a zombie's late lines may land over a
// slot another holder reuses (`crc_failures_ok`); everywhere else it means a
// stale line was read as valid.
void ExpectNoWrongBytes(const Tally* t, bool crc_failures_ok = false) {
  EXPECT_EQ(t->wrong.load(), 0u);
  if (!crc_failures_ok) {
    EXPECT_EQ(t->corrupt.load(), 0u);
  }
}

// A new process on `host` (holding partition `host`, its cache cold) that
// loads `id` and exits 0 if it is a whole block of writer version `version`,
// 10 if it cannot attach, 11 for anything else.
pid_t SpawnReaderOf(const Machine& m, uint32_t host, uint64_t id, uint64_t version) {
  return Spawn([&m, host, id, version] {
    NamespaceId ns;
    auto r = m.Attach(host, static_cast<int32_t>(host), &ns);
    if (!r) return 10;
    uint64_t v = 0;
    return Check(r.get(), ns, id, &v) == Got::kHit && v == version ? 0 : 11;
  });
}

// Three hosts, the formatter (partition 0) attaching last. Hosts 1 and 2
// cache the namespace table, the registry's counters and every block's
// lines while they are still empty; host 0 then registers the namespace and
// the others must find it; every host stores its own blocks and reads
// everyone's (half through Load, half through a zero-copy read lease whose
// bytes are read through the host's cache): all hits, whole; each host drops
// half of its own and the others must miss those; everyone's heartbeat and
// counters are seen advancing from another host; one host leaves and the
// others see its record FREE.
TEST(NoncoherentEmulator, ThreeHostsStoreLoadDropWithStaleCaches) {
  Machine m;
  auto* t = SharedAnon<Tally>();
  constexpr int kHosts = 3;
  const int kIds = Quick() ? 40 : 120;
  const NamespaceDesc other{"other", "bf16", "NHD", 0, 0};
  std::vector<pid_t> kids;
  for (int h = kHosts - 1; h >= 0; --h) {
    kids.push_back(Spawn([&, h] {
      std::unique_ptr<Region> r;
      Status s = m.Open(h, h, kHosts, &r);
      if (!s.ok()) {
        std::fprintf(stderr, "host %d: %s\n", h, s.ToString().c_str());
        return 10;
      }
      NamespaceId ns = 0, ons;
      if (h != 0) {
        if (!r->RegisterNamespace(other, &ons).ok()) return 11;
        (void)r->RegionCounters();
      }
      if (!Barrier(t, kHosts, 1)) return 12;
      if (h == 0 && !r->RegisterNamespace(kNs, &ns).ok()) return 13;
      if (!Barrier(t, kHosts, 2)) return 14;
      if (h != 0 && !r->RegisterNamespace(kNs, &ns).ok()) return 15;
      for (int q = 0; q < kHosts; ++q)
        for (int i = 0; i < kIds; ++i)
          if (Check(r.get(), ns, q * 100000 + i) != Got::kMiss) t->stale++;
      if (!Barrier(t, kHosts, 3)) return 16;
      for (int i = 0; i < kIds; ++i) {
        StoreOutcome o;
        if (!StoreBlock(r.get(), ns, h * 100000 + i, 1, &o) || o != StoreOutcome::kStored)
          t->errors++;
      }
      if (!Barrier(t, kHosts, 4)) return 17;
      for (int q = 0; q < kHosts; ++q) {
        for (int i = 0; i < kIds; ++i) {
          if (i % 2 == 0) {
            Count(t, Check(r.get(), ns, q * 100000 + i));
            continue;
          }
          Count(t, CheckLease(r.get(), ns, q * 100000 + i, 1));
        }
      }
      if (!Barrier(t, kHosts, 5)) return 18;
      for (int i = 0; i < kIds; i += 2)
        if (!r->Drop(ns, BlockKey::FromId(h * 100000 + i)).ok()) t->errors++;
      if (!Barrier(t, kHosts, 6)) return 19;
      for (int q = 0; q < kHosts; ++q) {
        for (int i = 0; i < kIds; ++i) {
          const Got g = Check(r.get(), ns, q * 100000 + i);
          if (i % 2 == 0 && g == Got::kHit) t->stale++;  // a dropped block served
          if (i % 2 == 1) Count(t, g);
        }
      }
      // Memory holds exactly the blocks not dropped: a scrub from this host
      // (READY slots of every partition) counts them.
      Region::ScrubReport rep;
      if (!r->Verify(false, &rep).ok() || rep.ready != uint64_t(kHosts * (kIds / 2)) ||
          rep.crc_failures != 0)
        t->errors++;
      // The region's counters (each host's, published on its heartbeats)
      // reach every store, and every other host's heartbeat advances.
      if (!test::WaitFor(
              [&] { return r->RegionCounters()[Counter::kStores] >= uint64_t(kHosts * kIds); },
              Ms(3000)))
        t->errors++;
      auto before = r->Participants();
      if (before.size() != kHosts) t->errors++;
      const bool advanced = test::WaitFor(
          [&] {
            auto now = r->Participants();
            if (now.size() != before.size()) return false;
            for (size_t k = 0; k < now.size(); ++k)
              if (!now[k].self && now[k].heartbeat == before[k].heartbeat) return false;
            return true;
          },
          Ms(3000));
      if (!advanced) t->errors++;
      if (!Barrier(t, kHosts, 7)) return 20;
      // Host 2 leaves; the others see its record FREE.
      if (h == 2) r.reset();
      if (!Barrier(t, kHosts, 8)) return 21;
      if (h != 2 && r->Participants().size() != kHosts - 1) t->errors++;
      return Barrier(t, kHosts, 9) ? 0 : 22;
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (pid_t k : kids) EXPECT_EQ(Reap(k), 0);
  ExpectNoWrongBytes(t);
  EXPECT_EQ(t->misses.load(), 0u);
  EXPECT_EQ(t->stale.load(), 0u);
  EXPECT_EQ(t->errors.load(), 0u);
  EXPECT_EQ(t->hits.load(), uint64_t(kHosts * kIds * kHosts + kHosts * (kIds / 2) * kHosts));
}

// Host 0 keeps storing more blocks than its partition holds (evicting the
// least recently used) while hosts 1 and 2 read recent ones: no wrong bytes, and no CRC
// failure either (the seqlock must turn every torn read into a miss).
TEST(NoncoherentEmulator, EvictionUnderCrossHostReads) {
  Machine m;
  auto* t = SharedAnon<Tally>();
  std::atomic<uint64_t>* newest = SharedAnon<std::atomic<uint64_t>>();
  const pid_t writer = Spawn([&] {
    NamespaceId ns;
    auto r = m.Attach(0, 0, &ns);
    if (!r) return 10;
    t->arrived++;
    // Until the time is up and at least 200 blocks were evicted.
    const auto end = Clock::now() + std::chrono::milliseconds(Ms(1500));
    uint64_t i = 0;
    for (; i < 200000; ++i) {
      StoreOutcome o;
      if (!StoreBlock(r.get(), ns, i, 7, &o)) t->errors++;
      newest->store(i);
      if (i % 64 == 0 && Clock::now() >= end && r->ProcessCounters()[Counter::kEvictions] >= 200)
        break;
    }
    t->done.store(1);
    return r->ProcessCounters()[Counter::kEvictions] >= 200 ? 0 : 12;
  });
  std::vector<pid_t> readers;
  for (int h = 1; h <= 2; ++h) {
    readers.push_back(Spawn([&, h] {
      if (!test::WaitFor([&] { return t->arrived.load() >= 1; }, 10000)) return 9;
      NamespaceId ns;
      auto r = m.Attach(h, h, &ns);
      if (!r) return 10;
      uint64_t x = h;
      const bool verify = true;
      while (t->done.load() == 0) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const uint64_t n = newest->load();
        // Recent blocks, and old ones about to be evicted (the least
        // recently stored: the partition holds about 600; cross-host reads
        // do not count as uses): a torn read shows on those.
        const uint64_t id = n - std::min<uint64_t>(n, (x >> 33) % 700);
        Count(t, (x >> 20) & 1 ? CheckLease(r.get(), ns, id, 7) : Check(r.get(), ns, id));
      }
      // A scrub from this host, whose cache holds lines of blocks since
      // evicted: every READY block verifies.
      Region::ScrubReport rep;
      if (verify && (!r->Verify(false, &rep).ok() || rep.crc_failures != 0 || rep.verified == 0))
        return 12;
      return 0;
    }));
  }
  EXPECT_EQ(Reap(writer), 0);
  for (pid_t k : readers) EXPECT_EQ(Reap(k), 0);
  ExpectNoWrongBytes(t);
  EXPECT_EQ(t->errors.load(), 0u);
  EXPECT_GT(t->hits.load(), 0u);
}

// Host 0 is killed in the middle of its stores; its host's cache keeps its
// dirty lines, which the sweeper lands at random moments. Every block host 0
// was told was stored stays readable from hosts 1 and 2, whole; the next
// holder of partition 0 (a new process on host 0) recovers the partition and
// its blocks are read from the other hosts.
TEST(NoncoherentEmulator, WriterKilledMidStore) {
  Machine m;
  auto* t = SharedAnon<Tally>();
  std::atomic<uint64_t>* acked = SharedAnon<std::atomic<uint64_t>>();
  const pid_t victim = Spawn([&] {
    NamespaceId ns;
    auto r = m.Attach(0, 0, &ns);
    if (!r) return 10;
    for (uint64_t i = 1;; ++i) {
      StoreOutcome o;
      if (StoreBlock(r.get(), ns, i, 3, &o) && o == StoreOutcome::kStored) acked->store(i);
      if (i == 300) return 12;  // must have been killed long before
    }
  });
  ASSERT_TRUE(test::WaitFor([&] { return acked->load() >= 5; }, 20000));
  m.StartSweeper();
  ASSERT_TRUE(test::WaitFor([&] { return acked->load() >= 60; }, 20000));
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  EXPECT_EQ(Reap(victim), 128 + SIGKILL);
  const uint64_t last = acked->load();
  std::vector<pid_t> readers;
  for (int h = 1; h <= 2; ++h) {
    readers.push_back(Spawn([&, h] {
      NamespaceId ns;
      auto r = m.Attach(h, h, &ns);
      if (!r) return 10;
      for (uint64_t i = 1; i <= last; ++i) Count(t, Check(r.get(), ns, i));
      if (!Barrier(t, 3, 1)) return 12;  // read before the heir attaches
      if (!Barrier(t, 3, 2)) return 13;  // the heir has stored
      for (uint64_t i = 0; i < 40; ++i) {
        uint64_t v = 0;
        const Got g = Check(r.get(), ns, 900000 + i, &v);
        Count(t, g);
        if (g == Got::kHit && v != 4) t->wrong++;
      }
      return 0;
    }));
  }
  const pid_t heir = Spawn([&] {
    if (!Barrier(t, 3, 1)) return 9;
    NamespaceId ns;
    auto r = m.Attach(0, 0, &ns);
    if (!r) return 10;
    for (uint64_t i = 0; i < 40; ++i) {
      StoreOutcome o;
      if (!StoreBlock(r.get(), ns, 900000 + i, 4, &o) || o != StoreOutcome::kStored) t->errors++;
    }
    return Barrier(t, 3, 2) ? 0 : 12;
  });
  EXPECT_EQ(Reap(heir), 0);
  for (pid_t k : readers) EXPECT_EQ(Reap(k), 0);
  ExpectNoWrongBytes(t);
  EXPECT_EQ(t->misses.load(), 0u);
  EXPECT_EQ(t->errors.load(), 0u);
  EXPECT_EQ(t->hits.load(), 2 * (last + 40));
}

// Host 0 is SIGSTOPped mid-store; the lease gives partition 0 to a process on
// host 3, which stores its own blocks; host 0 resumes (a zombie) and keeps
// storing until it finds itself fenced. Its late lines land at random
// moments. Readers on hosts 1 and 2 never get wrong bytes; the heir's
// blocks that no zombie line overwrote are whole.
TEST(NoncoherentEmulator, WriterPausedAndReplaced) {
  Machine m;
  auto* t = SharedAnon<Tally>();
  std::atomic<uint64_t>* acked = SharedAnon<std::atomic<uint64_t>>();
  std::atomic<int>* fenced = SharedAnon<std::atomic<int>>();
  // Partition 0's first holder comes and goes, and host 3 (an observer)
  // reads the registry meanwhile: host 3's cache keeps that record line.
  const pid_t first = Spawn([&] {
    NamespaceId ns;
    auto r = m.Attach(0, 0, &ns);
    if (!r) return 10;
    if (!Barrier(t, 2, 1)) return 12;  // the observer has read the registry
    return 0;
  });
  const pid_t observer = Spawn([&] {
    if (!test::WaitFor([&] { return std::filesystem::exists(m.path()); }, 10000)) return 9;
    std::unique_ptr<Region> r;
    if (!m.OpenFormatted(3, -1, &r).ok()) return 10;
    // The holder registers right after its format is published.
    if (!test::WaitFor([&] { return !r->Participants().empty(); }, 10000)) return 11;
    return Barrier(t, 2, 1) ? 0 : 12;
  });
  EXPECT_EQ(Reap(first), 0);
  EXPECT_EQ(Reap(observer), 0);
  t->arrived = 0;
  t->phase = 0;
  // The second holder: stores, is paused, replaced, resumed.
  const pid_t zombie = Spawn([&] {
    std::unique_ptr<Region> r;
    if (!m.Open(0, 0, 3, &r).ok()) return 10;
    NamespaceId ns;
    Status s = r->RegisterNamespace(kNs, &ns);
    if (!s.ok()) {
      std::fprintf(stderr, "zombie: %s\n", s.ToString().c_str());
      return 11;
    }
    for (uint64_t i = 1; i < 100000; ++i) {
      StoreOutcome o;
      (void)StoreBlock(r.get(), ns, i, 5, &o);
      if (o == StoreOutcome::kStored) acked->store(i);
      if (o == StoreOutcome::kFenced) {
        fenced->store(1);
        return 0;
      }
      if (t->done.load() >= 2) return 12;  // the heir gave up waiting: never fenced
    }
    return 13;
  });
  ASSERT_TRUE(test::WaitFor([&] { return acked->load() >= 5; }, 20000));
  m.StartSweeper();
  ASSERT_TRUE(test::WaitFor([&] { return acked->load() >= 40; }, 20000));
  ASSERT_EQ(::kill(zombie, SIGSTOP), 0);
  ASSERT_TRUE(test::WaitStopped(zombie));
  std::vector<pid_t> readers;
  for (int h = 1; h <= 2; ++h) {
    readers.push_back(Spawn([&, h] {
      NamespaceId ns;
      auto r = m.Attach(h, h, &ns);
      if (!r) return 10;
      while (t->done.load() < 2) {
        for (uint64_t i = 1; i < 200 && t->done.load() < 2; ++i) Count(t, Check(r.get(), ns, i));
      }
      return 0;
    }));
  }
  const pid_t heir = Spawn([&] {
    std::unique_ptr<Region> r;
    Status s = m.Open(3, 0, 3, &r);
    if (!s.ok()) return 10;
    NamespaceId ns;
    if (!r->RegisterNamespace(kNs, &ns).ok()) return 11;
    t->done++;  // the lease has moved: the zombie may resume
    for (uint64_t i = 100; i < 160; ++i) {
      StoreOutcome o;
      // kLostRace is a true answer: a zombie's late line landed over the
      // slot in flight and the heir's periodic sweep freed it.
      if (!StoreBlock(r.get(), ns, i, 6, &o) && o != StoreOutcome::kLostRace) t->errors++;
    }
    const bool ok = test::WaitFor([&] { return fenced->load() == 1; }, Ms(6000));
    std::this_thread::sleep_for(std::chrono::milliseconds(Ms(300)));
    t->done++;
    return ok ? 0 : 12;
  });
  ASSERT_TRUE(test::WaitFor([&] { return t->done.load() >= 1; }, 20000));
  ASSERT_EQ(::kill(zombie, SIGCONT), 0);
  EXPECT_EQ(Reap(zombie), 0) << "the paused writer must find itself fenced";
  EXPECT_EQ(Reap(heir), 0);
  for (pid_t k : readers) EXPECT_EQ(Reap(k), 0);
  // The zombie's late lines may land over a slot the heir reused: its CRC
  // (bound to the heir's generation) then fails, a true answer.
  ExpectNoWrongBytes(t, /*crc_failures_ok=*/true);
  EXPECT_EQ(t->errors.load(), 0u);
  EXPECT_GT(t->hits.load(), 0u);
}

// A zero-copy fill (BeginWrite's data(), written by a memcpy or a DMA, not
// through the host's cache) over a slot whose old payload lines this host
// still caches: CommitWrite without a CRC reads the fill back for it, so
// those stale lines must have been dropped first, or the CRC is of the old
// bytes and every reader fails it. Host 1 reads the refilled block whole.
TEST(NoncoherentEmulator, ZeroCopyFillOverThisHostsCachedLines) {
  Machine m;
  auto* t = SharedAnon<Tally>();
  constexpr uint64_t kId = 4242;
  const pid_t writer = Spawn([&] {
    NamespaceId ns;
    auto r = m.Attach(0, 0, &ns);
    if (!r) return 10;
    StoreOutcome o;
    // Version 1 through the cache (its payload lines stay cached, clean),
    // dropped, then version 2 into the same slot (the key's first free way).
    if (!StoreBlock(r.get(), ns, kId, 1, &o) || o != StoreOutcome::kStored) return 11;
    if (!r->Drop(ns, BlockKey::FromId(kId)).ok()) return 12;
    WriteLease l;
    if (!r->BeginWrite(ns, BlockKey::FromId(kId), LenOf(kId), &l).ok() || !l.open()) return 13;
    Fill(kId, 2, static_cast<uint8_t*>(l.data()));  // straight into memory
    if (!r->CommitWrite(&l, nullptr, &o).ok() || o != StoreOutcome::kStored) return 14;
    return Barrier(t, 2, 1) ? 0 : 15;
  });
  const pid_t reader = Spawn([&] {
    if (!test::WaitFor([&] { return t->arrived.load() >= 1; }, 20000)) return 9;
    NamespaceId ns;
    auto r = m.Attach(1, 1, &ns);
    if (!r) return 10;
    uint64_t v = 0;
    const Got g = Check(r.get(), ns, kId, &v);
    Count(t, g);
    if (g == Got::kHit && v != 2) t->stale++;
    return Barrier(t, 2, 1) ? 0 : 11;
  });
  EXPECT_EQ(Reap(writer), 0);
  EXPECT_EQ(Reap(reader), 0);
  EXPECT_EQ(t->hits.load(), 1u);
  EXPECT_EQ(t->stale.load(), 0u);
  ExpectNoWrongBytes(t);
}

// A drop reaches memory by its own flush (SwFreeOwn): host 0 stores a
// block, host 1 reads it, host 0 drops it, and host 1 must miss it at once.
// Host 0 beats every 10 s, so no periodic sweep runs meanwhile: the sweep
// invalidates the partition's meta lines, which writes a dirty FREE word
// back, and within 5 ms (the tests' usual beat) it hides a missing flush.
// The drops of ThreeHostsStoreLoadDropWithStaleCaches race that sweep, and
// under load the mutation test's run of that flush survived them.
TEST(NoncoherentEmulator, ADropIsSeenFromAnotherHostBeforeAnySweep) {
  Machine m;
  auto* t = SharedAnon<Tally>();
  constexpr uint64_t kId = 6060;
  const pid_t h0 = Spawn([&] {
    std::unique_ptr<Region> r;
    if (!m.Open(0, 0, 3, &r, 10'000'000'000ull).ok()) return 10;
    NamespaceId ns;
    if (!r->RegisterNamespace(kNs, &ns).ok()) return 11;
    StoreOutcome o;
    if (!StoreBlock(r.get(), ns, kId, 1, &o) || o != StoreOutcome::kStored) return 12;
    t->phase.store(1);
    if (!test::WaitFor([&] { return t->phase.load() == 2; }, 20000)) return 13;
    if (!r->Drop(ns, BlockKey::FromId(kId)).ok()) return 14;
    t->phase.store(3);
    // Attached (no close, whose flushes would land the line) until host 1
    // has looked.
    return test::WaitFor([&] { return t->phase.load() == 4; }, 20000) ? 0 : 15;
  });
  const pid_t h1 = Spawn([&] {
    if (!test::WaitFor([&] { return t->phase.load() == 1; }, 20000)) return 9;
    NamespaceId ns;
    auto r = m.Attach(1, 1, &ns);
    if (!r) return 10;
    Count(t, Check(r.get(), ns, kId));  // before the drop: a hit
    t->phase.store(2);
    if (!test::WaitFor([&] { return t->phase.load() == 3; }, 20000)) return 11;
    if (Check(r.get(), ns, kId) != Got::kMiss) t->stale++;  // the dropped block served
    t->phase.store(4);
    return 0;
  });
  EXPECT_EQ(Reap(h0), 0);
  EXPECT_EQ(Reap(h1), 0);
  EXPECT_EQ(t->hits.load(), 1u);
  EXPECT_EQ(t->stale.load(), 0u);
  ExpectNoWrongBytes(t);
}

// Host 1 caches the namespace table while an entry is FREE; host 0 then
// registers a namespace in it and hands the id over (as a peer process
// would, here through shared memory); host 1 stores under that id without
// registering it itself: its check of the entry must read memory, not its
// stale copy.
TEST(NoncoherentEmulator, ANamespaceIdFromAnotherHostIsUsable) {
  Machine m;
  auto* t = SharedAnon<Tally>();
  std::atomic<uint32_t>* id = SharedAnon<std::atomic<uint32_t>>();
  const NamespaceDesc other{"other", "bf16", "NHD", 0, 0};
  const pid_t h0 = Spawn([&] {
    std::unique_ptr<Region> r;
    if (!m.Open(0, 0, 3, &r).ok()) return 10;
    if (!Barrier(t, 2, 1)) return 11;  // host 1 has read the table
    NamespaceId ns;
    if (!r->RegisterNamespace(kNs, &ns).ok()) return 12;
    id->store(ns + 1);
    return Barrier(t, 2, 2) ? 0 : 13;
  });
  const pid_t h1 = Spawn([&] {
    std::unique_ptr<Region> r;
    if (!m.OpenFormatted(1, 1, &r).ok()) return 10;
    NamespaceId ons;
    if (!r->RegisterNamespace(other, &ons).ok()) return 11;  // reads the whole table
    if (!Barrier(t, 2, 1)) return 12;
    if (!test::WaitFor([&] { return id->load() != 0; }, 20000)) return 13;
    StoreOutcome o;
    if (!StoreBlock(r.get(), id->load() - 1, 31337, 1, &o) || o != StoreOutcome::kStored) return 14;
    return Barrier(t, 2, 2) ? 0 : 15;
  });
  EXPECT_EQ(Reap(h0), 0);
  EXPECT_EQ(Reap(h1), 0);
}

// Partition 0's first holder is killed right after zeroing the metadata of
// its format (the failpoint); a process on host 1 takes partition 0 and
// formats. The dead formatter's host cache still holds whatever it left
// dirty, and the sweeper lands it afterwards: none of it may clobber the new
// format (its superblock line: magic, lock, header), so a third host then
// attaches and reads what the new holder stored.
TEST(NoncoherentEmulator, FormatterKilledMidFormatLeavesNothingToLandLater) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  Machine m;
  const pid_t victim = Spawn([&] {
    ::setenv("CXLKV_FAILPOINT", "sw.format.after_zero:kill", 1);
    internal::ReloadFailpoints();
    std::unique_ptr<Region> r;
    (void)m.Open(0, 0, 3, &r);
    return 10;  // never reached: killed inside the format
  });
  EXPECT_EQ(Reap(victim), 128 + SIGKILL);
  const pid_t heir = Spawn([&] {
    NamespaceId ns;
    auto r = m.Attach(1, 0, &ns);
    if (!r) return 10;
    StoreOutcome o;
    return StoreBlock(r.get(), ns, 77, 3, &o) && o == StoreOutcome::kStored ? 0 : 11;
  });
  EXPECT_EQ(Reap(heir), 0);
  m.StartSweeper();  // host 0's late lines land now, over the new format
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(Reap(SpawnReaderOf(m, 2, 77, 3)), 0);
}

// A damaged magic word over a finished format: partition 0's next holder
// (host 1, its cache cold) restores it rather than formatting over every
// partition's blocks, and the restored word must reach memory (its flush):
// a holder of another partition on host 2 then attaches and reads the block
// partition 1's first holder stored, instead of waiting for a magic that
// stays in host 1's cache.
TEST(NoncoherentEmulator, DamagedMagicRestoredByPartitionZeroReachesEveryHost) {
  Machine m;
  const pid_t first = Spawn([&] {
    std::unique_ptr<Region> h0;
    if (!m.Open(0, 0, 3, &h0).ok()) return 10;
    NamespaceId ns;
    auto h1 = m.Attach(1, 1, &ns);
    if (!h1) return 11;
    StoreOutcome o;
    return StoreBlock(h1.get(), ns, 78, 4, &o) && o == StoreOutcome::kStored ? 0 : 12;
  });
  ASSERT_EQ(Reap(first), 0);
  {
    const int fd = ::open(m.path().c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, 0), 1);  // Superblock::magic
    b ^= 1;
    ASSERT_EQ(::pwrite(fd, &b, 1, 0), 1);
    ::close(fd);
  }
  const pid_t heir = Spawn([&] {
    std::unique_ptr<Region> r;
    return m.Open(1, 0, 3, &r).ok() ? 0 : 10;
  });
  ASSERT_EQ(Reap(heir), 0);
  const pid_t reader = Spawn([&] {
    std::unique_ptr<Region> r;
    if (!m.Open(2, 2, 3, &r, 0, 2'000'000'000).ok()) return 10;
    NamespaceId ns;
    if (!r->RegisterNamespace(kNs, &ns).ok()) return 11;
    uint64_t v = 0;
    return Check(r.get(), ns, 78, &v) == Got::kHit && v == 4 ? 0 : 12;
  });
  EXPECT_EQ(Reap(reader), 0);
}

// The hazard of layout v3 under non-coherence (docs/model.md, sw-v3): host
// 0's holder stores a block, which host 1 reads (host 1's cache now holds
// the registry record naming that holder's incarnation), then stops after
// its last ownership check, just before it publishes a second block (the
// failpoint); the lease gives partition 0 to a process on host 3, which
// sweeps and leaves; host 0 resumes and publishes its whole meta line. Host
// 1 must miss that block, never get its bytes (version 7): it reads the
// record again after the copy.
TEST(NoncoherentEmulator, HolderPausedPastItsLeaseIsNeverServed) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  Machine m;
  auto* t = SharedAnon<Tally>();
  constexpr uint64_t kId = 5150, kOld = 5151;
  const pid_t zombie = Spawn([&] {
    NamespaceId ns;
    auto r = m.Attach(0, 0, &ns);
    if (!r) return 10;
    StoreOutcome o;
    if (!StoreBlock(r.get(), ns, kOld, 1, &o) || o != StoreOutcome::kStored) return 11;
    t->phase.store(1);
    if (!test::WaitFor([&] { return t->phase.load() == 2; }, 20000)) return 12;
    ::setenv("CXLKV_FAILPOINT", "sw.commit.before_ready:stop", 1);
    internal::ReloadFailpoints();
    (void)StoreBlock(r.get(), ns, kId, 7, &o);
    return 0;
  });
  const pid_t reader = Spawn([&] {
    if (!test::WaitFor([&] { return t->phase.load() == 1; }, 20000)) return 9;
    NamespaceId ns;
    auto r = m.Attach(1, 1, &ns);
    if (!r) return 10;
    if (Check(r.get(), ns, kOld) != Got::kHit) return 11;
    t->phase.store(2);
    if (!test::WaitFor([&] { return t->phase.load() == 3; }, 20000)) return 12;
    uint64_t v = 0;
    const Got g = Check(r.get(), ns, kId, &v);
    if ((g == Got::kHit && v == 7) || g == Got::kWrong) t->wrong++;  // the zombie's bytes
    return 0;
  });
  ASSERT_TRUE(test::WaitStopped(zombie));
  const pid_t heir = Spawn([&] {
    NamespaceId ns;
    return m.Attach(3, 0, &ns) ? 0 : 10;  // attach (the sweep), then leave
  });
  EXPECT_EQ(Reap(heir), 0);
  ASSERT_EQ(::kill(zombie, SIGCONT), 0);
  EXPECT_EQ(Reap(zombie), 0);
  t->phase.store(3);
  EXPECT_EQ(Reap(reader), 0);
  ExpectNoWrongBytes(t);
}

// SW3's flush of the WRITING line, which the suites above reach only by
// chance: host 1 holds a zero-copy read lease on block K (validated, its
// payload lines dropped, not yet read); host 0 keeps storing new blocks into
// its full partition, each stopped (SIGSTOP) between its payload flush and
// its READY; when one of them has taken K's slot (K's payload in memory
// changed), host 1 reads the lease's bytes and ends it. Memory must say
// WRITING by then, so EndRead misses; with READY still there, the copy of
// the new payload under K's word fails its CRC (kCorruption).
TEST(NoncoherentEmulator, ReadLeaseAcrossAnEvictionOfItsSlot) {
  CXLKV_SKIP_WITHOUT_FAILPOINTS();
  Machine m;
  auto* t = SharedAnon<Tally>();
  constexpr uint64_t kK = 424242;
  const pid_t writer = Spawn([&] {
    NamespaceId ns;
    auto r = m.Attach(0, 0, &ns);
    if (!r) return 10;
    StoreOutcome o;
    uint64_t id = 1;
    for (; r->ProcessCounters()[Counter::kEvictions] == 0; ++id)
      if (!StoreBlock(r.get(), ns, id, 1, &o)) return 11;
    if (!StoreBlock(r.get(), ns, kK, 1, &o) || o != StoreOutcome::kStored) return 12;
    t->phase.store(1);
    if (!test::WaitFor([&] { return t->phase.load() == 2; }, 20000)) return 13;
    ::setenv("CXLKV_FAILPOINT", "sw.commit.before_ready:stop", 1);
    internal::ReloadFailpoints();
    for (; t->done.load() == 0 && id < 100000; ++id) (void)StoreBlock(r.get(), ns, id, 2, &o);
    return 0;
  });
  const pid_t reader = Spawn([&] {
    if (!test::WaitFor([&] { return t->phase.load() == 1; }, 20000)) return 9;
    NamespaceId ns;
    auto r = m.Attach(1, 1, &ns);
    if (!r) return 10;
    ReadLease l;
    if (!r->BeginRead(ns, BlockKey::FromId(kK), &l).ok()) return 11;
    t->phase.store(2);
    if (!test::WaitFor([&] { return t->phase.load() == 3; }, 60000)) return 12;
    std::vector<uint8_t> got(l.len()), want(LenOf(kK));
    RegionInternal::GetVisibility(r.get())->CopyFromRegion(got.data(), l.data(), l.len());
    const Status e = r->EndRead(&l, got.data(), nullptr);
    Fill(kK, 1, want.data());
    if (e.IsCorruption()) t->corrupt++;
    if (e.ok() && got != want) t->wrong++;
    // SW2b: K's entry said FREE in memory before its data slot's bytes
    // changed, so the re-read sees it changed: a miss (without that flush
    // the re-read finds READY still and the copy fails its CRC).
    if (e.IsNotFound()) t->misses++;
    return 0;
  });
  ASSERT_TRUE(test::WaitFor([&] { return t->phase.load() == 2; }, 30000));
  // K's slot and bytes, from memory itself.
  const int fd = ::open(m.path().c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* p = ::mmap(nullptr, kRegionBytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(p, MAP_FAILED);
  const auto* base = static_cast<const uint8_t*>(p);
  const auto* sb = reinterpret_cast<const internal::Superblock*>(base);
  const auto* meta = reinterpret_cast<const internal::SlotMeta*>(base + sb->meta_off);
  const BlockKey key = BlockKey::FromId(kK);
  // Layout 6: K's index entry names its data slot.
  uint64_t entry = sb->num_entries;
  for (uint64_t s = 0; s < sb->num_entries; ++s)
    if (meta[s].key_lo.load() == key.lo && meta[s].key_hi.load() == key.hi) entry = s;
  ASSERT_LT(entry, sb->num_entries);
  const uint64_t slot = meta[entry].data.load();
  ASSERT_LT(slot, sb->num_slots);
  std::vector<uint8_t> k_bytes(LenOf(kK));
  Fill(kK, 1, k_bytes.data());
  const uint8_t* k_data = base + sb->data_off + slot * sb->slot_stride;
  bool taken = false;
  for (int i = 0; i < 20000 && !taken; ++i) {
    if (!test::WaitStopped(writer)) break;
    taken = std::memcmp(k_data, k_bytes.data(), k_bytes.size()) != 0;
    if (taken) {
      t->phase.store(3);  // the writer stays stopped while host 1 reads
      EXPECT_EQ(Reap(reader), 0);
    }
    t->done.store(taken ? 1 : 0);
    ASSERT_EQ(::kill(writer, SIGCONT), 0);
  }
  t->done.store(1);
  while (test::WaitStopped(writer)) ::kill(writer, SIGCONT);
  EXPECT_TRUE(taken) << "no store took K's slot";
  EXPECT_EQ(t->misses.load(), 1u) << "the read across the eviction was not a miss";
  ::munmap(p, kRegionBytes);
  ExpectNoWrongBytes(t);
}

// The hint channel (layout 6): host 1's reads of host 0's block K keep it in
// host 0's partition while host 0 stores twice its partition's worth of other
// blocks after it. Host 1 first reads host 2's block X a ring's worth of times,
// so host 0's first drain caches every ring line with hints that are not its
// own; K's later hints land on those lines, and reach host 0 only if host 1
// flushed them (slots, then head) and host 0 invalidated them (head, slots)
// before reading. Without the channel K is the oldest block, and goes.
TEST(NoncoherentEmulator, HostBsReadsKeepHostAsBlockAlive) {
  Machine m;
  auto* t = SharedAnon<Tally>();
  constexpr uint64_t kK = 777001, kX = 777002, kFill = 2'000'000;
  constexpr int kRounds = 16;
  const pid_t a = Spawn([&] {
    NamespaceId ns;
    auto r = m.Attach(0, 0, &ns);
    if (!r) return 10;
    t->phase.store(1);  // formatted: the others attach
    StoreOutcome o;
    if (!StoreBlock(r.get(), ns, kK, 1, &o) || o != StoreOutcome::kStored) return 11;
    const uint64_t part = r->info().num_slots / 3;
    // Fill the partition but for a few slots: nothing evicted yet.
    uint64_t id = kFill;
    for (; id < kFill + part - 8; ++id)
      if (!StoreBlock(r.get(), ns, id, 1, &o)) return 12;
    if (r->ProcessCounters()[Counter::kEvictions] != 0) return 13;
    for (int round = 0; round < kRounds; ++round) {
      t->phase.store(2 * round + 2);  // host 1 reads
      if (!test::WaitFor([&] { return t->phase.load() == 2 * round + 3 || t->errors.load() != 0; },
                         30000) ||
          t->errors.load() != 0) {
        return 14;  // host 1 stopped (it lost K, or read it wrong)
      }
      for (uint64_t k = 0; k < part / 8; ++k, ++id)
        if (!StoreBlock(r.get(), ns, id, 1, &o)) return 15;
    }
    if (r->ProcessCounters()[Counter::kEvictions] < part) return 16;
    t->hits += Check(r.get(), ns, kK) == Got::kHit;
    t->phase.store(100);
    return 0;
  });
  const pid_t c = Spawn([&] {
    if (!test::WaitFor([&] { return t->phase.load() >= 1; }, 30000)) return 9;
    NamespaceId ns;
    auto r = m.Attach(2, 2, &ns);
    if (!r) return 10;
    StoreOutcome o;
    if (!StoreBlock(r.get(), ns, kX, 1, &o)) return 11;
    t->done.store(1);
    // Until host 0 is done (or the parent saw hosts 0 and 1 exit).
    return test::WaitFor([&] { return t->phase.load() == 100; }, 120000) ? 0 : 12;
  });
  const pid_t b = Spawn([&] {
    if (!test::WaitFor([&] { return t->phase.load() >= 1 && t->done.load() == 1; }, 30000))
      return 9;
    NamespaceId ns;
    auto r = m.Attach(1, 1, &ns);
    if (!r) return 10;
    for (int round = 0; round < kRounds; ++round) {
      if (!test::WaitFor([&] { return t->phase.load() == 2 * round + 2; }, 30000)) return 11;
      // Round 0: a ring's worth of hints for host 2's block first.
      for (int i = 0; round == 0 && i < 256; ++i) {
        if (Check(r.get(), ns, kX) != Got::kHit) {
          t->errors++;
          return 12;
        }
      }
      // One batch of hints for K (kHintBatch in software.cc: 16).
      for (int i = 0; i < 16; ++i) {
        const Got g = Check(r.get(), ns, kK);
        if (g != Got::kHit) {
          t->errors++;
          return g == Got::kMiss ? 13 : 14;
        }
      }
      t->phase.store(2 * round + 3);
    }
    return 0;
  });
  EXPECT_EQ(Reap(b), 0) << "host 1 lost K (13) or read it wrong (14)";
  EXPECT_EQ(Reap(a), 0);
  t->phase.store(100);  // host 2 may go
  EXPECT_EQ(Reap(c), 0);
  EXPECT_EQ(t->hits.load(), 1u) << "K left host 0's partition although host 1 kept reading it";
}

// Host 3 (an observer) scrubs the empty partition 0 (its cache now holds
// every slot's meta line saying FREE); host 0 fills the partition, host 2
// reads every block, host 0 then begins a write that evicts one of them and
// is killed with the lease open. The next holder of partition 0 runs on host
// 3: its attach must see the READY and WRITING slots through its stale cache
// (invalidate first), free them (since layout 4: all of the killed incarnation's),
// and leave memory with every slot FREE; the block can then be stored and
// read from host 1.
TEST(NoncoherentEmulator, WriterKilledMidWriteHeirOnAHostWithStaleLines) {
  Machine m;
  auto* t = SharedAnon<Tally>();
  constexpr uint64_t kIds = 800;  // more than partition 0 holds: it is full
  constexpr uint64_t kKey = 777777;
  std::atomic<int>* precached = SharedAnon<std::atomic<int>>();
  const pid_t victim = Spawn([&] {
    NamespaceId ns;
    auto r = m.Attach(0, 0, &ns);
    if (!r) return 10;
    if (!test::WaitFor([&] { return precached->load() == 1; }, 20000)) return 16;
    for (uint64_t i = 1; i <= kIds; ++i) {
      StoreOutcome o;
      if (!StoreBlock(r.get(), ns, i, 8, &o)) return 12;
    }
    if (!Barrier(t, 2, 1)) return 13;  // stored
    if (!Barrier(t, 2, 2)) return 14;  // the observer has read them all
    WriteLease l;
    if (!r->BeginWrite(ns, BlockKey::FromId(kKey), 1000, &l).ok() || !l.open()) return 15;
    std::memset(l.data(), 0xAB, 1000);
    t->done.store(1);
    for (;;) pause();  // killed here, mid-write
  });
  // Host 3 scrubs the region while the partition is still empty: its cache
  // now holds every slot's meta line saying FREE.
  const pid_t precacher = Spawn([&] {
    if (!test::WaitFor([&] { return std::filesystem::exists(m.path()); }, 10000)) return 9;
    std::unique_ptr<Region> r;
    if (!m.OpenFormatted(3, -1, &r).ok()) return 10;
    Region::ScrubReport rep;
    if (!r->Verify(false, &rep).ok() || rep.ready != 0) return 11;
    precached->store(1);
    return 0;
  });
  EXPECT_EQ(Reap(precacher), 0);
  const pid_t observer = Spawn([&] {
    if (!Barrier(t, 2, 1)) return 9;
    NamespaceId ns;
    auto r = m.Attach(2, -1, &ns);
    if (!r) return 10;
    for (uint64_t i = 1; i <= kIds; ++i) Count(t, Check(r.get(), ns, i));
    return Barrier(t, 2, 2) ? 0 : 12;
  });
  EXPECT_EQ(Reap(observer), 0);
  ASSERT_TRUE(test::WaitFor([&] { return t->done.load() == 1; }, 20000));
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  EXPECT_EQ(Reap(victim), 128 + SIGKILL);
  const uint64_t read_hits = t->hits.load();
  const pid_t heir = Spawn([&] {
    // A 2 s heartbeat: no periodic sweep (whose invalidates write lines
    // back) before the check of memory below; the attach sweep's own
    // flushes must have put them there.
    std::unique_ptr<Region> r;
    if (!m.Open(3, 0, 3, &r, 2'000'000'000ull).ok()) return 10;
    // The half-written slot and (layout 4) every READY block of the killed
    // incarnation: partition 0 was full.
    if (r->ProcessCounters()[Counter::kReclaimedSlots] < 2) return 11;
    // Memory itself (not a cache) holds no WRITING slot, and no READY one
    // of the killed incarnation, any more.
    const int fd = ::open(m.path().c_str(), O_RDONLY);
    if (fd < 0) return 12;
    void* p = ::mmap(nullptr, kRegionBytes, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return 13;
    const auto* sb = static_cast<const internal::Superblock*>(p);
    const auto* meta =
        reinterpret_cast<const internal::SlotMeta*>(static_cast<const uint8_t*>(p) + sb->meta_off);
    for (uint64_t s = 0; s < sb->num_entries; ++s)
      if (internal::WordState(meta[s].state.load()) != uint8_t(internal::SlotState::kFree))
        return 14;
    NamespaceId ns;
    if (!r->RegisterNamespace(kNs, &ns).ok()) return 15;
    StoreOutcome o;
    if (!StoreBlock(r.get(), ns, kKey, 9, &o) || o != StoreOutcome::kStored) return 16;
    return 0;
  });
  EXPECT_EQ(Reap(heir), 0);
  EXPECT_EQ(Reap(SpawnReaderOf(m, 1, kKey, 9)), 0);
  EXPECT_GT(read_hits, 100u);
  ExpectNoWrongBytes(t);
}

// The first index set of a key in write partition `p`, as SwSets (software.cc)
// places it: the same hash, reduced into the partition's sets.
uint64_t FirstSetOf(const internal::Superblock* sb, uint32_t p, NamespaceId ns, uint64_t id) {
  const BlockKey key = BlockKey::FromId(id);
  const uint64_t a = internal::Mix64(key.lo ^ (uint64_t(ns) * 0x9E3779B97F4A7C15ull));
  const uint64_t part_sets = sb->num_sets / sb->partitions;
  return p * part_sets +
         static_cast<uint64_t>((static_cast<unsigned __int128>(a) * part_sets) >> 64);
}
uint64_t SecondSetOf(const internal::Superblock* sb, uint32_t p, NamespaceId ns, uint64_t id) {
  const BlockKey key = BlockKey::FromId(id);
  const uint64_t a = internal::Mix64(key.lo ^ (uint64_t(ns) * 0x9E3779B97F4A7C15ull));
  const uint64_t b = internal::Mix64(key.hi + a);
  const uint64_t part_sets = sb->num_sets / sb->partitions;
  return p * part_sets +
         static_cast<uint64_t>((static_cast<unsigned __int128>(b) * part_sets) >> 64);
}

// The old holder's late tag line and fill (docs/model.md, sw-l6-no-repair):
// host 0 holds partition 0, stores A and stalls (its heartbeat a minute away,
// so nothing of it learns that the lease moved). The heir (host 3) stores B,
// whose first set is A's, into A's entry (its attach sweep freed it), and C
// into the data slot host 0 takes next. Host 0 resumes and stores D into the
// same set: SW3 flushes its whole cached tag line (A's tag where B's is) and
// its fill lands in C's data slot, before its ownership check fences it. The
// heir's own lines still say B and C are there (its Stores of them answer
// DUPLICATE), and memory's entries are the heir's, so only the heir's
// periodic sweep can put memory right: the set's tag line rewritten from its
// entries, C's payload checked against its CRC and its entry freed (the
// heir's next Store of C stores it again). Host 1 must then find both,
// whole; before that, a miss or a CRC failure, never wrong bytes.
TEST(NoncoherentEmulator, OldHoldersLateTagLineAndFillDoNotHideTheHeirsBlocks) {
  Machine m;
  auto* t = SharedAnon<Tally>();
  struct Plan {
    std::atomic<int> step{0};
    std::atomic<uint32_t> ns{0};
    std::atomic<uint64_t> a{0}, b{0}, c{0}, d{0};
    std::atomic<uint64_t> fenced{0}, heir_stored{0};
  };
  auto* plan = SharedAnon<Plan>();
  const pid_t old_holder = Spawn([&] {
    std::unique_ptr<Region> r;
    // The longest heartbeat (kMaxHeartbeatIntervalNs): none comes within the test.
    if (!m.Open(0, 0, 3, &r, 60'000'000'000ull).ok()) return 10;
    NamespaceId ns;
    if (!r->RegisterNamespace(kNs, &ns).ok()) return 11;
    plan->ns.store(ns);
    plan->step.store(1);
    if (!test::WaitFor([&] { return plan->step.load() == 2; }, 20000)) return 12;
    StoreOutcome o;
    if (!StoreBlock(r.get(), ns, plan->a.load(), 1, &o) || o != StoreOutcome::kStored) return 13;
    plan->step.store(3);  // stalled: the lease moves on
    if (!test::WaitFor([&] { return plan->step.load() == 4; }, 20000)) return 14;
    (void)StoreBlock(r.get(), ns, plan->d.load(), 1, &o);
    plan->fenced.store(o == StoreOutcome::kFenced ? 1 : 0);
    plan->step.store(5);
    return 0;
  });
  ASSERT_TRUE(test::WaitFor([&] { return plan->step.load() == 1; }, 20000));
  {
    // The keys, from the region's geometry: A, B and D share their first set
    // in partition 0; neither of C's sets is that one.
    const int fd = ::open(m.path().c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    void* p = ::mmap(nullptr, kRegionBytes, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    ASSERT_NE(p, MAP_FAILED);
    const auto* sb = static_cast<const internal::Superblock*>(p);
    const NamespaceId ns = plan->ns.load();
    const uint64_t set = FirstSetOf(sb, 0, ns, 9000);
    std::vector<uint64_t> same;
    uint64_t other = 0;
    for (uint64_t id = 9001; id < 200000 && (same.size() < 2 || other == 0); ++id) {
      if (FirstSetOf(sb, 0, ns, id) == set) {
        if (same.size() < 2) same.push_back(id);
      } else if (other == 0 && SecondSetOf(sb, 0, ns, id) != set) {
        other = id;
      }
    }
    ::munmap(p, kRegionBytes);
    ASSERT_EQ(same.size(), 2u);
    ASSERT_NE(other, 0u);
    plan->a = 9000;
    plan->b = same[0];
    plan->d = same[1];
    plan->c = other;
    plan->step.store(2);
  }
  const pid_t heir = Spawn([&] {
    if (!test::WaitFor([&] { return plan->step.load() == 3; }, 20000)) return 9;
    NamespaceId ns;
    auto r = m.Attach(3, 0, &ns);
    if (!r) return 10;
    StoreOutcome o;
    if (!StoreBlock(r.get(), ns, plan->b.load(), 2, &o) || o != StoreOutcome::kStored) return 11;
    if (!StoreBlock(r.get(), ns, plan->c.load(), 2, &o) || o != StoreOutcome::kStored) return 12;
    plan->step.store(4);  // the old holder resumes
    if (!test::WaitFor([&] { return plan->step.load() == 5; }, 20000)) return 13;
    // Its clients store B and C again now and then (a block another host
    // missed is computed again), until host 1 has found both.
    const auto until = Clock::now() + std::chrono::milliseconds(Ms(20000));
    while (t->done.load() == 0 && Clock::now() < until) {
      // kLostRace is a true answer: the sweep freed the entry in flight.
      if (!StoreBlock(r.get(), ns, plan->b.load(), 2, &o) && o != StoreOutcome::kLostRace)
        return 14;
      if (!StoreBlock(r.get(), ns, plan->c.load(), 2, &o) && o != StoreOutcome::kLostRace)
        return 15;
      if (o == StoreOutcome::kStored) plan->heir_stored++;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return 0;
  });
  const pid_t reader = Spawn([&] {
    if (!test::WaitFor([&] { return plan->step.load() == 5; }, 40000)) return 9;
    NamespaceId ns;
    auto r = m.Attach(1, 1, &ns);
    if (!r) return 10;
    const auto until = Clock::now() + std::chrono::milliseconds(Ms(20000));
    while (Clock::now() < until) {
      uint64_t vb = 0, vc = 0;
      const Got gb = Check(r.get(), ns, plan->b.load(), &vb);
      const Got gc = Check(r.get(), ns, plan->c.load(), &vc);
      Count(t, gb);
      Count(t, gc);
      if (gb == Got::kHit && gc == Got::kHit && vb == 2 && vc == 2) {
        t->done.store(1);
        return 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // What host 1 last saw (0 hit, 1 miss, 3 CRC failure), for the message.
    const Got gb = Check(r.get(), ns, plan->b.load());
    const Got gc = Check(r.get(), ns, plan->c.load());
    return 20 + 4 * static_cast<int>(gb) + static_cast<int>(gc);
  });
  EXPECT_EQ(Reap(old_holder), 0);
  EXPECT_EQ(plan->fenced.load(), 1u)
      << "the old holder's store after the lease moved must be fenced";
  EXPECT_EQ(Reap(reader), 0) << "host 1 never found the heir's blocks B and C (20 + 4 x B's "
                                "answer + C's: 0 hit, 1 miss, 3 CRC failure)";
  EXPECT_EQ(Reap(heir), 0);
  ExpectNoWrongBytes(t, /*crc_failures_ok=*/true);
}

// Verify by a partition's holder checks its own blocks as memory holds them:
// host 0's cache still holds K's right bytes while memory's changed under
// them (damage, or a paused old holder's fill); Verify(drop_corrupt) must
// count the CRC failure and drop K, not report it verified. (Host 0's
// heartbeat, whose payload check would free K by itself, is a minute away.)
TEST(NoncoherentEmulator, HoldersVerifyChecksItsOwnBlocksAsMemoryHoldsThem) {
  Machine m;
  auto* t = SharedAnon<Tally>();
  constexpr uint64_t kK = 606060;
  const pid_t holder = Spawn([&] {
    std::unique_ptr<Region> r;
    if (!m.Open(0, 0, 3, &r, 60'000'000'000ull).ok()) return 10;
    NamespaceId ns;
    if (!r->RegisterNamespace(kNs, &ns).ok()) return 11;
    StoreOutcome o;
    if (!StoreBlock(r.get(), ns, kK, 1, &o) || o != StoreOutcome::kStored) return 12;
    if (Check(r.get(), ns, kK) != Got::kHit) return 13;
    t->phase.store(1);
    if (!test::WaitFor([&] { return t->phase.load() == 2; }, 20000)) return 14;
    Region::ScrubReport rep;
    if (!r->Verify(/*drop_corrupt=*/true, &rep).ok()) return 15;
    // 20 + 2 x CRC failures found + blocks dropped, unless exactly one each.
    if (rep.crc_failures != 1 || rep.dropped != 1)
      return 20 + 2 * static_cast<int>(rep.crc_failures) + static_cast<int>(rep.dropped);
    return Check(r.get(), ns, kK) == Got::kMiss ? 0 : 16;
  });
  ASSERT_TRUE(test::WaitFor([&] { return t->phase.load() == 1; }, 20000));
  // One byte of K's payload in memory itself (the region file), not in
  // host 0's cache.
  const int fd = ::open(m.path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* p = ::mmap(nullptr, kRegionBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(p, MAP_FAILED);
  auto* base = static_cast<uint8_t*>(p);
  const auto* sb = reinterpret_cast<const internal::Superblock*>(base);
  const auto* meta = reinterpret_cast<const internal::SlotMeta*>(base + sb->meta_off);
  const BlockKey key = BlockKey::FromId(kK);
  uint64_t entry = sb->num_entries;
  for (uint64_t s = 0; s < sb->num_entries; ++s)
    if (meta[s].key_lo.load() == key.lo && meta[s].key_hi.load() == key.hi) entry = s;
  ASSERT_LT(entry, sb->num_entries);
  const uint64_t slot = meta[entry].data.load();
  ASSERT_LT(slot, sb->num_slots);
  base[sb->data_off + slot * sb->slot_stride + 100] ^= 0x20;
  ::munmap(p, kRegionBytes);
  t->phase.store(2);
  EXPECT_EQ(Reap(holder), 0) << "20 + 2 x CRC failures + dropped: Verify read host 0's cached "
                                "copy, not memory";
}

}  // namespace
}  // namespace cxlkv
