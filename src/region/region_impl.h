// Copyright cxlkv authors.
//
// RegionImpl: the implementation behind cxlkv::Region. Split by phase:
// open.cc (format-or-attach, validation), registry.cc (participants,
// heartbeat, liveness, reclaim), namespaces.cc, directory.cc (hashing, find,
// pins), write.cc, read.cc, maintenance.cc.
#ifndef CXLKV_SRC_REGION_REGION_IMPL_H_
#define CXLKV_SRC_REGION_REGION_IMPL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "crc32c.h"
#include "cxlkv/region.h"
#include "geometry.h"
#include "layout.h"
#include "mapping.h"
#include "region_internal.h"
#include "software_state.h"
#include "visibility/visibility.h"

namespace cxlkv::internal {

// Where a key can live: two candidate sets ("two choices"), and the
// fingerprint stored in the set's tag line.
struct KeyPlace {
  uint64_t set[2];
  uint32_t tag;
};

// The descriptor fields of a NamespaceRecord as stored (bytes [8, 232) of
// the record), for hashing and comparing.
struct NamespaceImage {
  uint32_t tp_rank;
  uint32_t kv_group;
  char model[128];
  char dtype[24];
  char kv_layout[64];
};
static_assert(sizeof(NamespaceImage) == 224 && offsetof(NamespaceRecord, tp_rank) == 8 &&
              offsetof(NamespaceRecord, desc_crc) == 8 + sizeof(NamespaceImage));
NamespaceImage MakeNamespaceImage(const NamespaceDesc& d);
// kInvalidArgument for over-long fields or NUL bytes.
Status CheckNamespaceDesc(const NamespaceDesc& d);

// Whether a region's first 4 KiB (a private copy of kSuperblockBytes; its
// magic not this build's) show a format of ours begun and not finished: a
// non-zero format lock word, a zero magic word, and after the first three
// words (magic, lock, progress) nothing, or the config JSON the formatter
// writes before the header (the header may then be half copied). Anything
// else under a lock word is foreign bytes, never formatted over (open.cc;
// the probe classifies with it too). Eight foreign bytes exactly where the
// lock word goes, over a blank rest, cannot be told from such a format.
bool FormatBegunHere(const uint8_t* head);

// The header image and config JSON a format writes (open.cc), for layout
// version 2 (partitions 0) or 3 (software mode, partitions 1..16).
Status BuildHeader(const Geometry& g, const RegionConfig& c, uint32_t layout_version,
                   uint32_t partitions, Superblock* out, std::string* json_text);
// CRC32C of a superblock's checksummed bytes (Superblock::header_crc).
uint32_t HeaderCrc(const Superblock& sb);
// The error of an opener other than partition 0's holder that finds an
// intact coherence=software header without its magic word (open.cc).
std::string SwMagicNotSetText(const std::string& path, uint32_t partitions);

// Recency of a slot's block for eviction (SlotMeta::last_use): a coarse
// wall clock in milliseconds, modulo 2^32 (directory.cc). Thread-safe; no
// syscall.
uint32_t RecencyTick();
// A read refreshes last_use only when it is at least this old (ms).
constexpr uint32_t kTouchGranularityMs = 16;

// Eviction rank of a READY block among a store's candidates (the larger
// goes first; docs/region_format.md, "Eviction"): its age since last use,
// scaled up by its depth in its prefix chain. A prefix is served only up to
// its first missing chunk, so a chain's chunks, stored and read together
// (equal ages to within the copy time), must leave tail first: a lost tail
// chunk costs one chunk, a lost head the whole chain. A chunk at depth d
// counts as (kDepthWeightBase + d) / kDepthWeightBase times its age, so a
// deep chunk goes before a shallower one at most about twice its age
// ((kDepthWeightBase + kDepthWeightCap) / kDepthWeightBase), and never
// before one older than that. kDepthWeightBase: bench/eviction/evaluate.py
// (policies.py's model) on both traces: 16 and 64 lost hits to plain LRU at
// 40 % of the working set, 1024 at 5 %.
// A block used since its store (a hit, or a duplicate store by a request
// that holds it) counts as 1 + uses (up to kMaxUses) times younger: a block
// that was reused is more likely reused again than one stored and never
// read (the last turn of a conversation). Both factors are measured by
// bench/eviction/evaluate.py (docs/benchmarks.md, "Eviction").
constexpr uint64_t kDepthWeightBase = 256;
constexpr uint32_t kDepthWeightCap = 255;
inline uint64_t EvictionRank(uint32_t age_ms, uint32_t depth, uint32_t uses) {
  const uint64_t d = depth < kDepthWeightCap ? depth : kDepthWeightCap;
  const uint64_t u = uses < kMaxUses ? uses : kMaxUses;
  // x 12 (divisible by 1 + every u): integers, no ties from rounding.
  return (uint64_t{age_ms} + 1) * (kDepthWeightBase + d) * 12 / (1 + u);
}

// Region::Open and RegionInternal::OpenWithVisibility (null: the CPU's own
// visibility layer where software mode needs one).
Status OpenRegion(const std::string& path, const RegionOptions& options,
                  std::unique_ptr<Visibility> visibility, std::unique_ptr<Region>* out);

// What the orphan rule does with a data word (RegionImpl::DataWordFate).
enum class DataFate : uint8_t { kKeep, kFree, kHeld };

class RegionImpl final : public Region {
 public:
  RegionImpl(std::unique_ptr<Mapping> map, const RegionOptions& options,
             std::unique_ptr<Visibility> visibility);
  ~RegionImpl() override;

  // Format-or-attach, validation, registration, prefault. Called once by
  // Region::Open before the object is handed out.
  Status Init();

  const RegionInfo& info() const override { return info_; }
  Status RegisterNamespace(const NamespaceDesc& desc, NamespaceId* id) override;

  Status Store(NamespaceId ns, const BlockKey& key, const void* data, size_t len,
               StoreOutcome* outcome, uint32_t depth) override;
  Status BeginWrite(NamespaceId ns, const BlockKey& key, size_t len, WriteLease* lease,
                    StoreOutcome* outcome, uint32_t depth) override;
  Status CommitWrite(WriteLease* lease, const uint32_t* crc32c, StoreOutcome* outcome) override;
  void AbortWrite(WriteLease* lease) override;

  Status Lookup(NamespaceId ns, const BlockKey& key) override;
  size_t LookupPrefix(NamespaceId ns, const BlockKey* keys, size_t n) override;
  Status PinPrefix(NamespaceId ns, const BlockKey* keys, size_t n, PinSet* pins) override;

  Status Load(NamespaceId ns, const BlockKey& key, void* dst, size_t capacity,
              const LoadOptions& options, LoadInfo* info) override;
  Status BeginRead(NamespaceId ns, const BlockKey& key, ReadLease* lease) override;
  Status EndRead(ReadLease* lease, const void* copied, const uint32_t* copied_crc32c) override;

  Status Drop(NamespaceId ns, const BlockKey& key) override;
  Status Verify(bool drop_corrupt, ScrubReport* report) override;
  Status Wipe(WipeReport* report) override;

  Counters ProcessCounters() const override;
  Counters RegionCounters() const override;
  std::vector<ParticipantInfo> Participants() const override;
  size_t ReapDeadParticipants() override;

  // ---- internal, for tests and tools (region_internal.h) ----
  // The bytes of data slot `slot` (REQUIRES: slot < num_slots).
  uint8_t* SlotData(uint64_t slot) const { return data_ + slot * geo_.slot_stride; }
  // The data slot index entry `entry` names (layout 5: SlotMeta::data; 4:
  // the entry itself), or -1 if the recorded index is out of range.
  int64_t EntryDataSlot(uint64_t entry) const;
  // SlotData(EntryDataSlot(entry)), or null for an out-of-range index.
  uint8_t* EntryData(uint64_t entry) const;
  // coherence=software (layout 6): the write partition of entry `slot`,
  // and whether data slot `d` lies in partition q's data slots (an entry of
  // q naming another is damage). Also for delegate.cc's fills.
  uint32_t SwPartitionOf(uint64_t slot) const {
    return static_cast<uint32_t>(slot / geo_.ways / part_sets_);
  }
  bool SwDataInPartition(uint64_t d, uint32_t q) const {
    return d < geo_.num_slots && d / part_datas_ == q;
  }
  // The data slot whose bytes start at `p` (a lease's data()).
  uint64_t DataIndexOf(const void* p) const {
    return static_cast<uint64_t>(static_cast<const uint8_t*>(p) - data_) / geo_.slot_stride;
  }
  SlotMeta& Meta(uint64_t slot) const { return meta_[slot]; }
  // Tests: the geometry, and data slot `d`'s word (layout 5).
  const Geometry& geometry() const { return geo_; }
  std::atomic<uint64_t>& DataWord(uint64_t d) const { return dwords_[d]; }
  // The orphan rule's verdict on data slot `d`'s word as it is now (the
  // census of ScanOccupancy). REQUIRES: layout 5, d < num_slots.
  DataFate DataSlotFate(uint64_t d) const {
    return DataWordFate(d, dwords_[d].load(std::memory_order_acquire));
  }
  // The orphan rule for a READY entry: whether entry `entry`, still READY
  // with word `word`, names a data slot its lease does not hold (an index
  // past the data area, or a data word that is not HELD or MOVING for
  // (entry, its generation)). A committed lease's word always is, so this
  // is damage, to the index or to that word. False for any other word, or
  // if the entry's word changed while we read (not damage: decide later).
  // The orphan sweep, the verify scrub and the inspect census share it.
  bool ReadyOffData(uint64_t entry, uint64_t word) const;
  // Slot currently READY for (ns, key), or -1.
  int64_t FindReadySlot(NamespaceId ns, const BlockKey& key) const;
  // RegionInternal::CandidateSlots.
  std::vector<uint64_t> CandidateSlots(NamespaceId ns, const BlockKey& key) const;
  // coherence=software: the visibility layer (null in hardware mode).
  Visibility* visibility() const { return soft_ ? vis_.get() : nullptr; }
  // The mapping (lifecycle.cc: scans, the SIGBUS guard's state).
  const Mapping& mapping() const { return *map_; }

 private:
  void UnpinSlots(const std::vector<uint64_t>& slots) override;

  // open.cc
  Status InitOrThrow();
  Status FormatOrWait();
  Status Format(uint64_t nonce);
  Status Validate();
  // kInvalidArgument unless the bytes a format would overwrite are zero.
  Status CheckMetadataAreaBlank() const;
  // For a format that claims no lock (coherence=software's partition 0),
  // `lock` being the format lock word it read: OK over a format of ours
  // begun (FormatBegunHere) or over blank bytes (CheckMetadataAreaBlank;
  // a file this process created is blank), else kInvalidArgument.
  Status CheckFormatTarget(uint64_t lock) const;
  Status StartPrefault();

  // registry.cc
  Status RegisterSelf();
  Status TryRegister();
  void Deregister();
  void HeartbeatLoop();
  // Frees everything participant `index` held (slots it was writing or
  // evicting, its pins, its namespace claims) and retires its counters.
  // REQUIRES: caller has moved the record to `reclaiming` (RECLAIMING by
  // us); stops as soon as the record no longer holds that word.
  void SweepParticipant(uint32_t index, uint64_t reclaiming);
  bool TryReclaim(uint32_t index, uint64_t observed_word);
  // Clears way `slot`'s tag if it still holds `tag` (a slot's new owner may
  // already have written its own).
  void ClearTag(uint64_t slot, uint32_t tag);
  uint32_t SlotTag(uint64_t slot) const;
  bool ParticipantActive(uint32_t index) const;
  // True if `index` names a registry entry that is ACTIVE or RECLAIMING:
  // slots it holds WRITING/EVICTING are its own or its reclaimer's to free.
  bool OwnerAlive(uint32_t index) const;
  // Bounded orphan sweep, run once per heartbeat: visits the next slots
  // (a whole pass per liveness timeout) and frees WRITING slots, restores
  // EVICTING ones and clears pin bits whose owner is not alive, once the
  // same word has been seen unchanged for the liveness timeout.
  void SweepOrphans();
  // Clears our pin bit on `slot` if this process holds no pin there
  // (damage: only we set our bit, under pin_mu_, with our pin count).
  void ClearStrayOwnPin(uint64_t slot);
  // True while our registry entry is still ours (not reclaimed). Checked
  // right before acting on the region as a participant.
  bool StillRegistered() const;
  // Marks this process fenced: it was judged dead; stop acting as index self_.
  void Fence();
  // Reclaims dead participants; usable before registering (reclaimer field
  // then names nobody). Returns how many were reclaimed.
  size_t ReapDead();

  // directory.cc
  KeyPlace Place(NamespaceId ns, const BlockKey& key) const;
  // Finds a slot holding (ns, key) READY or EVICTING (readable), and also
  // WRITING unless `readable_only`; returns the slot and the state word
  // observed (consistent with the key), or -1.
  int64_t Find(NamespaceId ns, const BlockKey& key, const KeyPlace& place, uint64_t* word,
               bool readable_only) const;
  bool KeyMatches(uint64_t slot, NamespaceId ns, const BlockKey& key) const;
  // Pins `slot` for this participant and confirms it still holds `word`.
  bool PinSlot(uint64_t slot, uint64_t word);
  void UnpinSlot(uint64_t slot);
  bool SlotPinned(uint64_t slot) const;
  // READY(word) -> EVICTING -> (pins clear) caller owns the slot: returns
  // true and leaves it EVICTING; false (restored) if pinned or changed, or
  // if `word` is not READY (an EVICTING word is another evictor's).
  bool TakeReadySlot(uint64_t slot, uint64_t word);
  // EVICTING(g, evictor) of an evictor that died -> READY(g, recorded writer).
  bool RestoreEvictedBlock(uint64_t slot, uint64_t evicting);
  // The block `word` found (READY or EVICTING, generation g) -> FREE
  // regardless of pins, taken from its word as it is now while that is
  // still generation g readable: for blocks that failed CRC.
  bool ForceDropSlot(uint64_t slot, uint64_t word);
  // Frees a slot this process holds as WRITING/EVICTING: checks that the
  // slot still holds `owned_word`, clears the tag (while owning it), then
  // CASes it FREE. False (nothing touched) if the slot is no longer ours.
  bool ReleaseOwnedSlot(uint64_t slot, uint64_t owned_word);
  // Takes a slot that is not ours (a dead writer's, a corrupt block) so
  // that it can be freed: CAS `word` -> WRITING(gen+1, us), then
  // ReleaseOwnedSlot. The generation bump fails every earlier reader.
  bool TakeAndFreeSlot(uint64_t slot, uint64_t word);
  // Frees entry `slot`, taken from READY by us (EVICTING word `evicting`),
  // and its data slot (layout 5). False if the entry is no longer ours.
  bool FreeTakenEntry(uint64_t slot, uint64_t evicting);
  // True while `slot` still holds `owned_word`; checked right before every
  // metadata store a writer makes.
  bool Owns(uint64_t slot, uint64_t owned_word) const {
    return meta_[slot].state.load(std::memory_order_acquire) == owned_word;
  }
  // Owner field we write into words we install: our index, or (before we
  // registered, e.g. a reclaim at open) kOwnerMask, which names nobody.
  uint32_t OwnerId() const { return self_ >= 0 ? self_index() : static_cast<uint32_t>(kOwnerMask); }
  // A use of READY block `word` in `slot`: refreshes last_use (at most once
  // per kTouchGranularityMs) and counts the use (up to kMaxUses).
  // `now`: RecencyTick(), read once for a whole prefix so that a chain's
  // chunks touched together stay equally recent.
  void Touch(uint64_t slot, uint64_t word, uint32_t now) const;
  // Sets the tag of a READY slot that lost it (damage, or a paused writer's
  // late clear), if the slot still holds `word`: a hint only, so a race
  // with the slot's reuse costs at most a miss until the next store.
  void RepairTag(uint64_t slot, uint64_t word, uint32_t tag);

  // ---- coherence=software (software.cc; docs/coherence.md) ----
  // What one slot's metadata line said, read through the visibility layer.
  struct SwMeta {
    uint64_t state = 0;
    BlockKey key;
    uint32_t ns = 0, len = 0, crc = 0, writer = 0;
    uint32_t data = 0;  // layout 6: the data slot the entry names (untrusted)
  };
  Status SwInitOrThrow();
  Status SwFormatOrWait();
  Status SwFormat(uint64_t nonce);
  Status SwRegister();
  void SwDeregister();
  void SwHeartbeatLoop();
  void SwPublishCounters();
  // The sweep of our partition (docs/coherence.md, "Recovery and reclaim"):
  // every slot WRITING, EVICTING or READY of another incarnation (an earlier
  // holder's, or a zombie's late line) becomes FREE with a new generation,
  // and each set's tag line is rewritten from its entries and flushed.
  // `attach`: the whole partition, also WRITING of our tag; else the next
  // slice of whole sets, keeping our own Stores in flight. REQUIRES:
  // sw_claim_mu_ held unless attaching.
  void SwRecoverPartition(bool attach);
  // The heartbeat's payload check of our READY blocks (a budget of bytes
  // per beat, from its own cursor): memory's bytes against the entry's CRC;
  // a block that fails is freed. Heartbeat thread only; takes sw_claim_mu_
  // per entry.
  void SwScrubPayloads();
  // True if slot word `w` of `slot` was written by the incarnation that
  // holds (or last held) the slot's partition: its owner field equals the
  // registry record's incarnation tag. `reread`: invalidate and load the
  // record (else our own partition's answers from our own word).
  bool SwWriterCurrent(uint64_t slot, uint64_t w, bool reread) const;
  // Checks our registry record (inval + load): false, and fenced, if a
  // newer incarnation of our partition exists; an older one (a zombie's
  // late line) is overwritten with ours again.
  bool SwStillOwner();
  // True for a slot of the partition we hold (not once fenced: its lines
  // are then the new holder's, and are invalidated like anyone's).
  bool SwOwnSlot(uint64_t slot) const {
    return self_ >= 0 && !fenced_.load(std::memory_order_acquire) &&
           slot / geo_.ways / part_sets_ == self_index();
  }
  // Records a use of entry `entry`'s block (READY word `w`, in data slot
  // `data`) for SW2's least-recently-used order: ours directly, another
  // partition's as a hint in our ring (SwNoteHint). Thread-safe.
  void SwTouch(uint64_t entry, uint64_t data, uint64_t w);
  // The hint channel (layout.h, "Hint rings"). SwNoteHint: a hit of ours
  // on entry `entry` (READY word `w`) of another partition goes into our
  // ring; every kHintBatch of them (and each heartbeat: SwFlushHints) the
  // ring's new slots, then its head, reach memory. SwDrainHints (holder,
  // under sw_claim_mu_): reads every other ring's new hints and counts a
  // use of each of our entries still READY at the hinted generation.
  void SwNoteHint(uint64_t entry, uint64_t w);
  void SwFlushHints();
  void SwFlushHintsLocked();  // REQUIRES: sw_hint_.mu held
  void SwDrainHints();
  void SwAttachHints();  // at attach: where each ring stands
  SwHintRingHead* SwRingHead(uint32_t q) const {
    return reinterpret_cast<SwHintRingHead*>(
        base_ + geo_.rings_off + uint64_t(q) * (sizeof(SwHintRingHead) + geo_.ring_entries * 8));
  }
  std::atomic<uint64_t>* SwRingSlots(uint32_t q) const {
    return reinterpret_cast<std::atomic<uint64_t>*>(SwRingHead(q) + 1);
  }
  // SW2b: frees our READY entry `entry` (word `w`) to take its data slot:
  // the entry's line says FREE(g+1) and reaches memory, then a store fence,
  // before any byte of the data slot changes. REQUIRES: sw_claim_mu_ held.
  void SwEvictEntry(uint64_t entry, uint64_t w);
  void SwSets(uint32_t partition, NamespaceId ns, const BlockKey& key, uint64_t set[2],
              uint32_t* tag) const;
  SwMeta SwReadMeta(uint64_t slot, bool fresh) const;
  // Finds (ns, key) READY (or, unless readable_only, WRITING) in
  // `partition`, or in every partition (own first) when partition < 0.
  int64_t SwFind(NamespaceId ns, const BlockKey& key, bool readable_only, int32_t partition,
                 SwMeta* meta) const;
  bool SwNamespaceReady(NamespaceId ns) const;
  // Another partition's block at `slot`, READY word `w`, failed its CRC or
  // names bytes it cannot have (sw_bad_); whether it did. Thread-safe.
  void SwNoteCorrupt(uint64_t slot, uint64_t w) const;
  bool SwKnownCorrupt(uint64_t slot, uint64_t w) const;
  // Own entry: if it still holds `word`, clear its tag, make it FREE and
  // give its data slot back to our free list.
  bool SwFreeOwn(uint64_t slot, uint64_t word);
  Status SwCheckWritable(StoreOutcome* outcome) const;
  Status SwRegisterNamespace(const NamespaceDesc& desc, NamespaceId* id);
  // raw_fill: the caller fills lease->data() itself (BeginWrite), not
  // through the visibility layer (Store).
  Status SwBeginWrite(NamespaceId ns, const BlockKey& key, size_t len, WriteLease* lease,
                      StoreOutcome* outcome, bool raw_fill, uint32_t depth);
  Status SwCommitWrite(WriteLease* lease, const uint32_t* crc32c, StoreOutcome* outcome);
  void SwAbortWrite(WriteLease* lease);
  Status SwStore(NamespaceId ns, const BlockKey& key, const void* data, size_t len,
                 StoreOutcome* outcome, uint32_t depth);
  Status SwLoad(NamespaceId ns, const BlockKey& key, void* dst, size_t capacity, LoadInfo* info);
  Status SwBeginRead(NamespaceId ns, const BlockKey& key, ReadLease* lease);
  Status SwEndRead(ReadLease* lease, const void* copied, const uint32_t* copied_crc32c);
  Status SwDrop(NamespaceId ns, const BlockKey& key);
  Status SwVerify(bool drop_corrupt, ScrubReport* report);
  Status SwWipe(WipeReport* report);
  Counters SwRegionCounters() const;
  std::vector<ParticipantInfo> SwParticipants() const;

  // write.cc / read.cc
  // Claims an entry among place's ways: a FREE one, else the least recently
  // used unpinned READY one. False if none; then, if a READY copy of (ns, key) without its
  // tag was seen first, *ready_copy is its slot (*word its word), else -1.
  // Layout 5: an entry evicted from the key's sets comes with its data slot
  // (*data, MOVING word *dword); a FREE entry with none (*data = -1).
  bool ClaimSlot(NamespaceId ns, const BlockKey& key, const KeyPlace& place, uint64_t* slot,
                 uint64_t* word, bool* evicted, int64_t* ready_copy, int64_t* data,
                 uint64_t* dword);
  // One try of ClaimSlot; *raced: pass 2 found a candidate changed since
  // its scan (taken by another process), so a retry may find a free entry.
  bool ClaimSlotOnce(NamespaceId ns, const BlockKey& key, const KeyPlace& place, uint64_t* slot,
                     uint64_t* word, bool* evicted, int64_t* ready_copy, int64_t* data,
                     uint64_t* dword, bool* raced);
  Status CheckWritable() const;
  // The one answer for "this participant was fenced": counts
  // store_failed_fenced region-wide, sets kFenced, returns kBusy.
  Status Fenced(StoreOutcome* outcome);
  // The data slot READY entry `slot` (observed `word`) names, read after
  // the pin; -1 with *bad set (a miss, or kCorruption for an index past the
  // data area) if it names none.
  int64_t ReadDataSlot(uint64_t slot, uint64_t word, Status* bad);
  // Our slot stopped holding our WRITING word while we wrote it.
  Status LostSlot(StoreOutcome* outcome);

  void Count(Counter c, uint64_t n = 1) const {
    my_counters_.load(std::memory_order_relaxed)
        ->v[static_cast<uint32_t>(c)]
        .fetch_add(n, std::memory_order_relaxed);
  }
  // Reclaim work done before we registered is credited to the region.
  void CountReclaim(Counter c) const {
    if (self_ >= 0)
      Count(c);
    else
      retired_->v[static_cast<uint32_t>(c)].fetch_add(1, std::memory_order_relaxed);
  }
  std::atomic<uint64_t>* PinWords(uint64_t slot) const { return pins_ + slot * geo_.pin_words; }

  // ---- layout 5: data slots and eviction (data.cc, victims.cc) ----
  // An entry's slot indices below are index entries; `data` ones are data
  // slots. Word states: layout.h, DataState.
  // A FREE data slot -> MOVING(entry, egen), for the entry we hold WRITING
  // at generation egen: scans from this process's cursor, the whole region
  // until a whole scan found none, then kFreeScanWords words per call.
  // False if none of them was FREE.
  bool ClaimDataSlot(uint64_t entry, uint64_t egen, uint64_t* data, uint64_t* dword);
  // Takes the data slot of victim entry `victim` (READY `vword`) for our
  // entry `entry` (WRITING at egen): victim -> EVICTING (false, restored,
  // if pinned or changed, or if its data index or word is not its lease's:
  // damage), the victim entry -> FREE (tag cleared), then its data word
  // HELD/MOVING(victim, its gen) -> MOVING(entry, egen). False after the
  // victim was freed if that word names another lease by then.
  bool MoveDataSlot(uint64_t victim, uint64_t vword, uint64_t entry, uint64_t egen, uint64_t* data,
                    uint64_t* dword);
  // Data slot `data`'s word, HELD or MOVING for lease (from, from_gen) ->
  // MOVING(entry, egen). False if it names any other lease.
  bool DetachDataSlot(uint64_t data, uint64_t from, uint64_t from_gen, uint64_t entry,
                      uint64_t egen, uint64_t* dword);
  // `dword` (HELD or MOVING) -> FREE if data slot `data` still holds it:
  // an aborted write's, a lost lease's.
  bool ReleaseDataSlot(uint64_t data, uint64_t dword);
  // Data slot `data` -> FREE if its word is lease (entry, egen)'s, HELD or
  // MOVING: a dropped or reclaimed block's, after its entry left READY.
  bool FreeLeaseData(uint64_t data, uint64_t entry, uint64_t egen);
  // A committed write's data slot: MOVING(lease) -> HELD(lease) (after its
  // entry is READY, so a dead writer's MOVING slot is found READY).
  void SettleDataSlot(uint64_t data, uint64_t dword);
  // The orphan rule for data slot `data`'s word `w` (layout.h): kFree if
  // its lease is over (its entry FREE or at another generation), or the
  // word is damage (an impossible state or entry, or a committed lease
  // whose entry names another data slot); kHeld if MOVING for a lease
  // whose entry is READY at that generation and names `data`.
  DataFate DataWordFate(uint64_t data, uint64_t w) const;
  // Applies DataWordFate to data slot `data` if it still holds `w`. True
  // if it freed it.
  bool SettleDataWord(uint64_t data, uint64_t w);
  // The orphan rule over every data word (a reclaim, after its entry sweep;
  // a wipe). Returns how many were freed.
  uint64_t SettleOrphanedData();
  // The same for the given data slots (slot -> the word seen unchanged for
  // a liveness timeout: the orphan sweep).
  uint64_t SettleMovingSlots(std::unordered_map<uint64_t, uint64_t> orphans);
  // The next victim entry of this process's queue (refilled by
  // RefillVictims) that still holds the READY word and last use it was
  // queued with: *entry, *word. False if the region has no READY unpinned
  // entry.
  bool NextVictim(uint64_t* entry, uint64_t* word);
  // Advances the sweep over the index by up to `budget` entries (0: to the
  // end of the pass), keeping the kVictimQueue most evictable READY
  // unpinned entries; a finished pass becomes the queue.
  // REQUIRES: victim_mu_ held.
  void RefillVictims(uint64_t budget);
  // Our data slot for WRITING entry `slot`: the data slot it came with
  // (*data already set, evicted from its sets), else a FREE one, else the
  // next victim's. False: the region is full of pinned or in-flight blocks.
  bool AcquireDataSlot(uint64_t entry, uint64_t egen, uint64_t* data, uint64_t* dword,
                       bool* evicted);
  // The last_use a store at `depth` records: now, or for a deeper chunk of
  // the chain this thread stored last, that chain's tick (eviction then
  // sees a request's chunks as equally recent and takes the deepest first).
  uint32_t StoreTick(uint32_t depth) const;
  uint32_t self_index() const { return static_cast<uint32_t>(self_); }

  // ---- immutable after Init ----
  std::unique_ptr<Mapping> map_;
  const RegionOptions opts_;
  RegionInfo info_;
  Geometry geo_;
  uint8_t* base_ = nullptr;
  Superblock* sb_ = nullptr;
  ParticipantRecord* parts_ = nullptr;
  NamespaceRecord* nss_ = nullptr;
  CounterBlock* retired_ = nullptr;
  SetTags* tags_ = nullptr;
  SlotMeta* meta_ = nullptr;
  std::atomic<uint64_t>* pins_ = nullptr;
  uint8_t* data_ = nullptr;
  int32_t self_ = -1;                 // participant index, -1: observer
  uint64_t self_word_ = 0;            // our ACTIVE state word
  CounterBlock observer_counters_{};  // counters of an observer (not in the region)
  // Our counter block: in the region while we are a participant, the
  // process-local one otherwise (observer, or fenced after being reclaimed).
  std::atomic<CounterBlock*> my_counters_{&observer_counters_};

  // ---- heartbeat thread ----
  std::thread heartbeat_;
  std::mutex hb_mu_;
  std::condition_variable hb_cv_;
  bool stop_ = false;                // guarded by hb_mu_
  std::atomic<bool> fenced_{false};  // we were judged dead and reclaimed
  std::thread prefault_;

  // ---- liveness observations (guarded by obs_mu_) ----
  struct Observation {
    uint64_t word = 0;
    uint64_t heartbeat = 0;
    std::chrono::steady_clock::time_point since{};
    bool valid = false;
  };
  mutable std::mutex obs_mu_;
  std::vector<Observation> obs_;

  // ---- this process's pin reference counts (striped mutexes) ----
  static constexpr int kPinStripes = 32;
  mutable std::mutex pin_mu_[kPinStripes];
  std::unordered_map<uint64_t, uint32_t> pin_counts_[kPinStripes];

  mutable std::atomic<uint32_t> clock_hand_{0};  // where eviction scans start

  // ---- layout 5 (null/empty in layout 4) ----
  std::atomic<uint64_t>* dwords_ = nullptr;  // one DataState word per data slot
  std::atomic<uint64_t> free_cursor_{0};     // where ClaimDataSlot looks next
  std::atomic<bool> data_full_{false};       // a whole ClaimDataSlot scan found none FREE
  struct Victim {
    int32_t rel;     // last_use - the pass's reference tick: smaller is older
    uint32_t depth;  // deeper goes first among equally old
    uint32_t last_use;
    uint64_t entry;
    uint64_t word;
  };
  std::mutex victim_mu_;
  std::vector<Victim> victims_;   // guarded by victim_mu_: most evictable at the back
  std::vector<Victim> building_;  // guarded by victim_mu_: this pass's heap
  uint64_t sweep_cursor_ = 0;     // guarded by victim_mu_
  uint32_t sweep_ref_ = 0;        // guarded by victim_mu_: the pass's reference tick

  // ---- coherence=software ----
  std::unique_ptr<Visibility> vis_;  // the CPU's, or a test's (emulator)
  bool soft_ = false;
  uint32_t partitions_ = 0;
  uint64_t part_sets_ = 0;      // index sets per partition
  std::mutex sw_claim_mu_;      // serialises this process's slot claims
  uint64_t sw_sweep_next_ = 0;  // guarded by sw_claim_mu_: the periodic sweep's cursor
  Counters sw_counter_base_{};  // our record's counters before we attached
  uint64_t part_datas_ = 0;     // data slots per partition (layout 6)
  // Our partition's free data slots and eviction order (software_state.h).
  std::unique_ptr<SwHolderState> sw_hold_;
  mutable SwHintState sw_hint_;
  mutable std::mutex sw_ns_mu_;
  mutable std::vector<bool> sw_ns_ok_;  // namespace ids seen READY and intact
  // SwScrubPayloads's cursor and its copy of a payload (heartbeat thread only).
  uint64_t sw_scrub_next_ = 0;
  std::vector<uint8_t> sw_scrub_buf_;
  // Blocks of other partitions this process found damaged (entry -> its
  // word then; SwNoteCorrupt): SwFind passes them over, so a key whose
  // damaged copy nobody may drop (its partition's holder's job, and nobody
  // may hold it) is stored and read elsewhere. A new word is a new block.
  mutable std::mutex sw_bad_mu_;
  mutable std::unordered_map<uint64_t, uint64_t> sw_bad_;  // guarded by sw_bad_mu_
  mutable std::atomic<bool> sw_any_bad_{false};

  // ---- orphan sweep (heartbeat thread only) ----
  struct OrphanObs {
    uint64_t word = 0;  // slot word, or the pin word's orphan bits
    std::chrono::steady_clock::time_point since{};
  };
  uint64_t orphan_cursor_ = 0;
  std::unordered_map<uint64_t, OrphanObs> orphan_slots_;  // slot -> observation
  std::unordered_map<uint64_t, OrphanObs> orphan_pins_;   // slot*pin_words+k -> observation
  std::unordered_map<uint64_t, OrphanObs> orphan_data_;   // data slot -> observation
};

// True if a slot that held READY/EVICTING word `before` still holds the same
// block: same generation, and not yet taken for writing.
inline bool SameReadableBlock(uint64_t before, uint64_t after) {
  const uint8_t s = WordState(after);
  return WordGen(after) == WordGen(before) && (s == kReady || s == kEvicting);
}

// The checked CRC of a slot: CRC32C of the payload (`payload_crc`, computed
// by whoever holds the bytes: the CPU, or the GPU on the DMA path) continued
// over the slot's identity (layout.h, SlotCrcTrailer).
inline uint32_t BindSlotCrc(uint32_t payload_crc, uint64_t generation, NamespaceId ns,
                            const BlockKey& key, uint64_t len) {
  const SlotCrcTrailer t{generation, key.hi, key.lo, ns, static_cast<uint32_t>(len)};
  return Crc32cFinish(Crc32cExtend(payload_crc ^ 0xFFFFFFFFu, &t, sizeof t));
}
// Layout 5: the same bound also to the data slot the entry names
// (SlotCrcTrailerV5). `data` < 0: layout 4's trailer.
inline uint32_t BindSlotCrc(uint32_t payload_crc, uint64_t generation, NamespaceId ns,
                            const BlockKey& key, uint64_t len, int64_t data) {
  if (data < 0) return BindSlotCrc(payload_crc, generation, ns, key, len);
  const SlotCrcTrailerV5 t{
      {generation, key.hi, key.lo, ns, static_cast<uint32_t>(len)}, static_cast<uint32_t>(data), 0};
  return Crc32cFinish(Crc32cExtend(payload_crc ^ 0xFFFFFFFFu, &t, sizeof t));
}

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_REGION_REGION_IMPL_H_
