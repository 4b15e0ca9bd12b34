// Copyright cxlkv authors.
#include "kubeletplugin/hostd_client.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

namespace cxlkv::dra {

using nlohmann::json;

namespace {

Status RegionFromJson(const json& j, HostRegion* r) {
  try {
    r->allocation_id = j.at("allocationId").get<std::string>();
    r->device = j.value("device", "");
    r->size_bytes = j.value("sizeBytes", uint64_t{0});
    r->cdi_device = j.at("cdiDevice").get<std::string>();
    r->assign_epoch = j.value("assignEpoch", uint64_t{0});
  } catch (const json::exception& e) {
    return Status::IOError(std::string("unexpected region JSON: ") + e.what());
  }
  return Status::OK();
}

}  // namespace

HostdClient::HostdClient(std::string base_url, int timeout_ms)
    : base_url_(std::move(base_url)), timeout_ms_(timeout_ms) {}

// Each call opens its own connection: hostd serves one request per
// connection, and calls are rare (one per prepare, one per health poll).
static httplib::Client MakeClient(const std::string& url, int timeout_ms) {
  httplib::Client c(url);
  c.set_connection_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
  c.set_read_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
  c.set_write_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
  return c;
}

Status HostdClient::RewriteSpec(const std::string& memory_id, HostRegion* region) const {
  httplib::Client c = MakeClient(base_url_, timeout_ms_);
  auto res = c.Post("/cxlkv/v1/regions/" + memory_id + "/spec", "", "application/json");
  if (!res) return Status::IOError("hostd " + base_url_ + ": " + httplib::to_string(res.error()));
  json body = json::parse(res->body, nullptr, false);
  if (res->status == 404) {
    return Status::NotFound("region " + memory_id + " is not materialized on this host");
  }
  if (res->status != 200) {
    std::string msg = body.is_object() ? body.value("error", res->body) : res->body;
    return Status::IOError("hostd " + base_url_ + ": HTTP " + std::to_string(res->status) + ": " +
                           msg);
  }
  if (!body.is_object()) return Status::IOError("hostd " + base_url_ + ": answer is not JSON");
  return RegionFromJson(body, region).WithContext("hostd " + base_url_);
}

Status HostdClient::Release(const std::string& memory_id, uint64_t assign_epoch) const {
  httplib::Client c = MakeClient(base_url_, timeout_ms_);
  json req = json::object();
  if (assign_epoch > 0) req["assignEpoch"] = assign_epoch;
  auto res = c.Post("/cxlkv/v1/regions/" + memory_id + "/release", req.dump(), "application/json");
  if (!res) return Status::IOError("hostd " + base_url_ + ": " + httplib::to_string(res.error()));
  if (res->status == 200) return Status::OK();
  json body = json::parse(res->body, nullptr, false);
  std::string msg = body.is_object() ? body.value("error", res->body) : res->body;
  if (res->status == 501) return Status::Unsupported("hostd " + base_url_ + ": " + msg);
  if (res->status == 409) return Status::Busy("hostd " + base_url_ + ": " + msg);
  return Status::IOError("hostd " + base_url_ + ": release region " + memory_id + ": HTTP " +
                         std::to_string(res->status) + ": " + msg);
}

Status HostdClient::List(std::vector<HostRegion>* regions) const {
  httplib::Client c = MakeClient(base_url_, timeout_ms_);
  auto res = c.Get("/cxlkv/v1/regions");
  if (!res) return Status::IOError("hostd " + base_url_ + ": " + httplib::to_string(res.error()));
  if (res->status != 200) {
    return Status::IOError("hostd " + base_url_ + ": HTTP " + std::to_string(res->status));
  }
  json body = json::parse(res->body, nullptr, false);
  if (!body.is_object() || !body.contains("regions") || !body["regions"].is_array()) {
    return Status::IOError("hostd " + base_url_ + ": answer is not a region list");
  }
  regions->clear();
  for (const auto& rj : body["regions"]) {
    HostRegion r;
    CXLKV_RETURN_IF_ERROR(RegionFromJson(rj, &r).WithContext("hostd " + base_url_));
    regions->push_back(std::move(r));
  }
  return Status::OK();
}

}  // namespace cxlkv::dra
