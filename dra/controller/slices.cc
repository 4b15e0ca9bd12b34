// Copyright cxlkv authors.
#include "controller/slices.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "common/claim_status.h"
#include "controller/claim_json.h"
#include "controller/controller_internal.h"
#include "cxlkv/fabric/local_composer.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::dra {

using kube::Json;

json DeviceFor(const fabric::Pool& p, const ControllerOptions& opt, int64_t capacity, bool down,
               bool binding) {
  const int64_t step = p.block_mib * opt.qos * kMiB;
  json device = {
      {"name", p.blade_id},
      {"attributes",
       {{"appliance", {{"string", p.appliance_id}}},
        {"blade", {{"string", p.blade_id}}},
        {"qos", {{"int", opt.qos}}},
        {"coherence", {{"string", opt.coherence}}},
        {"blockSizeBytes", {{"int", p.block_mib * kMiB}}}}},
      {"capacity",
       {{"memory",
         {{"value", std::to_string(capacity)},
          {"requestPolicy",
           {{"default", std::to_string(step)},
            {"validRange", {{"min", std::to_string(step)}, {"step", std::to_string(step)}}}}}}}}},
      {"allowMultipleAllocations", true}};
  if (binding) {
    device["bindingConditions"] = {kConditionComposed};
    device["bindingFailureConditions"] = {kConditionComposeFailed};
  }
  if (down) {
    // A taint applies on every host: right for a blade-wide fault such as
    // an unreachable manager (nothing new can be composed anywhere).
    device["taints"] = {
        {{"key", kTaintFabricUnreachable}, {"value", "true"}, {"effect", "NoSchedule"}}};
  }
  return device;
}

json DevicesFor(const fabric::Pool& p, const ControllerOptions& opt, int64_t capacity, bool down,
                bool prepare_wait, bool fixed_devices) {
  if (!fixed_devices) return json::array({DeviceFor(p, opt, capacity, down, !prepare_wait)});
  // Without consumable capacity a device is allocated to one claim at a
  // time, so the blade offers fixed devices: at most one per smallest
  // region the blade can compose (more could only fail at compose), at most
  // fixed_device_count (64: a slice's limit for devices with taints).
  const int64_t step = std::max<int64_t>(1, p.block_mib * opt.qos);
  const int64_t n =
      std::clamp<int64_t>(p.total_mib / step, 1, std::clamp(opt.fixed_device_count, 1, 64));
  json devices = json::array();
  for (int64_t i = 0; i < n; ++i) {
    json d = DeviceFor(p, opt, capacity, down, !prepare_wait);
    d["name"] = p.blade_id + "-" + std::to_string(i);
    d.erase("allowMultipleAllocations");
    // The value is the blade's free bytes at the last resync: a CEL
    // selector can prefer a blade with room, but nothing is reserved.
    d["capacity"]["memory"].erase("requestPolicy");
    devices.push_back(d);
  }
  return devices;
}

int64_t SliceCapacity(const fabric::Pool& p, const std::map<std::string, int64_t>& unusable,
                      const std::map<std::string, int64_t>& live, bool fixed_devices) {
  auto u = unusable.find(PoolName(p));
  int64_t held = u == unusable.end() ? 0 : u->second;
  // Fixed devices: the scheduler subtracts nothing, so the live claims'
  // regions come off here too.
  auto lb = live.find(PoolName(p));
  if (fixed_devices && lb != live.end()) held += lb->second;
  return std::max<int64_t>(0, p.total_mib * kMiB - held);
}

json SliceFor(const fabric::Pool& p, const std::string& driver, const json& devices) {
  json slice = {
      {"metadata", {{"name", driver + "-" + p.appliance_id + "-" + p.blade_id}}},
      {"spec",
       {{"driver", driver},
        {"pool", {{"name", PoolName(p)}, {"generation", 1}, {"resourceSliceCount", 1}}},
        {"nodeSelector",
         {{"nodeSelectorTerms",
           {{{"matchExpressions",
              {{{"key", "kubernetes.io/hostname"}, {"operator", "In"}, {"values", p.hosts}}}}}}}}},
        {"devices", devices}}}};
  // A local pool serves its own node only: a per-node slice (nodeName),
  // as node-local drivers publish.
  if (p.appliance_id == fabric::LocalComposer::kApplianceId && p.hosts.size() == 1) {
    slice["spec"].erase("nodeSelector");
    slice["spec"]["nodeName"] = p.hosts[0];
  }
  return slice;
}

json Controller::Rep::Devices(const fabric::Pool& p, int64_t capacity, bool down) const {
  return DevicesFor(p, opt, capacity, down, prepare_wait, fixed_devices);
}

Status Controller::Rep::PublishSlices(const std::vector<fabric::Pool>& pools,
                                      const std::map<std::string, int64_t>& unusable_bytes,
                                      const std::map<std::string, int64_t>& live_bytes, bool down) {
  const std::string& drv = opt.driver_name;
  Status first_error;
  for (const auto& p : pools) {
    // A write that shows the apiserver dropping fields changes the mode, and
    // so the slice's shape: that pool is sent once more in the new shape.
    for (int attempt = 0; attempt < 2; ++attempt) {
      bool mode_changed = false;
      Status s = PublishSlice(p, unusable_bytes, live_bytes, down, &mode_changed);
      if (!s.ok() && first_error.ok()) first_error = s;
      if (!s.ok() || !mode_changed) break;
    }
  }
  if (!down) {
    // A blade the manager no longer lists (removed, or taken out of its
    // management) must leave the scheduler's view too: its slice goes, so
    // an allocation that failed there is retried elsewhere. Only slices of
    // this controller's kind (fabric or local pools) are looked at.
    std::set<std::string> listed;
    for (const auto& p : pools) listed.insert(PoolName(p));
    const bool local_mode = !opt.local_hostd_url.empty();
    const std::string local_prefix = std::string(fabric::LocalComposer::kApplianceId) + "/";
    std::vector<Json> ours;
    std::string rv;
    kube::ListOptions lo;
    lo.field_selector = "spec.driver=" + drv;
    kube::Status ks = kube::ResourceSliceClient(kube).ListAll(lo, 500, &ours, &rv);
    if (!ks.ok() && first_error.ok()) {
      first_error = Status::IOError("list slices of " + drv + ": " + ks.ToString());
    }
    for (const auto& sl : ks.ok() ? ours : std::vector<Json>{}) {
      const std::string pool = sl["spec"]["pool"].value("name", "");
      const std::string name = sl["metadata"].value("name", "");
      if (pool.empty() || listed.count(pool) || name.rfind(drv + "-", 0) != 0) continue;
      if ((pool.rfind(local_prefix, 0) == 0) != local_mode) continue;
      kube::Status ds = kube::ResourceSliceClient(kube).Delete(name);
      if (ds.ok() || ds.IsNotFound()) {
        spdlog::info("deleted slice {}: pool {} is no longer listed by the composer", name, pool);
      } else if (first_error.ok()) {
        first_error = Status::IOError("delete stale slice " + name + ": " + ds.ToString());
      }
    }
  }
  return first_error;
}

Status Controller::Rep::PublishSlice(const fabric::Pool& p,
                                     const std::map<std::string, int64_t>& unusable_bytes,
                                     const std::map<std::string, int64_t>& live_bytes, bool down,
                                     bool* mode_changed) {
  const bool was_prepare_wait = prepare_wait, was_fixed = fixed_devices;
  const int64_t capacity = SliceCapacity(p, unusable_bytes, live_bytes, fixed_devices);
  const json devices = Devices(p, capacity, down);
  json slice = SliceFor(p, opt.driver_name, devices);
  const std::string name = slice["metadata"]["name"].get<std::string>();
  auto slices = kube::ResourceSliceClient(kube);
  json cur;
  kube::Status ks = slices.Get(name, &cur);
  json stored;
  bool was_tainted = false;
  if (ks.IsNotFound()) {
    ks = slices.Create(slice, &stored);
  } else if (ks.ok()) {
    // The apiserver stamps timeAdded on taints: compare without it.
    json cur_spec = cur["spec"];
    for (auto& d : cur_spec["devices"]) {
      if (!d.contains("taints")) continue;
      was_tainted = true;
      for (auto& t : d["taints"]) t.erase("timeAdded");
    }
    json want_spec = slice["spec"];
    want_spec["pool"]["generation"] = cur_spec["pool"].value("generation", int64_t{1});
    if (cur_spec == want_spec) {
      if (fixed_devices) EnterFixedDevices(&cur, "the apiserver keeps no consumable capacity");
      return Status::OK();
    }
    slice["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"];
    int64_t gen = cur["spec"]["pool"].value("generation", int64_t{1});
    slice["spec"]["pool"]["generation"] = gen + 1;
    ks = slices.Update(slice, &stored);
  }
  if (!ks.ok()) {
    // Another writer (a replica that just lost the Lease) gives 409: the
    // next pass retries.
    return Status::IOError("publish slice " + name + ": " + ks.ToString());
  }
  // A disabled gate makes the apiserver drop fields silently: compare what
  // came back with what was sent, on every write.
  const json& got = stored["spec"]["devices"][0];
  if (!prepare_wait && !got.contains("bindingConditions")) {
    prepare_wait = true;
    spdlog::error(
        "slice {}: the apiserver dropped bindingConditions: using "
        "the paper's flow",
        name);
    Event(stored, true, "BindingConditionsOff",
          "the apiserver dropped bindingConditions: consumers wait in prepare "
          "instead");
  }
  if (!fixed_devices && (!got.contains("allowMultipleAllocations") ||
                         !got["capacity"]["memory"].contains("requestPolicy"))) {
    if (opt.capacity_mode == "auto") {
      EnterFixedDevices(&stored,
                        "the apiserver dropped allowMultipleAllocations/requestPolicy "
                        "(DRAConsumableCapacity off)");
    } else {
      // --capacity-mode consumable: say so, but keep the shape asked for.
      metrics.SetAnnotationMode(true);
      spdlog::error("slice {}: the apiserver dropped consumable-capacity fields", name);
      Event(stored, true, "FieldsDropped",
            "the apiserver dropped consumable-capacity fields of " + name);
    }
  } else if (fixed_devices) {
    EnterFixedDevices(&stored, "the apiserver keeps no consumable capacity");
  } else if (left_fixed_devices && consumable_events.insert(name).second) {
    // The first write in the consumable shape since fixed devices were
    // left, and it came back intact.
    Event(stored, false, "ConsumableCapacity",
          "the apiserver keeps consumable capacity again: slice " + name +
              " offers one shared device; the scheduler accounts memory");
  }
  *mode_changed = was_prepare_wait != prepare_wait || was_fixed != fixed_devices;
  if (down && !was_tainted) {
    Event(stored, true, "FabricUnreachable",
          "fabric manager unreachable: device " + p.blade_id + " tainted " +
              kTaintFabricUnreachable + ":NoSchedule");
  } else if (!down && was_tainted) {
    Event(stored, false, "FabricReachable",
          "fabric manager reachable again: taint " + std::string(kTaintFabricUnreachable) +
              " removed");
  }
  spdlog::info("published slice {} (pool {}, hosts {}, {} MiB{}{})", name, PoolName(p),
               json(p.hosts).dump(), capacity / kMiB,
               fixed_devices ? ", " + std::to_string(devices.size()) + " fixed devices" : "",
               down ? ", tainted fabric-unreachable" : "");
  return Status::OK();
}

}  // namespace cxlkv::dra
