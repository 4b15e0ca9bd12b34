// Copyright cxlkv authors.
//
// Driver: the kubelet-facing gRPC surface of cxlkv-dra-kubeletplugin.
//  - Registration (pluginregistration.Registration) on a socket in
//    <kubelet root>/plugins_registry, which the kubelet's plugin watcher
//    finds; GetInfo advertises, preferred first, v1.DRAPlugin,
//    v1beta1.DRAPlugin, v1.DRAResourceHealth, v1alpha1.DRAResourceHealth.
//  - DRAPlugin v1 and v1beta1 plus DRAResourceHealth v1 and v1alpha1 on
//    <kubelet root>/plugins/<driver>/dra[-<pod uid>].sock.
// With a pod UID, both sockets carry it, so two plugin pods of a rolling
// update (maxSurge 1) serve side by side; the kubelet uses the newest.
// Prepare/Unprepare go to DeviceState, health to HealthMonitor. A per-claim
// failure is the claim's `error`; a gRPC error is never used for it (it
// would discard the other claims' answers).
//
// Thread-safety: Start and Stop from one thread; the servers run their own.
#ifndef CXLKV_DRA_KUBELETPLUGIN_DRIVER_H_
#define CXLKV_DRA_KUBELETPLUGIN_DRIVER_H_

#include <atomic>
#include <memory>
#include <string>

#include "cxlkv/status.h"
#include "kubeletplugin/health.h"
#include "kubeletplugin/state.h"

namespace cxlkv::dra {

struct DriverOptions {
  std::string driver_name = "cxlkv.dev";
  // The kubelet's --root-dir; sockets go under plugins_registry/ and plugins/.
  std::string kubelet_root_dir = "/var/lib/kubelet";
  // This plugin pod's UID ("" = fixed socket names, no rolling update).
  std::string pod_uid;
};

class Driver {
 public:
  // Removes stale sockets of the same names, starts the DRA service socket,
  // then the registration socket (the kubelet dials the DRA socket as soon
  // as it has read GetInfo). IOError: a socket cannot be created.
  // REQUIRES: state and health outlive the driver.
  static Status Start(const DriverOptions& opt, DeviceState* state, HealthMonitor* health,
                      std::unique_ptr<Driver>* out);
  ~Driver();  // Stop()

  // Removes the registration socket first (the kubelet deregisters the
  // plugin), then shuts the servers down and removes the DRA socket.
  void Stop();

  const std::string& registration_socket() const;
  const std::string& dra_socket() const;
  // What the kubelet last said in NotifyRegistrationStatus.
  bool registered() const;
  std::string registration_error() const;

  // For /healthz: "" when both sockets exist and accept a connection, else
  // what failed ("registration socket <path>: <errno text>"). Registration by
  // the kubelet is not required (a plugin waiting for its kubelet is alive).
  std::string Check() const;

  struct Rep;

 private:
  explicit Driver(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

// The registration socket's file name, as the Go helper
// (k8s.io/dynamic-resource-allocation/kubeletplugin) names it: without a pod
// UID "<driver>-reg.sock"; with one, the first of "<driver>-<uid>-reg.sock",
// "<driver>-<b64url(sha256(uid))[:8 bytes]>-reg.sock" and
// "dra-<b64url(sha256(driver NUL uid))[:16 bytes]>-reg.sock" whose full path
// fits in a Unix socket address (107 bytes plus NUL).
std::string RegistrationSocketName(const std::string& registry_dir, const std::string& driver,
                                   const std::string& pod_uid);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_KUBELETPLUGIN_DRIVER_H_
