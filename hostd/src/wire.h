// Copyright cxlkv authors.
//
// The host agent's wire shapes, for both ends: the server
// (agent_server.cc) and the one client (client.cc). Private to hostd/.
//
//   PUT  /cxlkv/v1/regions/{id}          body: MaterializeRequestToJson
//   POST /cxlkv/v1/regions/{id}/spec     answer: DeviceToJson
//   POST /cxlkv/v1/regions/{id}/release  body: {"assignEpoch": N} (optional)
//   DELETE /cxlkv/v1/regions/{id}
//   GET  /cxlkv/v1/regions               answer: {"hostId", "regions": [DeviceToJson...]}
//   errors: {"error": "<message>"}
//
// Thread-safety: pure functions.
#ifndef CXLKV_HOSTD_WIRE_H_
#define CXLKV_HOSTD_WIRE_H_

#include <nlohmann/json.hpp>
#include <string>

#include "cxlkv/hostd/client.h"
#include "cxlkv/hostd/materializer.h"
#include "cxlkv/status.h"

namespace cxlkv::hostd::wire {

// The materialize request (all but the id, which is in the path).
nlohmann::json MaterializeRequestToJson(const MaterializeRequest& req);
// Reads one into *r (all but the id). InvalidArgument naming the field:
// not an object, sizeBytes missing, a size or offset that is not a
// non-negative integer, a bad assignEpoch, a backingPath not a string.
Status RegionRequestFromJson(const nlohmann::json& body, RegionRequest* r);

// A byte count (size or offset) under `key` of object j into *out; 0 when
// absent. InvalidArgument: present but not a non-negative integer (json's
// get<uint64_t>() would cast -1 to 2^64-1: an offset that wrapped the backing
// file's bounds check).
Status OptByteCount(const nlohmann::json& j, const char* key, uint64_t* out);

// A materialized device as hostd describes it (cdi_device: its fully
// qualified CDI name, CdiDeviceName), and back.
nlohmann::json DeviceToJson(const Device& d, const std::string& cdi_device);
// IOError "unexpected region JSON: ..." for a missing or mistyped field.
Status HostRegionFromJson(const nlohmann::json& j, HostRegion* r);

}  // namespace cxlkv::hostd::wire

#endif  // CXLKV_HOSTD_WIRE_H_
