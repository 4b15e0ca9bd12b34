// Copyright cxlkv authors.
//
// HealthMonitor: per-device health of this node's prepared claims, for the
// kubelet's DRAResourceHealth stream (v1 and v1alpha1). Every `interval` it
// lists the regions the local hostd has materialized; a blade device is
// Healthy when hostd answers and every prepared claim's region on it is
// still materialized here, Unhealthy when hostd is down or a region is gone
// (an appliance power cycle, a host that lost it), with the reason.
// Health here is per host: a fault on one host is reported by that host's
// plugin only, never as a blade-wide taint.
//
// Thread-safety: all methods are safe to call concurrently.
#ifndef CXLKV_DRA_KUBELETPLUGIN_HEALTH_H_
#define CXLKV_DRA_KUBELETPLUGIN_HEALTH_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cxlkv/hostd/client.h"
#include "kubeletplugin/state.h"

namespace cxlkv::dra {

struct DeviceHealthInfo {
  enum class Health : uint8_t { kUnknown, kHealthy, kUnhealthy };
  std::string pool_name;
  std::string device_name;
  Health health = Health::kUnknown;
  std::string message;       // why, "" when healthy
  int64_t updated_unix = 0;  // seconds
};

class HealthMonitor {
 public:
  // REQUIRES: state and hostd outlive the monitor; interval > 0.
  HealthMonitor(DeviceState* state, const hostd::Client* hostd, std::chrono::milliseconds interval);
  ~HealthMonitor();  // stops the poller

  // Starts polling (the first check runs at once).
  void Start();
  void Stop();

  // Runs one check now and publishes it.
  void CheckNow();

  // Waits until a check newer than *seen was published, *stop became true or
  // `timeout` passed; fills *devices with the latest list and *seen with its
  // number. Returns false on stop or timeout with nothing new.
  bool Wait(uint64_t* seen, std::vector<DeviceHealthInfo>* devices,
            const std::function<bool()>& stop, std::chrono::milliseconds timeout);

  // How long the kubelet should wait for the next update before it marks
  // the devices Unknown: three intervals.
  int64_t timeout_seconds() const;

 private:
  void Loop();

  // Immutable after construction.
  DeviceState* const state_;
  const hostd::Client* const hostd_;
  const std::chrono::milliseconds interval_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                      // guarded by mu_
  uint64_t published_ = 0;                 // guarded by mu_
  std::vector<DeviceHealthInfo> devices_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_KUBELETPLUGIN_HEALTH_H_
