// Copyright cxlkv authors.
//
// JSON shapes of the CFM API (memoryRegion, composeMemoryRequest, the error
// body) plus the share extension in fabric/api/cxlkv-overlay.yaml. Decoders
// accept what a real cfm-service sends: unknown and missing optional fields
// are tolerated; wrong types are InvalidArgument.
#ifndef CXLKV_FABRIC_JSON_CODEC_H_
#define CXLKV_FABRIC_JSON_CODEC_H_

#include <nlohmann/json.hpp>
#include <string>

#include "cxlkv/fabric/types.h"
#include "cxlkv/status.h"

namespace cxlkv::fabric::internal {

nlohmann::json RegionToJson(const MemoryRegion& r);
Status RegionFromJson(const nlohmann::json& j, MemoryRegion* r);

nlohmann::json ComposeRequestToJson(const ComposeRequest& req);
// Validates as the OpenAPI schema does (required fields, QoS enum, types).
Status ComposeRequestFromJson(const nlohmann::json& j, ComposeRequest* req);

// The share extension's assignment epoch `key` of object j into *out (0 when
// absent). InvalidArgument: present but not a non-negative integer.
Status OptEpoch(const nlohmann::json& j, const char* key, uint64_t* out);

// Full state form of a region (adds blocks and qos), for persistence.
nlohmann::json RegionToStateJson(const MemoryRegion& r);
Status RegionFromStateJson(const nlohmann::json& j, MemoryRegion* r);

}  // namespace cxlkv::fabric::internal

#endif  // CXLKV_FABRIC_JSON_CODEC_H_
