// Copyright cxlkv authors.
#include "cxlkv/fabric/client.h"

#include <nlohmann/json.hpp>

#include "cxlkv/base/json.h"
#include "cxlkv/fabric/http_client.h"
#include "cxlkv/fabric/json_codec.h"

namespace cxlkv::fabric {

using nlohmann::json;

namespace {

std::string ErrorDetails(const std::string& body, long status) {
  json j;
  if (base::ParseJson(body, &j).ok() && j.is_object() && j.contains("details") &&
      j["details"].is_string()) {
    return j["details"].get<std::string>();
  }
  return "HTTP " + std::to_string(status);
}

std::string LastSegment(const std::string& uri) {
  auto pos = uri.rfind('/');
  return pos == std::string::npos ? uri : uri.substr(pos + 1);
}

Status Members(const std::string& body, std::vector<std::string>* uris) {
  json j;
  CXLKV_RETURN_IF_ERROR(base::ParseJson(body, &j));
  if (!j.is_object() || !j.contains("members") || !j["members"].is_array()) {
    return Status::IOError("collection without members");
  }
  for (const auto& m : j["members"]) {
    if (m.is_object() && m.contains("uri") && m["uri"].is_string()) {
      uris->push_back(m["uri"].get<std::string>());
    }
  }
  return Status::OK();
}

}  // namespace

Status FabricClient::Open(const ClientOptions& options, std::unique_ptr<FabricClient>* out) {
  if (options.base_url.rfind("http://", 0) != 0 && options.base_url.rfind("https://", 0) != 0) {
    return Status::InvalidArgument("fabric manager URL must start with http:// or https://: " +
                                   options.base_url);
  }
  out->reset(new FabricClient(options));
  return Status::OK();
}

Status FabricClient::Call(const std::string& method, const std::string& path,
                          const std::string& body, long* status, std::string* response) {
  HttpOptions o;
  o.username = options_.username;
  o.password = options_.password;
  o.ca_file = options_.ca_file;
  o.insecure = options_.insecure;
  o.timeout_ms = options_.timeout_ms;
  HttpResponse r;
  CXLKV_RETURN_IF_ERROR(HttpDo(o, method, options_.base_url + path, body, &r));
  *status = r.status;
  *response = std::move(r.body);
  return Status::OK();
}

Status FabricClient::Json(const std::string& verb, const std::string& method,
                          const std::string& path, const std::string& body, std::string* response,
                          long* status_out) {
  long status = 0;
  Status s = Call(method, path, body, &status, response);
  if (!s.ok()) return s.WithContext(verb);
  if (status_out) *status_out = status;
  if (status >= 200 && status < 300) return Status::OK();
  std::string msg = verb + ": " + ErrorDetails(*response, status);
  switch (status) {
    case 400:
      return Status::InvalidArgument(msg);
    case 401:
      return Status::InvalidArgument(msg + " (authentication failed)");
    case 404:
      return Status::NotFound(msg);
    case 409:
      return method == "POST" || method == "PUT" ? Status::NoSpace(msg) : Status::Busy(msg);
    default:
      return Status::IOError(msg);
  }
}

Status FabricClient::ListPools(std::vector<Pool>* pools) {
  pools->clear();
  std::string body;
  CXLKV_RETURN_IF_ERROR(Json("list appliances", "GET", "/cfm/v1/appliances", "", &body));
  std::vector<std::string> apps;
  CXLKV_RETURN_IF_ERROR(Members(body, &apps).WithContext("list appliances"));
  for (const auto& auri : apps) {
    std::vector<std::string> blades;
    CXLKV_RETURN_IF_ERROR(Json("list blades of " + auri, "GET", auri + "/blades", "", &body));
    CXLKV_RETURN_IF_ERROR(Members(body, &blades).WithContext("list blades of " + auri));
    for (const auto& buri : blades) {
      Pool p;
      p.appliance_id = LastSegment(auri);
      p.blade_id = LastSegment(buri);
      CXLKV_RETURN_IF_ERROR(Json("read blade " + buri, "GET", buri, "", &body));
      json bj;
      CXLKV_RETURN_IF_ERROR(base::ParseJson(body, &bj).WithContext("read blade " + buri));
      int64_t avail = bj.value("totalMemoryAvailableMiB", int64_t{0});
      p.allocated_mib = bj.value("totalMemoryAllocatedMiB", int64_t{0});
      p.total_mib = avail + p.allocated_mib;
      std::vector<std::string> res;
      CXLKV_RETURN_IF_ERROR(
          Json("list resources of " + buri, "GET", buri + "/resources", "", &body));
      CXLKV_RETURN_IF_ERROR(Members(body, &res).WithContext("list resources of " + buri));
      if (!res.empty()) {
        CXLKV_RETURN_IF_ERROR(Json("read resource " + res[0], "GET", res[0], "", &body));
        json rj;
        if (base::ParseJson(body, &rj).ok() && rj.is_object()) {
          p.block_mib = rj.value("capacityMiB", int64_t{0});
        }
      }
      std::vector<std::string> ports;
      CXLKV_RETURN_IF_ERROR(Json("list ports of " + buri, "GET", buri + "/ports", "", &body));
      CXLKV_RETURN_IF_ERROR(Members(body, &ports).WithContext("list ports of " + buri));
      for (const auto& puri : ports) {
        CXLKV_RETURN_IF_ERROR(Json("read port " + puri, "GET", puri, "", &body));
        json pj;
        if (!base::ParseJson(body, &pj).ok() || !pj.is_object()) continue;
        std::string linked = pj.value("linkedPortUri", "");
        // linkedPortUri = /cfm/v1/hosts/{hostId}/ports/{portId}
        const std::string prefix = "/cfm/v1/hosts/";
        if (linked.rfind(prefix, 0) == 0) {
          std::string rest = linked.substr(prefix.size());
          p.hosts.push_back(rest.substr(0, rest.find('/')));
          p.ports.push_back({LastSegment(puri), p.hosts.back()});
        }
      }
      pools->push_back(std::move(p));
    }
  }
  return Status::OK();
}

static std::string MemPath(const std::string& a, const std::string& b) {
  return "/cfm/v1/appliances/" + a + "/blades/" + b + "/memory";
}

Status FabricClient::Compose(const std::string& aid, const std::string& bid,
                             const ComposeRequest& req, ComposeResult* result) {
  std::string body;
  long status = 0;
  const std::string verb = "compose memory on " + aid + "/" + bid;
  CXLKV_RETURN_IF_ERROR(
      Json(verb, "POST", MemPath(aid, bid), ComposeRequestToJson(req).dump(), &body, &status));
  json j;
  CXLKV_RETURN_IF_ERROR(base::ParseJson(body, &j).WithContext(verb));
  CXLKV_RETURN_IF_ERROR(RegionFromJson(j, &result->region).WithContext(verb));
  if (result->region.appliance_id.empty()) result->region.appliance_id = aid;
  if (result->region.blade_id.empty()) result->region.blade_id = bid;
  result->partial = (status == 206);
  return Status::OK();
}

Status FabricClient::Free(const std::string& aid, const std::string& bid, const std::string& mid) {
  std::string body;
  return Json("free memory " + mid, "DELETE", MemPath(aid, bid) + "/" + mid, "", &body);
}

Status FabricClient::Get(const std::string& aid, const std::string& bid, const std::string& mid,
                         MemoryRegion* region) {
  std::string body;
  const std::string verb = "read memory " + mid;
  CXLKV_RETURN_IF_ERROR(Json(verb, "GET", MemPath(aid, bid) + "/" + mid, "", &body));
  json j;
  CXLKV_RETURN_IF_ERROR(base::ParseJson(body, &j).WithContext(verb));
  CXLKV_RETURN_IF_ERROR(RegionFromJson(j, region).WithContext(verb));
  if (region->appliance_id.empty()) region->appliance_id = aid;
  if (region->blade_id.empty()) region->blade_id = bid;
  return Status::OK();
}

Status FabricClient::List(const std::string& aid, const std::string& bid,
                          std::vector<MemoryRegion>* regions) {
  regions->clear();
  std::string body;
  const std::string verb = "list memory of " + aid + "/" + bid;
  CXLKV_RETURN_IF_ERROR(Json(verb, "GET", MemPath(aid, bid), "", &body));
  std::vector<std::string> uris;
  CXLKV_RETURN_IF_ERROR(Members(body, &uris).WithContext(verb));
  for (const auto& u : uris) {
    MemoryRegion r;
    Status s = Get(aid, bid, LastSegment(u), &r);
    if (s.IsNotFound()) continue;  // freed between the two calls
    CXLKV_RETURN_IF_ERROR(s);
    regions->push_back(std::move(r));
  }
  return Status::OK();
}

Status FabricClient::AddHost(const std::string& aid, const std::string& bid, const std::string& mid,
                             const std::string& host_id, MemoryRegion* region) {
  std::vector<Pool> pools;
  CXLKV_RETURN_IF_ERROR(ListPools(&pools));
  for (const auto& p : pools) {
    if (p.appliance_id != aid || p.blade_id != bid) continue;
    for (const auto& port : p.ports) {
      if (port.host_id == host_id) return Assign(aid, bid, mid, port.port_id, true, region);
    }
    return Status::InvalidArgument("host " + host_id + " is not cabled to blade " + aid + "/" +
                                   bid);
  }
  return Status::NotFound("no blade " + aid + "/" + bid);
}

Status FabricClient::Assign(const std::string& aid, const std::string& bid, const std::string& mid,
                            const std::string& port, bool assign, MemoryRegion* region) {
  std::string body;
  const std::string verb = (assign ? "assign memory " : "unassign memory ") + mid + " port " + port;
  json req = {{"Port", port}, {"Operation", assign ? "assign" : "unassign"}};
  CXLKV_RETURN_IF_ERROR(Json(verb, "PATCH", MemPath(aid, bid) + "/" + mid, req.dump(), &body));
  json j;
  CXLKV_RETURN_IF_ERROR(base::ParseJson(body, &j).WithContext(verb));
  return RegionFromJson(j, region).WithContext(verb);
}

Status FabricClient::Unassign(const std::string& aid, const std::string& bid,
                              const std::string& mid, const std::string& port,
                              uint64_t assign_epoch, MemoryRegion* region) {
  std::string body;
  const std::string verb = "unassign memory " + mid + " port " + port + " (assignment epoch " +
                           std::to_string(assign_epoch) + ")";
  json req = {{"Port", port}, {"Operation", "unassign"}, {"assignEpoch", assign_epoch}};
  CXLKV_RETURN_IF_ERROR(Json(verb, "PATCH", MemPath(aid, bid) + "/" + mid, req.dump(), &body));
  json j;
  CXLKV_RETURN_IF_ERROR(base::ParseJson(body, &j).WithContext(verb));
  return RegionFromJson(j, region).WithContext(verb);
}

Status FabricClient::HostRegions(const std::string& host_id, std::vector<MemoryRegion>* regions) {
  regions->clear();
  std::string body;
  const std::string verb = "list regions of host " + host_id;
  long status = 0;
  Status s = Json(verb, "GET", "/cxlkv/v1/hosts/" + host_id + "/regions", "", &body, &status);
  if (!s.ok()) {
    json j;
    // A plain cfm-service answers 404 without the CFM error body.
    if (s.IsNotFound() &&
        (!base::ParseJson(body, &j).ok() || !j.is_object() || !j.contains("details"))) {
      return Status::Unsupported(verb + ": the fabric manager lacks the cxlkv extension");
    }
    return s;
  }
  json j;
  CXLKV_RETURN_IF_ERROR(base::ParseJson(body, &j).WithContext(verb));
  if (!j.is_object() || !j.contains("regions") || !j["regions"].is_array()) {
    return Status::IOError(verb + ": answer has no regions array");
  }
  for (const auto& rj : j["regions"]) {
    MemoryRegion r;
    CXLKV_RETURN_IF_ERROR(RegionFromJson(rj, &r).WithContext(verb));
    regions->push_back(std::move(r));
  }
  return Status::OK();
}

Status FabricClient::ReportMaterialization(const std::string& host_id, const std::string& memory_id,
                                           Materialization state, const std::string& error,
                                           const std::string& device, uint64_t assign_epoch) {
  json req = {{"materialization", ToString(state)}};
  if (assign_epoch > 0) req["assignEpoch"] = assign_epoch;
  if (!error.empty()) req["error"] = error;
  if (!device.empty()) req["device"] = device;
  std::string body;
  return Json("report materialization of " + memory_id + " on " + host_id, "PUT",
              "/cxlkv/v1/hosts/" + host_id + "/regions/" + memory_id + "/materialization",
              req.dump(), &body);
}

Status FabricClient::PowerCycle(const std::string& aid, const std::string& bid, int* forgotten) {
  json req = json::object();
  if (!aid.empty()) req["applianceId"] = aid;
  if (!bid.empty()) req["bladeId"] = bid;
  std::string body;
  const std::string verb =
      "power-cycle " + (aid.empty() ? std::string("all blades") : aid + "/" + bid);
  CXLKV_RETURN_IF_ERROR(Json(verb, "POST", "/cxlkv/v1/power-cycle", req.dump(), &body));
  json j;
  CXLKV_RETURN_IF_ERROR(base::ParseJson(body, &j).WithContext(verb));
  *forgotten = j.value("forgottenRegions", 0);
  return Status::OK();
}

}  // namespace cxlkv::fabric
