// Copyright cxlkv authors.
#include "controller/conditions.h"

#include <spdlog/spdlog.h>

#include "common/claim_status.h"
#include "controller/claim_json.h"
#include "controller/controller_internal.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::dra {

namespace {
// The driver's entries of a claim's status.devices.
json StatusDevices(const json& claim) {
  return claim.contains("status") ? claim["status"].value("devices", json::array()) : json::array();
}
}  // namespace

StatusUpdate ClaimStatusUpdate(const json& claim, const json& ours, const RegionRef& ref,
                               const fabric::MemoryRegion& region, const std::string& driver) {
  StatusUpdate u;
  u.hosts = json::object();
  bool& all = u.all_materialized;
  all = !region.mappings.empty();
  std::string pending;
  for (const auto& m : region.mappings) {
    if (m.host_id.empty()) continue;
    const std::string state = fabric::ToString(m.materialization);
    u.hosts[m.host_id] = {{"state", state}, {"cdiDevice", "cxlkv.dev/region=" + region.id}};
    if (!m.error.empty()) u.hosts[m.host_id]["error"] = m.error;
    if (!m.device.empty()) u.hosts[m.host_id]["device"] = m.device;
    // The fabric manager's assignment epoch of this host (docs/dra-design.md,
    // "Release protocol"): larger after a release and an add-host.
    if (m.assign_epoch > 0) u.hosts[m.host_id]["assignEpoch"] = m.assign_epoch;
    if (m.materialization != fabric::Materialization::kMaterialized) {
      all = false;
      pending += (pending.empty() ? "" : ", ") + m.host_id + " " + state;
    }
  }
  json data = {{"memoryId", region.id},
               {"applianceId", ref.appliance_id},
               {"bladeId", ref.blade_id},
               {"sizeBytes", region.size_mib * kMiB},
               {"hosts", u.hosts}};
  const json current = StatusDevices(claim);
  u.devices = json::array();
  for (const auto& d : current) {
    if (d.value("driver", "") != driver) u.devices.push_back(d);  // keep others'
  }
  std::string prev_ids;  // the region the status named before, if any
  json prev_hosts = json::object();
  for (const auto& d : current) {
    if (d.value("driver", "") == driver && d.contains("data") && d["data"].is_object()) {
      prev_ids = d["data"].value("memoryId", "");
      if (prev_ids == region.id && d["data"].contains("hosts")) prev_hosts = d["data"]["hosts"];
    }
  }
  for (const auto& r : ours) {
    json entry = DeviceEntry(r, driver);
    json prev;
    for (const auto& d : current) {
      if (d.value("driver", "") == driver && d.value("pool", "") == r.value("pool", "") &&
          d.value("device", "") == r.value("device", "") &&
          d.value("shareID", "") == r.value("shareID", "")) {
        prev = d;
      }
    }
    // Binding conditions are evaluated once per claim (k/k#140036): once
    // True for this region it stays True while a later consumer's host is
    // added (the plugin gates prepare on that host's state in data.hosts).
    // A new region (recomposed after a loss) starts False again.
    bool was_true = false, was_unreachable = false;
    std::string since = Now3339(), reach_since = since;
    const bool same_region = prev.is_object() && prev.contains("data") &&
                             prev["data"].is_object() &&
                             prev["data"].value("memoryId", "") == region.id;
    if (prev.is_object()) {
      for (const auto& c : prev.value("conditions", json::array())) {
        if (c.value("type", "") == kConditionComposed && c.value("status", "") == "True" &&
            same_region) {
          was_true = true;
        }
        if (c.value("type", "") == kConditionFabricReachable) {
          if (c.value("status", "") == "False") {
            was_unreachable = true;
          } else {
            reach_since = c.value("lastTransitionTime", reach_since);
          }
        }
      }
    }
    const bool ctrue = all || was_true;
    std::string cstatus = ctrue ? "True" : "False";
    if (prev.is_object()) {
      for (const auto& c : prev.value("conditions", json::array())) {
        if (c.value("type", "") == kConditionComposed && c.value("status", "") == cstatus &&
            (same_region || !ctrue)) {
          since = c.value("lastTransitionTime", since);
        }
      }
    }
    std::string reason = all ? "Materialized" : (ctrue ? "AddingHosts" : "Materializing");
    if (!ctrue && !prev_ids.empty() && prev_ids != region.id) reason = "Recomposing";
    entry["conditions"] = {{{"type", kConditionComposed},
                            {"status", cstatus},
                            {"reason", reason},
                            {"message", all ? "region " + region.id + " materialized on every host"
                                            : "waiting for " + pending},
                            {"lastTransitionTime", since}},
                           {{"type", kConditionFabricReachable},
                            {"status", "True"},
                            {"reason", "Reachable"},
                            {"message", "the fabric manager answered"},
                            {"lastTransitionTime", reach_since}}};
    if (was_unreachable) u.fabric_reachable_again = true;
    entry["data"] = data;
    if (!prev.is_object() || prev.value("data", json()) != data ||
        prev.value("conditions", json()) != entry["conditions"]) {
      u.changed = true;
    }
    if (all && !was_true) u.became_true = true;
    u.devices.push_back(entry);
  }
  for (const auto& [h, st] : u.hosts.items()) {
    if (st.value("state", "") != kHostMaterialized) continue;
    if (prev_hosts.contains(h) && prev_hosts[h].value("state", "") == kHostMaterialized) continue;
    u.newly_materialized.push_back(h);
  }
  return u;
}

json FabricDownDevices(const json& claim, const json& ours, const std::string& driver,
                       const Status& why, bool* changed) {
  // The claim keeps its data and its composed condition; only the
  // informational fabric-reachable condition turns False (once: the Event
  // and the write happen on the transition, not on every retry).
  const json down = {{"type", kConditionFabricReachable},
                     {"status", "False"},
                     {"reason", "FabricUnreachable"},
                     {"message", why.ToString().substr(0, 512)},
                     {"lastTransitionTime", Now3339()}};
  json devices = json::array();
  bool have_ours = false;
  *changed = false;
  for (const auto& d : StatusDevices(claim)) {
    if (d.value("driver", "") != driver) {
      devices.push_back(d);
      continue;
    }
    have_ours = true;
    json e = d;
    json conds = json::array();
    bool already = false;
    for (const auto& c : e.value("conditions", json::array())) {
      if (c.value("type", "") != kConditionFabricReachable) {
        conds.push_back(c);
      } else if (c.value("status", "") == "False") {
        already = true;
        conds.push_back(c);
      }
    }
    if (!already) {
      conds.push_back(down);
      *changed = true;
    }
    e["conditions"] = conds;
    devices.push_back(e);
  }
  if (!have_ours) {
    for (const auto& r : ours) {
      json e = DeviceEntry(r, driver);
      e["conditions"] = {down};
      devices.push_back(e);
    }
    *changed = true;
  }
  return devices;
}

json ComposeFailedDevices(const json& claim, const json& ours, const std::string& driver,
                          const Status& why) {
  json devices = json::array();
  for (const auto& d : StatusDevices(claim)) {
    if (d.value("driver", "") != driver) devices.push_back(d);
  }
  const std::string msg = why.ToString().substr(0, 1024);
  const std::string now = Now3339();
  for (const auto& r : ours) {
    json e = DeviceEntry(r, driver);
    e["conditions"] = {{{"type", kConditionComposed},
                        {"status", "False"},
                        {"reason", "ComposeFailed"},
                        {"message", msg},
                        {"lastTransitionTime", now}},
                       {{"type", kConditionComposeFailed},
                        {"status", "True"},
                        {"reason", IsBudgetExceeded(why) ? kBudgetExceededReason
                                   : why.IsNoSpace()     ? "NoSpace"
                                                         : "InvalidRequest"},
                        {"message", msg},
                        {"lastTransitionTime", now}}};
    devices.push_back(e);
  }
  return devices;
}

namespace {
json ReplaceDevices(const json& devices) {
  return json::array({{{"op", "add"}, {"path", "/status/devices"}, {"value", devices}}});
}
}  // namespace

Status Controller::Rep::MarkFabricDown(const json& claim, const json& ours, const Status& why) {
  bool changed = false;
  const json devices = FabricDownDevices(claim, ours, opt.driver_name, why, &changed);
  if (!changed) return Status::OK();
  Event(claim, true, "FabricUnreachable", "fabric manager unreachable: " + why.ToString());
  json out;
  return Timed("status_patch",
               [&] { return PatchClaim(claim, ReplaceDevices(devices), &out, "status"); });
}

Status Controller::Rep::ComposeFailed(const json& claim, const json& ours, const Status& why) {
  const json devices = ComposeFailedDevices(claim, ours, opt.driver_name, why);
  json out;
  return Timed("status_patch",
               [&] { return PatchClaim(claim, ReplaceDevices(devices), &out, "status"); });
}

Status Controller::Rep::WriteStatus(const json& claim, const json& ours, const RegionRef& ref,
                                    const fabric::MemoryRegion& region, bool* all) {
  const StatusUpdate u = ClaimStatusUpdate(claim, ours, ref, region, opt.driver_name);
  *all = u.all_materialized;
  if (u.fabric_reachable_again) {
    Event(claim, false, "FabricReachable", "fabric manager reachable again");
  }
  if (!u.changed) return Status::OK();
  json out;
  CXLKV_RETURN_IF_ERROR(Timed("status_patch", [&] {
    return PatchClaim(claim, ReplaceDevices(u.devices), &out, "status");
  }));
  // One Event per host whose state became Materialized in this write.
  for (const auto& h : u.newly_materialized) {
    Event(claim, false, "Materialized", "region " + region.id + " materialized on host " + h);
  }
  if (u.became_true) {
    spdlog::info("claim {}: region {} materialized on every host ({})", kube::ObjectKey(claim),
                 region.id, u.hosts.size());
  }
  return Status::OK();
}

}  // namespace cxlkv::dra
