// Copyright cxlkv authors.
#include "controller/annotations.h"

#include <nlohmann/json.hpp>

namespace cxlkv::dra {

using nlohmann::json;

std::string EncodeRegionAnnotation(const RegionRef& ref) {
  // nlohmann's object is a std::map: the keys come out sorted.
  return json{{"applianceId", ref.appliance_id},
              {"bladeId", ref.blade_id},
              {"memoryId", ref.memory_id},
              {"allocationTimestamp", ref.allocation_timestamp},
              {"sizeMiB", ref.size_mib}}
      .dump();
}

RegionRef ParseRegionAnnotation(const std::string& text) {
  RegionRef r;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return r;
  try {
    r.appliance_id = j.value("applianceId", "");
    r.blade_id = j.value("bladeId", "");
    r.memory_id = j.value("memoryId", "");
    r.allocation_timestamp = j.value("allocationTimestamp", "");
    r.size_mib = j.value("sizeMiB", int64_t{0});
  } catch (const json::exception&) {
    // A key of the wrong type: the value is not one this driver wrote.
    return RegionRef();
  }
  return r;
}

}  // namespace cxlkv::dra
