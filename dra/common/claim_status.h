// Copyright cxlkv authors.
//
// The contract between the cxlkv DRA controller (writer) and the kubelet
// plugin (reader) inside a ResourceClaim's `status.devices[]` entry for the
// blade device (driver, pool, device, shareID):
//
//   conditions: cxlkv.dev/composed (the binding condition), and
//               cxlkv.dev/compose-failed (the binding failure condition),
//               cxlkv.dev/fabric-reachable (False while the controller cannot
//               reach the fabric manager for this claim; informational)
//   data: {
//     "memoryId":    "<fabric memory id = allocation id = CDI device name>",
//     "applianceId": "...", "bladeId": "...",
//     "sizeBytes":   <int>,
//     "hosts": { "<node name>": { "state": "Materialized" | "Pending" |
//                                 "Failed" | "NoAgent",
//                                 "error": "...", "device": "...",
//                                 "cdiDevice": "cxlkv.dev/region=<id>" } }
//   }
//
// One region per claim: every result of this driver in one claim uses the
// region named by the first entry that carries a memoryId.
//
// Thread-safety: constants only.
#ifndef CXLKV_DRA_COMMON_CLAIM_STATUS_H_
#define CXLKV_DRA_COMMON_CLAIM_STATUS_H_

namespace cxlkv::dra {

inline constexpr const char* kDefaultDriverName = "cxlkv.dev";
inline constexpr const char* kConditionComposed = "cxlkv.dev/composed";
inline constexpr const char* kConditionComposeFailed = "cxlkv.dev/compose-failed";
inline constexpr const char* kConditionFabricReachable = "cxlkv.dev/fabric-reachable";
inline constexpr const char* kFinalizer = "cxlkv.dev/free-memory";
inline constexpr const char* kOwnerAnnotation = "cxlkv.dev/owner";
inline constexpr const char* kHostMaterialized = "Materialized";

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_COMMON_CLAIM_STATUS_H_
