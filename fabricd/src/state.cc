// Copyright cxlkv authors.
#include "state.h"

#include <nlohmann/json.hpp>

#include "cxlkv/base/file.h"
#include "cxlkv/base/json.h"
#include "cxlkv/fabric/json_codec.h"

namespace cxlkv::fabric::internal {

using nlohmann::json;

// fabric-state.json: {"version": 1, "appliances", "hosts", "regions"}.
constexpr int kStateVersion = 1;

int64_t BladeState::AllocatedMiB() const {
  int64_t n = 0;
  for (bool u : used) n += u ? 1 : 0;
  return n * geometry.block_mib;
}

const PortConfig* BladeState::FindPort(const std::string& port_id) const {
  for (const auto& p : ports) {
    if (p.id == port_id) return &p;
  }
  return nullptr;
}

BladeState* ApplianceState::FindBlade(const std::string& bid) {
  for (auto& b : blades) {
    if (b.managed && b.id == bid) return &b;
  }
  return nullptr;
}

ApplianceState* FabricState::FindAppliance(const std::string& aid) {
  for (auto& a : appliances) {
    if (a.managed && a.id == aid) return &a;
  }
  return nullptr;
}

HostState* FabricState::FindHost(const std::string& hid) {
  for (auto& h : hosts) {
    if (h.managed && h.id == hid) return &h;
  }
  return nullptr;
}

Status FabricState::RebuildUsage() {
  for (auto& a : appliances) {
    for (auto& b : a.blades) {
      b.used.assign(static_cast<size_t>(b.geometry.channels * b.geometry.blocks_per_channel),
                    false);
    }
  }
  for (const auto& [id, r] : regions) {
    BladeState* blade = nullptr;
    for (auto& a : appliances) {
      if (a.id != r.appliance_id) continue;
      for (auto& b : a.blades) {
        if (b.id == r.blade_id) blade = &b;
      }
    }
    if (blade == nullptr) {
      return Status::Corruption("region " + id + ": blade " + r.appliance_id + "/" + r.blade_id +
                                " is not in the config");
    }
    for (int blk : r.blocks) {
      if (blk < 0 || static_cast<size_t>(blk) >= blade->used.size()) {
        return Status::Corruption("region " + id + ": block " + std::to_string(blk) +
                                  " out of range");
      }
      if (blade->used[blk]) {
        return Status::Corruption("region " + id + ": block " + std::to_string(blk) +
                                  " used twice");
      }
      blade->used[blk] = true;
    }
  }
  return Status::OK();
}

Status BuildState(const FabricConfig& config, const std::string& persisted, FabricState* out) {
  FabricState s;
  for (const auto& ac : config.appliances) {
    ApplianceState a;
    a.id = a.config_id = ac.id;
    for (const auto& bc : ac.blades) {
      BladeState b;
      b.id = b.config_id = bc.id;
      b.geometry = {bc.channels, bc.blocks_per_channel, bc.resource_block_mib};
      b.ports = bc.ports;
      a.blades.push_back(std::move(b));
    }
    s.appliances.push_back(std::move(a));
  }
  for (const auto& hc : config.hosts) {
    HostState h;
    h.id = h.config_id = hc.id;
    h.agent = hc.agent;
    h.local_memory_mib = hc.local_memory_mib;
    s.hosts.push_back(std::move(h));
  }
  if (!persisted.empty()) {
    json j;
    CXLKV_RETURN_IF_ERROR(base::ParseState(persisted, kStateVersion, &j));
    try {
      for (const auto& aj : j.at("appliances")) {
        for (auto& a : s.appliances) {
          if (a.config_id != aj.at("configId").get<std::string>()) continue;
          a.id = aj.at("id").get<std::string>();
          a.managed = aj.at("managed").get<bool>();
          for (const auto& bj : aj.at("blades")) {
            for (auto& b : a.blades) {
              if (b.config_id != bj.at("configId").get<std::string>()) continue;
              b.id = bj.at("id").get<std::string>();
              b.managed = bj.at("managed").get<bool>();
            }
          }
        }
      }
      for (const auto& hj : j.at("hosts")) {
        for (auto& h : s.hosts) {
          if (h.config_id != hj.at("configId").get<std::string>()) continue;
          h.id = hj.at("id").get<std::string>();
          h.managed = hj.at("managed").get<bool>();
        }
      }
      for (const auto& rj : j.at("regions")) {
        MemoryRegion r;
        CXLKV_RETURN_IF_ERROR(RegionFromStateJson(rj, &r));
        r.qos = rj.value("QoS", 0);
        s.regions[r.id] = std::move(r);
      }
    } catch (const json::exception& e) {
      return Status::Corruption(std::string("state: ") + e.what());
    }
  }
  CXLKV_RETURN_IF_ERROR(s.RebuildUsage());
  *out = std::move(s);
  return Status::OK();
}

std::string SerializeState(const FabricState& s) {
  json j = {{"version", kStateVersion}};
  json apps = json::array();
  for (const auto& a : s.appliances) {
    json blades = json::array();
    for (const auto& b : a.blades) {
      blades.push_back({{"configId", b.config_id}, {"id", b.id}, {"managed", b.managed}});
    }
    apps.push_back(
        {{"configId", a.config_id}, {"id", a.id}, {"managed", a.managed}, {"blades", blades}});
  }
  j["appliances"] = std::move(apps);
  json hosts = json::array();
  for (const auto& h : s.hosts) {
    hosts.push_back({{"configId", h.config_id}, {"id", h.id}, {"managed", h.managed}});
  }
  j["hosts"] = std::move(hosts);
  json regions = json::array();
  for (const auto& [id, r] : s.regions) regions.push_back(RegionToStateJson(r));
  j["regions"] = std::move(regions);
  return j.dump(2);
}

}  // namespace cxlkv::fabric::internal
