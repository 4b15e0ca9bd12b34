// Copyright cxlkv authors.
#include "cxlkv/fabric/json_codec.h"

#include <algorithm>

#include "cxlkv/base/json.h"

namespace cxlkv::fabric {

using nlohmann::json;

using base::OptInt;
using base::OptString;
using base::OptStrings;

Status OptEpoch(const json& j, const char* key, uint64_t* out) {
  *out = 0;
  if (!j.contains(key)) return Status::OK();
  const json& v = j[key];
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    return Status::InvalidArgument(std::string(key) + ": must be a non-negative integer");
  }
  *out = v.get<uint64_t>();
  return Status::OK();
}

json RegionToJson(const MemoryRegion& r) {
  json j = {{"id", r.id}, {"type", "MemoryTypeRegion"}, {"sizeMiB", r.size_mib}};
  if (r.status != RegionStatus::kUnknown) j["status"] = ToString(r.status);
  if (!r.appliance_id.empty()) j["memoryApplianceId"] = r.appliance_id;
  if (!r.blade_id.empty()) j["memoryBladeId"] = r.blade_id;
  // CFM reports one port/host; the first mapping fills those fields.
  if (!r.mappings.empty()) {
    const Mapping& m = r.mappings.front();
    j["memoryAppliancePort"] = m.appliance_port;
    if (!m.host_id.empty()) j["mappedHostId"] = m.host_id;
    if (!m.host_port.empty()) j["mappedHostPort"] = m.host_port;
  }
  j["shareCount"] = r.share_count;
  if (!r.claim_uid.empty()) j["claimUid"] = r.claim_uid;
  if (r.qos > 0) j["QoS"] = r.qos;
  if (!r.backing_path.empty()) j["backingPath"] = r.backing_path;
  json maps = json::array();
  for (const Mapping& m : r.mappings) {
    json mj = {{"appliancePort", m.appliance_port},
               {"materialization", ToString(m.materialization)}};
    if (!m.host_id.empty()) mj["hostId"] = m.host_id;
    if (!m.host_port.empty()) mj["hostPort"] = m.host_port;
    if (!m.error.empty()) mj["error"] = m.error;
    if (!m.device.empty()) mj["device"] = m.device;
    if (m.assign_epoch > 0) mj["assignEpoch"] = m.assign_epoch;
    maps.push_back(std::move(mj));
  }
  j["mappings"] = std::move(maps);
  if (r.assign_epoch > 0) j["assignEpoch"] = r.assign_epoch;
  return j;
}

Status RegionFromJson(const json& j, MemoryRegion* r) {
  if (!j.is_object()) return Status::InvalidArgument("memoryRegion: must be an object");
  MemoryRegion out;
  CXLKV_RETURN_IF_ERROR(OptString(j, "id", &out.id));
  if (out.id.empty()) return Status::InvalidArgument("memoryRegion: id missing");
  std::string status;
  CXLKV_RETURN_IF_ERROR(OptString(j, "status", &status));
  // A real cfm-service's own status strings read as kUnknown.
  if (!ParseRegionStatus(status, &out.status)) out.status = RegionStatus::kUnknown;
  CXLKV_RETURN_IF_ERROR(OptInt(j, "sizeMiB", &out.size_mib));
  CXLKV_RETURN_IF_ERROR(OptString(j, "memoryApplianceId", &out.appliance_id));
  CXLKV_RETURN_IF_ERROR(OptString(j, "memoryBladeId", &out.blade_id));
  CXLKV_RETURN_IF_ERROR(OptString(j, "claimUid", &out.claim_uid));
  CXLKV_RETURN_IF_ERROR(OptString(j, "backingPath", &out.backing_path));
  int64_t v = 1;
  CXLKV_RETURN_IF_ERROR(OptInt(j, "shareCount", &v));
  out.share_count = static_cast<int>(v);
  v = 0;
  CXLKV_RETURN_IF_ERROR(OptInt(j, "QoS", &v));
  out.qos = static_cast<int>(v);
  CXLKV_RETURN_IF_ERROR(OptEpoch(j, "assignEpoch", &out.assign_epoch));
  if (j.contains("mappings") && j["mappings"].is_array()) {
    for (const auto& mj : j["mappings"]) {
      if (!mj.is_object()) return Status::InvalidArgument("mappings: items must be objects");
      Mapping m;
      CXLKV_RETURN_IF_ERROR(OptString(mj, "appliancePort", &m.appliance_port));
      CXLKV_RETURN_IF_ERROR(OptString(mj, "hostId", &m.host_id));
      CXLKV_RETURN_IF_ERROR(OptString(mj, "hostPort", &m.host_port));
      std::string state;
      CXLKV_RETURN_IF_ERROR(OptString(mj, "materialization", &state));
      if (!state.empty() && !ParseMaterialization(state, &m.materialization)) {
        return Status::InvalidArgument("mappings: materialization: unknown value \"" + state +
                                       "\"");
      }
      CXLKV_RETURN_IF_ERROR(OptString(mj, "error", &m.error));
      CXLKV_RETURN_IF_ERROR(OptString(mj, "device", &m.device));
      CXLKV_RETURN_IF_ERROR(OptEpoch(mj, "assignEpoch", &m.assign_epoch));
      out.mappings.push_back(std::move(m));
    }
  } else {
    // A real cfm-service: one port, one host at most.
    Mapping m;
    CXLKV_RETURN_IF_ERROR(OptString(j, "memoryAppliancePort", &m.appliance_port));
    CXLKV_RETURN_IF_ERROR(OptString(j, "mappedHostId", &m.host_id));
    CXLKV_RETURN_IF_ERROR(OptString(j, "mappedHostPort", &m.host_port));
    if (!m.appliance_port.empty() && m.appliance_port != "NOT_IMPLEMENTED") {
      m.materialization = Materialization::kNoAgent;
      out.mappings.push_back(std::move(m));
    }
  }
  *r = std::move(out);
  return Status::OK();
}

json RegionToStateJson(const MemoryRegion& r) {
  json j = RegionToJson(r);
  j["blocks"] = r.blocks;
  return j;
}

Status RegionFromStateJson(const json& j, MemoryRegion* r) {
  CXLKV_RETURN_IF_ERROR(RegionFromJson(j, r));
  if (!j.contains("blocks") || !j["blocks"].is_array()) {
    return Status::Corruption("region " + r->id + ": blocks missing");
  }
  for (const auto& b : j["blocks"]) {
    if (!b.is_number_integer()) return Status::Corruption("region " + r->id + ": bad block");
    r->blocks.push_back(b.get<int>());
  }
  // The next assign must take an epoch no mapping has had (a state file
  // written before epochs has none: 0 everywhere).
  for (const Mapping& m : r->mappings) r->assign_epoch = std::max(r->assign_epoch, m.assign_epoch);
  return Status::OK();
}

json ComposeRequestToJson(const ComposeRequest& req) {
  json j = {{"memorySizeMiB", req.size_mib}, {"QoS", req.qos}};
  if (!req.port.empty()) j["Port"] = req.port;
  if (req.share_count > 0) j["shareCount"] = req.share_count;
  if (!req.candidate_hosts.empty()) j["candidateHosts"] = req.candidate_hosts;
  if (!req.candidate_ports.empty()) j["candidatePorts"] = req.candidate_ports;
  if (!req.claim_uid.empty()) j["claimUid"] = req.claim_uid;
  return j;
}

Status ComposeRequestFromJson(const json& j, ComposeRequest* req) {
  if (!j.is_object()) return Status::InvalidArgument("request body must be a JSON object");
  ComposeRequest out;
  if (!j.contains("memorySizeMiB")) return Status::InvalidArgument("memorySizeMiB is required");
  if (!j.contains("QoS")) return Status::InvalidArgument("QoS is required");
  CXLKV_RETURN_IF_ERROR(OptInt(j, "memorySizeMiB", &out.size_mib));
  if (j["memorySizeMiB"].is_null()) return Status::InvalidArgument("memorySizeMiB is required");
  if (out.size_mib < 1) return Status::InvalidArgument("memorySizeMiB must be >= 1");
  int64_t qos = 0;
  CXLKV_RETURN_IF_ERROR(OptInt(j, "QoS", &qos));
  if (qos != 1 && qos != 2 && qos != 4 && qos != 8) {
    return Status::InvalidArgument("QoS must be 1, 2, 4 or 8");
  }
  out.qos = static_cast<int>(qos);
  CXLKV_RETURN_IF_ERROR(OptString(j, "Port", &out.port));
  if (out.port.size() > 256) return Status::InvalidArgument("Port: longer than 256");
  int64_t share = 0;
  CXLKV_RETURN_IF_ERROR(OptInt(j, "shareCount", &share));
  if (j.contains("shareCount") && (share < 1 || share > 64)) {
    return Status::InvalidArgument("shareCount must be 1..64");
  }
  out.share_count = static_cast<int>(share);
  CXLKV_RETURN_IF_ERROR(OptStrings(j, "candidateHosts", &out.candidate_hosts));
  CXLKV_RETURN_IF_ERROR(OptStrings(j, "candidatePorts", &out.candidate_ports));
  CXLKV_RETURN_IF_ERROR(OptString(j, "claimUid", &out.claim_uid));
  *req = std::move(out);
  return Status::OK();
}

}  // namespace cxlkv::fabric
