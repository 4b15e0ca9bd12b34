// Copyright cxlkv authors.
//
// Conditions: the claim's status.devices[] entries of this driver
// (common/claim_status.h): data (memoryId, sizeBytes, each host's state,
// device and assignment epoch) and the conditions cxlkv.dev/composed (True
// once every target host reports Materialized, and then kept True for that
// region while later consumers' hosts are added), cxlkv.dev/compose-failed
// (the binding failure condition) and cxlkv.dev/fabric-reachable (False
// while the fabric manager does not answer for this claim). Other drivers'
// entries are kept as they are. The writes are Controller::Rep::WriteStatus,
// MarkFabricDown and ComposeFailed (conditions.cc).
//
// Thread-safety: pure functions.
#ifndef CXLKV_DRA_CONTROLLER_CONDITIONS_H_
#define CXLKV_DRA_CONTROLLER_CONDITIONS_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "controller/annotations.h"
#include "cxlkv/fabric/types.h"
#include "cxlkv/status.h"

namespace cxlkv::dra {

// The status.devices a region's current state calls for.
struct StatusUpdate {
  nlohmann::json devices;  // the whole list, others' entries first
  nlohmann::json hosts;    // data.hosts: by host, its state
  bool changed = false;    // differs from what the claim carries
  bool all_materialized = false;
  bool became_true = false;             // cxlkv.dev/composed turns True in this update
  bool fabric_reachable_again = false;  // an entry had fabric-reachable False
  // Hosts Materialized now and not in the claim's status for this region.
  std::vector<std::string> newly_materialized;
};
StatusUpdate ClaimStatusUpdate(const nlohmann::json& claim, const nlohmann::json& ours,
                               const RegionRef& ref, const fabric::MemoryRegion& region,
                               const std::string& driver);

// The status.devices with cxlkv.dev/fabric-reachable False on this driver's
// entries (added for the results when there are none); *changed false when
// every entry already says so.
nlohmann::json FabricDownDevices(const nlohmann::json& claim, const nlohmann::json& ours,
                                 const std::string& driver, const Status& why, bool* changed);

// The status.devices for a compose this allocation cannot get: composed
// False, compose-failed True with reason BudgetExceeded, NoSpace or
// InvalidRequest.
nlohmann::json ComposeFailedDevices(const nlohmann::json& claim, const nlohmann::json& ours,
                                    const std::string& driver, const Status& why);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_CONDITIONS_H_
