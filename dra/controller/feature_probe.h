// Copyright cxlkv authors.
//
// The feature probe: a server-side dry run of a slice with every field the
// controller uses tells which feature gates the apiserver has on
// (DRADeviceBindingConditions, DRAConsumableCapacity), without persisting
// anything. At start it settles flow and capacity mode "auto"
// (Controller::Rep::ProbeGates); while fixed devices are on it is repeated
// every resync period (Controller::Rep::ReprobeConsumable).
//
// Thread-safety: pure functions.
#ifndef CXLKV_DRA_CONTROLLER_FEATURE_PROBE_H_
#define CXLKV_DRA_CONTROLLER_FEATURE_PROBE_H_

#include <nlohmann/json.hpp>

#include "controller/controller.h"

namespace cxlkv::dra {

// The dry-run slice: one device in the consumable shape with binding
// conditions, whatever the current mode, on a pool nobody uses.
nlohmann::json ProbeSlice(const ControllerOptions& opt);

// What the apiserver kept of ProbeSlice (the stored object it answered).
struct ProbeResult {
  bool binding_conditions = false;  // bindingConditions kept
  bool consumable = false;          // allowMultipleAllocations and requestPolicy kept
};
ProbeResult ReadProbe(const nlohmann::json& stored);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_FEATURE_PROBE_H_
