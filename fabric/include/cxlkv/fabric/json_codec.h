// Copyright cxlkv authors.
//
// The fabric wire codec: JSON shapes of the CFM API (memoryRegion,
// composeMemoryRequest) plus the share extension in
// fabric/api/cxlkv-overlay.yaml, and the state form of a region. Both sides
// of the wire use it: FabricClient and LocalComposer here, the emulator
// cxlkv-fabricd (fabricd/) there. Decoders accept what a real cfm-service
// sends: unknown and missing optional fields are tolerated; wrong types are
// InvalidArgument naming the field.
//
// Thread-safety: pure functions.
#ifndef CXLKV_FABRIC_JSON_CODEC_H_
#define CXLKV_FABRIC_JSON_CODEC_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "cxlkv/fabric/types.h"
#include "cxlkv/status.h"

namespace cxlkv::fabric {

// A memoryRegion as the API answers it. RegionFromJson: InvalidArgument for
// a wrong type or an unknown enum value (the field named).
nlohmann::json RegionToJson(const MemoryRegion& r);
Status RegionFromJson(const nlohmann::json& j, MemoryRegion* r);

// A composeMemoryRequest. ComposeRequestFromJson validates as the OpenAPI
// schema does (required fields, QoS enum, types): InvalidArgument otherwise.
nlohmann::json ComposeRequestToJson(const ComposeRequest& req);
Status ComposeRequestFromJson(const nlohmann::json& j, ComposeRequest* req);

// The share extension's assignment epoch (docs/fabric.md, "Assignment
// epochs") under `key` of object j into *out; 0 when absent.
// InvalidArgument: present but not a non-negative integer.
Status OptEpoch(const nlohmann::json& j, const char* key, uint64_t* out);

// Full state form of a region (adds blocks and qos), for persistence.
// RegionFromStateJson: InvalidArgument as RegionFromJson.
nlohmann::json RegionToStateJson(const MemoryRegion& r);
Status RegionFromStateJson(const nlohmann::json& j, MemoryRegion* r);

}  // namespace cxlkv::fabric

#endif  // CXLKV_FABRIC_JSON_CODEC_H_
