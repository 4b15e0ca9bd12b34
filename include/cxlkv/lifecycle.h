// Copyright cxlkv authors.
//
// Region lifecycle: what happens to a region outside one process's use of
// it. Whether anyone is attached, probing what a path holds, destroying or
// unformatting a region, occupancy and slot-state scans, and garbage
// collection of a directory of region files (as leveldb keeps DestroyDB and
// RepairDB beside its DB class). The `cxlkv` command, the DRA driver (cleanup
// on unprepare) and the vLLM backend call these; none of them has its own
// copy of the rules below.
//
// "Attached" has one definition, used by every function here:
//   1. on this host, a process holds the region file's flock: every
//      Region::Open of a file holds a shared one for the Region's lifetime
//      (observers included); or
//   2. a participant record in the region changes (registration, heartbeat,
//      reclaim) while it is watched. A record unchanged for
//      max(liveness_timeout_ns, 4 x its declared heartbeat interval) is not
//      attached: the engine's own rule for judging a participant dead. The
//      declared interval counts up to kMaxHeartbeatIntervalNs, the longest
//      Region::Open accepts, so a watch lasts at most 4 minutes.
// A live participant shows itself within one heartbeat interval, so
// "attached" is known early; "nobody attached" costs a full watch (5 s
// with the default options and participants). Only the heartbeat half
// works across hosts (a devdax device, a file shared between hosts); there
// is no cross-host lock, so a participant that registers from another host
// after the watch and before the destroy is not seen.
//
// Thread-safety: every function may be called from any thread; they share
// no state. They coordinate with other processes through the flock protocol
// above. Functions taking a Region require it to outlive the call.
#ifndef CXLKV_LIFECYCLE_H_
#define CXLKV_LIFECYCLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cxlkv/key.h"
#include "cxlkv/region.h"
#include "cxlkv/status.h"

namespace cxlkv {

// The longest heartbeat interval Region::Open accepts (kInvalidArgument
// beyond it), and so the longest any lifecycle watch has to allow for.
inline constexpr uint64_t kMaxHeartbeatIntervalNs = 60'000'000'000;

// ---- Scans of an open region ----

// A slot's state, the low 4 bits of its state word (docs/region_format.md).
// kInvalid stands for any other value (a damaged word).
enum class SlotState : uint8_t {
  kFree = 0,
  kWriting = 1,
  kReady = 2,
  kEvicting = 3,
  kInvalid = 15
};
const char* SlotStateName(SlotState s);

// One slot's directory entry as read (each field a separate load: a slot
// that changes during the read may mix two states; region bytes are
// untrusted, so every field may be garbage except `state`, which is decoded).
struct SlotView {
  uint64_t slot = 0;
  SlotState state = SlotState::kFree;
  uint64_t generation = 0;  // bumps on every transition into WRITING
  uint32_t owner = 0;       // participant index that last wrote or is evicting it
  uint32_t ns = 0;          // namespace index
  uint32_t len = 0;         // payload bytes
  BlockKey key;
  // The block's depth in its prefix chain as its writer told Store or
  // BeginWrite (an eviction hint), or 0: not told, not written for this
  // generation, or coherence=software (which keeps depths in the holder's
  // process memory).
  uint32_t depth = 0;
  // The data slot holding the entry's block (layout 5: the entry's recorded
  // index, untrusted; layout 4: `slot` itself). Its bytes are at
  // data_offset + data x slot_stride.
  uint64_t data = 0;
};

struct Occupancy {
  uint64_t free = 0, writing = 0, ready = 0, evicting = 0, invalid = 0;
  uint64_t ready_bytes = 0;  // sum of `len` over READY slots
  // Layout 5 (coherence=hardware; all 0 for layout 4): the data slots by
  // their word, HELD (a committed block's), MOVING (being filled or moved)
  // and FREE. Of those, `data_unsettled` are words the orphan rule would
  // change: a lease that is over (its writer, mover or dropper died or was
  // reclaimed) or damage; the orphan sweep settles them within a few
  // liveness timeouts, so one that stays is a lost data slot.
  // `ready_off_data`: READY entries whose data slot's word is not their
  // lease (damage: that slot's next holder may overwrite the bytes); the
  // orphan sweep drops them within a few liveness timeouts, and so do a
  // read that fails the CRC and an eviction.
  uint64_t data_held = 0, data_moving = 0, data_free = 0, data_unsettled = 0;
  uint64_t ready_off_data = 0;
};

// Counts directory entries by state, one load per entry (a region in use
// moves under the scan: the counts are not one instant's); `free` is the
// data slots no entry holds (num_slots minus the others). Layout 5: also
// the data words, by state and against the orphan rule.
Occupancy ScanOccupancy(const Region& region);

// Fills *out with directory entries [first, first + count), clipped to the
// region. kInvalidArgument if first >= num_entries.
Status ScanSlots(const Region& region, uint64_t first, uint64_t count, std::vector<SlotView>* out);

// kIOError if this process's mapping of the region was lost to a SIGBUS
// (its file truncated under it, or a memory error): the mapping was replaced
// with zeros, so since then every block misses and stores fail as fenced.
// The message names the offset and the cause. OK otherwise.
Status CheckMapping(const Region& region);

// ---- Regions by path ----

// Whose region files GcDirectory may collect.
enum class GcOwners : uint8_t {
  kMine = 0,  // only files owned by this process's effective uid
  kAny = 1,   // every owner's (an administrator's sweep)
};

struct LifecycleOptions {
  // Where the region lives in the file/device: byte offset, and size
  // (0 = what the region's header records, else the rest of the file).
  uint64_t offset = 0;
  uint64_t size = 0;
  // The shortest watch for "attached" (see the file comment). Default 5 s,
  // the engine's default liveness timeout; tests whose participants beat
  // every few ms can pass less.
  uint64_t liveness_timeout_ns = 5'000'000'000;
  // Root of sysfs, for devdax facts (as RegionOptions::sysfs_root).
  std::string sysfs_root = "/sys";
  // GcDirectory and GcFiles: report what would be removed, remove nothing.
  bool dry_run = false;
  // GcDirectory only: whose files a sweep collects. By default only this
  // user's: a region another user left unattached may still be wanted (a
  // cache kept between runs), and "nobody attached" is all gc can prove.
  // Another owner's regions are kept and reported with their uid. GcFiles
  // (files named one by one) does not check the owner.
  GcOwners gc_owners = GcOwners::kMine;
};

enum class RegionKind : uint8_t {
  kAbsent = 0,   // no such path
  kEmpty = 1,    // a regular file with no bytes at the region's offset (a failed create)
  kBlank = 2,    // first 4 KiB zero: nothing of a cxlkv region (formatting checks the rest)
  kRegion = 3,   // a cxlkv region that validates
  kDamaged = 4,  // recognizably a cxlkv region (magic, intact header or a format of
                 // ours begun) that does not validate: damaged, another layout
                 // version, an abandoned format
  kForeign = 5,  // anything else: never formatted, destroyed or collected
};
const char* RegionKindName(RegionKind k);

struct ProbeReport {
  RegionKind kind = RegionKind::kAbsent;
  std::string detail;  // why kDamaged/kForeign (the validation error), else ""
  RegionInfo info;     // valid for kRegion
};

// Says what `path` holds, without registering, formatting, locking or
// allocating anything. kIOError if it cannot be read.
Status ProbeRegion(const std::string& path, const LifecycleOptions& options, ProbeReport* out);

struct AttachReport {
  bool attached = false;
  bool locked_on_this_host = false;   // a process here holds the file's flock
  std::vector<ParticipantInfo> live;  // participants whose record changed
  uint64_t watched_ns = 0;            // how long the heartbeats were watched
  // One line for messages, e.g. "held open by a process on this host".
  std::string ToString() const;
};

// Whether anyone is attached to the region at `path` (definition at the top
// of this file). Blocks for up to the watch. OK with *out filled (for a path
// that is not a valid region only the flock half applies); kIOError if it
// cannot be read.
Status CheckAttached(const std::string& path, const LifecycleOptions& options, AttachReport* out);

// Makes `path` hold no region. A region file is removed when the region
// spans it from offset 0; otherwise (a devdax device, a region at an offset)
// the region's bytes are zeroed (UnformatRegion). Absent: OK (idempotent).
// kBusy while anyone is attached (message says who); kInvalidArgument for a
// kBlank or kForeign path (never touched); kIOError if the OS refuses.
Status DestroyRegion(const std::string& path, const LifecycleOptions& options);

// Zeroes the region's bytes (the magic last) so the next Region::Open with
// create_if_missing formats it afresh, with any geometry. This is what
// `cxlkv format --force` overrides: a damaged header or magic, another
// geometry or layout version, an abandoned format. Never: a kBlank or
// kForeign path (kInvalidArgument), an absent one (kNotFound), a region
// anyone is attached to (kBusy). kIOError if the OS refuses.
Status UnformatRegion(const std::string& path, const LifecycleOptions& options);

struct GcEntry {
  std::string path;
  std::string reason;  // why kept; what was removed ("region", "empty file")
};
struct GcReport {
  std::vector<GcEntry> removed;  // or, with dry_run, would be removed
  std::vector<GcEntry> kept;     // regions (valid or damaged) kept, and why
};

// Removes from directory `dir` (not recursively) every region file that is
// abandoned — nobody attached, by the definition at the top of this file —
// and owned as options.gc_owners says (by default this user's), and empty
// files left by failed creates (same owner rule). Kept and reported: damaged
// regions, regions in use, other owners' regions and empty files (with the
// uid). Blank and foreign files are never touched nor reported. All
// candidates are watched at once (one watch, not one per file).
// options.offset and size are ignored (region files start at 0). kIOError
// if `dir` cannot be read.
Status GcDirectory(const std::string& dir, const LifecycleOptions& options, GcReport* out);

// GcDirectory's rules for the files in `paths`, named one by one, whoever
// owns them (naming a file is the owner's consent; the OS still decides
// whether this user may remove it). A named path that is not a region or an
// empty regular file is kept and reported (absent, a directory or device,
// blank or foreign bytes), never touched. OK with *out filled.
Status GcFiles(const std::vector<std::string>& paths, const LifecycleOptions& options,
               GcReport* out);

}  // namespace cxlkv

#endif  // CXLKV_LIFECYCLE_H_
