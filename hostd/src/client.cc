// Copyright cxlkv authors.
#include "cxlkv/hostd/client.h"

#include <nlohmann/json.hpp>

#include "cxlkv/base/json.h"
#include "cxlkv/fabric/http_client.h"
#include "wire.h"

namespace cxlkv::hostd {
namespace {

using nlohmann::json;

// hostd's error text: the "error" field of a JSON error body, else the body.
std::string ErrorText(const fabric::HttpResponse& res) {
  json body;
  if (base::ParseJson(res.body, &body).ok() && body.is_object() && body.contains("error") &&
      body["error"].is_string()) {
    return body["error"].get<std::string>();
  }
  return res.body;
}

// Each call opens its own connection (HttpDo: one curl handle per call):
// hostd serves one request per connection, and calls are rare (one per
// materialize, prepare, release or health poll).
Status Do(const ClientOptions& o, const std::string& method, const std::string& path,
          const std::string& body, fabric::HttpResponse* res) {
  fabric::HttpOptions h;
  h.timeout_ms = o.timeout_ms;
  return fabric::HttpDo(h, method, o.base_url + path, body, res).WithContext("hostd " + o.base_url);
}

}  // namespace

Client::Client(ClientOptions options) : options_(std::move(options)) {}

Status Client::Materialize(const MaterializeRequest& req, HostRegion* region) const {
  fabric::HttpResponse res;
  CXLKV_RETURN_IF_ERROR(Do(options_, "PUT", "/cxlkv/v1/regions/" + req.allocation_id,
                           wire::MaterializeRequestToJson(req).dump(), &res));
  if (res.status != 200 && res.status != 201) {
    return Status::IOError("hostd " + options_.base_url + ": materialize region " +
                           req.allocation_id + ": HTTP " + std::to_string(res.status) + ": " +
                           ErrorText(res));
  }
  json body;
  if (!base::ParseJson(res.body, &body).ok() || !body.is_object()) {
    return Status::IOError("hostd " + options_.base_url + ": answer is not JSON");
  }
  return wire::HostRegionFromJson(body, region).WithContext("hostd " + options_.base_url);
}

Status Client::Remove(const std::string& memory_id) const {
  fabric::HttpResponse res;
  CXLKV_RETURN_IF_ERROR(Do(options_, "DELETE", "/cxlkv/v1/regions/" + memory_id, "", &res));
  if (res.status == 200 || res.status == 204) return Status::OK();
  if (res.status == 404) {
    return Status::NotFound("region " + memory_id + " is not materialized on host " +
                            options_.base_url);
  }
  return Status::IOError("hostd " + options_.base_url + ": remove region " + memory_id + ": HTTP " +
                         std::to_string(res.status) + ": " + ErrorText(res));
}

Status Client::RewriteSpec(const std::string& memory_id, HostRegion* region) const {
  fabric::HttpResponse res;
  CXLKV_RETURN_IF_ERROR(Do(options_, "POST", "/cxlkv/v1/regions/" + memory_id + "/spec", "", &res));
  if (res.status == 404) {
    return Status::NotFound("region " + memory_id + " is not materialized on this host");
  }
  if (res.status != 200) {
    return Status::IOError("hostd " + options_.base_url + ": HTTP " + std::to_string(res.status) +
                           ": " + ErrorText(res));
  }
  json body;
  if (!base::ParseJson(res.body, &body).ok() || !body.is_object()) {
    return Status::IOError("hostd " + options_.base_url + ": answer is not JSON");
  }
  return wire::HostRegionFromJson(body, region).WithContext("hostd " + options_.base_url);
}

Status Client::Release(const std::string& memory_id, uint64_t assign_epoch) const {
  json req = json::object();
  if (assign_epoch > 0) req["assignEpoch"] = assign_epoch;
  fabric::HttpResponse res;
  CXLKV_RETURN_IF_ERROR(
      Do(options_, "POST", "/cxlkv/v1/regions/" + memory_id + "/release", req.dump(), &res));
  if (res.status == 200) return Status::OK();
  const std::string msg = ErrorText(res);
  if (res.status == 501) return Status::Unsupported("hostd " + options_.base_url + ": " + msg);
  if (res.status == 409) return Status::Busy("hostd " + options_.base_url + ": " + msg);
  return Status::IOError("hostd " + options_.base_url + ": release region " + memory_id +
                         ": HTTP " + std::to_string(res.status) + ": " + msg);
}

Status Client::List(std::vector<HostRegion>* regions) const {
  fabric::HttpResponse res;
  CXLKV_RETURN_IF_ERROR(Do(options_, "GET", "/cxlkv/v1/regions", "", &res));
  if (res.status != 200) {
    return Status::IOError("hostd " + options_.base_url + ": HTTP " + std::to_string(res.status));
  }
  json body;
  if (!base::ParseJson(res.body, &body).ok() || !body.is_object() || !body.contains("regions") ||
      !body["regions"].is_array()) {
    return Status::IOError("hostd " + options_.base_url + ": answer is not a region list");
  }
  regions->clear();
  for (const auto& rj : body["regions"]) {
    HostRegion r;
    CXLKV_RETURN_IF_ERROR(
        wire::HostRegionFromJson(rj, &r).WithContext("hostd " + options_.base_url));
    regions->push_back(std::move(r));
  }
  return Status::OK();
}

}  // namespace cxlkv::hostd
