// Copyright cxlkv authors.
//
// /cfm/v1/discover, /cfm/v1/appliances/... (appliances, blades, ports,
// resources, blade status) and blade memory (compose, assign, free).
#include "cxlkv/fabric/json_codec.h"
#include "server_internal.h"

namespace cxlkv::fabric::internal {

using httplib::Request;
using httplib::Response;
using nlohmann::json;

namespace {
const std::string kId = "([^/]+)";
}  // namespace

void HttpFabricServer::InstallApplianceRoutes() {
  On("GET", "/cfm/v1/discover", [this](const Request& req, Response& res) {
    std::string type = req.get_param_value("deviceType");
    if (type != "blade" && type != "cxl-host") {
      return ReplyError(req, res, 400, "deviceType must be blade or cxl-host");
    }
    // No mDNS here: configured devices that are not managed yet are what a
    // discovery would find.
    json out = manager_->Read([&](const FabricState& s) {
      json arr = json::array();
      if (type == "blade") {
        for (const auto& a : s.appliances) {
          for (const auto& b : a.blades) {
            if (!a.managed || !b.managed) {
              arr.push_back({{"name", b.config_id},
                             {"address", "127.0.0.1"},
                             {"port", 443},
                             {"type", "blade"}});
            }
          }
        }
      } else {
        for (const auto& h : s.hosts) {
          if (!h.managed) {
            arr.push_back({{"name", h.config_id},
                           {"address", "127.0.0.1"},
                           {"port", 8082},
                           {"type", "cxl-host"}});
          }
        }
      }
      return arr;
    });
    ReplyJson(res, 200, out);
  });

  On("GET", "/cfm/v1/appliances", [this](const Request&, Response& res) {
    ReplyJson(res, 200, manager_->Read([](const FabricState& s) {
      std::vector<std::string> uris;
      for (const auto& a : s.appliances) {
        if (a.managed) uris.push_back(ApplianceUri(a.id));
      }
      return Collection(uris);
    }));
  });
  On("POST", "/cfm/v1/appliances", kCredentialsBody, [this](const Request& req, Response& res) {
    json body;
    if (!ParseBody(req, res, &body)) return;
    std::string bad = CheckCredentials(body);
    if (!bad.empty()) return ReplyError(req, res, 400, bad);
    std::string id;
    Status s = manager_->AddAppliance(body.value("customId", ""), &id);
    if (!s.ok()) return ReplyStatus(req, res, s);
    ReplyJson(res, 201, manager_->Read([&](const FabricState& st) {
      for (const auto& a : st.appliances) {
        if (a.id == id) return ApplianceJson(a);
      }
      return json::object();
    }));
  });

  const std::string app = std::string("/cfm/v1/appliances/") + kId;
  auto get_app = [this](const Request& req, Response& res) {
    std::string aid = req.matches[1];
    json out = manager_->Read([&](const FabricState& s) {
      for (const auto& a : s.appliances) {
        if (a.managed && a.id == aid) return ApplianceJson(a);
      }
      return json();
    });
    if (out.is_null()) return ReplyError(req, res, 404, "appliance " + aid + " not found");
    ReplyJson(res, 200, out);
  };
  On("GET", app, get_app);
  On("PATCH", app, base::kNoHttpBody, get_app);  // resync: the emulator's state is always in sync
  On("DELETE", app, [this, get_app](const Request& req, Response& res) {
    std::string aid = req.matches[1];
    json before = manager_->Read([&](const FabricState& s) {
      for (const auto& a : s.appliances) {
        if (a.managed && a.id == aid) return ApplianceJson(a);
      }
      return json();
    });
    Status s = manager_->DeleteAppliance(aid);
    if (!s.ok()) return ReplyStatus(req, res, s);
    ReplyJson(res, 200, before);
  });
  On("PUT", app, kRenameBody, [this](const Request& req, Response& res) {
    std::string aid = req.matches[1];
    if (!req.has_param("newApplianceId")) {
      return ReplyError(req, res, 400, "newApplianceId is required");
    }
    std::string nid = req.get_param_value("newApplianceId");
    Status s = manager_->RenameAppliance(aid, nid);
    if (!s.ok()) return ReplyStatus(req, res, s);
    ReplyJson(res, 200, manager_->Read([&](const FabricState& st) {
      for (const auto& a : st.appliances) {
        if (a.managed && a.id == nid) return ApplianceJson(a);
      }
      return json::object();
    }));
  });
}

void HttpFabricServer::InstallBladeRoutes() {
  const std::string blades = std::string("/cfm/v1/appliances/") + kId + "/blades";
  const std::string blade = blades + "/" + kId;

  // Runs f(state, appliance, blade) for a managed blade, or replies 404.
  auto with_blade = [this](const Request& req, Response& res, auto f) {
    std::string aid = req.matches[1], bid = req.matches[2];
    bool found = manager_->Read([&](const FabricState& s) {
      for (const auto& a : s.appliances) {
        if (!a.managed || a.id != aid) continue;
        for (const auto& b : a.blades) {
          if (b.managed && b.id == bid) {
            f(s, a, b);
            return true;
          }
        }
      }
      return false;
    });
    if (!found) ReplyError(req, res, 404, "blade " + aid + "/" + bid + " not found");
  };

  On("GET", blades, [this](const Request& req, Response& res) {
    std::string aid = req.matches[1];
    json out = manager_->Read([&](const FabricState& s) {
      for (const auto& a : s.appliances) {
        if (!a.managed || a.id != aid) continue;
        std::vector<std::string> uris;
        for (const auto& b : a.blades) {
          if (b.managed) uris.push_back(BladeUri(a.id, b.id));
        }
        return Collection(uris);
      }
      return json();
    });
    if (out.is_null()) return ReplyError(req, res, 404, "appliance " + aid + " not found");
    ReplyJson(res, 200, out);
  });
  On("POST", blades, kCredentialsBody, [this](const Request& req, Response& res) {
    json body;
    if (!ParseBody(req, res, &body)) return;
    std::string bad = CheckCredentials(body);
    if (!bad.empty()) return ReplyError(req, res, 400, bad);
    std::string aid = req.matches[1], id;
    Status s = manager_->AddBlade(aid, body.value("customId", ""), &id);
    if (!s.ok()) return ReplyStatus(req, res, s);
    ReplyJson(res, 201, manager_->Read([&](const FabricState& st) {
      for (const auto& a : st.appliances) {
        for (const auto& b : a.blades) {
          if (a.id == aid && b.id == id) return BladeJson(a, b);
        }
      }
      return json::object();
    }));
  });
  auto get_blade = [with_blade](const Request& req, Response& res) {
    with_blade(req, res, [&](const FabricState&, const ApplianceState& a, const BladeState& b) {
      ReplyJson(res, 200, BladeJson(a, b));
    });
  };
  On("GET", blade, get_blade);
  On("PATCH", blade, base::kNoHttpBody, get_blade);  // resync
  On("DELETE", blade, [this, with_blade](const Request& req, Response& res) {
    json before;
    with_blade(req, res, [&](const FabricState&, const ApplianceState& a, const BladeState& b) {
      before = BladeJson(a, b);
    });
    if (before.is_null()) return;
    Status s = manager_->DeleteBlade(req.matches[1], req.matches[2]);
    if (!s.ok()) return ReplyStatus(req, res, s);
    ReplyJson(res, 200, before);
  });
  On("PUT", blade, kRenameBody, [this](const Request& req, Response& res) {
    std::string aid = req.matches[1], bid = req.matches[2];
    if (!req.has_param("newBladeId")) return ReplyError(req, res, 400, "newBladeId is required");
    std::string nid = req.get_param_value("newBladeId");
    Status s = manager_->RenameBlade(aid, bid, nid);
    if (!s.ok()) return ReplyStatus(req, res, s);
    ReplyJson(res, 200, manager_->Read([&](const FabricState& st) {
      for (const auto& a : st.appliances) {
        for (const auto& b : a.blades) {
          if (a.managed && a.id == aid && b.managed && b.id == nid) return BladeJson(a, b);
        }
      }
      return json::object();
    }));
  });

  auto status_lists = [](const FabricState& s, const ApplianceState& a, const BladeState& b,
                         json* mem, json* ports, json* resources) {
    std::string u = BladeUri(a.id, b.id);
    *mem = json::array();
    for (const auto& [id, r] : s.regions) {
      if (r.appliance_id == a.id && r.blade_id == b.id) {
        mem->push_back({{"uri", u + "/memory/" + id}, {"id", id}});
      }
    }
    *ports = json::array();
    for (const auto& p : b.ports) ports->push_back({{"uri", u + "/ports/" + p.id}, {"id", p.id}});
    *resources = json::array();
    for (size_t i = 0; i < b.used.size(); ++i) {
      std::string rid = "resourceblock" + std::to_string(i);
      resources->push_back(
          {{"uri", u + "/resources/" + rid},
           {"id", rid},
           {"compositionStatus", {{"compositionState", b.used[i] ? "Composed" : "Unused"}}}});
    }
  };
  On("GET", blade + "/status", [with_blade, status_lists](const Request& req, Response& res) {
    with_blade(req, res, [&](const FabricState& s, const ApplianceState& a, const BladeState& b) {
      json mem, ports, resources;
      status_lists(s, a, b, &mem, &ports, &resources);
      json st = {
          {"uri", BladeUri(a.id, b.id)},
          {"id", b.id},
          {"memoryStatus", {{"statusCount", mem.size()}, {"memoryStatuses", mem}}},
          {"portStatus", {{"statusCount", ports.size()}, {"portStatuses", ports}}},
          {"resourceStatus", {{"statusCount", resources.size()}, {"resourceStatuses", resources}}}};
      ReplyJson(res, 200, {{"statusCount", 1}, {"bladeStatus", json::array({st})}});
    });
  });
  On("GET", blade + "/statusmemory", [with_blade, status_lists](const Request& req, Response& res) {
    with_blade(req, res, [&](const FabricState& s, const ApplianceState& a, const BladeState& b) {
      json mem, ports, resources;
      status_lists(s, a, b, &mem, &ports, &resources);
      ReplyJson(res, 200, mem);
    });
  });
  On("GET", blade + "/statusports", [with_blade, status_lists](const Request& req, Response& res) {
    with_blade(req, res, [&](const FabricState& s, const ApplianceState& a, const BladeState& b) {
      json mem, ports, resources;
      status_lists(s, a, b, &mem, &ports, &resources);
      ReplyJson(res, 200, ports);
    });
  });
  On("GET", blade + "/statusresources",
     [with_blade, status_lists](const Request& req, Response& res) {
       with_blade(req, res,
                  [&](const FabricState& s, const ApplianceState& a, const BladeState& b) {
                    json mem, ports, resources;
                    status_lists(s, a, b, &mem, &ports, &resources);
                    ReplyJson(res, 200,
                              {{"statusCount", resources.size()}, {"resourceStatuses", resources}});
                  });
     });
  On("GET", blade + "/resources", [with_blade](const Request& req, Response& res) {
    with_blade(req, res, [&](const FabricState&, const ApplianceState& a, const BladeState& b) {
      std::vector<std::string> uris;
      for (size_t i = 0; i < b.used.size(); ++i) {
        uris.push_back(BladeUri(a.id, b.id) + "/resources/resourceblock" + std::to_string(i));
      }
      ReplyJson(res, 200, Collection(uris));
    });
  });
  On("GET", blade + "/resources/" + kId, [with_blade](const Request& req, Response& res) {
    std::string rid = req.matches[3];
    with_blade(req, res, [&](const FabricState&, const ApplianceState&, const BladeState& b) {
      for (size_t i = 0; i < b.used.size(); ++i) {
        if (rid == "resourceblock" + std::to_string(i)) {
          return ReplyJson(res, 200, ResourceJson(b, static_cast<int>(i)));
        }
      }
      ReplyError(req, res, 404, "resource block " + rid + " not found");
    });
  });
  On("GET", blade + "/ports", [with_blade](const Request& req, Response& res) {
    with_blade(req, res, [&](const FabricState&, const ApplianceState& a, const BladeState& b) {
      std::vector<std::string> uris;
      for (const auto& p : b.ports) uris.push_back(BladeUri(a.id, b.id) + "/ports/" + p.id);
      ReplyJson(res, 200, Collection(uris));
    });
  });
  On("GET", blade + "/ports/" + kId, [with_blade](const Request& req, Response& res) {
    std::string pid = req.matches[3];
    with_blade(req, res, [&](const FabricState& s, const ApplianceState& a, const BladeState& b) {
      const PortConfig* p = b.FindPort(pid);
      if (p == nullptr) return ReplyError(req, res, 404, "port " + pid + " not found");
      ReplyJson(res, 200, BladePortJson(s, a, b, *p));
    });
  });
}

void HttpFabricServer::InstallMemoryRoutes() {
  const std::string mem = std::string("/cfm/v1/appliances/") + kId + "/blades/" + kId + "/memory";
  On("GET", mem, [this](const Request& req, Response& res) {
    std::string aid = req.matches[1], bid = req.matches[2];
    json out = manager_->Read([&](const FabricState& s) {
      const ApplianceState* a = s.FindAppliance(aid);
      if (a == nullptr || a->FindBlade(bid) == nullptr) return json();
      std::vector<std::string> uris;
      for (const auto& [id, r] : s.regions) {
        if (r.appliance_id == aid && r.blade_id == bid)
          uris.push_back(BladeUri(aid, bid) + "/memory/" + id);
      }
      return Collection(uris);
    });
    if (out.is_null()) return ReplyError(req, res, 404, "blade " + aid + "/" + bid + " not found");
    ReplyJson(res, 200, out);
  });
  auto reply_compose = [](const Request& req, Response& res, const Status& s,
                          const ComposeResult& r) {
    if (!s.ok()) return ReplyStatus(req, res, s);
    ReplyJson(res, r.partial ? 206 : 201, RegionToJson(r.region));
  };
  On("POST", mem, kComposeBody, [this, reply_compose](const Request& req, Response& res) {
    json body;
    if (!ParseBody(req, res, &body)) return;
    ComposeRequest creq;
    Status s = ComposeRequestFromJson(body, &creq);
    if (!s.ok()) return ReplyError(req, res, 400, s.message());
    ComposeResult r;
    s = manager_->Compose(req.matches[1], req.matches[2], creq, &r);
    reply_compose(req, res, s, r);
  });
  On("PUT", mem,
     "a JSON object {\"memoryResources\": [ID, ...]} (the resource blocks to compose) with "
     "optional Port, sent with its Content-Length",
     [this, reply_compose](const Request& req, Response& res) {
       json body;
       if (!ParseBody(req, res, &body)) return;
       if (!body.contains("memoryResources") || !body["memoryResources"].is_array()) {
         return ReplyError(req, res, 400, "memoryResources (array of ids) is required");
       }
       std::vector<std::string> ids;
       for (const auto& v : body["memoryResources"]) {
         if (!v.is_string())
           return ReplyError(req, res, 400, "memoryResources: ids must be strings");
         ids.push_back(v.get<std::string>());
       }
       if (body.contains("Port") && !body["Port"].is_string()) {
         return ReplyError(req, res, 400, "Port must be a string");
       }
       ComposeResult r;
       Status s = manager_->ComposeByResource(req.matches[1], req.matches[2], ids,
                                              body.value("Port", ""), &r);
       reply_compose(req, res, s, r);
     });
  const std::string one = mem + "/" + kId;
  On("GET", one, [this](const Request& req, Response& res) {
    std::string aid = req.matches[1], bid = req.matches[2], mid = req.matches[3];
    json out = manager_->Read([&](const FabricState& s) {
      const ApplianceState* a = s.FindAppliance(aid);
      if (a == nullptr || a->FindBlade(bid) == nullptr) return json();
      auto it = s.regions.find(mid);
      if (it == s.regions.end() || it->second.appliance_id != aid || it->second.blade_id != bid) {
        return json();
      }
      return RegionToJson(it->second);
    });
    if (out.is_null()) return ReplyError(req, res, 404, "memory region " + mid + " not found");
    ReplyJson(res, 200, out);
  });
  On("PATCH", one,
     "a JSON object {\"Port\": ID, \"Operation\": \"assign\" or \"unassign\"} with optional "
     "assignEpoch (unassign), sent with its Content-Length",
     [this](const Request& req, Response& res) {
       json body;
       if (!ParseBody(req, res, &body)) return;
       if (!body.contains("Port") || !body["Port"].is_string()) {
         return ReplyError(req, res, 400, "Port (string) is required");
       }
       if (!body.contains("Operation") || !body["Operation"].is_string()) {
         return ReplyError(req, res, 400, "Operation (assign or unassign) is required");
       }
       std::string op = body["Operation"].get<std::string>();
       if (op != "assign" && op != "unassign") {
         return ReplyError(req, res, 400, "Operation must be assign or unassign");
       }
       // Extension: the assignment an unassign undoes (docs/fabric.md).
       uint64_t epoch = 0;
       Status es = OptEpoch(body, "assignEpoch", &epoch);
       if (!es.ok()) return ReplyStatus(req, res, es);
       if (body.contains("assignEpoch") && (op != "unassign" || epoch == 0)) {
         return ReplyError(req, res, 400, "assignEpoch (>= 1) goes with Operation unassign only");
       }
       MemoryRegion r;
       Status s = manager_->Assign(req.matches[1], req.matches[2], req.matches[3],
                                   body["Port"].get<std::string>(), op == "assign", epoch, &r);
       if (!s.ok()) return ReplyStatus(req, res, s);
       ReplyJson(res, 200, RegionToJson(r));
     });
  On("DELETE", one, [this](const Request& req, Response& res) {
    MemoryRegion r;
    Status s = manager_->Free(req.matches[1], req.matches[2], req.matches[3], &r);
    if (!s.ok()) return ReplyStatus(req, res, s);
    ReplyJson(res, 200, RegionToJson(r));
  });
}

}  // namespace cxlkv::fabric::internal
