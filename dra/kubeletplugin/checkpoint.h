// Copyright cxlkv authors.
//
// The kubelet plugin's checkpoint: which ResourceClaims this node prepared,
// with the region and the CDI ids each got. One JSON file, written
// atomically (temp file, fsync, rename, fsync of the directory) so a crash
// leaves the old or the new contents. Versioned with additive fields: new
// fields are optional with defaults and a reader ignores fields it does not
// know, so an upgrade and a downgrade both read the file; `version` changes
// only for an incompatible format. Stamped with the boot id so a reboot (which wipes
// /var/run/cdi and the host's devices) is detected; a checkpoint is never
// trusted without re-checking hostd and the CDI file (see state.h).
//
// Thread-safety: plain values and free functions; callers serialize access
// to one file.
#ifndef CXLKV_DRA_KUBELETPLUGIN_CHECKPOINT_H_
#define CXLKV_DRA_KUBELETPLUGIN_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cxlkv/status.h"

namespace cxlkv::dra {

// Persisted as a string; the enum order is not part of the format.
enum class PrepareState : uint8_t {
  kPrepareStarted,    // work began (a crash here means: redo it)
  kPrepareCompleted,  // the CDI ids were handed to the kubelet
};

struct PreparedDevice {
  std::vector<std::string> request_names;  // without "/<subrequest>"
  std::string pool_name;
  std::string device_name;
  std::string share_id;  // "" when the allocation has none
  std::vector<std::string> cdi_device_ids;
};

struct ClaimEntry {
  std::string uid;
  std::string ns;
  std::string name;
  // The composed region this claim uses on this node (fabric memory id, also
  // the allocation id and the CDI device name).
  std::string memory_id;
  PrepareState state = PrepareState::kPrepareStarted;
  std::vector<PreparedDevice> devices;
  int64_t updated_unix = 0;  // seconds
  // The fabric manager's assignment epoch of this node's mapping when the
  // claim was prepared (hostd's device; 0: unknown, hostd or manager
  // without epochs). The node's release names it, so a release that comes
  // late cannot undo a newer assignment. Additive field "assignEpoch".
  uint64_t assign_epoch = 0;
};

struct Checkpoint {
  static constexpr int kVersion = 1;
  int version = kVersion;
  std::string boot_id;                       // /proc/sys/kernel/random/boot_id when written
  std::string node_name;                     // the node the entries belong to
  std::map<std::string, ClaimEntry> claims;  // by claim UID
  // Regions whose last claim here was unprepared and whose release (this
  // host's port unassigned, device removed: hostd::Client::Release) has not
  // gone through yet; retried until it does or a claim prepares the region
  // here again. Additive field "pendingReleases" (absent = none).
  std::set<std::string> pending_releases;
  // The assignment epoch each pending release undoes (ClaimEntry::
  // assign_epoch of the claim unprepared); a region absent here names none.
  // Additive field "pendingReleaseEpochs" (absent = none).
  std::map<std::string, uint64_t> release_epochs;
};

// The JSON text, with a CRC32 over the canonical encoding of the payload.
std::string EncodeCheckpoint(const Checkpoint& cp);

// Parses text from EncodeCheckpoint, from this or an older or newer writer
// (unknown fields ignored). Corruption: not JSON, a failed checksum or
// missing required fields; Unsupported: a newer incompatible version.
Status DecodeCheckpoint(const std::string& text, Checkpoint* cp);

// Loads `path`. NotFound: no file; otherwise as DecodeCheckpoint, with the
// path in the message ("read checkpoint <path>: <cause>").
Status LoadCheckpoint(const std::string& path, Checkpoint* cp);

// Writes `path` atomically. IOError: "write checkpoint <path>: <cause>".
Status SaveCheckpoint(const std::string& path, const Checkpoint& cp);

// This boot's id: the trimmed contents of `path`. IOError when unreadable.
Status ReadBootId(std::string* boot_id,
                  const std::string& path = "/proc/sys/kernel/random/boot_id");

const char* PrepareStateName(PrepareState s);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_KUBELETPLUGIN_CHECKPOINT_H_
