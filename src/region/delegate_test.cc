// Copyright cxlkv authors.
//
// Delegated, parted writes (delegate.h): one process reserves and commits,
// forked processes fill the parts, readers verify one part each.
#include "cxlkv/delegate.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "crc32c.h"
#include "region_impl.h"
#include "software_testutil.h"
#include "testutil.h"

namespace cxlkv {
namespace {

using test::FillPattern;
using test::MustOpen;
using test::Reap;
using test::ScratchRegion;
using test::Spawn;
using test::TestOptions;

constexpr uint64_t kPage = 1000;  // not a power of two: offsets must not assume one
constexpr uint32_t kBlocks = 16;  // blocks per KV tensor
constexpr uint32_t kPerChunk = 4;
constexpr uint32_t kTensors = 3;
const NamespaceDesc kNs{"model", "bfloat16", "LBHNC/parted", 0, 0};

// A rank's KV cache: kTensors tensors of kBlocks pages, page-strided with a gap.
struct Kv {
  explicit Kv(uint64_t seed) : bytes(kTensors * kBlocks * (kPage + 24)) {
    FillPattern(seed, bytes.data(), bytes.size());
    for (uint32_t t = 0; t < kTensors; ++t)
      tensors.push_back(
          PageTensor{reinterpret_cast<uint64_t>(bytes.data()) + t * kBlocks * (kPage + 24),
                     kPage + 24, kPage, kBlocks});
  }
  const uint8_t* page(uint32_t t, int32_t b) const {
    return reinterpret_cast<const uint8_t*>(tensors[t].base + b * tensors[t].block_stride);
  }
  ChunkPages pages(const int32_t* ids, uint32_t skip = 0, uint32_t count = kPerChunk) const {
    return ChunkPages{tensors.data(), tensors.size(), kPerChunk, ids, skip, count};
  }
  std::vector<uint8_t> bytes;
  std::vector<PageTensor> tensors;
};

const PartedLayout kLayout{2, kTensors* kPerChunk* kPage + 100};  // with padding

NamespaceId Ns(Region* r) {
  NamespaceId id = 0;
  if (!r->RegisterNamespace(kNs, &id).ok()) std::abort();
  return id;
}

TEST(DelegateTest, CombineEqualsTheCrcOfTheConcatenation) {
  std::vector<uint8_t> d(10007);
  FillPattern(3, d.data(), d.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{4096}, size_t{10006}, d.size()}) {
    const uint32_t a = internal::Crc32c(d.data(), cut);
    const uint32_t b = internal::Crc32c(d.data() + cut, d.size() - cut);
    EXPECT_EQ(Crc32cCombine(a, b, d.size() - cut), internal::Crc32c(d.data(), d.size())) << cut;
  }
}

// Two forked fillers (ranks) fill their parts of a slot the parent reserved;
// the parent commits; each part then loads back byte for byte, also from the
// middle of the chunk.
TEST(DelegateTest, PartsFilledByOtherProcessesCommitAndLoadBack) {
  ScratchRegion sr("parted");
  const RegionOptions o = TestOptions(8 << 20, kLayout.PayloadLen());
  auto r = MustOpen(sr.path(), o);
  const NamespaceId ns = Ns(r.get());
  const BlockKey key = BlockKey::FromId(5);
  WriteLease lease;
  ASSERT_TRUE(r->BeginWrite(ns, key, kLayout.PayloadLen(), &lease).ok());
  WriteToken token;
  ASSERT_TRUE(ExportWriteToken(*r, lease, &token).ok());
  const int32_t ids[2][kPerChunk] = {{3, 9, 4, 0}, {15, 1, 2, 7}};
  for (uint32_t part = 0; part < 2; ++part) {
    pid_t k = Spawn([&, part] {
      auto w = MustOpen(sr.path(), o);
      Kv kv(100 + part);
      Status s = FillPart(w.get(), token, kLayout, part, kv.pages(ids[part]));
      if (!s.ok()) std::fprintf(stderr, "fill %u: %s\n", part, s.ToString().c_str());
      return s.ok() ? 0 : 1;
    });
    ASSERT_EQ(Reap(k), 0);
  }
  EXPECT_FALSE(r->Lookup(ns, key).ok()) << "not READY before the commit";
  ASSERT_TRUE(CommitPartedWrite(r.get(), &lease, kLayout).ok());
  ASSERT_TRUE(r->Lookup(ns, key).ok());

  for (uint32_t part = 0; part < 2; ++part) {
    const Kv want(100 + part);
    Kv got(7);  // other contents
    const int32_t dst[kPerChunk] = {10, 11, 12, 13};
    LoadInfo info;
    Status s = LoadPart(r.get(), ns, key, kLayout, part, got.pages(dst), &info);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(info.len, kTensors * kPerChunk * kPage);
    for (uint32_t t = 0; t < kTensors; ++t)
      for (uint32_t j = 0; j < kPerChunk; ++j)
        EXPECT_EQ(std::memcmp(got.page(t, dst[j]), want.page(t, ids[part][j]), kPage), 0);
    // A load that enters the chunk mid-way: blocks 1..3 only.
    Kv mid(8);
    const Kv untouched(8);
    const int32_t dst2[3] = {5, 6, 2};
    ASSERT_TRUE(LoadPart(r.get(), ns, key, kLayout, part, mid.pages(dst2, 1, 3)).ok());
    for (uint32_t t = 0; t < kTensors; ++t) {
      for (uint32_t j = 0; j < 3; ++j)
        EXPECT_EQ(std::memcmp(mid.page(t, dst2[j]), want.page(t, ids[part][j + 1]), kPage), 0);
      EXPECT_EQ(std::memcmp(mid.page(t, 0), untouched.page(t, 0), kPage), 0);
    }
  }
}

// A part never filled (a rank that died, or stale bytes of the slot's last
// use) is refused at commit and the slot freed.
TEST(DelegateTest, CommitRefusesAPartNotFilledForThisReservation) {
  ScratchRegion sr("missing");
  auto r = MustOpen(sr.path(), TestOptions(8 << 20, kLayout.PayloadLen()));
  const NamespaceId ns = Ns(r.get());
  // Use the slot once fully, so its table holds entries of an older word.
  Kv kv(1);
  const int32_t ids[kPerChunk] = {0, 1, 2, 3};
  for (int round = 0; round < 2; ++round) {
    const BlockKey key = BlockKey::FromId(round);
    WriteLease lease;
    ASSERT_TRUE(r->BeginWrite(ns, key, kLayout.PayloadLen(), &lease).ok());
    WriteToken token;
    ASSERT_TRUE(ExportWriteToken(*r, lease, &token).ok());
    ASSERT_TRUE(FillPart(r.get(), token, kLayout, 0, kv.pages(ids)).ok());
    if (round == 0) {
      ASSERT_TRUE(FillPart(r.get(), token, kLayout, 1, kv.pages(ids)).ok());
    }
    Status s = CommitPartedWrite(r.get(), &lease, kLayout);
    if (round == 0) {
      ASSERT_TRUE(s.ok()) << s.ToString();
      ASSERT_TRUE(r->Drop(ns, key).ok());  // the slot goes back, with its table
    } else {
      EXPECT_TRUE(s.IsCorruption()) << s.ToString();
      EXPECT_FALSE(lease.open());
      EXPECT_FALSE(r->Lookup(ns, key).ok());
    }
  }
  // The freed slot is usable again.
  std::vector<uint8_t> d(64, 1);
  EXPECT_TRUE(r->Store(ns, BlockKey::FromId(9), d.data(), d.size()).ok());
}

TEST(DelegateTest, FillAfterTheReservationWasAbortedIsRefused) {
  ScratchRegion sr("aborted");
  auto r = MustOpen(sr.path(), TestOptions(8 << 20, kLayout.PayloadLen()));
  const NamespaceId ns = Ns(r.get());
  WriteLease lease;
  ASSERT_TRUE(r->BeginWrite(ns, BlockKey::FromId(1), kLayout.PayloadLen(), &lease).ok());
  WriteToken token;
  ASSERT_TRUE(ExportWriteToken(*r, lease, &token).ok());
  r->AbortWrite(&lease);
  Kv kv(1);
  const int32_t ids[kPerChunk] = {0, 1, 2, 3};
  EXPECT_TRUE(FillPart(r.get(), token, kLayout, 0, kv.pages(ids)).IsNotFound());
  WriteToken other = token;
  other.format_epoch ^= 1;
  EXPECT_TRUE(FillPart(r.get(), other, kLayout, 0, kv.pages(ids)).IsInvalidArgument());
  const int32_t bad[kPerChunk] = {0, 1, 2, kBlocks};
  EXPECT_TRUE(FillPart(r.get(), token, kLayout, 0, kv.pages(bad)).IsInvalidArgument());
}

// A damaged byte in part 1 fails part 1's load (and drops the slot) but the
// check of part 0 does not read part 1.
TEST(DelegateTest, CorruptPartFailsItsOwnLoadOnly) {
  ScratchRegion sr("corrupt");
  auto r = MustOpen(sr.path(), TestOptions(8 << 20, kLayout.PayloadLen()));
  const NamespaceId ns = Ns(r.get());
  const BlockKey key = BlockKey::FromId(3);
  WriteLease lease;
  ASSERT_TRUE(r->BeginWrite(ns, key, kLayout.PayloadLen(), &lease).ok());
  WriteToken token;
  ASSERT_TRUE(ExportWriteToken(*r, lease, &token).ok());
  Kv kv(1);
  const int32_t ids[kPerChunk] = {0, 1, 2, 3};
  ASSERT_TRUE(FillPart(r.get(), token, kLayout, 0, kv.pages(ids)).ok());
  ASSERT_TRUE(FillPart(r.get(), token, kLayout, 1, kv.pages(ids)).ok());
  ASSERT_TRUE(CommitPartedWrite(r.get(), &lease, kLayout).ok());
  auto* impl = static_cast<internal::RegionImpl*>(r.get());
  const int64_t slot = impl->FindReadySlot(ns, key);
  ASSERT_GE(slot, 0);
  impl->EntryData(slot)[kLayout.part_len + 17] ^= 0x40;
  Kv got(2);
  EXPECT_TRUE(LoadPart(r.get(), ns, key, kLayout, 0, got.pages(ids)).ok());
  EXPECT_TRUE(LoadPart(r.get(), ns, key, kLayout, 1, got.pages(ids)).IsCorruption());
  EXPECT_FALSE(r->Lookup(ns, key).ok()) << "a corrupt slot is dropped";
  EXPECT_EQ(r->ProcessCounters()[Counter::kCrcFailures], 1u);
}

// The split form (BeginFillPart/EndFillPart, BeginLoadPart/EndLoadPart), as
// the GPU path uses it: the caller copies and checksums; the result is the
// same slot FillPart makes, readable by LoadPart, and a reader's copy whose
// CRC does not match is refused and the slot dropped.
TEST(DelegateTest, SplitFillAndLoadMatchTheCopyingForm) {
  ScratchRegion sr("parted-split");
  const RegionOptions o = TestOptions(8 << 20, kLayout.PayloadLen());
  auto r = MustOpen(sr.path(), o);
  const NamespaceId ns = Ns(r.get());
  const BlockKey key = BlockKey::FromId(9);
  WriteLease lease;
  ASSERT_TRUE(r->BeginWrite(ns, key, kLayout.PayloadLen(), &lease).ok());
  WriteToken token;
  ASSERT_TRUE(ExportWriteToken(*r, lease, &token).ok());
  // Part 0 by the copying form, part 1 by the split form with a caller copy
  // of only part of part_len (the rest is padding EndFillPart writes).
  const int32_t ids[kPerChunk] = {3, 9, 4, 0};
  Kv kv0(200), kv1(201);
  ASSERT_TRUE(FillPart(r.get(), token, kLayout, 0, kv0.pages(ids)).ok());
  uint8_t* dst = nullptr;
  ASSERT_TRUE(BeginFillPart(r.get(), token, kLayout, 1, &dst).ok());
  std::vector<uint8_t> src(kTensors * kPerChunk * kPage);
  for (uint32_t t = 0, off = 0; t < kTensors; ++t)
    for (uint32_t j = 0; j < kPerChunk; ++j, off += kPage)
      std::memcpy(src.data() + off, kv1.page(t, ids[j]), kPage);
  std::memset(dst + src.size(), 0xAB, kLayout.part_len - src.size());  // stale bytes: padded over
  std::memcpy(dst, src.data(), src.size());
  EXPECT_TRUE(EndFillPart(r.get(), token, kLayout, 1, kLayout.part_len + 1, 0).IsInvalidArgument());
  ASSERT_TRUE(
      EndFillPart(r.get(), token, kLayout, 1, src.size(), internal::Crc32c(src.data(), src.size()))
          .ok());
  ASSERT_TRUE(CommitPartedWrite(r.get(), &lease, kLayout).ok());

  // LoadPart reads the split-filled part.
  Kv got(7);
  const int32_t back[kPerChunk] = {10, 11, 12, 13};
  ASSERT_TRUE(LoadPart(r.get(), ns, key, kLayout, 1, got.pages(back)).ok());
  for (uint32_t t = 0; t < kTensors; ++t)
    for (uint32_t j = 0; j < kPerChunk; ++j)
      EXPECT_EQ(std::memcmp(got.page(t, back[j]), kv1.page(t, ids[j]), kPage), 0);

  // The split reader: a correct CRC passes, and names the writer.
  ReadLease rl;
  const uint8_t* part = nullptr;
  ASSERT_TRUE(BeginLoadPart(r.get(), ns, key, kLayout, 0, &rl, &part).ok());
  std::vector<uint8_t> copy(part, part + src.size());
  LoadInfo info;
  ASSERT_TRUE(EndLoadPart(r.get(), &rl, kLayout, 0, copy.size(),
                          internal::Crc32c(copy.data(), copy.size()), &info)
                  .ok());
  EXPECT_EQ(info.len, copy.size());
  EXPECT_FALSE(rl.open());
  // A wrong CRC (a copy that did not land as read) is kCorruption and the
  // slot is gone for everyone.
  ASSERT_TRUE(BeginLoadPart(r.get(), ns, key, kLayout, 0, &rl, &part).ok());
  Status bad = EndLoadPart(r.get(), &rl, kLayout, 0, copy.size(),
                           internal::Crc32c(copy.data(), copy.size()) ^ 1u);
  EXPECT_TRUE(bad.IsCorruption()) << bad.ToString();
  EXPECT_TRUE(r->Lookup(ns, key).IsNotFound());
  // EndLoadPart without a lease is an error, not a crash.
  EXPECT_TRUE(EndLoadPart(r.get(), &rl, kLayout, 0, 0, 0).IsInvalidArgument());
}

// A split fill whose reservation is lost between Begin and End reports it.
TEST(DelegateTest, SplitFillNoticesALostReservation) {
  ScratchRegion sr("parted-split-lost");
  const RegionOptions o = TestOptions(8 << 20, kLayout.PayloadLen());
  auto r = MustOpen(sr.path(), o);
  const NamespaceId ns = Ns(r.get());
  WriteLease lease;
  ASSERT_TRUE(r->BeginWrite(ns, BlockKey::FromId(10), kLayout.PayloadLen(), &lease).ok());
  WriteToken token;
  ASSERT_TRUE(ExportWriteToken(*r, lease, &token).ok());
  uint8_t* dst = nullptr;
  ASSERT_TRUE(BeginFillPart(r.get(), token, kLayout, 0, &dst).ok());
  r->AbortWrite(&lease);
  EXPECT_TRUE(EndFillPart(r.get(), token, kLayout, 0, 0, 0).IsNotFound());
  EXPECT_TRUE(BeginFillPart(r.get(), token, kLayout, 0, &dst).IsNotFound());
}

// A reservation of `key` whose entry's index, damaged after its token was
// exported, names the data slot of `other`, a block stored just before
// (bytes `ob`, FillPattern(pattern)): what a filler must never write into.
struct DamagedIndex {
  NamespaceId ns = 0;
  std::vector<uint8_t> ob;
  uint32_t od = 0;   // the other block's data slot
  uint32_t own = 0;  // the reservation's own data slot
  WriteLease lease;
  WriteToken token;
  std::atomic<uint32_t>* index = nullptr;  // the reserved entry's data slot index
};
void ReserveOverADamagedIndex(Region* r, const BlockKey& other, const BlockKey& key,
                              uint64_t pattern, DamagedIndex* d) {
  d->ns = Ns(r);
  auto* impl = static_cast<internal::RegionImpl*>(r);
  d->ob.resize(kLayout.PayloadLen());
  FillPattern(pattern, d->ob.data(), d->ob.size());
  ASSERT_TRUE(r->Store(d->ns, other, d->ob.data(), d->ob.size()).ok());
  const int64_t oe = impl->FindReadySlot(d->ns, other);
  ASSERT_GE(oe, 0);
  d->od = impl->Meta(static_cast<uint64_t>(oe)).data.load();
  ASSERT_TRUE(r->BeginWrite(d->ns, key, kLayout.PayloadLen(), &d->lease).ok());
  ASSERT_TRUE(ExportWriteToken(*r, d->lease, &d->token).ok());
  EXPECT_EQ(TokenPayloadLen(d->token), kLayout.PayloadLen());
  d->index = &impl->Meta(d->token.slot).data;
  d->own = d->index->load();
  ASSERT_NE(d->own, d->od);
  EXPECT_EQ(TokenDataSlot(d->token), d->own);
  d->index->store(d->od);  // damage: the reservation's index names the other block's data slot
}

// Layout 5: a damaged data slot index on the reserved entry (here: another
// block's data slot) sent the fillers' bytes into that block (its loads
// then failed the CRC, and it was dropped). The token carries the
// reservation's data slot, which its data word confirms: the fillers write
// there, the other block stays exact, and (the index repaired) the parted
// block reads back as filled.
TEST(DelegateTest, FillersWriteTheTokensDataSlotNotADamagedIndex) {
  ScratchRegion sr("parted-index");
  auto r = MustOpen(sr.path(), TestOptions(8 << 20, kLayout.PayloadLen()));
  ASSERT_EQ(r->info().config.coherence, CoherenceMode::kHardware);
  const BlockKey other = BlockKey::FromId(20), key = BlockKey::FromId(21);
  DamagedIndex d;
  ASSERT_NO_FATAL_FAILURE(ReserveOverADamagedIndex(r.get(), other, key, 77, &d));
  const NamespaceId ns = d.ns;
  const std::vector<uint8_t>& ob = d.ob;
  const uint32_t od = d.od, own = d.own;
  WriteLease& lease = d.lease;
  const WriteToken& token = d.token;
  std::atomic<uint32_t>& index = *d.index;
  Kv kv0(300), kv1(301);
  const int32_t ids[kPerChunk] = {1, 5, 2, 8};
  ASSERT_TRUE(FillPart(r.get(), token, kLayout, 0, kv0.pages(ids)).ok());
  ASSERT_TRUE(FillPart(r.get(), token, kLayout, 1, kv1.pages(ids)).ok());
  std::vector<uint8_t> got(ob.size());
  ASSERT_TRUE(r->Load(ns, other, got.data(), got.size()).ok()) << "the fillers wrote into it";
  EXPECT_EQ(got, ob);
  index.store(own);
  ASSERT_TRUE(CommitPartedWrite(r.get(), &lease, kLayout).ok());
  Kv back(9);
  const int32_t to[kPerChunk] = {10, 11, 12, 13};
  ASSERT_TRUE(LoadPart(r.get(), ns, key, kLayout, 1, back.pages(to)).ok());
  for (uint32_t t = 0; t < kTensors; ++t)
    for (uint32_t j = 0; j < kPerChunk; ++j)
      EXPECT_EQ(std::memcmp(back.page(t, to[j]), kv1.page(t, ids[j]), kPage), 0);
  // A token whose data slot is not the reservation's is refused, not filled.
  WriteLease l2;
  ASSERT_TRUE(r->BeginWrite(ns, BlockKey::FromId(22), kLayout.PayloadLen(), &l2).ok());
  WriteToken t2;
  ASSERT_TRUE(ExportWriteToken(*r, l2, &t2).ok());
  WriteToken wrong = t2;
  wrong.len = TokenPayloadLen(t2) | (uint64_t{od} << 32);
  // (Data slot 0 is also what a token from an older build names: refused as
  // that, kInvalidArgument.)
  const Status ws = FillPart(r.get(), wrong, kLayout, 0, kv0.pages(ids));
  EXPECT_TRUE(od == 0 ? ws.IsInvalidArgument() : ws.IsNotFound()) << ws.ToString();
  wrong.len = TokenPayloadLen(t2) | (r->info().num_slots << 32);
  EXPECT_TRUE(FillPart(r.get(), wrong, kLayout, 0, kv0.pages(ids)).IsInvalidArgument());
  r->AbortWrite(&l2);
  ASSERT_TRUE(r->Load(ns, other, got.data(), got.size()).ok());
  EXPECT_EQ(got, ob);
}

// Layout 5: a token exported by a build from before tokens carried the data
// slot has zero high bits. For a reservation whose data slot is not 0 that
// is not a lost reservation (kNotFound, which a connector treats as "store
// again later") but a token this build cannot place: kInvalidArgument,
// saying where it came from and how to go on. Nothing is written; the
// reservation's own token still fills and commits, and once the reservation
// is gone the old-style token is kNotFound again.
TEST(DelegateTest, ATokenFromAnOlderBuildIsAClearErrorNotALostReservation) {
  ScratchRegion sr("parted-old-token");
  auto r = MustOpen(sr.path(), TestOptions(8 << 20, kLayout.PayloadLen()));
  ASSERT_EQ(r->info().config.coherence, CoherenceMode::kHardware);
  const NamespaceId ns = Ns(r.get());
  // A reservation on a data slot other than 0 (one that got 0 stays open,
  // so the next cannot).
  WriteLease first, lease;
  ASSERT_TRUE(r->BeginWrite(ns, BlockKey::FromId(30), kLayout.PayloadLen(), &first).ok());
  WriteLease* mine = &first;
  WriteToken token;
  ASSERT_TRUE(ExportWriteToken(*r, first, &token).ok());
  if (TokenDataSlot(token) == 0) {
    ASSERT_TRUE(r->BeginWrite(ns, BlockKey::FromId(31), kLayout.PayloadLen(), &lease).ok());
    ASSERT_TRUE(ExportWriteToken(*r, lease, &token).ok());
    mine = &lease;
  }
  ASSERT_NE(TokenDataSlot(token), 0u);
  WriteToken old = token;
  old.len = TokenPayloadLen(token);  // what an older build exported
  Kv kv0(400), kv1(401);
  const int32_t ids[kPerChunk] = {3, 0, 7, 9};
  const Status s = FillPart(r.get(), old, kLayout, 0, kv0.pages(ids));
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("older cxlkv build"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("ExportWriteToken"), std::string::npos) << s.message();
  uint8_t* dst = nullptr;
  EXPECT_TRUE(BeginFillPart(r.get(), old, kLayout, 0, &dst).IsInvalidArgument());
  EXPECT_TRUE(EndFillPart(r.get(), old, kLayout, 0, 0, 0).IsInvalidArgument());
  ASSERT_TRUE(FillPart(r.get(), token, kLayout, 0, kv0.pages(ids)).ok());
  ASSERT_TRUE(FillPart(r.get(), token, kLayout, 1, kv1.pages(ids)).ok());
  ASSERT_TRUE(CommitPartedWrite(r.get(), mine, kLayout).ok());
  EXPECT_TRUE(FillPart(r.get(), old, kLayout, 0, kv0.pages(ids)).IsNotFound());
  if (first.open()) r->AbortWrite(&first);
}

// Layout 6 (coherence=software) likewise: fillers on the reserving host
// wrote where the reserved entry's data index (region bytes) pointed, so a
// damaged index sent their bytes into another block's data slot (here: of
// the same partition; any data slot of the region passed). Its token now
// carries the reservation's data slot too, and a fill goes there only while
// the entry is the reservation's, the slot lies in its write partition and
// the index names it (no data words: the holder's free list is its
// process's memory), so damage or a wrong token is refused, never filled.
TEST(DelegateTest, SoftwareModeFillersNeverWriteWhereADamagedIndexPoints) {
  CXLKV_NEED_VISIBILITY();
  ScratchRegion sr("parted-sw");
  auto r = MustOpen(sr.path(), test::SoftwareOptions(8 << 20, kLayout.PayloadLen(), 2, 0));
  ASSERT_EQ(r->info().config.coherence, CoherenceMode::kSoftware);
  const BlockKey other = BlockKey::FromId(30), key = BlockKey::FromId(31);
  DamagedIndex d;
  ASSERT_NO_FATAL_FAILURE(ReserveOverADamagedIndex(r.get(), other, key, 78, &d));
  const NamespaceId ns = d.ns;
  const std::vector<uint8_t>& ob = d.ob;
  const uint32_t od = d.od, own = d.own;
  WriteLease& lease = d.lease;
  const WriteToken& token = d.token;
  std::atomic<uint32_t>& index = *d.index;
  Kv kv0(310), kv1(311);
  const int32_t ids[kPerChunk] = {3, 0, 7, 9};
  EXPECT_FALSE(FillPart(r.get(), token, kLayout, 0, kv0.pages(ids)).ok());
  std::vector<uint8_t> got(ob.size());
  ASSERT_TRUE(r->Load(ns, other, got.data(), got.size()).ok()) << "the fillers wrote into it";
  EXPECT_EQ(got, ob);
  index.store(own);
  ASSERT_TRUE(FillPart(r.get(), token, kLayout, 0, kv0.pages(ids)).ok());
  ASSERT_TRUE(FillPart(r.get(), token, kLayout, 1, kv1.pages(ids)).ok());
  ASSERT_TRUE(CommitPartedWrite(r.get(), &lease, kLayout).ok());
  Kv back(19);
  const int32_t to[kPerChunk] = {4, 5, 6, 7};
  ASSERT_TRUE(LoadPart(r.get(), ns, key, kLayout, 1, back.pages(to)).ok());
  for (uint32_t t = 0; t < kTensors; ++t)
    for (uint32_t j = 0; j < kPerChunk; ++j)
      EXPECT_EQ(std::memcmp(back.page(t, to[j]), kv1.page(t, ids[j]), kPage), 0);
  // A token naming another data slot than the reservation's is refused.
  WriteLease l2;
  ASSERT_TRUE(r->BeginWrite(ns, BlockKey::FromId(32), kLayout.PayloadLen(), &l2).ok());
  WriteToken t2;
  ASSERT_TRUE(ExportWriteToken(*r, l2, &t2).ok());
  WriteToken wrong = t2;
  wrong.len = TokenPayloadLen(t2) | (uint64_t{od} << 32);
  EXPECT_FALSE(FillPart(r.get(), wrong, kLayout, 0, kv0.pages(ids)).ok());
  wrong.len = TokenPayloadLen(t2) | (r->info().num_slots << 32);
  EXPECT_TRUE(FillPart(r.get(), wrong, kLayout, 0, kv0.pages(ids)).IsInvalidArgument());
  // One from an older build (no data slot) says so, as layout 5's does.
  ASSERT_NE(TokenDataSlot(t2), 0u);
  wrong.len = TokenPayloadLen(t2);
  const Status old = FillPart(r.get(), wrong, kLayout, 0, kv0.pages(ids));
  EXPECT_TRUE(old.IsInvalidArgument()) << old.ToString();
  EXPECT_NE(old.message().find("older cxlkv build"), std::string::npos) << old.message();
  r->AbortWrite(&l2);
  ASSERT_TRUE(r->Load(ns, other, got.data(), got.size()).ok());
  EXPECT_EQ(got, ob);
}

}  // namespace
}  // namespace cxlkv
