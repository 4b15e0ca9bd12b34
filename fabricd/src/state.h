// Copyright cxlkv authors.
//
// FabricState: everything cxlkv-fabricd knows, as one value. The topology
// (geometry, cabling, agents) comes from the config at every start; what the
// API changed (managed flags, renamed ids, composed regions) is persisted in
// <stateDir>/fabric-state.json with atomic writes. Block usage is derived from
// the regions, never stored, so the two cannot disagree.
#ifndef CXLKV_FABRIC_STATE_H_
#define CXLKV_FABRIC_STATE_H_

#include <map>
#include <string>
#include <vector>

#include "allocator.h"
#include "cxlkv/fabric/types.h"
#include "cxlkv/fabricd/config.h"
#include "cxlkv/status.h"

namespace cxlkv::fabric::internal {

struct BladeState {
  std::string id;         // current id (PUT ?newBladeId= renames it)
  std::string config_id;  // id in the config file
  bool managed = true;
  BladeGeometry geometry;
  std::vector<PortConfig> ports;
  std::vector<bool> used;  // derived from regions
  int64_t TotalMiB() const {
    return geometry.block_mib * geometry.channels * geometry.blocks_per_channel;
  }
  int64_t AllocatedMiB() const;
  const PortConfig* FindPort(const std::string& port_id) const;
};

struct ApplianceState {
  std::string id, config_id;
  bool managed = true;
  std::vector<BladeState> blades;
  BladeState* FindBlade(const std::string& id);
  const BladeState* FindBlade(const std::string& id) const {
    return const_cast<ApplianceState*>(this)->FindBlade(id);
  }
};

struct HostState {
  std::string id, config_id;
  bool managed = true;
  std::string agent;
  int64_t local_memory_mib = 0;
};

struct FabricState {
  std::vector<ApplianceState> appliances;
  std::vector<HostState> hosts;
  std::map<std::string, MemoryRegion> regions;  // by memory id

  ApplianceState* FindAppliance(const std::string& id);  // managed only
  const ApplianceState* FindAppliance(const std::string& id) const {
    return const_cast<FabricState*>(this)->FindAppliance(id);
  }
  HostState* FindHost(const std::string& id);  // managed only
  // Recomputes every blade's `used` from the regions. Corruption when two
  // regions claim one block or a block is out of range.
  Status RebuildUsage();
};

// Builds the topology from config, overlays the persisted JSON (may be "" for
// a first start). Corruption on a state file that does not parse.
Status BuildState(const FabricConfig& config, const std::string& persisted, FabricState* out);

// Serialises the API-changed parts of the state.
std::string SerializeState(const FabricState& s);

}  // namespace cxlkv::fabric::internal

#endif  // CXLKV_FABRIC_STATE_H_
