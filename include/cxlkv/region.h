// Copyright cxlkv authors.
//
// Region: a KV-block store whose directory lives inside a shared memory
// region (a file such as /dev/shm/cxlkv/<name>, or a devdax device). Any
// process that maps the region can look up, load and store blocks with
// ordinary loads, stores and atomics: there is no metadata service
// ([Fan26] §3.2). On-media format: docs/region_format.md.
//
// Thread-safety: a Region is safe for concurrent use by any number of threads
// and processes. Leases and PinSets are single-owner values; each must be
// used by one thread at a time and must not outlive its Region.
//
// Write protocol (one slot):
//   FREE/READY --BeginWrite--> WRITING(g) --fill data()--> CommitWrite --> READY(g)
//                                         \--AbortWrite / lease dropped / writer
//                                            dies (reclaimed) --> FREE
// Read protocol:
//   BeginRead (slot READY(g), pinned) --> copy/DMA data()
//   --> EndRead: OK only if the slot is still READY(g) with the key (and, when
//   asked, the CRC32C of the copy verifies).
// The recorded CRC binds the bytes to the slot's identity: it is the CRC32C
// of the payload continued over (g, key, namespace, length). A writer that
// was paused, judged dead and reclaimed cannot make its bytes or CRC verify
// in a slot that has been reused since (docs/region_format.md).
#ifndef CXLKV_REGION_H_
#define CXLKV_REGION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cxlkv/key.h"
#include "cxlkv/options.h"
#include "cxlkv/stats.h"
#include "cxlkv/status.h"

namespace cxlkv {

class Region;
class RegionInternal;
namespace internal {
class RegionImpl;
}  // namespace internal

// Geometry and configuration of an attached region (immutable after Open).
struct RegionInfo {
  std::string path;
  std::string backend;  // "file" or "devdax"
  uint64_t offset = 0;  // bytes into the file/device
  uint64_t size = 0;    // bytes of the region
  uint32_t layout_version = 0;
  uint64_t slot_size = 0;     // payload bytes per slot
  uint64_t slot_stride = 0;   // bytes between slot starts (>= slot_size)
  uint64_t num_slots = 0;     // data slots: how many blocks the region holds
  uint64_t num_entries = 0;   // directory entries (layout 5: 2 x num_slots; 4: num_slots)
  uint64_t num_sets = 0;      // directory sets of `ways` entries (each key may live in 2)
  uint32_t ways = 0;          // entries per set
  uint64_t data_offset = 0;   // region-relative offset of slot 0's bytes
  RegionConfig config;        // as recorded in the region
  uint64_t format_epoch = 0;  // random id of this format of the region
  int32_t participant = -1;   // this process's participant index, -1: observer
};

struct ParticipantInfo {
  uint32_t index = 0;
  uint64_t incarnation = 0;  // bumps each time the index is reused
  uint32_t pid = 0;          // informational: pids are per host/namespace
  std::string host;          // informational
  uint64_t heartbeat = 0;    // the counter others watch
  uint64_t heartbeat_interval_ns = 0;
  bool reclaiming = false;  // judged dead; its slots/pins being reclaimed
  bool self = false;
  Counters counters;
};

// What a store did. Set by every Store/BeginWrite/CommitWrite call that is
// given an outcome pointer, whatever the Status.
enum class StoreOutcome : uint8_t {
  kStored = 0,     // Status OK
  kDuplicate = 1,  // Status OK: the key was already READY (nothing written)
  kFull = 2,       // Status kNoSpace
  kTooLarge = 3,   // Status kInvalidArgument
  kLostRace = 4,   // Status kBusy: another participant is storing this key
  kFenced = 5,     // Status kBusy: this participant was judged dead and reclaimed
                   // (paused past the liveness timeout); reopen the region
  kRefused = 6,    // Status kInvalidArgument: namespace not registered, or an
                   // observer (register_participant=false) tried to store;
                   // Status kIOError: the region file was truncated under
                   // this process (CheckMapping in lifecycle.h)
};

struct LoadOptions {
  // Verify the copied bytes against the slot's CRC32C. Costs a second pass
  // over the copied bytes, after the copy. Turn off only where another check
  // covers integrity: without it, bytes that a reclaimed (paused) writer or
  // damaged memory left in a slot are returned. Default true.
  bool verify_crc = true;
};

struct LoadInfo {
  size_t len = 0;                   // bytes copied
  uint32_t writer_participant = 0;  // index of the participant that stored it
  bool cross_participant = false;   // stored by a participant other than us
};

// A reserved slot being filled. Move-only. Dropping an open lease aborts it.
class WriteLease {
 public:
  WriteLease() = default;
  WriteLease(WriteLease&& o) noexcept { *this = std::move(o); }
  WriteLease& operator=(WriteLease&& o) noexcept;
  WriteLease(const WriteLease&) = delete;
  WriteLease& operator=(const WriteLease&) = delete;
  ~WriteLease();

  bool open() const { return region_ != nullptr; }
  // Slot bytes to fill; valid until CommitWrite/AbortWrite.
  void* data() const { return data_; }
  size_t len() const { return len_; }

 private:
  friend class RegionInternal;
  Region* region_ = nullptr;
  void* data_ = nullptr;
  size_t len_ = 0;
  uint64_t slot_ = 0;
  uint64_t state_word_ = 0;  // the WRITING word we installed
  uint64_t data_word_ = 0;   // layout 5: our data slot's MOVING word
  BlockKey key_;             // what the commit binds the CRC to
  NamespaceId ns_ = 0;
};

// A slot being read. Move-only. Holds a pin (when this process is a
// participant) so the slot cannot be evicted until EndRead or destruction.
class ReadLease {
 public:
  ReadLease() = default;
  ReadLease(ReadLease&& o) noexcept { *this = std::move(o); }
  ReadLease& operator=(ReadLease&& o) noexcept;
  ReadLease(const ReadLease&) = delete;
  ReadLease& operator=(const ReadLease&) = delete;
  ~ReadLease();

  bool open() const { return region_ != nullptr; }
  // Region bytes of the block; valid until EndRead. May change under a
  // zombie writer: never trust them before EndRead returned OK.
  const void* data() const { return data_; }
  size_t len() const { return len_; }
  // The slot's recorded CRC: the payload CRC32C bound to the slot identity,
  // so not comparable with a plain CRC of the bytes; pass that to EndRead.
  uint32_t crc32c() const { return crc_; }
  uint32_t writer_participant() const { return writer_; }

 private:
  friend class RegionInternal;
  Region* region_ = nullptr;
  const void* data_ = nullptr;
  size_t len_ = 0;
  uint64_t slot_ = 0;
  uint64_t state_word_ = 0;  // the READY word observed at BeginRead
  uint32_t crc_ = 0;
  uint32_t writer_ = 0;
  bool pinned_ = false;
  BlockKey key_;  // what EndRead binds the copy's CRC to
  NamespaceId ns_ = 0;
};

// Pins on the leading hits of a block chain (PinPrefix). A pinned slot is
// never evicted; pins of a process that dies are released by whoever
// reclaims it. Move-only; released on destruction.
class PinSet {
 public:
  PinSet() = default;
  PinSet(PinSet&& o) noexcept { *this = std::move(o); }
  PinSet& operator=(PinSet&& o) noexcept;
  PinSet(const PinSet&) = delete;
  PinSet& operator=(const PinSet&) = delete;
  ~PinSet() { Release(); }

  size_t size() const { return slots_.size(); }
  void Release();

 private:
  friend class RegionInternal;
  Region* region_ = nullptr;
  std::vector<uint64_t> slots_;
};

class Region {
 public:
  // Maps the region at `path` (a file, created when missing, or a devdax
  // character device), formats it if unformatted and allowed, validates the
  // header, and registers this process as a participant.
  // Returns kInvalidArgument for options that can never work or a region
  // whose recorded config differs from options.config (message names the
  // field and both values, e.g. a coherence mode other than the region's);
  // kUnsupported for a layout version this build does not read, or
  // coherence=software on an architecture without a visibility layer
  // (docs/coherence.md); kCorruption for header/config bytes that
  // fail validation; kNotFound for an unformatted region with
  // create_if_missing=false; kNoSpace when all participant entries are live;
  // kBusy when another process's format did not finish in format_wait_ns;
  // kIOError when the OS refuses (message names path and errno).
  static Status Open(const std::string& path, const RegionOptions& options,
                     std::unique_ptr<Region>* out);

  // Deregisters: aborts this process's open writes and releases its pins.
  virtual ~Region();

  virtual const RegionInfo& info() const = 0;

  // Finds or creates the namespace `desc` in the region's namespace table.
  // kInvalidArgument for over-long fields; kNoSpace when the table is full.
  virtual Status RegisterNamespace(const NamespaceDesc& desc, NamespaceId* id) = 0;

  // ---- Writes ----

  // Copies `len` bytes into a slot for (ns, key) and publishes it; the CRC32C
  // is taken from `data`. OK with *outcome kStored or kDuplicate; kNoSpace
  // (kFull: nothing free or evictable); kInvalidArgument (kTooLarge: len >
  // slot_size; kRefused: `ns` not registered, or an observer); kBusy
  // (kLostRace: another writer is storing the key; kFenced: this participant
  // was judged dead and reclaimed, every later store fails the same way:
  // reopen the region). Every outcome but kStored is counted.
  //
  // `depth` is the block's position in its prefix chain (0 = the first
  // chunk of a prompt; the k-th chunk, k), a hint for eviction: a chain's
  // chunks leave tail first, since a prefix is usable only up to its first
  // missing chunk. 0, the default, makes the block a chain head, as every
  // block was before the hint existed.
  virtual Status Store(NamespaceId ns, const BlockKey& key, const void* data, size_t len,
                       StoreOutcome* outcome = nullptr, uint32_t depth = 0) = 0;

  // Reserves a slot for (ns, key) and len bytes (evicting if needed: the
  // candidate with the largest age scaled by its chain depth); the caller
  // fills lease->data() (e.g. by DMA) and then commits. `depth`: as Store.
  // Same codes as Store; kDuplicate comes back as OK with !lease->open().
  // A READY copy of the key whose directory tag was lost is found here, its
  // tag repaired, and answered kDuplicate.
  virtual Status BeginWrite(NamespaceId ns, const BlockKey& key, size_t len, WriteLease* lease,
                            StoreOutcome* outcome = nullptr, uint32_t depth = 0) = 0;
  // Publishes the slot. `crc32c` is the CRC32C of the source bytes, computed
  // wherever they are (e.g. on the GPU, or by another process that filled
  // the slot); null = compute it from the slot. Pass it wherever integrity
  // matters: with null, bytes that a reclaimed (paused, judged dead) process
  // copied or DMAed into this slot after its reuse and before this commit are
  // checksummed as this lease's and then verify for every reader (the Spin
  // model's counterexample, docs/model.md). Store, RegionGpu with gpu_crc and
  // the delegated writes always pass the source's CRC. The engine binds it to the
  // lease's slot identity. OK (kStored); kBusy (kFenced) if this participant
  // was judged dead and reclaimed meanwhile; kBusy (kLostRace) if the slot
  // was taken from a live writer (damaged region); kInvalidArgument for a
  // closed lease. Closes the lease in all cases.
  virtual Status CommitWrite(WriteLease* lease, const uint32_t* crc32c = nullptr,
                             StoreOutcome* outcome = nullptr) = 0;
  // Frees the reserved slot, if it is still this lease's. Closes the lease.
  virtual void AbortWrite(WriteLease* lease) = 0;

  // ---- Lookups ----

  // OK if (ns, key) is READY now; kNotFound otherwise.
  virtual Status Lookup(NamespaceId ns, const BlockKey& key) = 0;
  // Number of leading keys of the chain keys[0..n) that are READY.
  virtual size_t LookupPrefix(NamespaceId ns, const BlockKey* keys, size_t n) = 0;
  // Like LookupPrefix, and pins each of the leading hits for this
  // participant until `pins` is released. REQUIRES: participant.
  virtual Status PinPrefix(NamespaceId ns, const BlockKey* keys, size_t n, PinSet* pins) = 0;

  // ---- Reads ----

  // Copies the block into dst (capacity bytes). A hit only if the key, state
  // and generation are unchanged after the copy and (if asked) the CRC32C of
  // the copied bytes verifies. kNotFound on a miss or a slot that changed
  // during the copy; kCorruption on a CRC mismatch (the slot is then dropped
  // so it can be stored again); kInvalidArgument if capacity is too small.
  virtual Status Load(NamespaceId ns, const BlockKey& key, void* dst, size_t capacity,
                      const LoadOptions& options = {}, LoadInfo* info = nullptr) = 0;
  // Zero-copy read: exposes the slot's bytes (e.g. for DMA). kNotFound on
  // a miss. The caller copies lease->data(), then calls EndRead.
  virtual Status BeginRead(NamespaceId ns, const BlockKey& key, ReadLease* lease) = 0;
  // OK if the slot did not change since BeginRead (same READY word and key:
  // the copy is valid); kNotFound otherwise. If `copied` is given, also
  // verifies its CRC32C; if `copied_crc32c` is given (the plain CRC32C the
  // caller computed over its copy, e.g. on the GPU), binds it to the slot
  // identity and compares. A mismatch is kCorruption, counted as a CRC
  // failure, and the slot is dropped. Closes the lease in all cases.
  virtual Status EndRead(ReadLease* lease, const void* copied = nullptr,
                         const uint32_t* copied_crc32c = nullptr) = 0;

  // ---- Maintenance ----

  // Drops (ns, key) if READY and unpinned. kNotFound if absent, kBusy if pinned.
  virtual Status Drop(NamespaceId ns, const BlockKey& key) = 0;

  struct ScrubReport {
    uint64_t ready = 0, verified = 0, crc_failures = 0, dropped = 0, skipped_changed = 0;
    // Layout 5 (coherence=hardware; 0 otherwise), by the orphan sweep's
    // rules. ready_off_data: READY blocks whose data slot's word is not
    // their lease (a damaged index or data word), also counted in
    // crc_failures (and dropped, in `dropped`, when `drop_corrupt`).
    // data_unsettled: data words the orphan rule would change (a lease that
    // is over, a damaged or copied word, a dead writer's MOVING word);
    // data_settled: those the scrub changed (`drop_corrupt` only).
    uint64_t ready_off_data = 0, data_unsettled = 0, data_settled = 0;
  };
  // Re-reads every READY slot and checks its CRC32C; corrupt slots are
  // dropped when `drop_corrupt`. Layout 5 also checks the data words as the
  // orphan sweep does, and settles them when `drop_corrupt`. Safe while
  // others are attached.
  virtual Status Verify(bool drop_corrupt, ScrubReport* report) = 0;

  struct WipeReport {
    // writing: slots being written or evicted by a live participant;
    // orphaned: slots held WRITING/EVICTING by an owner that is not alive
    // (or an impossible state word), freed.
    uint64_t dropped = 0, pinned = 0, writing = 0, orphaned = 0;
  };
  // Drops every READY, unpinned slot and frees orphaned ones. Safe while
  // others are attached: live writes in flight and pinned slots are left
  // alone and counted.
  virtual Status Wipe(WipeReport* report) = 0;

  // Counters of this participant (zero for observers), and of the whole
  // region (every participant's block plus those retired by leavers).
  virtual Counters ProcessCounters() const = 0;
  virtual Counters RegionCounters() const = 0;

  // Participants currently registered (alive or being reclaimed).
  virtual std::vector<ParticipantInfo> Participants() const = 0;

  // Runs one liveness pass now (normally done by the heartbeat thread every
  // heartbeat interval): reclaims participants judged dead. Returns the
  // number of participants reclaimed.
  virtual size_t ReapDeadParticipants() = 0;

 private:
  friend class PinSet;
  // Lease plumbing and the tools' access (src/region/region_internal.h).
  friend class RegionInternal;
  // The one implementation: RegionInternal relies on every Region being one.
  friend class internal::RegionImpl;
  Region() = default;
  virtual void UnpinSlots(const std::vector<uint64_t>& slots) = 0;
};

}  // namespace cxlkv

#endif  // CXLKV_REGION_H_
