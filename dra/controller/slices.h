// Copyright cxlkv authors.
//
// ResourceSlices: one slice per blade (pool "<appliance>/<blade>"), its
// nodeSelector `kubernetes.io/hostname In [hosts cabled to the blade]` (a
// local pool's: nodeName), and the blade's device(s) in the current mode:
//  - consumable capacity: one device with allowMultipleAllocations and
//    capacity `memory` whose request policy steps in resource block x QoS;
//  - fixed devices (the fallback when DRAConsumableCapacity is off): at most
//    one device per smallest region, "<blade>-<i>", each allocatable once,
//    capacity `memory` the blade's free bytes (informational).
// With binding conditions (not in the prepare-wait flow) each device names
// cxlkv.dev/composed and the failure condition cxlkv.dev/compose-failed;
// while the fabric manager is unreachable each carries the taint
// cxlkv.dev/fabric-unreachable NoSchedule. Publishing is
// Controller::Rep::PublishSlices (slices.cc).
//
// Thread-safety: pure functions.
#ifndef CXLKV_DRA_CONTROLLER_SLICES_H_
#define CXLKV_DRA_CONTROLLER_SLICES_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "controller/controller.h"
#include "cxlkv/fabric/composer.h"

namespace cxlkv::dra {

inline constexpr const char* kTaintFabricUnreachable = "cxlkv.dev/fabric-unreachable";

// The blade's one device in the consumable shape. binding: with the
// binding conditions; down: with the fabric-unreachable taint.
nlohmann::json DeviceFor(const fabric::Pool& p, const ControllerOptions& opt, int64_t capacity,
                         bool down, bool binding);

// The slice's devices: DeviceFor's one device, or with fixed_devices the
// fixed devices "<blade>-<i>" (at most one per smallest region, at most
// opt.fixed_device_count, at most 64).
nlohmann::json DevicesFor(const fabric::Pool& p, const ControllerOptions& opt, int64_t capacity,
                          bool down, bool prepare_wait, bool fixed_devices);

// The capacity a pool's slice offers: its bytes less what backs no live
// allocation (`unusable`) and, with fixed devices (the scheduler subtracts
// nothing then), less what backs live ones too (`live`); never below 0.
int64_t SliceCapacity(const fabric::Pool& p, const std::map<std::string, int64_t>& unusable,
                      const std::map<std::string, int64_t>& live, bool fixed_devices);

// The slice object for a pool: "<driver>-<appliance>-<blade>", generation 1.
nlohmann::json SliceFor(const fabric::Pool& p, const std::string& driver,
                        const nlohmann::json& devices);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_SLICES_H_
