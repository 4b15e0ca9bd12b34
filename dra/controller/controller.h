// Copyright cxlkv authors.
//
// Controller: the cxlkv DRA driver's cluster side. Two jobs:
//  - ResourceSlices: one slice per blade (pool "<appliance>/<blade>"), its
//    nodeSelector `kubernetes.io/hostname In [hosts cabled to the blade]`,
//    one device (the blade) with allowMultipleAllocations, capacity `memory`
//    (MiB-exact bytes) whose request policy steps in resource block x QoS,
//    and the binding condition cxlkv.dev/composed (failure
//    cxlkv.dev/compose-failed), no bindsToNode (it would pin a shared region
//    to the first pod's node). Republished every `slice_period`.
//  - ResourceClaims allocated on our devices, per claim:
//      unowned -> owned     JSON Patch [test resourceVersion, add owner
//                           annotation, add finalizer]: a real compare-and-
//                           set (two controllers: one wins, one gets 409);
//      owned -> composed    compose through the Composer, keyed by (claim
//                           UID, allocationTimestamp); the teardown
//                           parameters go into the cxlkv.dev/region
//                           annotation before status is written;
//      composed -> ready    status.devices[] (common/claim_status.h) with
//                           cxlkv.dev/composed True once every target host
//                           reports Materialized (polled until then);
//      deallocated/deleted  free the region, drop annotation and finalizer;
//                           after 5 failed frees the finalizer is dropped
//                           with a Warning Event (the region is leaked).
//    Events on the claim: Composed, ComposeFailed, FreeRetrying, FreeFailed.
//
// Thread-safety: Start/Stop from one thread; work runs on its own threads.
#ifndef CXLKV_DRA_CONTROLLER_CONTROLLER_H_
#define CXLKV_DRA_CONTROLLER_CONTROLLER_H_

#include <chrono>
#include <memory>
#include <string>

#include "cxlkv/fabric/composer.h"
#include "cxlkv/kube/client.h"
#include "cxlkv/status.h"

namespace cxlkv::dra {

struct ControllerOptions {
  std::string driver_name = "cxlkv.dev";
  // This replica's identity in the owner annotation (e.g. the pod name).
  std::string identity;
  // DIMM channels interleaved per region (CFM QoS): 1, 2, 4 or 8.
  int qos = 4;
  std::chrono::milliseconds slice_period{30000};
  // How often a claim whose region is not yet materialized everywhere is
  // re-read from the fabric manager.
  std::chrono::milliseconds materialize_poll{500};
  int max_free_attempts = 5;
  int workers = 2;
};

class Controller {
 public:
  // REQUIRES: kube and composer outlive the controller.
  static Status New(const ControllerOptions& opt, kube::Client* kube, fabric::Composer* composer,
                    std::unique_ptr<Controller>* out);
  ~Controller();  // Stop()

  // Publishes the slices once (IOError when the fabric manager or the
  // apiserver refuses), then starts the claim informer, the workers and the
  // periodic slice publisher.
  Status Start();
  void Stop();

  // One slice pass (also run periodically). Exposed for tests.
  Status PublishSlices();

  struct Rep;

 private:
  explicit Controller(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

// Parses a Kubernetes quantity ("2Gi", "1536Mi", "2147483648", "2G") into
// bytes. InvalidArgument for anything else or a fractional byte count.
Status ParseQuantityBytes(const std::string& q, int64_t* bytes);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_CONTROLLER_H_
