// Copyright cxlkv authors.
#include "testing/openapi_validator.h"

#include <fstream>

namespace cxlkv::kube::testing {

namespace {

const char* JsonTypeName(const Json& v) {
  if (v.is_string()) return "string";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_boolean()) return "boolean";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "null";
}

bool TypeMatches(const std::string& want, const Json& v) {
  if (want == "string") return v.is_string();
  if (want == "integer") return v.is_number_integer();
  if (want == "number") return v.is_number();
  if (want == "boolean") return v.is_boolean();
  if (want == "array") return v.is_array();
  if (want == "object") return v.is_object();
  return true;
}

}  // namespace

Status OpenApiValidator::Load(const std::string& path, std::unique_ptr<OpenApiValidator>* out) {
  std::ifstream f(path);
  if (!f)
    return Status::Error(Status::Code::kInvalidArgument, "load openapi " + path + ": cannot open");
  std::unique_ptr<OpenApiValidator> v(new OpenApiValidator());
  v->doc_ = Json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!v->doc_.is_object() || !v->doc_.contains("definitions")) {
    return Status::Error(Status::Code::kInvalidArgument,
                         "load openapi " + path + ": not an OpenAPI v2 document with definitions");
  }
  for (const auto& [name, def] : v->doc_["definitions"].items()) {
    if (!def.contains("x-kubernetes-group-version-kind")) continue;
    for (const auto& gvk : def["x-kubernetes-group-version-kind"]) {
      std::string group = gvk.value("group", "");
      std::string av =
          group.empty() ? gvk.value("version", "") : group + "/" + gvk.value("version", "");
      v->by_gvk_[av + "/" + gvk.value("kind", "")] = name;
    }
  }
  *out = std::move(v);
  return Status::OK();
}

std::string OpenApiValidator::DefinitionFor(const std::string& api_version,
                                            const std::string& kind) const {
  auto it = by_gvk_.find(api_version + "/" + kind);
  return it == by_gvk_.end() ? "" : it->second;
}

std::vector<std::string> OpenApiValidator::Validate(const std::string& def,
                                                    const Json& value) const {
  std::vector<std::string> problems;
  Check(Json{{"$ref", "#/definitions/" + def}}, value, "", &problems, 0);
  return problems;
}

std::vector<std::string> OpenApiValidator::ValidateObject(const Json& obj, bool* known) const {
  std::string def;
  if (obj.is_object()) def = DefinitionFor(obj.value("apiVersion", ""), obj.value("kind", ""));
  if (known != nullptr) *known = !def.empty();
  if (def.empty()) return {};
  return Validate(def, obj);
}

void OpenApiValidator::Check(const Json& schema, const Json& value, const std::string& path,
                             std::vector<std::string>* problems, int depth) const {
  if (depth > 64) return;  // definitions here are not recursive; guard anyway
  if (value.is_null()) return;
  const std::string where = path.empty() ? "." : path;
  if (schema.contains("$ref")) {
    std::string ref = schema["$ref"];
    const std::string prefix = "#/definitions/";
    if (ref.rfind(prefix, 0) != 0 || !doc_["definitions"].contains(ref.substr(prefix.size()))) {
      problems->push_back(where + ": unresolvable $ref " + ref);
      return;
    }
    Check(doc_["definitions"][ref.substr(prefix.size())], value, path, problems, depth + 1);
    return;
  }
  if (schema.contains("allOf")) {
    for (const auto& s : schema["allOf"]) Check(s, value, path, problems, depth + 1);
  }
  if (schema.contains("type") && schema["type"].is_string()) {
    std::string want = schema["type"];
    if (!TypeMatches(want, value)) {
      problems->push_back(where + ": want " + want + ", got " + JsonTypeName(value));
      return;
    }
  }
  if (value.is_object() && schema.contains("properties")) {
    const Json& props = schema["properties"];
    for (const auto& [k, v] : value.items()) {
      if (props.contains(k)) {
        Check(props[k], v, path + "." + k, problems, depth + 1);
      } else if (schema.contains("additionalProperties")) {
        Check(schema["additionalProperties"], v, path + "." + k, problems, depth + 1);
      } else {
        problems->push_back(path + "." + k + ": unknown field");
      }
    }
  } else if (value.is_object() && schema.contains("additionalProperties") &&
             schema["additionalProperties"].is_object()) {
    for (const auto& [k, v] : value.items()) {
      Check(schema["additionalProperties"], v, path + "." + k, problems, depth + 1);
    }
  }
  if (value.is_array() && schema.contains("items")) {
    for (size_t i = 0; i < value.size(); ++i) {
      Check(schema["items"], value[i], path + "[" + std::to_string(i) + "]", problems, depth + 1);
    }
  }
}

}  // namespace cxlkv::kube::testing
