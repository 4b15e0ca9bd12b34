// Copyright cxlkv authors.
//
// /cfm/v1/hosts/... and the cxlkv extension (/cxlkv/v1: power cycle, fault
// injection, per-host region listing for cxlkv-hostd resync, the
// assignment-epoch counters).
#include "cxlkv/fabric/json_codec.h"
#include "server_internal.h"

namespace cxlkv::fabric::internal {

using httplib::Request;
using httplib::Response;
using nlohmann::json;

namespace {
const std::string kHost = "/cfm/v1/hosts/([^/]+)";

json FaultsToJson(const Faults& f) {
  json rules = json::array();
  for (const auto& r : f.rules) {
    rules.push_back({{"method", r.method},
                     {"path", r.path_prefix},
                     {"status", r.status},
                     {"delayMs", r.delay_ms},
                     {"count", r.count}});
  }
  return {{"rules", rules},
          {"failMaterializeHosts", f.fail_materialize_hosts},
          {"failAssignPorts", f.fail_assign_ports},
          {"crashAt", f.crash_at}};
}

std::string FaultsFromJson(const json& j, Faults* f) {
  try {
    for (const auto& r : j.value("rules", json::array())) {
      FaultRule rule;
      rule.method = r.value("method", "");
      rule.path_prefix = r.value("path", "");
      rule.status = r.value("status", 0);
      rule.delay_ms = r.value("delayMs", 0);
      rule.count = r.value("count", -1);
      if (rule.status != 0 && (rule.status < 400 || rule.status > 599)) {
        return "rules.status must be 0 or 400..599";
      }
      if (rule.delay_ms < 0 || rule.delay_ms > 60000) return "rules.delayMs must be 0..60000";
      f->rules.push_back(rule);
    }
    f->fail_materialize_hosts = j.value("failMaterializeHosts", std::vector<std::string>{});
    f->fail_assign_ports = j.value("failAssignPorts", std::vector<std::string>{});
    f->crash_at = j.value("crashAt", "");
  } catch (const json::exception& e) {
    return std::string("faults: ") + e.what();
  }
  return "";
}
}  // namespace

void HttpFabricServer::InstallHostRoutes() {
  auto with_host = [this](const Request& req, Response& res, auto f) {
    std::string hid = req.matches[1];
    bool found = manager_->Read([&](const FabricState& s) {
      for (const auto& h : s.hosts) {
        if (h.managed && h.id == hid) {
          f(s, h);
          return true;
        }
      }
      return false;
    });
    if (!found) ReplyError(req, res, 404, "host " + hid + " not found");
  };

  On("GET", "/cfm/v1/hosts", [this](const Request&, Response& res) {
    ReplyJson(res, 200, manager_->Read([](const FabricState& s) {
      std::vector<std::string> uris;
      for (const auto& h : s.hosts) {
        if (h.managed) uris.push_back("/cfm/v1/hosts/" + h.id);
      }
      return Collection(uris);
    }));
  });
  On("POST", "/cfm/v1/hosts", kCredentialsBody, [this](const Request& req, Response& res) {
    json body;
    if (!ParseBody(req, res, &body)) return;
    std::string bad = CheckCredentials(body);
    if (!bad.empty()) return ReplyError(req, res, 400, bad);
    std::string id;
    Status s = manager_->AddHost(body.value("customId", ""), &id);
    if (!s.ok()) return ReplyStatus(req, res, s);
    ReplyJson(res, 201, manager_->Read([&](const FabricState& st) {
      for (const auto& h : st.hosts) {
        if (h.id == id) return HostJson(st, h);
      }
      return json::object();
    }));
  });
  auto get_host = [with_host](const Request& req, Response& res) {
    with_host(req, res, [&](const FabricState& s, const HostState& h) {
      ReplyJson(res, 200, HostJson(s, h));
    });
  };
  On("GET", kHost, get_host);
  On("PATCH", kHost, base::kNoHttpBody, get_host);  // resync
  On("DELETE", kHost, [this, with_host](const Request& req, Response& res) {
    json before;
    with_host(req, res, [&](const FabricState& s, const HostState& h) { before = HostJson(s, h); });
    if (before.is_null()) return;
    Status s = manager_->DeleteHost(req.matches[1]);
    if (!s.ok()) return ReplyStatus(req, res, s);
    ReplyJson(res, 200, before);
  });
  On("PUT", kHost, kRenameBody, [this, with_host](const Request& req, Response& res) {
    if (!req.has_param("newHostId")) return ReplyError(req, res, 400, "newHostId is required");
    std::string nid = req.get_param_value("newHostId");
    Status s = manager_->RenameHost(req.matches[1], nid);
    if (!s.ok()) return ReplyStatus(req, res, s);
    ReplyJson(res, 200, manager_->Read([&](const FabricState& st) {
      for (const auto& h : st.hosts) {
        if (h.managed && h.id == nid) return HostJson(st, h);
      }
      return json::object();
    }));
  });
  On("GET", kHost + "/ports", [with_host](const Request& req, Response& res) {
    with_host(req, res, [&](const FabricState& s, const HostState& h) {
      std::vector<std::string> uris;
      for (const auto& p : HostPortIds(s, h))
        uris.push_back("/cfm/v1/hosts/" + h.id + "/ports/" + p);
      ReplyJson(res, 200, Collection(uris));
    });
  });
  On("GET", kHost + "/ports/([^/]+)", [with_host](const Request& req, Response& res) {
    std::string pid = req.matches[2];
    with_host(req, res, [&](const FabricState& s, const HostState& h) {
      for (const auto& p : HostPortIds(s, h)) {
        if (p == pid) return ReplyJson(res, 200, HostPortJson(s, h, p));
      }
      ReplyError(req, res, 404, "host port " + pid + " not found");
    });
  });
  On("GET", kHost + "/memory-devices", [with_host](const Request& req, Response& res) {
    with_host(req, res, [&](const FabricState& s, const HostState& h) {
      std::vector<std::string> uris;
      for (const auto& p : HostPortIds(s, h)) {
        uris.push_back("/cfm/v1/hosts/" + h.id + "/memory-devices/" + p + "-ld0");
      }
      ReplyJson(res, 200, Collection(uris));
    });
  });
  On("GET", kHost + "/memory-devices/([^/]+)", [with_host](const Request& req, Response& res) {
    std::string did = req.matches[2];
    with_host(req, res, [&](const FabricState& s, const HostState& h) {
      for (const auto& p : HostPortIds(s, h)) {
        if (p + "-ld0" == did) return ReplyJson(res, 200, MemoryDeviceJson(s, h, p));
      }
      ReplyError(req, res, 404, "memory device " + did + " not found");
    });
  });
  On("GET", kHost + "/memory", [with_host](const Request& req, Response& res) {
    with_host(req, res, [&](const FabricState& s, const HostState& h) {
      std::vector<std::string> uris;
      for (const auto& [id, r] : s.regions) {
        for (const auto& m : r.mappings) {
          if (m.host_id == h.id) {
            uris.push_back("/cfm/v1/hosts/" + h.id + "/memory/" + id);
            break;
          }
        }
      }
      ReplyJson(res, 200, Collection(uris));
    });
  });
  On("POST", kHost + "/memory", kComposeBody, [this](const Request& req, Response& res) {
    json body;
    if (!ParseBody(req, res, &body)) return;
    ComposeRequest creq;
    Status s = ComposeRequestFromJson(body, &creq);
    if (!s.ok()) return ReplyError(req, res, 400, s.message());
    ComposeResult r;
    s = manager_->HostCompose(req.matches[1], creq, &r);
    if (!s.ok()) return ReplyStatus(req, res, s);
    ReplyJson(res, r.partial ? 206 : 201, RegionToJson(r.region));
  });
  On("GET", kHost + "/memory/([^/]+)", [with_host](const Request& req, Response& res) {
    std::string mid = req.matches[2];
    with_host(req, res, [&](const FabricState& s, const HostState& h) {
      auto it = s.regions.find(mid);
      if (it != s.regions.end()) {
        for (const auto& m : it->second.mappings) {
          if (m.host_id == h.id) return ReplyJson(res, 200, RegionToJson(it->second));
        }
      }
      ReplyError(req, res, 404, "memory region " + mid + " is not mapped to host " + h.id);
    });
  });
  On("DELETE", kHost + "/memory/([^/]+)", [this](const Request& req, Response& res) {
    MemoryRegion r;
    Status s = manager_->HostFree(req.matches[1], req.matches[2], &r);
    if (!s.ok()) return ReplyStatus(req, res, s);
    ReplyJson(res, 200, RegionToJson(r));
  });
}

void HttpFabricServer::InstallExtensionRoutes() {
  // Every region mapped to a host, in full, for its agent's resync. Hosts
  // are named by id here, managed or not: an agent must still learn that
  // its regions are gone.
  On("GET", "/cxlkv/v1/hosts/([^/]+)/regions", [this](const Request& req, Response& res) {
    std::string hid = req.matches[1];
    json out = manager_->Read([&](const FabricState& s) {
      bool known = false;
      for (const auto& h : s.hosts) known |= (h.id == hid);
      if (!known) return json();
      json arr = json::array();
      for (const auto& [id, r] : s.regions) {
        if (r.status != RegionStatus::kComposed) continue;
        for (const auto& m : r.mappings) {
          if (m.host_id == hid) {
            arr.push_back(RegionToJson(r));
            break;
          }
        }
      }
      return json{{"hostId", hid}, {"regions", arr}};
    });
    if (out.is_null()) return ReplyError(req, res, 404, "host " + hid + " not found");
    ReplyJson(res, 200, out);
  });
  On("PUT", "/cxlkv/v1/hosts/([^/]+)/regions/([^/]+)/materialization",
     "a JSON report {\"materialization\": STATE} with optional error, device and assignEpoch, "
     "sent with its Content-Length",
     [this](const Request& req, Response& res) {
       json body;
       if (!ParseBody(req, res, &body)) return;
       for (const char* k : {"materialization", "error", "device"}) {
         if (body.contains(k) && !body[k].is_string()) {
           return ReplyError(req, res, 400, std::string(k) + " must be a string");
         }
       }
       if (!body.contains("materialization")) {
         return ReplyError(req, res, 400, "materialization is required");
       }
       // Any other string leaves kPending, which the manager refuses as it
       // refuses every state but the two reports.
       Materialization state = Materialization::kPending;
       ParseMaterialization(body["materialization"].get<std::string>(), &state);
       uint64_t epoch = 0;
       Status es = OptEpoch(body, "assignEpoch", &epoch);
       if (!es.ok()) return ReplyStatus(req, res, es);
       MemoryRegion r;
       Status s = manager_->ReportMaterialization(req.matches[1], req.matches[2], state,
                                                  body.value("error", ""), body.value("device", ""),
                                                  epoch, &r);
       if (!s.ok()) return ReplyStatus(req, res, s);
       ReplyJson(res, 200, RegionToJson(r));
     });
  On("POST", "/cxlkv/v1/power-cycle",
     "an optional JSON object {\"applianceId\": ID, \"bladeId\": ID}, sent with its "
     "Content-Length; for none, an empty body (Content-Length: 0)",
     [this](const Request& req, Response& res) {
       json body;
       if (!ParseBody(req, res, &body)) return;
       for (const char* k : {"applianceId", "bladeId"}) {
         if (body.contains(k) && !body[k].is_string()) {
           return ReplyError(req, res, 400, std::string(k) + " must be a string");
         }
       }
       std::string aid = body.value("applianceId", ""), bid = body.value("bladeId", "");
       int forgotten = 0;
       Status s = manager_->PowerCycle(aid, bid, &forgotten);
       if (!s.ok()) return ReplyStatus(req, res, s);
       ReplyJson(res, 200, {{"forgottenRegions", forgotten}});
     });
  On("GET", "/cxlkv/v1/faults", [this](const Request&, Response& res) {
    ReplyJson(res, 200, FaultsToJson(manager_->GetFaults()));
  });
  On("PUT", "/cxlkv/v1/faults",
     "a JSON fault set ({\"rules\": [...]} and optional failMaterializeHosts, docs/fabric.md), "
     "sent with its Content-Length",
     [this](const Request& req, Response& res) {
       json body;
       if (!ParseBody(req, res, &body)) return;
       Faults f;
       std::string bad = FaultsFromJson(body, &f);
       if (!bad.empty()) return ReplyError(req, res, 400, bad);
       manager_->SetFaults(f);
       ReplyJson(res, 200, FaultsToJson(f));
     });
  // The assignment-epoch protocol's counters since start (docs/fabric.md).
  On("GET", "/cxlkv/v1/stats", [this](const Request&, Response& res) {
    FabricManager::EpochStats st = manager_->GetEpochStats();
    ReplyJson(res, 200,
              {{"staleUnassignsRefused", st.stale_unassigns_refused},
               {"unassignsWithoutEpoch", st.unassigns_without_epoch},
               {"staleReportsRefused", st.stale_reports_refused}});
  });
}

}  // namespace cxlkv::fabric::internal
