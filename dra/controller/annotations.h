// Copyright cxlkv authors.
//
// The annotations the cxlkv DRA controller keeps on a ResourceClaim, and
// their format (the format-version policy is in docs/dra.md, "Upgrades"):
//
//   cxlkv.dev/owner   the owning replica's identity (--identity), a string
//   cxlkv.dev/region  the teardown parameters of the claim's region, a JSON
//                     object: {"allocationTimestamp": "<RFC 3339>",
//                     "applianceId": "...", "bladeId": "...",
//                     "memoryId": "...", "sizeMiB": <int>}
//   cxlkv.dev/capacity-mib, cxlkv.dev/share-count  written by users (decimal)
//
// The region annotation changes only additively: a new key is optional, a
// reader ignores keys it does not know and reads a missing one as empty, so
// a release reads what the one before wrote and the other way round. A
// change a reader of v0.1.0 could not read goes under a new annotation key,
// written beside this one for one release.
//
// Thread-safety: plain values and pure functions.
#ifndef CXLKV_DRA_CONTROLLER_ANNOTATIONS_H_
#define CXLKV_DRA_CONTROLLER_ANNOTATIONS_H_

#include <cstdint>
#include <string>

namespace cxlkv::dra {

inline constexpr const char* kRegionAnnotation = "cxlkv.dev/region";

// The region a claim's cxlkv.dev/region annotation names (teardown parameters).
struct RegionRef {
  std::string appliance_id, blade_id, memory_id, allocation_timestamp;
  int64_t size_mib = 0;  // 0 when the writer did not record it
  bool ok() const { return !memory_id.empty(); }
};

// The annotation's value: compact JSON, keys sorted.
std::string EncodeRegionAnnotation(const RegionRef& ref);

// Reads a value from EncodeRegionAnnotation of this or another release.
// Not a JSON object, or keys of the wrong type: a RegionRef that is not
// ok() (the claim is then treated as having no region recorded).
RegionRef ParseRegionAnnotation(const std::string& text);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_ANNOTATIONS_H_
