// Copyright cxlkv authors.
#include "cxlkv/base/json.h"

namespace cxlkv::base {

using nlohmann::json;

Status ParseJson(const std::string& text, json* out) {
  try {
    *out = json::parse(text);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("malformed JSON: ") + e.what());
  }
  return Status::OK();
}

Status OptString(const json& j, const char* key, std::string* out) {
  if (!j.contains(key) || j[key].is_null()) return Status::OK();
  if (!j[key].is_string()) return Status::InvalidArgument(std::string(key) + ": must be a string");
  *out = j[key].get<std::string>();
  return Status::OK();
}

Status OptInt(const json& j, const char* key, int64_t* out) {
  if (!j.contains(key) || j[key].is_null()) return Status::OK();
  if (!j[key].is_number_integer()) {
    return Status::InvalidArgument(std::string(key) + ": must be an integer");
  }
  *out = j[key].get<int64_t>();
  return Status::OK();
}

Status OptStrings(const json& j, const char* key, std::vector<std::string>* out) {
  if (!j.contains(key) || j[key].is_null()) return Status::OK();
  if (!j[key].is_array()) return Status::InvalidArgument(std::string(key) + ": must be an array");
  for (const auto& v : j[key]) {
    if (!v.is_string())
      return Status::InvalidArgument(std::string(key) + ": items must be strings");
    out->push_back(v.get<std::string>());
  }
  return Status::OK();
}

}  // namespace cxlkv::base
