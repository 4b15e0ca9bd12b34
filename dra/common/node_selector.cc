// Copyright cxlkv authors.
#include "common/node_selector.h"

#include <algorithm>
#include <cstdlib>

namespace cxlkv::dra {

using nlohmann::json;

namespace {

// One requirement against a value that may be absent (`has`).
Status Requirement(const json& req, bool has, const std::string& value, bool* ok) {
  if (!req.is_object() || !req.contains("operator") || !req["operator"].is_string()) {
    return Status::InvalidArgument("node selector requirement without operator: " + req.dump());
  }
  const std::string op = req["operator"].get<std::string>();
  std::vector<std::string> values;
  if (req.contains("values")) {
    if (!req["values"].is_array()) {
      return Status::InvalidArgument("node selector values is not a list: " + req.dump());
    }
    for (const auto& v : req["values"]) {
      if (!v.is_string()) return Status::InvalidArgument("node selector value: " + v.dump());
      values.push_back(v.get<std::string>());
    }
  }
  auto in = [&] { return has && std::find(values.begin(), values.end(), value) != values.end(); };
  if (op == "In") {
    *ok = in();
  } else if (op == "NotIn") {
    *ok = !in();
  } else if (op == "Exists") {
    *ok = has;
  } else if (op == "DoesNotExist") {
    *ok = !has;
  } else if (op == "Gt" || op == "Lt") {
    if (values.size() != 1) return Status::InvalidArgument(op + " needs exactly one value");
    char* end = nullptr;
    long long want = std::strtoll(values[0].c_str(), &end, 10);
    if (*end != '\0' || values[0].empty()) {
      return Status::InvalidArgument(op + " value is not an integer: " + values[0]);
    }
    long long got = std::strtoll(value.c_str(), &end, 10);
    bool numeric = has && !value.empty() && *end == '\0';
    *ok = numeric && (op == "Gt" ? got > want : got < want);
  } else {
    return Status::InvalidArgument("unknown node selector operator \"" + op + "\"");
  }
  return Status::OK();
}

Status TermMatches(const json& term, const json& node, bool* match) {
  *match = false;
  const json labels =
      node.contains("metadata") ? node["metadata"].value("labels", json::object()) : json::object();
  const std::string name =
      node.contains("metadata") ? node["metadata"].value("name", std::string()) : "";
  bool any = false;
  for (const auto& e : term.value("matchExpressions", json::array())) {
    any = true;
    std::string key = e.value("key", "");
    bool has = labels.contains(key) && labels[key].is_string();
    bool ok = false;
    CXLKV_RETURN_IF_ERROR(Requirement(e, has, has ? labels[key].get<std::string>() : "", &ok));
    if (!ok) return Status::OK();
  }
  for (const auto& f : term.value("matchFields", json::array())) {
    any = true;
    std::string key = f.value("key", "");
    if (key != "metadata.name") {
      return Status::InvalidArgument("unsupported node selector field \"" + key + "\"");
    }
    bool ok = false;
    CXLKV_RETURN_IF_ERROR(Requirement(f, true, name, &ok));
    if (!ok) return Status::OK();
  }
  *match = any;  // an empty term matches nothing
  return Status::OK();
}

}  // namespace

Status NodeSelectorMatches(const json& selector, const json& node, bool* match) {
  *match = false;
  if (!selector.is_object()) return Status::InvalidArgument("node selector is not an object");
  const json terms = selector.value("nodeSelectorTerms", json::array());
  if (!terms.is_array()) return Status::InvalidArgument("nodeSelectorTerms is not a list");
  for (const auto& term : terms) {
    if (!term.is_object()) return Status::InvalidArgument("node selector term is not an object");
    bool m = false;
    CXLKV_RETURN_IF_ERROR(TermMatches(term, node, &m));
    if (m) {
      *match = true;
      return Status::OK();
    }
  }
  return Status::OK();
}

std::vector<std::string> SelectorHostnames(const json& selector) {
  std::vector<std::string> out;
  auto add = [&](const json& req, const char* key) {
    if (!req.is_object() || req.value("key", "") != key || req.value("operator", "") != "In")
      return;
    for (const auto& v : req.value("values", json::array())) {
      if (v.is_string() && std::find(out.begin(), out.end(), v.get<std::string>()) == out.end()) {
        out.push_back(v.get<std::string>());
      }
    }
  };
  if (!selector.is_object()) return out;
  for (const auto& term : selector.value("nodeSelectorTerms", json::array())) {
    if (!term.is_object()) continue;
    for (const auto& e : term.value("matchExpressions", json::array())) {
      add(e, "kubernetes.io/hostname");
    }
    for (const auto& f : term.value("matchFields", json::array())) add(f, "metadata.name");
  }
  return out;
}

}  // namespace cxlkv::dra
