// Copyright cxlkv authors.
//
// Damaged metadata, including coordinated multi-word faults (two slots'
// keys and tags swapped, a namespace index moved onto another namespace's
// copy of a key, ...), not only single flips. Properties: a load returns the
// exact bytes stored for (namespace, key) or misses; the damage is found by
// the scrub; and every key can be stored again, at once or once the orphan
// sweep has released what a dead owner left (a few liveness timeouts).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cxlkv/lifecycle.h"
#include "cxlkv/region.h"
#include "layout.h"
#include "mapping.h"
#include "region_impl.h"
#include "testutil.h"

namespace cxlkv {
namespace {

using internal::DataState;
using internal::PackData;
using internal::PackWord;
using internal::SlotMeta;
using internal::SlotState;
using internal::WordGen;
using internal::WordOwner;
using internal::WordState;
using test::DataSlotViolation;
using test::FillPattern;
using test::MustOpen;
using test::ScratchRegion;
using test::TestOptions;
using test::WaitFor;

constexpr uint64_t kSlot = 4096;
// Four data slots, two index sets of four entries, and keys whose two
// candidate sets are both of them (Populate): a key moved to another entry
// by damage is found there.
constexpr uint64_t kTiny = 108 << 10;
constexpr int kBlocks = 4;
const NamespaceDesc kNsA{"model-a", "bf16", "NHD", 0, 0};
const NamespaceDesc kNsB{"model-b", "bf16", "NHD", 0, 0};

std::vector<uint8_t> Bytes(uint64_t id, NamespaceId ns) {
  std::vector<uint8_t> v(kSlot);
  FillPattern(id * 31 + ns, v.data(), v.size());
  return v;
}

// The region's bytes, behind the engine's back.
class Raw {
 public:
  explicit Raw(const std::string& path) {
    EXPECT_TRUE(internal::Mapping::Open(path, 0, 0, false, "/sys", &map_).ok());
    sb_ = reinterpret_cast<internal::Superblock*>(map_->base());
  }
  SlotMeta& meta(uint64_t s) {
    return reinterpret_cast<SlotMeta*>(map_->base() + sb_->meta_off)[s];
  }
  std::atomic<uint32_t>& tag(uint64_t s) {
    return reinterpret_cast<internal::SetTags*>(map_->base() + sb_->tags_off)[s / sb_->ways]
        .tag[s % sb_->ways];
  }
  std::atomic<uint64_t>& pins(uint64_t s) {
    return reinterpret_cast<std::atomic<uint64_t>*>(map_->base() +
                                                    sb_->pins_off)[s * sb_->pin_words];
  }
  // The bytes entry `s` names (layout 5: its data slot index).
  uint8_t* data(uint64_t s) {
    return map_->base() + sb_->data_off + uint64_t{meta(s).data.load()} * sb_->slot_stride;
  }
  // Data slot `d`'s word (layout 5).
  std::atomic<uint64_t>& dword(uint64_t d) {
    return reinterpret_cast<std::atomic<uint64_t>*>(map_->base() + sb_->dwords_off)[d];
  }
  uint64_t num_slots() const { return sb_->num_slots; }
  uint64_t num_entries() const { return sb_->num_entries; }

 private:
  std::unique_ptr<internal::Mapping> map_;
  internal::Superblock* sb_ = nullptr;
};

template <typename T>
void SwapAtomic(std::atomic<T>& a, std::atomic<T>& b) {
  const T x = a.load();
  a.store(b.load());
  b.store(x);
}

// Slot of each block: 4 blocks fill the 4 ways. Blocks 0..2 are in
// namespace A (ids 0..2); block 3 is id 0 in namespace B (the same key).
struct Stored {
  NamespaceId ns[kBlocks];
  uint64_t id[kBlocks];
  int64_t slot[kBlocks];
  int32_t writer;
};

Stored Populate(const std::string& path) {
  Stored st{};
  auto r = MustOpen(path, TestOptions(kTiny, kSlot));
  EXPECT_EQ(r->info().num_slots, 4u);
  NamespaceId a, b;
  EXPECT_TRUE(r->RegisterNamespace(kNsA, &a).ok());
  EXPECT_TRUE(r->RegisterNamespace(kNsB, &b).ok());
  auto* impl = static_cast<internal::RegionImpl*>(r.get());
  // Keys whose candidate sets are both index sets (block 0's id in both
  // namespaces, for block 3).
  auto covers = [&](NamespaceId ns, uint64_t id) {
    return RegionInternal::CandidateSlots(r.get(), ns, BlockKey::FromId(id)).size() ==
           r->info().num_entries;
  };
  uint64_t ids[3] = {};
  uint64_t next = 0;
  while (!covers(a, next) || !covers(b, next)) ++next;
  ids[0] = next++;
  for (int i = 1; i < 3; ++i) {
    while (!covers(a, next)) ++next;
    ids[i] = next++;
  }
  for (int i = 0; i < kBlocks; ++i) {
    st.ns[i] = i < 3 ? a : b;
    st.id[i] = i < 3 ? ids[i] : ids[0];
    const auto d = Bytes(st.id[i], st.ns[i]);
    EXPECT_TRUE(r->Store(st.ns[i], BlockKey::FromId(st.id[i]), d.data(), d.size()).ok());
    st.slot[i] = impl->FindReadySlot(st.ns[i], BlockKey::FromId(st.id[i]));
    EXPECT_GE(st.slot[i], 0);
  }
  st.writer = r->info().participant;
  return st;
}

RegionOptions AttachOpts() {
  RegionOptions o = TestOptions(0, 0);
  o.create_if_missing = false;
  return o;
}

// Loads every block; returns how many hit. Every hit must be exact.
int LoadAll(Region* r, const Stored& st, std::vector<bool>* hit = nullptr) {
  int hits = 0;
  std::vector<uint8_t> buf(kSlot);
  for (int i = 0; i < kBlocks; ++i) {
    Status s = r->Load(st.ns[i], BlockKey::FromId(st.id[i]), buf.data(), buf.size());
    if (s.ok()) {
      EXPECT_EQ(buf, Bytes(st.id[i], st.ns[i])) << "block " << i << " returned wrong bytes";
      ++hits;
    } else {
      EXPECT_TRUE(s.IsNotFound() || s.IsCorruption()) << s.ToString();
    }
    if (hit) hit->push_back(s.ok());
  }
  return hits;
}

// Stores every block again (retrying while a dead owner's slot waits for
// the orphan sweep) and loads each exactly.
void ExpectAllStorable(Region* r, const Stored& st) {
  for (int i = 0; i < kBlocks; ++i) {
    const auto d = Bytes(st.id[i], st.ns[i]);
    const BlockKey k = BlockKey::FromId(st.id[i]);
    StoreOutcome out = StoreOutcome::kLostRace;
    EXPECT_TRUE(WaitFor(
        [&] {
          return r->Store(st.ns[i], k, d.data(), d.size(), &out).ok() &&
                 (out == StoreOutcome::kStored || out == StoreOutcome::kDuplicate);
        },
        3000))
        << "block " << i << " not storable: outcome " << int(out);
    std::vector<uint8_t> buf(kSlot);
    ASSERT_TRUE(r->Load(st.ns[i], k, buf.data(), buf.size()).ok()) << "block " << i;
    EXPECT_EQ(buf, d);
  }
}

// ---- coordinated faults that would alias blocks ----

struct Fault {
  const char* name;
  void (*apply)(Raw& raw, const Stored& st);
  bool detected;  // the damaged blocks must miss, and the scrub must see them
  std::vector<int> damaged;
};

void SwapKeysAndTags(Raw& raw, const Stored& st) {
  const uint64_t a = st.slot[0], b = st.slot[1];
  SwapAtomic(raw.meta(a).key_hi, raw.meta(b).key_hi);
  SwapAtomic(raw.meta(a).key_lo, raw.meta(b).key_lo);
  SwapAtomic(raw.tag(a), raw.tag(b));
}

void SwapAllButStateAndData(Raw& raw, const Stored& st) {
  const uint64_t a = st.slot[0], b = st.slot[1];
  SwapKeysAndTags(raw, st);
  SwapAtomic(raw.meta(a).ns, raw.meta(b).ns);
  SwapAtomic(raw.meta(a).len, raw.meta(b).len);
  SwapAtomic(raw.meta(a).crc, raw.meta(b).crc);
}

void SwapNamespaceOfOneKey(Raw& raw, const Stored& st) {
  // Block 0 (ns A) and block 3 (ns B) hold the same key.
  const uint64_t a = st.slot[0], b = st.slot[3];
  SwapAtomic(raw.meta(a).ns, raw.meta(b).ns);
  SwapAtomic(raw.tag(a), raw.tag(b));
}

void SwapKeysTagsAndCrcs(Raw& raw, const Stored& st) {
  SwapKeysAndTags(raw, st);
  SwapAtomic(raw.meta(st.slot[0]).crc, raw.meta(st.slot[1]).crc);
}

void SwapData(Raw& raw, const Stored& st) {
  std::vector<uint8_t> t(kSlot);
  std::memcpy(t.data(), raw.data(st.slot[0]), kSlot);
  std::memcpy(raw.data(st.slot[0]), raw.data(st.slot[1]), kSlot);
  std::memcpy(raw.data(st.slot[1]), t.data(), kSlot);
}

void BumpGeneration(Raw& raw, const Stored& st) {
  std::atomic<uint64_t>& w = raw.meta(st.slot[2]).state;
  const uint64_t v = w.load();
  w.store(PackWord(WordGen(v) + 1, WordOwner(v), WordState(v)));
}

void ShortenLength(Raw& raw, const Stored& st) { raw.meta(st.slot[2]).len.store(kSlot / 2); }

// Everything of two index entries swapped, state words and data slot
// indexes included, and the two data words (each names its entry's lease):
// a consistent relocation (both blocks were their entry's first write, so
// the generations are equal; each entry still names its own bytes, and
// their words its lease), which must still serve exactly the right bytes.
// Moving the bytes instead (SwapData) is detected: the CRC binds the data
// slot. Without the data words, each entry would be on a data slot its
// lease does not hold, which the orphan sweep and verify find.
void SwapWholeSlots(Raw& raw, const Stored& st) {
  const uint64_t da = raw.meta(st.slot[0]).data.load(), db = raw.meta(st.slot[1]).data.load();
  SwapAllButStateAndData(raw, st);
  SwapAtomic(raw.meta(st.slot[0]).data, raw.meta(st.slot[1]).data);
  SwapAtomic(raw.meta(st.slot[0]).state, raw.meta(st.slot[1]).state);
  SwapAtomic(raw.dword(da), raw.dword(db));
}

class CoordinatedFaultTest : public testing::TestWithParam<Fault> {};

TEST_P(CoordinatedFaultTest, LoadsAreExactOrMissesAndEveryKeyIsStorableAgain) {
  const Fault& f = GetParam();
  ScratchRegion sr("fault");
  const Stored st = Populate(sr.path());
  {
    Raw raw(sr.path());
    f.apply(raw, st);
  }
  auto r = MustOpen(sr.path(), AttachOpts());
  {
    // Scrub first (read-only), so the loads below see the damage too.
    Region::ScrubReport rep;
    ASSERT_TRUE(r->Verify(false, &rep).ok());
    if (f.detected) {
      EXPECT_GE(rep.crc_failures, f.damaged.size()) << f.name;
    } else {
      EXPECT_EQ(rep.crc_failures, 0u) << f.name;
    }
  }
  std::vector<bool> hit;
  LoadAll(r.get(), st, &hit);
  if (f.detected) {
    for (int i : f.damaged) EXPECT_FALSE(hit[i]) << f.name << ": damaged block " << i << " hit";
  } else {
    EXPECT_EQ(std::count(hit.begin(), hit.end(), true), kBlocks) << f.name;
  }
  ExpectAllStorable(r.get(), st);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, CoordinatedFaultTest,
    testing::Values(Fault{"SwapKeysAndTags", SwapKeysAndTags, true, {0, 1}},
                    Fault{"SwapKeysTagsAndCrcs", SwapKeysTagsAndCrcs, true, {0, 1}},
                    Fault{"SwapAllButStateAndData", SwapAllButStateAndData, true, {0, 1}},
                    Fault{"SwapNamespaceOfOneKey", SwapNamespaceOfOneKey, true, {0, 3}},
                    Fault{"SwapData", SwapData, true, {0, 1}},
                    Fault{"BumpGeneration", BumpGeneration, true, {2}},
                    Fault{"ShortenLength", ShortenLength, true, {2}},
                    Fault{"SwapWholeSlots", SwapWholeSlots, false, {}}),
    [](const testing::TestParamInfo<Fault>& i) { return std::string(i.param.name); });

// ---- faults that used to make a key unstorable ----

// A READY block whose tag was lost: a miss, and the next store finds the
// untagged copy, repairs its tag and answers kDuplicate.
TEST(DamageTest, ReadyBlockWithoutItsTagIsFoundAndRepairedByTheNextStore) {
  for (uint32_t bad : {0u, 0x12345679u}) {
    ScratchRegion sr("notag");
    const Stored st = Populate(sr.path());
    {
      Raw raw(sr.path());
      raw.tag(st.slot[1]).store(bad);
    }
    auto r = MustOpen(sr.path(), AttachOpts());
    const BlockKey k = BlockKey::FromId(st.id[1]);
    std::vector<uint8_t> buf(kSlot);
    EXPECT_TRUE(r->Load(st.ns[1], k, buf.data(), buf.size()).IsNotFound());
    const auto d = Bytes(st.id[1], st.ns[1]);
    StoreOutcome out;
    ASSERT_TRUE(r->Store(st.ns[1], k, d.data(), d.size(), &out).ok());
    EXPECT_EQ(out, StoreOutcome::kDuplicate);
    ASSERT_TRUE(r->Load(st.ns[1], k, buf.data(), buf.size()).ok());
    EXPECT_EQ(buf, d);
    EXPECT_EQ(LoadAll(r.get(), st), kBlocks);
  }
}

// A slot word that names an owner who is not alive: nothing but the orphan
// sweep would ever free or restore it.
struct Orphan {
  const char* name;
  uint8_t state;
  uint32_t owner;  // participant index written into the word
};

class OrphanTest : public testing::TestWithParam<Orphan> {};

TEST_P(OrphanTest, SlotOfAnOwnerThatIsNotAliveIsReleased) {
  const Orphan& o = GetParam();
  ScratchRegion sr("orphan");
  const Stored st = Populate(sr.path());
  {
    Raw raw(sr.path());
    std::atomic<uint64_t>& w = raw.meta(st.slot[1]).state;
    w.store(PackWord(WordGen(w.load()), o.owner, o.state));
  }
  auto r = MustOpen(sr.path(), AttachOpts());
  ASSERT_NE(r->info().participant, static_cast<int32_t>(o.owner));
  const BlockKey k = BlockKey::FromId(st.id[1]);
  std::vector<uint8_t> buf(kSlot);
  if (o.state == static_cast<uint8_t>(SlotState::kWriting)) {
    EXPECT_FALSE(r->Load(st.ns[1], k, buf.data(), buf.size()).ok());
    StoreOutcome out;
    EXPECT_TRUE(r->Store(st.ns[1], k, buf.data(), kSlot, &out).IsBusy());
    EXPECT_EQ(out, StoreOutcome::kLostRace);
  }
  auto* impl = static_cast<internal::RegionImpl*>(r.get());
  const uint8_t want = o.state == static_cast<uint8_t>(SlotState::kEvicting)
                           ? static_cast<uint8_t>(SlotState::kReady)
                           : static_cast<uint8_t>(SlotState::kFree);
  EXPECT_TRUE(WaitFor([&] { return WordState(impl->Meta(st.slot[1]).state.load()) == want; }, 3000))
      << o.name << ": still " << int(WordState(impl->Meta(st.slot[1]).state.load()));
  if (want == static_cast<uint8_t>(SlotState::kReady)) {
    // Restored with its generation and the writer it recorded.
    LoadInfo info;
    ASSERT_TRUE(r->Load(st.ns[1], k, buf.data(), buf.size(), {}, &info).ok());
    EXPECT_EQ(buf, Bytes(st.id[1], st.ns[1]));
    EXPECT_EQ(info.writer_participant, static_cast<uint32_t>(st.writer));
  }
  ExpectAllStorable(r.get(), st);
}

INSTANTIATE_TEST_SUITE_P(
    Owners, OrphanTest,
    testing::Values(Orphan{"WritingByFreeEntry", 1, 17}, Orphan{"WritingByNoEntry", 1, 4000},
                    Orphan{"EvictingByFreeEntry", 3, 17}, Orphan{"EvictingByNoEntry", 3, 4000},
                    Orphan{"ImpossibleState", 9, 4095}),
    [](const testing::TestParamInfo<Orphan>& i) { return std::string(i.param.name); });

// An operator's wipe frees orphaned slots at once and counts them apart from
// writes of live participants; a dead evictor's block is restored, then
// dropped like any unpinned block.
TEST(DamageTest, WipeFreesOrphansAndCountsLiveWritesApart) {
  ScratchRegion sr("wipe");
  const Stored st = Populate(sr.path());
  {
    Raw raw(sr.path());
    std::atomic<uint64_t>& w1 = raw.meta(st.slot[1]).state;
    w1.store(PackWord(WordGen(w1.load()), 17, static_cast<uint8_t>(SlotState::kWriting)));
    std::atomic<uint64_t>& w2 = raw.meta(st.slot[2]).state;
    w2.store(PackWord(WordGen(w2.load()), 4000, static_cast<uint8_t>(SlotState::kEvicting)));
  }
  auto r = MustOpen(sr.path(), AttachOpts());
  WriteLease lease;  // a live write in flight: left alone
  const auto d = Bytes(50, st.ns[0]);
  ASSERT_TRUE(r->Drop(st.ns[0], BlockKey::FromId(st.id[0])).ok());
  ASSERT_TRUE(r->BeginWrite(st.ns[0], BlockKey::FromId(50), kSlot, &lease).ok());
  ASSERT_TRUE(lease.open());
  Region::WipeReport rep;
  ASSERT_TRUE(r->Wipe(&rep).ok());
  EXPECT_EQ(rep.orphaned, 1u);
  EXPECT_EQ(rep.writing, 1u);
  EXPECT_EQ(rep.dropped, 2u);  // the restored block and block 3
  std::memcpy(lease.data(), d.data(), kSlot);
  ASSERT_TRUE(r->CommitWrite(&lease).ok());
  ExpectAllStorable(r.get(), st);
}

// A pin bit of an entry that is FREE holds the block against eviction and
// drop until the orphan sweep clears it.
TEST(DamageTest, PinBitOfAFreeEntryIsCleared) {
  ScratchRegion sr("orphanpin");
  const Stored st = Populate(sr.path());
  {
    Raw raw(sr.path());
    raw.pins(st.slot[2]).fetch_or(1ull << 9);
  }
  auto r = MustOpen(sr.path(), AttachOpts());
  ASSERT_NE(r->info().participant, 9);
  const BlockKey k = BlockKey::FromId(st.id[2]);
  EXPECT_TRUE(r->Drop(st.ns[2], k).IsBusy());
  EXPECT_TRUE(WaitFor([&] { return r->Drop(st.ns[2], k).ok(); }, 3000));
  EXPECT_GE(r->RegionCounters()[Counter::kReleasedPins], 1u);
  ExpectAllStorable(r.get(), st);
}

// ---- layout 5: data slot indexes and data words ----
//
// The index names the data slot of each block (SlotMeta::data) and one word
// per data slot names the lease that holds it; both are region bytes. Damage
// to either must cost at most the damaged blocks (misses, never wrong bytes),
// never a key that stays unstorable or a data slot lost for good: the orphan
// sweep, an eviction or a read repairs it within a few liveness timeouts.

// Stores `n` new blocks (ids from 1000) into a region whose data slots are
// all taken, so that each one evicts; every store must succeed.
void StoreNew(Region* r, NamespaceId ns, int n, uint64_t first = 1000) {
  for (int i = 0; i < n; ++i) {
    const auto d = Bytes(first + i, ns);
    StoreOutcome out = StoreOutcome::kRefused;
    Status s = r->Store(ns, BlockKey::FromId(first + i), d.data(), d.size(), &out);
    EXPECT_TRUE(s.ok()) << "store " << i << ": " << s.ToString();
    EXPECT_EQ(out, StoreOutcome::kStored) << "store " << i;
  }
}

// An entry whose data slot index is past the data area: a read reports the
// damage, and the key can be stored again at once (the damaged entry must
// not stay READY, where every store of its key answers kDuplicate and every
// load kCorruption).
TEST(DataSlotDamageTest, EntryNamingADataSlotPastTheRegionIsDroppedAndItsKeyStoredAgain) {
  for (uint32_t past : {0u, 5u, 0xFFFFFFFFu - 4u}) {
    ScratchRegion sr("dpast");
    const Stored st = Populate(sr.path());
    {
      Raw raw(sr.path());
      raw.meta(st.slot[1]).data.store(static_cast<uint32_t>(raw.num_slots()) + past);
    }
    auto r = MustOpen(sr.path(), AttachOpts());
    const BlockKey k = BlockKey::FromId(st.id[1]);
    std::vector<uint8_t> buf(kSlot);
    Status s = r->Load(st.ns[1], k, buf.data(), buf.size());
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_NE(s.message().find("names a data slot past"), std::string::npos) << s.ToString();
    const auto d = Bytes(st.id[1], st.ns[1]);
    StoreOutcome out;
    ASSERT_TRUE(r->Store(st.ns[1], k, d.data(), d.size(), &out).ok());
    EXPECT_EQ(out, StoreOutcome::kStored) << "the damaged entry still answers for its key";
    ASSERT_TRUE(r->Load(st.ns[1], k, buf.data(), buf.size()).ok());
    EXPECT_EQ(buf, d);
    // The data slot the damaged entry held is freed by the orphan sweep.
    EXPECT_TRUE(WaitFor([&] { return DataSlotViolation(r.get(), true).empty(); }, 3000))
        << DataSlotViolation(r.get(), true);
    LoadAll(r.get(), st);
    ExpectAllStorable(r.get(), st);
  }
}

// Every READY entry's data index damaged (past the region, or onto another
// block's data slot) on a region whose data slots are all taken: each store
// evicts, and its victims are all damaged. Stores must go on succeeding
// (the victims dropped, their data slots freed), not fail as "every block is
// pinned" for as long as the damaged blocks stay unread.
TEST(DataSlotDamageTest, StoresEvictPastVictimsWhoseDataIndexIsDamaged) {
  for (const bool onto_another : {false, true}) {
    ScratchRegion sr("dvict");
    constexpr uint64_t kMid = 1 << 20;  // > 64 data slots: more than one store's tries
    NamespaceId ns;
    uint64_t n = 0;
    {
      auto r = MustOpen(sr.path(), TestOptions(kMid, kSlot));
      ASSERT_TRUE(r->RegisterNamespace(kNsA, &ns).ok());
      n = r->info().num_slots;
      ASSERT_GT(n, 64u);
      for (uint64_t i = 0; i < n; ++i) {
        const auto d = Bytes(i, ns);
        StoreOutcome out;
        ASSERT_TRUE(r->Store(ns, BlockKey::FromId(i), d.data(), d.size(), &out).ok());
        ASSERT_EQ(out, StoreOutcome::kStored);
      }
    }
    {
      Raw raw(sr.path());
      for (uint64_t e = 0; e < raw.num_entries(); ++e) {
        if (WordState(raw.meta(e).state.load()) != static_cast<uint8_t>(SlotState::kReady)) {
          continue;
        }
        const uint32_t d = raw.meta(e).data.load();
        raw.meta(e).data.store(onto_another ? (d + 1) % static_cast<uint32_t>(raw.num_slots())
                                            : static_cast<uint32_t>(raw.num_slots()) + d);
      }
    }
    auto r = MustOpen(sr.path(), AttachOpts());
    // Every store succeeds, possibly once the orphan sweep has freed the
    // data slots of the damaged blocks that the first stores dropped.
    for (int i = 0; i < 8; ++i) {
      const auto d = Bytes(5000 + i, ns);
      StoreOutcome out = StoreOutcome::kRefused;
      EXPECT_TRUE(WaitFor(
          [&] {
            return r->Store(ns, BlockKey::FromId(5000 + i), d.data(), d.size(), &out).ok() &&
                   out == StoreOutcome::kStored;
          },
          3000))
          << (onto_another ? "onto another: " : "past: ") << "store " << i << " outcome "
          << int(out);
    }
    std::vector<uint8_t> buf(kSlot);
    for (uint64_t i = 0; i < n; ++i) {
      if (r->Load(ns, BlockKey::FromId(i), buf.data(), buf.size()).ok()) {
        EXPECT_EQ(buf, Bytes(i, ns)) << "block " << i << " returned wrong bytes";
      }
    }
    EXPECT_TRUE(WaitFor([&] { return DataSlotViolation(r.get(), true).empty(); }, 3000))
        << DataSlotViolation(r.get(), true);
  }
}

// Two READY entries name one data slot (the second's index damaged onto the
// first's). The first block still reads exactly, the second never returns
// the first's bytes, and once eviction has cycled through the region the
// second's own data slot is not lost: every HELD word is named by exactly
// one READY entry.
TEST(DataSlotDamageTest, TwoReadyEntriesNamingOneDataSlotLoseNeitherBytesNorSlots) {
  ScratchRegion sr("dtwo");
  const Stored st = Populate(sr.path());
  {
    Raw raw(sr.path());
    raw.meta(st.slot[1]).data.store(raw.meta(st.slot[0]).data.load());
  }
  auto r = MustOpen(sr.path(), AttachOpts());
  Region::ScrubReport rep;
  ASSERT_TRUE(r->Verify(false, &rep).ok());
  EXPECT_EQ(rep.crc_failures, 1u);
  std::vector<uint8_t> buf(kSlot);
  ASSERT_TRUE(r->Load(st.ns[0], BlockKey::FromId(st.id[0]), buf.data(), buf.size()).ok());
  EXPECT_EQ(buf, Bytes(st.id[0], st.ns[0]));
  // Block 1 is never read here: eviction alone must not lose its slot.
  StoreNew(r.get(), st.ns[0], 12);
  EXPECT_TRUE(WaitFor([&] { return DataSlotViolation(r.get(), true).empty(); }, 3000))
      << DataSlotViolation(r.get(), true);
  LoadAll(r.get(), st);
  ExpectAllStorable(r.get(), st);
}

// The same in a region with room (no eviction) where the damaged block is
// never read: the orphan sweep drops a READY entry whose data slot's word
// is not its lease (seen so for a liveness timeout), and frees the slot it
// held; nothing waits for a read or an eviction that may never come.
TEST(DataSlotDamageTest, ReadyEntryOnADataSlotItsLeaseDoesNotHoldIsDroppedByTheSweep) {
  for (const bool past : {false, true}) {
    ScratchRegion sr("doff");
    const Stored st = Populate(sr.path());
    {
      auto r = MustOpen(sr.path(), AttachOpts());
      ASSERT_TRUE(r->Drop(st.ns[3], BlockKey::FromId(st.id[3])).ok());  // room
    }
    {
      Raw raw(sr.path());
      raw.meta(st.slot[1])
          .data.store(past ? static_cast<uint32_t>(raw.num_slots()) + 1
                           : raw.meta(st.slot[0]).data.load());
    }
    auto r = MustOpen(sr.path(), AttachOpts());
    EXPECT_TRUE(WaitFor([&] { return DataSlotViolation(r.get(), true).empty(); }, 3000))
        << (past ? "past: " : "onto another: ") << DataSlotViolation(r.get(), true);
    EXPECT_GE(r->RegionCounters()[Counter::kCrcFailures], 1u);
    std::vector<bool> hit;
    LoadAll(r.get(), st, &hit);
    EXPECT_TRUE(hit[0] && hit[2]);
    EXPECT_FALSE(hit[1]);
    ExpectAllStorable(r.get(), st);
  }
}

// A data word that names no live lease, written over a FREE data slot: the
// orphan sweep frees it (within a few liveness timeouts), and until then it
// only keeps that slot from being claimed.
struct BadWord {
  const char* name;
  // The word, from the region as damaged: `free_entry` is a FREE index
  // entry (at generation `free_gen`), `live` a READY entry whose block is
  // in data slot `live_data`.
  uint64_t (*make)(Raw& raw, uint64_t free_entry, uint64_t free_gen, uint64_t live,
                   uint64_t live_data);
};

class OrphanDataWordTest : public testing::TestWithParam<BadWord> {};

TEST_P(OrphanDataWordTest, IsFreedAndNoBlockIsServedWrongBytes) {
  const BadWord& bw = GetParam();
  ScratchRegion sr("dword");
  const Stored st = Populate(sr.path());
  auto r = MustOpen(sr.path(), AttachOpts());
  auto* impl = static_cast<internal::RegionImpl*>(r.get());
  // Block 2 dropped: its entry and data slot are FREE.
  const uint64_t d2 = static_cast<uint64_t>(impl->EntryDataSlot(st.slot[2]));
  ASSERT_TRUE(r->Drop(st.ns[2], BlockKey::FromId(st.id[2])).ok());
  ASSERT_EQ(impl->DataWord(d2).load(), 0u);
  uint64_t bad;
  {
    Raw raw(sr.path());
    const uint64_t live = st.slot[0];
    bad = bw.make(raw, st.slot[2], WordGen(raw.meta(st.slot[2]).state.load()), live,
                  raw.meta(live).data.load());
    raw.dword(d2).store(bad);
  }
  EXPECT_TRUE(WaitFor([&] { return impl->DataWord(d2).load() == 0; }, 3000))
      << bw.name << ": data slot " << d2 << " still holds " << impl->DataWord(d2).load();
  EXPECT_EQ(DataSlotViolation(r.get(), true), "") << bw.name;
  std::vector<bool> hit;
  LoadAll(r.get(), st, &hit);
  EXPECT_TRUE(hit[0] && hit[1] && hit[3]) << bw.name;
  ExpectAllStorable(r.get(), st);
}

INSTANTIATE_TEST_SUITE_P(
    Words, OrphanDataWordTest,
    testing::Values(
        BadWord{"EntryPastTheIndex",
                [](Raw& raw, uint64_t, uint64_t, uint64_t, uint64_t) {
                  return PackData(raw.num_entries() + 3, 0, DataState::kHeld);
                }},
        BadWord{"LargestEntryField",
                [](Raw&, uint64_t, uint64_t, uint64_t, uint64_t) {
                  return PackData(internal::kDataEntryMask, 5, DataState::kMoving);
                }},
        BadWord{"HeldByAFreeEntry", [](Raw&, uint64_t e, uint64_t g, uint64_t,
                                       uint64_t) { return PackData(e, g, DataState::kHeld); }},
        BadWord{"MovingForAFreeEntry",
                [](Raw&, uint64_t e, uint64_t g, uint64_t, uint64_t) {
                  return PackData(e, g + 1, DataState::kMoving);
                }},
        BadWord{"HeldByAReadyEntryAtAnotherGeneration",
                [](Raw& raw, uint64_t, uint64_t, uint64_t live, uint64_t) {
                  return PackData(live, WordGen(raw.meta(live).state.load()) + 1, DataState::kHeld);
                }},
        BadWord{"ImpossibleState",
                [](Raw& raw, uint64_t, uint64_t, uint64_t live, uint64_t) {
                  return PackData(live, WordGen(raw.meta(live).state.load()), DataState::kFree) | 7;
                }},
        // The lease of a READY block whose entry names another data slot:
        // a copy of a live word (HELD), or one the rule for a writer that
        // died between READY and its settle would promote (MOVING).
        BadWord{"CopyOfALiveLease", [](Raw& raw, uint64_t, uint64_t, uint64_t,
                                       uint64_t live_data) { return raw.dword(live_data).load(); }},
        BadWord{"MovingForAReadyEntryNamingAnotherSlot",
                [](Raw& raw, uint64_t, uint64_t, uint64_t live, uint64_t) {
                  return PackData(live, WordGen(raw.meta(live).state.load()), DataState::kMoving);
                }}),
    [](const testing::TestParamInfo<BadWord>& i) { return std::string(i.param.name); });

// A live block's own data word damaged (zeroed: FREE; or naming no lease):
// the slot may be claimed and overwritten by the next store, and the block
// must then miss, never return the new bytes; the accounting is whole again
// once eviction has cycled through the region.
TEST(DataSlotDamageTest, LiveBlocksDataWordDamagedCostsAtMostThatBlock) {
  for (const uint64_t bad : {uint64_t{0}, PackData(1ull << 30, 0, DataState::kHeld)}) {
    ScratchRegion sr("dlive");
    const Stored st = Populate(sr.path());
    {
      Raw raw(sr.path());
      raw.dword(raw.meta(st.slot[2]).data.load()).store(bad);
    }
    auto r = MustOpen(sr.path(), AttachOpts());
    StoreNew(r.get(), st.ns[0], 6);
    LoadAll(r.get(), st);
    EXPECT_TRUE(WaitFor([&] { return DataSlotViolation(r.get(), true).empty(); }, 3000))
        << DataSlotViolation(r.get(), true);
    ExpectAllStorable(r.get(), st);
  }
}

// Set tag lines that disagree with their entries: tags on FREE ways, tags
// swapped between ways, one key's tag on every way. Lookups check the entry
// behind a tag, so every load is exact or a miss, and every key storable.
TEST(DataSlotDamageTest, TagLinesInconsistentWithTheirEntriesCostOnlyMisses) {
  ScratchRegion sr("dtags");
  const Stored st = Populate(sr.path());
  {
    Raw raw(sr.path());
    const uint32_t t0 = raw.tag(st.slot[0]).load();
    for (uint64_t e = 0; e < raw.num_entries(); ++e) {
      if (WordState(raw.meta(e).state.load()) == static_cast<uint8_t>(SlotState::kFree)) {
        raw.tag(e).store(t0);  // block 0's tag on every FREE way
      }
    }
    SwapAtomic(raw.tag(st.slot[1]), raw.tag(st.slot[2]));
  }
  auto r = MustOpen(sr.path(), AttachOpts());
  std::vector<bool> hit;
  LoadAll(r.get(), st, &hit);
  EXPECT_TRUE(hit[0]);
  StoreNew(r.get(), st.ns[0], 6);
  LoadAll(r.get(), st);
  ExpectAllStorable(r.get(), st);
  EXPECT_TRUE(WaitFor([&] { return DataSlotViolation(r.get(), true).empty(); }, 3000))
      << DataSlotViolation(r.get(), true);
}

// The census `cxlkv inspect` shows: a data word left to the orphan sweep
// (a copied lease word) and a READY entry on a data slot its lease does not
// hold are counted, seen by an observer, and gone once a participant's
// sweep and an eviction have repaired them.
TEST(DataSlotDamageTest, InspectCountsWhatTheSweepHasLeftToRepair) {
  ScratchRegion sr("dcensus");
  const Stored st = Populate(sr.path());
  {
    auto r = MustOpen(sr.path(), AttachOpts());
    ASSERT_TRUE(r->Drop(st.ns[2], BlockKey::FromId(st.id[2])).ok());
  }
  {
    Raw raw(sr.path());
    // Block 2's data slot is FREE: a copy of block 0's lease word on it,
    // and block 1's entry pointed at block 3's data slot.
    raw.dword(raw.meta(st.slot[2]).data.load()).store(raw.dword(raw.meta(st.slot[0]).data.load()));
    raw.meta(st.slot[1]).data.store(raw.meta(st.slot[3]).data.load());
  }
  RegionOptions obs = AttachOpts();
  obs.register_participant = false;
  auto o = MustOpen(sr.path(), obs);
  Occupancy occ = ScanOccupancy(*o);
  EXPECT_EQ(occ.data_held, 4u);  // blocks 0, 1 (its own slot), 3 and the copy
  EXPECT_EQ(occ.data_free, 0u);
  // The copy, and block 1's own slot (its entry names block 3's now).
  EXPECT_EQ(occ.data_unsettled, 2u);
  EXPECT_EQ(occ.ready_off_data, 1u);
  auto r = MustOpen(sr.path(), AttachOpts());
  EXPECT_TRUE(WaitFor([&] { return ScanOccupancy(*o).data_unsettled == 0; }, 3000));
  StoreNew(r.get(), st.ns[0], 6);
  occ = ScanOccupancy(*o);
  EXPECT_EQ(occ.ready_off_data, 0u);
  EXPECT_EQ(occ.data_held + occ.data_moving + occ.data_free, r->info().num_slots);
  EXPECT_EQ(DataSlotViolation(r.get(), true), "");
}

// A pin bit of a live participant that holds no pin (damage: a bit set
// where its owner never pinned) kept its block from being evicted or
// dropped for as long as that participant lived: the orphan sweep clears
// only bits of owners that are not alive. Each participant knows its own
// pins (its process's pin counts), so its sweep clears a bit of its own
// that no pin of its holds, and leaves a real pin alone.
TEST(DamageTest, AStrayPinBitOfALiveParticipantIsClearedByThatParticipant) {
  ScratchRegion sr("straypin");
  const Stored st = Populate(sr.path());
  RegionOptions opts = AttachOpts();
  opts.heartbeat_interval_ns = 20'000'000;
  opts.liveness_timeout_ns = 5'000'000'000;  // nobody is judged dead under load
  auto a = MustOpen(sr.path(), opts);
  auto b = MustOpen(sr.path(), opts);
  const auto pb = static_cast<uint32_t>(b->info().participant);
  ASSERT_LT(pb, 64u);
  // B really pins block 1; its bit on block 0 is damage.
  PinSet pins;
  const BlockKey k0 = BlockKey::FromId(st.id[0]), k1 = BlockKey::FromId(st.id[1]);
  ASSERT_TRUE(b->PinPrefix(st.ns[1], &k1, 1, &pins).ok());
  ASSERT_EQ(pins.size(), 1u);
  {
    Raw raw(sr.path());
    raw.pins(st.slot[0]).fetch_or(1ull << pb);
  }
  // B's sweep clears the stray bit (a pass over this region's entries
  // takes one heartbeat); A can then drop block 0.
  Raw raw(sr.path());
  EXPECT_TRUE(WaitFor([&] { return (raw.pins(st.slot[0]).load() & (1ull << pb)) == 0; }, 20000))
      << "participant " << pb << "'s stray pin bit is still set";
  EXPECT_TRUE(a->Drop(st.ns[0], k0).ok());
  // B's real pin stayed through the passes that cleared the stray bit.
  EXPECT_NE(raw.pins(st.slot[1]).load() & (1ull << pb), 0u);
  EXPECT_TRUE(a->Drop(st.ns[1], k1).IsBusy());
  pins.Release();
  EXPECT_TRUE(a->Drop(st.ns[1], k1).ok());
}

}  // namespace
}  // namespace cxlkv
