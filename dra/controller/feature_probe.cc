// Copyright cxlkv authors.
#include "controller/feature_probe.h"

#include <spdlog/spdlog.h>

#include "controller/claim_json.h"
#include "controller/controller_internal.h"
#include "controller/slices.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::dra {

json ProbeSlice(const ControllerOptions& opt) {
  fabric::Pool probe;
  probe.appliance_id = "gate-probe";
  probe.blade_id = "gate-probe";
  probe.block_mib = 256;
  probe.total_mib = 256 * opt.qos * 8;  // validation wants steps to fit
  return {{"metadata", {{"name", opt.driver_name + "-gate-probe"}}},
          {"spec",
           {{"driver", opt.driver_name},
            {"pool", {{"name", "gate-probe"}, {"generation", 1}, {"resourceSliceCount", 1}}},
            {"nodeName", "gate-probe"},
            {"devices", {DeviceFor(probe, opt, probe.total_mib * kMiB, false, true)}}}}};
}

ProbeResult ReadProbe(const json& stored) {
  ProbeResult r;
  if (!stored.contains("spec") || !stored["spec"].contains("devices") ||
      !stored["spec"]["devices"].is_array() || stored["spec"]["devices"].empty()) {
    return r;
  }
  const json& d = stored["spec"]["devices"][0];
  r.binding_conditions = d.contains("bindingConditions");
  r.consumable = d.contains("allowMultipleAllocations") && d.contains("capacity") &&
                 d["capacity"].contains("memory") &&
                 d["capacity"]["memory"].contains("requestPolicy");
  return r;
}

Status Controller::Rep::DryRunProbe(bool* binding_conditions, bool* consumable) {
  kube::WriteOptions wo;
  wo.dry_run = true;
  json got;
  kube::Status ks = kube::ResourceSliceClient(kube).Create(ProbeSlice(opt), &got, wo);
  if (!ks.ok()) return Status::IOError("probe feature gates (dry-run slice): " + ks.ToString());
  const ProbeResult r = ReadProbe(got);
  *binding_conditions = r.binding_conditions;
  *consumable = r.consumable;
  return Status::OK();
}

void Controller::Rep::EnterFixedDevices(const json* slice, const std::string& why) {
  const bool was = fixed_devices.exchange(true);
  metrics.SetAnnotationMode(true);
  if (slice != nullptr) left_fixed_devices = false;
  if (!was) {
    spdlog::error(
        "annotation mode: {}: fixed devices per blade, claim sizes "
        "from cxlkv.dev/capacity-mib "
        "(the scheduler does not account capacity; a claim can fail "
        "at compose)",
        why);
  }
  if (slice == nullptr) return;
  const std::string name = (*slice)["metadata"].value("name", "");
  if (!fixed_device_events.insert(name).second) return;
  Event(*slice, true, "AnnotationMode",
        why + ": slice " + name +
            " offers fixed devices; claims give their size in "
            "cxlkv.dev/capacity-mib");
}

void Controller::Rep::ReprobeConsumable() {
  if (!fixed_devices || opt.capacity_mode != "auto") return;
  bool binding = false, consumable = false;
  Status s = DryRunProbe(&binding, &consumable);
  if (!s.ok()) {
    spdlog::warn("annotation mode: {}", s.ToString());
    return;
  }
  if (!consumable) return;
  if (!fixed_devices.exchange(false)) return;
  metrics.SetAnnotationMode(false);
  fixed_device_events.clear();  // a later fallback tells every slice again
  consumable_events.clear();
  left_fixed_devices = true;
  spdlog::warn(
      "annotation mode off: the dry-run slice kept "
      "allowMultipleAllocations/requestPolicy "
      "(DRAConsumableCapacity on again): one shared device per blade, "
      "the scheduler accounts "
      "memory");
}

Status Controller::Rep::ProbeGates() {
  bool binding = false, consumable = false;
  CXLKV_RETURN_IF_ERROR(DryRunProbe(&binding, &consumable));
  if (opt.flow == "auto" && !binding) {
    prepare_wait = true;
    spdlog::warn(
        "the apiserver drops bindingConditions "
        "(DRADeviceBindingConditions off): "
        "using the paper's flow");
  }
  if (!consumable) {
    if (opt.capacity_mode == "auto") {
      // The slices' Events follow on their first write (the probe is
      // never stored, so there is nothing to attach one to).
      EnterFixedDevices(nullptr,
                        "the dry-run slice came back without allowMultipleAllocations/"
                        "requestPolicy (DRAConsumableCapacity off)");
    } else if (opt.capacity_mode == "consumable") {
      metrics.SetAnnotationMode(true);
      spdlog::error(
          "the apiserver drops consumable-capacity fields "
          "(DRAConsumableCapacity off), but "
          "--capacity-mode consumable: the scheduler will not account memory");
    }
  }
  return Status::OK();
}

}  // namespace cxlkv::dra
