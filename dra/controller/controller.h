// Copyright cxlkv authors.
//
// Controller: the cxlkv DRA driver's cluster side. Its concepts, one file
// each in dra/controller/ (controller_internal.h lists them):
//  - ResourceSlices (slices.h): one slice per blade, its device(s) with
//    capacity `memory` = the blade's bytes less every region that backs no
//    live allocation (orphaned, pending free, leaked, foreign): the scheduler
//    subtracts live claims itself, and must never admit what compose will
//    refuse. While the fabric manager is unreachable the devices carry the
//    taint cxlkv.dev/fabric-unreachable NoSchedule.
//  - The feature probe (feature_probe.h): a dry-run slice tells which gates
//    the apiserver keeps; flow and capacity mode "auto" follow it.
//  - Resync (resync.h; one replica: the holder of the Lease `lease_name`),
//    at start and every `resync_period` (backing off from 1 s while the
//    fabric manager is unreachable): the orphan sweep, then the slices.
//  - ResourceClaims allocated on our devices, per claim (reconcile.h):
//    ownership by compare-and-set and takeover of a dead replica's claims
//    (ownership.h), compose and later consumers' hosts (compose.h), the
//    status.devices conditions (conditions.h), release (release.h).
//    Events on the claim: Composed, Materialized, HostAdded, ComposeFailed,
//    FabricUnreachable, FabricReachable, RegionLost, OwnerTakenOver,
//    FreeRetrying, FreeFailed, Freed. On the slice: FabricUnreachable,
//    FabricReachable, BindingConditionsOff, AnnotationMode,
//    ConsumableCapacity.
//  - /metrics, /healthz and /readyz on `metrics_listen` (controller/metrics.h,
//    common/status_server.h): /healthz 200 while the process serves (JSON:
//    fabricReachable, leader); /readyz 200 once the claim informer has
//    synced and this replica holds its owner Lease, else 503 (JSON: ready,
//    informerSynced, ownerLease).
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
  // Published as every blade device's `coherence` attribute: "hardware", or
  // "software" for blades whose hosts share memory without hardware
  // coherence (CXL 1.1/2.0 multi-host), so a DeviceClass or claim can select
  // on it (docs/dra.md, "Non-coherent regions").
  std::string coherence = "hardware";
  // How often a claim whose region is being materialized on some host is
  // re-read from the fabric manager. A claim whose hosts are all
  // Materialized, or all released, is not polled: the next change of the
  // claim (a consumer in reservedFor) or the informer's resync brings it
  // back. Only while a consumer bound to a mapped host has not started yet
  // (its node may be releasing the region under it) is it re-read, from
  // this period doubling to 2 s.
  std::chrono::milliseconds materialize_poll{500};
  int max_free_attempts = 5;
  int workers = 2;
  // Orphan sweep + slice publishing period, and the informer's resync (each
  // replica re-checks the regions of the claims it owns this often).
  std::chrono::milliseconds resync_period{30000};
  // The Lease that elects the one replica doing resync and slices.
  std::string lease_namespace = "default";
  std::string lease_name = "cxlkv-dra-controller";
  std::chrono::milliseconds lease_duration{15000};
  // The Lease holder's resync deletes another replica's heartbeat Lease
  // ("<lease_name>-owner-<identity>") once its record has not changed for
  // this many of its leaseDurationSeconds, as seen from here (a departed
  // replica's; a live one renews every retry period). 0 = never.
  int owner_lease_gc_durations = 4;
  // "host:port" for /metrics, /healthz and /readyz; "" = no HTTP server.
  std::string metrics_listen;
  // How a pod waits for its claim's region:
  //  "binding-conditions": in the scheduler's PreBind, for the binding
  //    condition cxlkv.dev/composed (DRADeviceBindingConditions);
  //  "prepare-wait" (formerly "paper", still accepted): no binding
  //    conditions; the pod is bound and the kubelet's prepare answers "not
  //    ready yet" until the CDI ids are there, while the controller waits up
  //    to consumer_wait for a consumer, composes and patches status (status
  //    re-read every prepare_wait_poll): the flow of [Fan26] §2.3;
  //  "auto": binding conditions unless a dry-run slice shows the apiserver
  //    drops them.
  std::string flow = "auto";
  // How the scheduler accounts blade memory:
  //  "consumable": one device per blade, allowMultipleAllocations, capacity
  //    `memory` the scheduler accounts (DRAConsumableCapacity);
  //  "fixed-devices" (formerly "annotation", still accepted; [Fan26] §2.2):
  //    the fallback when that gate is off: fixed_device_count fixed devices
  //    per blade (at most one per minimum region, at most 64), each
  //    allocatable once, capacity `memory` = the blade's free bytes at the
  //    last resync (informational: the scheduler does not subtract); size,
  //    share count and QoS from the claim's cxlkv.dev/capacity-mib,
  //    share-count and qos annotations; two claims can then be admitted
  //    against the same free bytes and the second fails at compose (Event
  //    ComposeFailed);
  //  "auto": consumable unless the dry-run slice at start, or any later
  //    slice write, comes back without those fields; with fixed devices
  //    every resync period repeats the dry run, and once the fields come
  //    back intact the controller returns to consumable capacity (log line,
  //    metric cxlkv_dra_annotation_mode 0, Event ConsumableCapacity on each
  //    slice).
  std::string capacity_mode = "auto";
  int fixed_device_count = 64;
  std::chrono::milliseconds consumer_wait{30000};
  std::chrono::milliseconds prepare_wait_poll{1500};
  // A local pool (fabric::LocalComposer): the node's cxlkv-hostd, which the
  // controller asks to materialize and remove regions, as the fabric manager
  // does for its regions ("" with a fabric manager).
  std::string local_hostd_url;
  // Tests only: "after-compose" SIGKILLs the process right after a compose
  // returns, before the teardown parameters are recorded.
  std::string failpoint;
};

class Controller {
 public:
  // REQUIRES: kube and composer outlive the controller.
  static Status New(const ControllerOptions& opt, kube::Client* kube, fabric::Composer* composer,
                    std::unique_ptr<Controller>* out);
  ~Controller();  // Stop()

  // Checks that the apiserver serves resource.k8s.io/v1 (Unsupported with
  // the versions it does serve otherwise; IOError: apiserver unreachable),
  // starts the metrics server (IOError: cannot listen), then the claim
  // informer, the workers, the Lease contender and the resync loop.
  Status Start();
  void Stop();

  // One resync pass: the orphan sweep, then the slices. IOError when the
  // fabric manager or the apiserver fails (the slices then carry the
  // fabric-unreachable taint where they could be written). Run by the
  // Lease holder; exposed for tests.
  Status Resync();

  // The port /metrics listens on (0 when off); useful with "host:0".
  int metrics_port() const;

  struct Rep;

 private:
  friend class ControllerInternal;  // controller_internal.h: the concepts' tests
  explicit Controller(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

// Parses a Kubernetes quantity ("2Gi", "1536Mi", "2147483648", "2G") into
// bytes. InvalidArgument for anything else or a fractional byte count.
Status ParseQuantityBytes(const std::string& q, int64_t* bytes);

// Validates opt->flow and opt->capacity_mode, replacing the old names
// ("paper", "annotation") by the current ones. InvalidArgument naming the
// flag and the values it takes otherwise. Controller::New calls it; a main
// calls it with its other flag checks, before any start-up work.
Status CanonicalModes(ControllerOptions* opt);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_CONTROLLER_H_
