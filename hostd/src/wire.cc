// Copyright cxlkv authors.
#include "wire.h"

#include "cxlkv/fabric/json_codec.h"

namespace cxlkv::hostd::wire {

using nlohmann::json;

json MaterializeRequestToJson(const MaterializeRequest& req) {
  // The request the fabric manager has always sent; a local pool's
  // controller sends the same shape (its ports empty, its epoch 0).
  return {{"allocationId", req.allocation_id},   {"sizeBytes", req.size_bytes},
          {"offsetBytes", req.offset_bytes},     {"backingPath", req.backing_path},
          {"applianceId", req.appliance_id},     {"bladeId", req.blade_id},
          {"appliancePort", req.appliance_port}, {"hostPort", req.host_port},
          {"assignEpoch", req.assign_epoch}};
}

Status OptByteCount(const json& j, const char* key, uint64_t* out) {
  *out = 0;
  if (!j.contains(key)) return Status::OK();
  const json& v = j[key];
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    return Status::InvalidArgument(std::string(key) + ": must be a non-negative integer");
  }
  *out = v.get<uint64_t>();
  return Status::OK();
}

Status RegionRequestFromJson(const json& body, RegionRequest* r) {
  if (!body.is_object()) return Status::InvalidArgument("region request: body must be an object");
  if (!body.contains("sizeBytes")) {
    return Status::InvalidArgument("region request: sizeBytes is required");
  }
  Status s = OptByteCount(body, "sizeBytes", &r->size_bytes);
  if (s.ok()) s = OptByteCount(body, "offsetBytes", &r->offset_bytes);
  if (s.ok()) s = fabric::OptEpoch(body, "assignEpoch", &r->assign_epoch);
  if (s.ok() && body.contains("backingPath") && !body["backingPath"].is_string()) {
    s = Status::InvalidArgument("backingPath: must be a string");
  }
  if (!s.ok()) return Status::InvalidArgument("region request: " + s.message());
  r->backing_path = body.value("backingPath", "");
  return Status::OK();
}

json DeviceToJson(const Device& d, const std::string& cdi_device) {
  return {{"allocationId", d.allocation_id},
          {"kind", d.kind},
          {"device", d.path},
          {"sizeBytes", d.size_bytes},
          {"offsetBytes", d.offset_bytes},
          {"cdiDevice", cdi_device},
          {"assignEpoch", d.assign_epoch}};
}

Status HostRegionFromJson(const json& j, HostRegion* r) {
  try {
    r->allocation_id = j.at("allocationId").get<std::string>();
    r->device = j.value("device", "");
    r->size_bytes = j.value("sizeBytes", uint64_t{0});
    r->cdi_device = j.at("cdiDevice").get<std::string>();
    r->assign_epoch = j.value("assignEpoch", uint64_t{0});
  } catch (const json::exception& e) {
    return Status::IOError(std::string("unexpected region JSON: ") + e.what());
  }
  return Status::OK();
}

}  // namespace cxlkv::hostd::wire
