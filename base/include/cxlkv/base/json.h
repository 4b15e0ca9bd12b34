// Copyright cxlkv authors.
//
// Reading JSON that came from outside (request bodies, state files, answers
// of other daemons): parse errors and wrong types become InvalidArgument
// with the field's name, never an exception.
//
// Thread-safety: free functions.
#ifndef CXLKV_BASE_JSON_H_
#define CXLKV_BASE_JSON_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cxlkv/status.h"

namespace cxlkv::base {

// Parses text; InvalidArgument "malformed JSON: <cause>" on syntax errors.
Status ParseJson(const std::string& text, nlohmann::json* out);

// Optional fields of object `j`: absent or null leaves *out unchanged;
// another type than the one asked for is InvalidArgument "<key>: must be ...".
Status OptString(const nlohmann::json& j, const char* key, std::string* out);
Status OptInt(const nlohmann::json& j, const char* key, int64_t* out);
// Appends the strings of an array field.
Status OptStrings(const nlohmann::json& j, const char* key, std::vector<std::string>* out);

}  // namespace cxlkv::base

#endif  // CXLKV_BASE_JSON_H_
