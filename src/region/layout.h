// Copyright cxlkv authors.
//
// The on-media ABI of a region (layout version 5 for coherence=hardware,
// 6 for coherence=software). Everything a process reads from the region is
// untrusted: attach validates the whole superblock and recomputes the
// geometry before touching anything else (geometry.cc). Prose description:
// docs/region_format.md.
//
// Version 5 decouples the directory from where data lives: an index entry
// (SlotMeta) names its data slot (SlotMeta::data), so eviction may take the
// region's least recently used block wherever it is, not one of the 32
// ways a key may live in (issue 24).
//
//   [superblock 4 KiB: Superblock | config JSON]
//   [participant registry: max_participants x ParticipantRecord]
//   [namespace table: kNamespaceEntries x NamespaceRecord]
//   [retired counters: one CounterBlock]
//   [set tags: num_sets x SetTags]            one cache line per index set
//   [index: num_entries x SlotMeta]           one cache line per entry
//   [pins: num_entries x pin_words x u64]     bit p = participant p pins it
//   [data words: num_slots x u64]             version 5 only: DataState
//   [pad to data_align]
//   [data: num_slots x slot_stride]
//
// Version 5: num_entries = 2 x num_slots, num_sets = num_entries / ways.
// Version 6 (coherence=software): version 5's index and data split inside
// each write partition, no data words; in their place one hint ring per
// partition (SwHintRing, at dwords_off). Partition p owns index sets
// [p x S, (p+1) x S) (S = num_sets / partitions) and data slots
// [p x D, (p+1) x D) (D = num_slots / partitions = S x ways / 2).
#ifndef CXLKV_SRC_REGION_LAYOUT_H_
#define CXLKV_SRC_REGION_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "cxlkv/stats.h"

namespace cxlkv::internal {

inline constexpr uint64_t kMagic = 0x31474552564B4C43ull;  // "CLKVREG1" little-endian
// 2: the slot CRC binds the payload to the slot's identity (SlotCrcTrailer)
//    and SlotMeta records the writer. Refused since version 5 (a key's
//    block could only live in its 32 ways); `cxlkv format --force` makes a
//    version 5 region of it (its blocks are lost: a cache).
inline constexpr uint32_t kLayoutVersionHardwareV2 = 2;
// 5: coherence=hardware with the index decoupled from the data slots: 2 x
//    num_slots index entries, each naming its data slot (SlotMeta::data),
//    one DataState word per data slot, and the data slot index in the
//    slot CRC's trailer (SlotCrcTrailerV5).
inline constexpr uint32_t kLayoutVersion = 5;
// 3: coherence=software as v0.1.0 shipped it: version 2's areas and words,
//    plus `partitions`; every line has one writer host. Refused: a holder
//    paused past its lease could publish a block that readers served
//    (docs/coherence.md, docs/model.md case sw-v3).
inline constexpr uint32_t kLayoutVersionSoftwareV3 = 3;
// 4: coherence=software: version 3 plus the writer's incarnation in every
//    slot word's owner field (SwIncTag) and in its slot CRC, checked by
//    readers against the partition's registry record after the copy, and
//    the heartbeat off the record's state line (ParticipantRecord::
//    sw_heartbeat). Hardware-mode regions stay version 2.
//    Refused since version 6 (its eviction chose among a key's 32 ways
//    only): format it again.
inline constexpr uint32_t kLayoutVersionSoftwareV4 = 4;
// 6: coherence=software with version 5's decoupled directory inside each
//    write partition (SlotMeta::data names a data slot of the entry's
//    partition, SlotCrcTrailerV5), no data words (the holder keeps its free
//    data slots and its eviction order in its own memory and rebuilds them
//    at attach), and one hint ring per partition (SwHintRing) through which
//    readers tell the holder which of its blocks they used.
inline constexpr uint32_t kLayoutVersionSoftware = 6;
inline constexpr uint32_t kMaxSoftwarePartitions = 16;
inline constexpr uint64_t kSuperblockBytes = 4096;
inline constexpr uint64_t kConfigJsonMax = kSuperblockBytes - 512;
inline constexpr uint32_t kMaxWays = 16;
inline constexpr uint32_t kNamespaceEntries = 256;
inline constexpr uint32_t kCounterCount = static_cast<uint32_t>(Counter::kCount);
inline constexpr uint32_t kCounterSlots = 24;  // room to append counters without a layout change
static_assert(kCounterCount <= kCounterSlots);

// Every atomic in the region is shared by processes: only a lock-free one
// works there (a lock-based std::atomic keeps its lock in one process's
// memory), and it must be exactly as wide as the field it overlays.
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == 8 && alignof(std::atomic<uint64_t>) == 8);
static_assert(sizeof(std::atomic<uint32_t>) == 4 && alignof(std::atomic<uint32_t>) == 4);
// Strings in the registry and namespace table are copied a byte at a time.
static_assert(std::atomic<char>::is_always_lock_free && sizeof(std::atomic<char>) == 1);
inline constexpr uint64_t kMinSlotSize = 64;
inline constexpr uint64_t kMaxSlotSize = (1ull << 32) - 4096;  // SlotMeta::len is 32-bit

// ---- Superblock ----
//
// Words touched by the format protocol are atomics; the rest is written once
// by the formatter (before `magic`) and covered by `header_crc`.
struct alignas(64) Superblock {
  std::atomic<uint64_t> magic;            // kMagic once formatted; written last
  std::atomic<uint64_t> format_lock;      // 0 = unclaimed, else formatter nonce
  std::atomic<uint64_t> format_progress;  // formatter advances while working
  uint32_t layout_version;
  uint32_t superblock_bytes;
  // Geometry inputs (everything else is derived from these).
  uint64_t region_size;
  uint64_t slot_size;
  uint32_t max_participants;
  uint32_t coherence;  // CoherenceMode
  uint64_t hash_seed_fingerprint;
  char hash_algorithm[32];  // NUL-terminated
  uint64_t format_epoch;    // random per format
  // Derived geometry, recorded so attach can cross-check it.
  uint64_t num_slots;
  uint64_t num_sets;
  uint32_t ways;
  uint32_t pin_words;
  uint64_t slot_stride;
  uint64_t data_align;
  uint64_t registry_off;
  uint64_t namespaces_off;
  uint64_t retired_off;
  uint64_t tags_off;
  uint64_t meta_off;
  uint64_t pins_off;
  uint64_t data_off;
  uint64_t config_json_off;
  uint32_t config_json_len;
  uint32_t config_json_crc;
  uint32_t partitions;  // versions 3, 4: write partitions (1..16); version 5: 0
  uint32_t reserved0;
  uint64_t num_entries;  // versions 5, 6: index entries (2 x num_slots)
  uint64_t dwords_off;   // version 5: the data words; 6: the hint rings
  uint8_t reserved[268];
  uint32_t header_crc;  // CRC32C of bytes [offsetof(layout_version), offsetof(header_crc))
};
static_assert(sizeof(Superblock) == 512);
static_assert(offsetof(Superblock, magic) == 0);
static_assert(offsetof(Superblock, layout_version) == 24);
static_assert(offsetof(Superblock, header_crc) == 508);
static_assert(offsetof(Superblock, partitions) == 216);
static_assert(offsetof(Superblock, num_entries) == 224 && offsetof(Superblock, dwords_off) == 232);

// ---- Participant registry ----
//
// state word: [incarnation:48][reclaimer:12][state:4]
enum class ParticipantState : uint8_t { kFree = 0, kActive = 1, kReclaiming = 2 };

struct alignas(64) CounterBlock {
  std::atomic<uint64_t> v[kCounterSlots];
};
static_assert(sizeof(CounterBlock) == 192);

struct alignas(64) ParticipantRecord {
  std::atomic<uint64_t> state;
  std::atomic<uint64_t> heartbeat;  // advanced by the owner only
  std::atomic<uint64_t> heartbeat_interval_ns;
  std::atomic<uint32_t> pid;
  uint32_t reserved0;
  char host[32];  // informational; written with relaxed stores
  // Layout 4 (coherence=software): the owner's heartbeat, on the record's
  // second line, so its periodic store never writes the state line back (a
  // paused owner's copy of that line carries its old incarnation). Layout 2
  // uses `heartbeat`; this is 0 there.
  std::atomic<uint64_t> sw_heartbeat;
  uint8_t reserved[56];
  CounterBlock counters;
};
static_assert(sizeof(ParticipantRecord) == 320);
static_assert(offsetof(ParticipantRecord, sw_heartbeat) == 64);

// ---- Namespace table ----
//
// state word: [owner:12][state:4]; FREE -> WRITING(owner) -> READY.
enum class NamespaceState : uint8_t { kFree = 0, kWriting = 1, kReady = 2 };

struct alignas(64) NamespaceRecord {
  std::atomic<uint64_t> state;
  uint32_t tp_rank;
  uint32_t kv_group;
  char model[128];
  char dtype[24];
  char kv_layout[64];
  uint32_t desc_crc;  // CRC32C of the descriptor fields, checked on use
  uint8_t reserved[20];
};
static_assert(sizeof(NamespaceRecord) == 256);

// ---- Directory ----
//
// Slot state word: [generation:48][owner:12][state:4].
// FREE --CAS--> WRITING(g+1, writer) --CAS--> READY(g+1, writer)
// READY --CAS--> EVICTING(g, evictor) --pins clear--> WRITING(g+1, evictor)
//                                     \--pinned------> READY(g)
// The generation changes on every reuse, so a reader that saw READY(g)
// before its copy and READY(g) after knows the bytes were not replaced.
enum class SlotState : uint8_t { kFree = 0, kWriting = 1, kReady = 2, kEvicting = 3 };

struct alignas(64) SetTags {
  // Per way: nonzero fingerprint of (namespace, key) while the way holds a
  // key, 0 when empty. A hint only; the slot's state and key are the truth.
  std::atomic<uint32_t> tag[kMaxWays];
};
static_assert(sizeof(SetTags) == 64);

struct alignas(64) SlotMeta {
  std::atomic<uint64_t> state;
  std::atomic<uint64_t> key_hi;
  std::atomic<uint64_t> key_lo;
  std::atomic<uint32_t> ns;
  std::atomic<uint32_t> len;
  std::atomic<uint32_t> crc;       // CRC32C(payload || SlotCrcTrailer), see below
  std::atomic<uint32_t> last_use;  // recency for eviction: RecencyTick() of the last store or read
  std::atomic<uint32_t> writer;    // participant that wrote the block (informational)
  // The block's depth in its prefix chain (0 = head, or not told), for
  // eviction: PackDepth(depth, generation). A hint like last_use, written
  // by the block's writer; a value whose generation bits are not the
  // slot's (an engine that predates the field left the previous block's,
  // or damage) reads as depth 0. Was reserved (zero) before.
  std::atomic<uint32_t> depth;
  // How many times the block was used since its store (hits, duplicate
  // stores), saturating at kMaxUses: PackDepth(uses, generation), written
  // by readers without a CAS (a lost increment is a hint lost), at most
  // kMaxUses times per block. Was reserved (zero) before.
  std::atomic<uint32_t> uses;
  // Version 5: the data slot holding this entry's block, written by the
  // entry's writer while it holds the entry WRITING and the data slot
  // MOVING. Untrusted like every byte: readers check it is < num_slots, and
  // the slot CRC binds it. Version 4: 0 (entry i's data is slot i).
  std::atomic<uint32_t> data;
  uint8_t reserved[8];
};
static_assert(sizeof(SlotMeta) == 64);
static_assert(offsetof(SlotMeta, crc) == 32 && offsetof(SlotMeta, writer) == 40 &&
              offsetof(SlotMeta, depth) == 44 && offsetof(SlotMeta, uses) == 48 &&
              offsetof(SlotMeta, data) == 52);
inline constexpr uint32_t kMaxUses = 3;

// SlotMeta::depth and ::uses: [generation low 16 bits:16][value:16]. The
// generation binds the hint to the block it was written for.
inline constexpr uint32_t kMaxChainDepth = 0xFFFF;
constexpr uint32_t PackDepth(uint32_t depth, uint64_t gen) {
  return (static_cast<uint32_t>(gen & 0xFFFF) << 16) |
         (depth < kMaxChainDepth ? depth : kMaxChainDepth);
}
// The depth (or use count) a slot word `w`'s block was stored with, or 0
// if `packed` was not written for that block.
constexpr uint32_t UnpackDepth(uint32_t packed, uint64_t w) {
  return (packed >> 16) == ((w >> 16) & 0xFFFF) ? (packed & 0xFFFF) : 0;
}

// What `SlotMeta::crc` covers besides the payload: the CRC32C of the payload
// continued over this record, so a CRC verifies only for the slot identity it
// was written for. A writer builds it from its own lease (the generation of
// its WRITING word, the key, namespace and length it asked to store), never
// from slot metadata; a reader from the READY word it observed and the key,
// namespace and length it asked for and copied. A paused writer's late CRC
// carries a stale generation, and keys or lengths swapped by damage no
// longer match, so both fail every reader's check.
struct SlotCrcTrailer {
  uint64_t generation;  // WordGen of the slot's WRITING/READY word
  uint64_t key_hi;
  uint64_t key_lo;
  uint32_t ns;
  uint32_t len;
};
static_assert(sizeof(SlotCrcTrailer) == 32);
// Version 5: the same plus the data slot index, so a reader that followed a
// stale or damaged SlotMeta::data fails the CRC like one with a stale
// generation.
struct SlotCrcTrailerV5 {
  SlotCrcTrailer base;
  uint32_t data;
  uint32_t zero;  // 0: explicit padding, hashed
};
static_assert(sizeof(SlotCrcTrailerV5) == 40);

// ---- Data slot words (version 5) ----
//
// One u64 per data slot naming the LEASE that holds it, not a participant:
// [entry generation low 27 bits:27][entry index:33][state:4]; FREE is 0.
// Entry indices need 33 bits: num_entries = 2 x num_slots and num_slots
// <= 2^32 (SlotMeta::data is u32; ComputeGeometry refuses more). 27 bits of
// the entry's generation: a stale word can only pass for a live lease of
// the same entry after 2^27 reuses of that one entry while its holder is
// paused. Region bytes: an entry index >= num_entries is damage (the
// orphan rule frees the word).
// FREE --ClaimDataSlot (entry e WRITING at g)--> MOVING(e, g)
// MOVING(e, g) --commit (entry READY first)--> HELD(e, g)
// HELD(v, gv) or MOVING(v, gv) --MoveDataSlot (v taken and freed)--> MOVING(e, g)
// HELD(v, gv) --ClaimSlot pass 2 (v EVICTING(gv) -> WRITING(gv+1))--> MOVING(v, gv+1)
// HELD / MOVING --ReleaseDataSlot (exact word) or the lease's end--> FREE
// Orphan rule (reclaim, wipe, and the orphan sweep after a liveness
// timeout): a word whose entry is FREE or at another generation is FREE'd,
// and so is one of a committed lease (e READY or EVICTING at g) whose entry
// names another data slot (damage: a copied word); MOVING(e, g) with e
// READY at g (its writer died between READY and settle) goes HELD. Every CAS on a data word names
// the lease it expects, so a paused participant's late step fails on a word a newer lease holds
// (docs/model.md, l5-lease-*).
enum class DataState : uint8_t { kFree = 0, kHeld = 1, kMoving = 2 };
inline constexpr uint64_t kDataEntryShift = 4;
inline constexpr uint64_t kDataEntryMask = (1ull << 33) - 1;
inline constexpr uint64_t kDataGenShift = 37;
inline constexpr uint64_t kDataGenMask = (1ull << 27) - 1;
inline constexpr uint64_t kMaxDataSlots = 1ull << 32;
constexpr uint64_t PackData(uint64_t entry, uint64_t egen, DataState state) {
  return ((egen & kDataGenMask) << kDataGenShift) | ((entry & kDataEntryMask) << kDataEntryShift) |
         static_cast<uint64_t>(state);
}
constexpr uint64_t DataEntry(uint64_t w) { return (w >> kDataEntryShift) & kDataEntryMask; }
constexpr uint64_t DataGen(uint64_t w) { return w >> kDataGenShift; }
// Whether data word `w` is held (HELD or MOVING) by entry `entry`'s lease
// at generation `egen` (an entry word's WordGen).
constexpr bool DataLeaseIs(uint64_t w, uint64_t entry, uint64_t egen) {
  const uint64_t s = w & 0xF;
  return (s == static_cast<uint64_t>(DataState::kHeld) ||
          s == static_cast<uint64_t>(DataState::kMoving)) &&
         DataEntry(w) == entry && DataGen(w) == (egen & kDataGenMask);
}
static_assert(kDataGenShift == kDataEntryShift + 33 && kDataGenShift + 27 == 64);
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the trailer is hashed as stored");

// ---- Hint rings (version 6) ----
//
// One per write partition, written by that partition's holder only: each
// hit on another partition's block appends PackHint(entry, generation)
// (the block's entry index and its READY word's generation, low 31 bits)
// at head % ring entries; the head counts appends for ever. The holder of
// the block's partition reads the other rings when it refills its victim
// order and counts a hint as a use only where its own entry still says
// READY at that generation: hints may be lost, overwritten or stale, and
// only change which block goes.
struct alignas(64) SwHintRingHead {
  std::atomic<uint64_t> head;
  uint8_t reserved[56];
};
static_assert(sizeof(SwHintRingHead) == 64);
inline constexpr uint64_t kHintEntryShift = 31;
inline constexpr uint64_t kHintGenMask = (1ull << 31) - 1;
// 0 is no hint: the entry field is stored plus one.
constexpr uint64_t PackHint(uint64_t entry, uint64_t gen) {
  return ((entry + 1) << kHintEntryShift) | (gen & kHintGenMask);
}
// Ring entries per partition: 4,096 in regions of 64 MiB and more, 256 below.
constexpr uint64_t HintRingEntries(uint64_t region_size) {
  return region_size >= (64ull << 20) ? 4096 : 256;
}

// ---- Word encodings ----
inline constexpr uint64_t kStateMask = 0xF;
inline constexpr uint64_t kOwnerShift = 4;
inline constexpr uint64_t kOwnerMask = 0xFFF;
inline constexpr uint64_t kGenShift = 16;
inline constexpr uint32_t kMaxParticipantsLimit = 1024;  // fits the 12-bit owner field

constexpr uint64_t PackWord(uint64_t gen, uint32_t owner, uint8_t state) {
  return (gen << kGenShift) | ((uint64_t(owner) & kOwnerMask) << kOwnerShift) | state;
}
constexpr uint8_t WordState(uint64_t w) { return uint8_t(w & kStateMask); }
constexpr uint32_t WordOwner(uint64_t w) { return uint32_t((w >> kOwnerShift) & kOwnerMask); }
constexpr uint64_t WordGen(uint64_t w) { return w >> kGenShift; }

// The state fields of the words above, as WordState returns them and
// PackWord takes them: one set for every file of the engine.
// Index entry state words (SlotState):
inline constexpr uint8_t kFree = static_cast<uint8_t>(SlotState::kFree);
inline constexpr uint8_t kWriting = static_cast<uint8_t>(SlotState::kWriting);
inline constexpr uint8_t kReady = static_cast<uint8_t>(SlotState::kReady);
inline constexpr uint8_t kEvicting = static_cast<uint8_t>(SlotState::kEvicting);
// Data slot words (DataState):
inline constexpr uint8_t kDFree = static_cast<uint8_t>(DataState::kFree);
inline constexpr uint8_t kDHeld = static_cast<uint8_t>(DataState::kHeld);
inline constexpr uint8_t kDMoving = static_cast<uint8_t>(DataState::kMoving);
// Participant record state words (ParticipantState):
inline constexpr uint8_t kPFree = static_cast<uint8_t>(ParticipantState::kFree);
inline constexpr uint8_t kPActive = static_cast<uint8_t>(ParticipantState::kActive);
inline constexpr uint8_t kPReclaiming = static_cast<uint8_t>(ParticipantState::kReclaiming);
// Namespace record state words (NamespaceState):
inline constexpr uint8_t kNsFree = static_cast<uint8_t>(NamespaceState::kFree);
inline constexpr uint8_t kNsWriting = static_cast<uint8_t>(NamespaceState::kWriting);
inline constexpr uint8_t kNsReady = static_cast<uint8_t>(NamespaceState::kReady);

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_REGION_LAYOUT_H_
