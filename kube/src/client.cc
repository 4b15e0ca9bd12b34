// Copyright cxlkv authors.
#include "cxlkv/kube/client.h"

#include <utility>

#include "http.h"

namespace cxlkv::kube {

using internal::HttpRequest;
using internal::HttpResponse;

struct Client::Rep {
  Rep(const Config& c, const ClientOptions& o) : config(c), options(o), transport(c, o) {}
  const Config config;
  const ClientOptions options;
  internal::Transport transport;
};

namespace {

// "<resource> <ns>/<name>" or "<resource> <name>", for error context.
std::string Describe(const ResourceType& type, const std::string& ns, const std::string& name) {
  std::string d = type.resource + " ";
  if (type.namespaced && !ns.empty()) d += ns + "/";
  return d + name;
}

void AddParam(std::string* q, const std::string& k, const std::string& v) {
  if (v.empty()) return;
  if (!q->empty()) *q += "&";
  *q += k + "=" + QueryEscape(v);
}

std::string WriteQuery(const WriteOptions& o, bool apply) {
  std::string q;
  AddParam(&q, "fieldManager", o.field_manager);
  if (o.dry_run) AddParam(&q, "dryRun", "All");
  AddParam(&q, "fieldValidation", o.field_validation);
  if (apply && o.force) AddParam(&q, "force", "true");
  return q;
}

// Fills apiVersion/kind when absent; refuses a mismatch.
Status Stamp(const ResourceType& type, const Json& in, Json* out) {
  if (!in.is_object())
    return Status::Error(Status::Code::kInvalidArgument, "object is not a JSON object");
  *out = in;
  if (!out->contains("apiVersion")) (*out)["apiVersion"] = type.api_version();
  if (!out->contains("kind")) (*out)["kind"] = type.kind;
  if ((*out)["apiVersion"] != type.api_version() || (*out)["kind"] != type.kind) {
    return Status::Error(Status::Code::kInvalidArgument,
                         "object is " + (*out)["apiVersion"].dump() + " " + (*out)["kind"].dump() +
                             ", want " + type.api_version() + " " + type.kind);
  }
  return Status::OK();
}

std::string NameOf(const Json& obj) {
  if (obj.contains("metadata") && obj["metadata"].is_object()) {
    return obj["metadata"].value("name", "");
  }
  return "";
}

}  // namespace

std::string QueryEscape(const std::string& s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string ResourcePath(const ResourceType& type, const std::string& ns, const std::string& name,
                         const std::string& subresource) {
  std::string p = type.base_path();
  if (type.namespaced && !ns.empty()) p += "/namespaces/" + ns;
  p += "/" + type.resource;
  if (!name.empty()) p += "/" + name;
  if (!subresource.empty()) p += "/" + subresource;
  return p;
}

std::string ObjectKey(const Json& obj) {
  if (!obj.contains("metadata")) return "";
  const Json& m = obj["metadata"];
  std::string ns = m.value("namespace", "");
  std::string name = m.value("name", "");
  return ns.empty() ? name : ns + "/" + name;
}

Status Client::New(const Config& config, const ClientOptions& options,
                   std::unique_ptr<Client>* out) {
  if (config.server.rfind("https://", 0) != 0) {
    return Status::Error(
        Status::Code::kInvalidArgument,
        "create client: server must be https://host:port, got \"" + config.server + "\"");
  }
  out->reset(new Client(std::make_unique<Rep>(config, options)));
  return Status::OK();
}

Client::Client(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
Client::~Client() = default;
const Config& Client::config() const { return rep_->config; }

Status Client::Raw(const std::string& method, const std::string& path, const std::string& query,
                   const std::string& content_type, const std::string& body, Json* out) {
  HttpRequest req;
  req.method = method;
  req.path_and_query = query.empty() ? path : path + "?" + query;
  req.content_type = content_type;
  req.body = body;
  req.timeout_ms = rep_->options.request_timeout_ms;
  if (!body.empty() && rep_->options.on_request_body) {
    rep_->options.on_request_body(method, path, body);
  }
  HttpResponse resp;
  Status s = rep_->transport.Do(req, &resp);
  if (!s.ok()) return s;
  if (resp.status < 200 || resp.status >= 300) return internal::ErrorFromResponse(resp);
  if (out != nullptr) {
    *out = Json::parse(resp.body, nullptr, /*allow_exceptions=*/false);
    if (out->is_discarded()) {
      *out = Json(resp.body);  // e.g. "/readyz" answers plain text
    }
  }
  return Status::OK();
}

Status Client::Get(const ResourceType& type, const std::string& ns, const std::string& name,
                   Json* out) {
  return Raw("GET", ResourcePath(type, ns, name), "", "", "", out)
      .WithContext("get " + Describe(type, ns, name));
}

Status Client::List(const ResourceType& type, const std::string& ns, const ListOptions& o,
                    Json* out) {
  std::string q;
  AddParam(&q, "labelSelector", o.label_selector);
  AddParam(&q, "fieldSelector", o.field_selector);
  if (o.limit > 0) AddParam(&q, "limit", std::to_string(o.limit));
  AddParam(&q, "continue", o.continue_token);
  AddParam(&q, "resourceVersion", o.resource_version);
  return Raw("GET", ResourcePath(type, ns), q, "", "", out).WithContext("list " + type.resource);
}

Status Client::Create(const ResourceType& type, const std::string& ns, const Json& obj, Json* out,
                      const WriteOptions& o) {
  Json body;
  Status s = Stamp(type, obj, &body);
  if (s.ok()) {
    s = Raw("POST", ResourcePath(type, ns), WriteQuery(o, false), "application/json", body.dump(),
            out);
  }
  return s.WithContext("create " + Describe(type, ns, NameOf(obj)));
}

Status Client::Update(const ResourceType& type, const std::string& ns, const Json& obj, Json* out,
                      const WriteOptions& o) {
  Json body;
  Status s = Stamp(type, obj, &body);
  std::string name = NameOf(obj);
  if (s.ok() && name.empty()) s = Status::Error(Status::Code::kInvalidArgument, "no metadata.name");
  if (s.ok()) {
    s = Raw("PUT", ResourcePath(type, ns, name), WriteQuery(o, false), "application/json",
            body.dump(), out);
  }
  return s.WithContext("update " + Describe(type, ns, name));
}

Status Client::UpdateStatus(const ResourceType& type, const std::string& ns, const Json& obj,
                            Json* out, const WriteOptions& o) {
  Json body;
  Status s = Stamp(type, obj, &body);
  std::string name = NameOf(obj);
  if (s.ok() && name.empty()) s = Status::Error(Status::Code::kInvalidArgument, "no metadata.name");
  if (s.ok()) {
    s = Raw("PUT", ResourcePath(type, ns, name, "status"), WriteQuery(o, false), "application/json",
            body.dump(), out);
  }
  return s.WithContext("update status of " + Describe(type, ns, name));
}

Status Client::Patch(const ResourceType& type, const std::string& ns, const std::string& name,
                     PatchType pt, const Json& patch, Json* out, const WriteOptions& o,
                     const std::string& subresource) {
  const char* ct = "application/merge-patch+json";
  switch (pt) {
    case PatchType::kMerge:
      break;
    case PatchType::kJson:
      ct = "application/json-patch+json";
      break;
    case PatchType::kStrategicMerge:
      ct = "application/strategic-merge-patch+json";
      break;
    case PatchType::kApply:
      ct = "application/apply-patch+yaml";
      break;
  }
  std::string what =
      "patch " + Describe(type, ns, name) + (subresource.empty() ? "" : "/" + subresource);
  if (pt == PatchType::kApply && o.field_manager.empty()) {
    return Status::Error(Status::Code::kInvalidArgument,
                         what + ": server-side apply needs a field manager");
  }
  Json body = patch;
  if (pt == PatchType::kApply) {
    Status s = Stamp(type, patch, &body);  // apply bodies are full objects
    if (!s.ok()) return s.WithContext(what);
  }
  // JSON is a subset of YAML, so an apply patch can be sent as JSON text.
  return Raw("PATCH", ResourcePath(type, ns, name, subresource),
             WriteQuery(o, pt == PatchType::kApply), ct, body.dump(), out)
      .WithContext(what);
}

Status Client::Delete(const ResourceType& type, const std::string& ns, const std::string& name,
                      const DeleteOptions& o, Json* out) {
  Json body = {{"apiVersion", "v1"}, {"kind", "DeleteOptions"}};
  if (o.uid || o.resource_version) {
    Json pre = Json::object();
    if (o.uid) pre["uid"] = *o.uid;
    if (o.resource_version) pre["resourceVersion"] = *o.resource_version;
    body["preconditions"] = pre;
  }
  if (o.grace_period_seconds) body["gracePeriodSeconds"] = *o.grace_period_seconds;
  if (!o.propagation_policy.empty()) body["propagationPolicy"] = o.propagation_policy;
  return Raw("DELETE", ResourcePath(type, ns, name), "", "application/json", body.dump(), out)
      .WithContext("delete " + Describe(type, ns, name));
}

Status Client::Watch(const ResourceType& type, const std::string& ns, const WatchOptions& o,
                     const std::function<bool(const WatchEvent&)>& on_event,
                     const std::atomic<bool>* stop) {
  std::string q = "watch=true";
  AddParam(&q, "labelSelector", o.label_selector);
  AddParam(&q, "fieldSelector", o.field_selector);
  AddParam(&q, "resourceVersion", o.resource_version);
  if (o.allow_bookmarks) AddParam(&q, "allowWatchBookmarks", "true");
  if (o.timeout_seconds > 0) AddParam(&q, "timeoutSeconds", std::to_string(o.timeout_seconds));

  // The apiserver frames a JSON watch stream as one event per line.
  std::string pending;
  Status parse_error;
  HttpRequest req;
  req.path_and_query = ResourcePath(type, ns) + "?" + q;
  req.stop = stop;
  req.on_data = [&](std::string_view chunk) {
    pending.append(chunk);
    size_t start = 0, nl;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      std::string_view line(pending.data() + start, nl - start);
      start = nl + 1;
      if (line.empty()) continue;
      Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("type") || !j.contains("object")) {
        parse_error = Status::Error(Status::Code::kBadResponse,
                                    "malformed watch event: " + std::string(line.substr(0, 200)));
        return false;
      }
      WatchEvent ev{j["type"].get<std::string>(), std::move(j["object"])};
      if (!on_event(ev)) return false;  // the caller is done: end the stream, OK
    }
    pending.erase(0, start);
    return true;
  };
  HttpResponse resp;
  std::string what = "watch " + type.resource;
  Status s = rep_->transport.Do(req, &resp);
  if (!s.ok()) return s.WithContext(what);
  if (!parse_error.ok()) return parse_error.WithContext(what);
  if (resp.status < 200 || resp.status >= 300)
    return internal::ErrorFromResponse(resp).WithContext(what);
  return Status::OK();
}

}  // namespace cxlkv::kube
