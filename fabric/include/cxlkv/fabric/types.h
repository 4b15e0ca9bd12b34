// Copyright cxlkv authors.
//
// Plain value types shared by the fabric-manager client, the cxlkv-fabricd
// emulator and the local composer: what a composed region is, and how a
// caller asks for one. Sizes are MiB where the CFM API uses MiB, bytes where
// a host maps memory.
//
// Thread-safety: plain values; no internal synchronisation.
#ifndef CXLKV_FABRIC_TYPES_H_
#define CXLKV_FABRIC_TYPES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cxlkv::fabric {

// What the host behind an assigned port did with a region. On the wire and
// on disk: "Pending", "Materialized", "Failed", "NoAgent".
enum class Materialization : uint8_t {
  kPending,       // no answer from the host's agent yet
  kMaterialized,  // the agent made the device (Mapping::device)
  kFailed,        // the agent refused or failed (Mapping::error)
  kNoAgent,       // the host has no cxlkv-hostd configured
};

// A region's composition state. On the wire: "Composed", "Composing", or no
// `status` field (kUnknown). A real cfm-service's other strings read as
// kUnknown.
enum class RegionStatus : uint8_t {
  kUnknown,    // not reported, or a value this client does not know
  kComposing,  // only mid-compose: the emulator's crash journal
  kComposed,
};

// The wire strings of the two enums, and back. The parsers return false on a
// string that is not one of them.
const char* ToString(Materialization m);
bool ParseMaterialization(std::string_view text, Materialization* out);
const char* ToString(RegionStatus s);  // "" for kUnknown
bool ParseRegionStatus(std::string_view text, RegionStatus* out);

// One port a region is assigned to, and what the host behind it did with it.
struct Mapping {
  std::string appliance_port;  // blade port id, e.g. "P1"
  std::string host_id;         // host cabled to that port ("" when uncabled)
  std::string host_port;       // host-side port id
  // A failure on one host is not fatal to the region: the others keep it.
  Materialization materialization = Materialization::kPending;
  std::string error;   // why materialization failed; "" otherwise
  std::string device;  // host-local device path the agent reported
  // Extension: the assignment epoch of this mapping. Every assign of a port
  // (compose or PATCH) takes the region's next epoch, so a port assigned,
  // unassigned and assigned again has a larger epoch the second time; an
  // unassign that names an older epoch is refused (docs/fabric.md, "Assignment
  // epochs"). 0: not reported (a real cfm-service).
  uint64_t assign_epoch = 0;
};

// A composed memory region (CFM `memoryRegion` plus the share extension).
// Named apart from the engine's cxlkv::Region, which is what a process maps.
struct MemoryRegion {
  std::string id;  // memory id; also the allocation id and CDI device name
  std::string appliance_id;
  std::string blade_id;
  RegionStatus status = RegionStatus::kUnknown;
  int64_t size_mib = 0;           // allocated size, rounded up to whole resource blocks
  int qos = 0;                    // DIMM channels interleaved (1, 2, 4, 8)
  int share_count = 1;            // ports the caller asked to assign
  std::string claim_uid;          // opaque caller tag (the ResourceClaim UID), may be ""
  std::vector<int> blocks;        // resource block indexes on the blade
  std::string backing_path;       // emulation: file holding the region's bytes
  std::vector<Mapping> mappings;  // assigned ports, in assignment order
  // Extension: the last assignment epoch this region issued (its mappings'
  // epochs are at most this; it never goes down, also when a port is
  // unassigned). 0: not reported.
  uint64_t assign_epoch = 0;
};

// A request to compose a region (CFM `composeMemoryRequest` + extension).
struct ComposeRequest {
  int64_t size_mib = 0;  // REQUIRES: >= 1
  int qos = 4;           // 1, 2, 4 or 8
  std::string port;      // optional single blade port (CFM semantics)
  // Extension: assign to share_count ports picked from candidate_ports, then
  // from the ports cabled to candidate_hosts, in order.
  int share_count = 0;  // 0: CFM behaviour (assign `port` if given)
  std::vector<std::string> candidate_hosts;
  std::vector<std::string> candidate_ports;
  std::string claim_uid;
};

}  // namespace cxlkv::fabric

#endif  // CXLKV_FABRIC_TYPES_H_
