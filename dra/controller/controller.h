// Copyright cxlkv authors.
//
// Controller: the cxlkv DRA driver's cluster side. Two jobs:
//  - ResourceSlices: one slice per blade (pool "<appliance>/<blade>"), its
//    nodeSelector `kubernetes.io/hostname In [hosts cabled to the blade]`,
//    one device (the blade) with allowMultipleAllocations, capacity `memory`
//    (MiB-exact bytes) whose request policy steps in resource block x QoS,
//    and the binding condition cxlkv.dev/composed (failure
//    cxlkv.dev/compose-failed), no bindsToNode (it would pin a shared region
//    to the first pod's node). Capacity = the blade's memory minus every
//    region that backs no live allocation (orphaned, pending free, leaked,
//    foreign): the scheduler subtracts live claims itself, and must never
//    admit what compose will refuse. While the fabric manager is
//    unreachable the device carries the taint cxlkv.dev/fabric-unreachable
//    NoSchedule; it is dropped on recovery.
//  - Resync (one replica: the holder of the Lease `lease_name`), at start
//    and every `resync_period` (backing off from 1 s while the fabric
//    manager is unreachable): regions tagged by this driver whose (claim
//    UID, allocationTimestamp) names no live allocation, and that no claim
//    annotation still names, are freed (the orphan sweep); then the slices
//    are published.
//  - ResourceClaims allocated on our devices, per claim:
//      unowned -> owned     JSON Patch [test resourceVersion, add owner
//                           annotation, add finalizer]: a real compare-and-
//                           set (two controllers: one wins, one gets 409);
//      owned -> composed    compose through the Composer, keyed by (claim
//                           UID, allocationTimestamp) in the region's tag
//                           (a region already tagged so is adopted: a
//                           controller killed after compose leaks nothing);
//                           target hosts = the reserving pods' nodes
//                           (spec.nodeName, else status.nominatedNodeName)
//                           when all are known, else the allocation's node
//                           selector; the teardown parameters go into the
//                           cxlkv.dev/region annotation before status;
//      composed -> ready    status.devices[] (common/claim_status.h) with
//                           cxlkv.dev/composed True once every target host
//                           reports Materialized (polled until then);
//                           a later consumer on another cabled host: the
//                           host is added to the region (Composer::AddHost)
//                           and its state shows in status data.hosts;
//      deallocated/deleted  free the region, drop annotation and finalizer;
//                           after 5 failed frees the finalizer is dropped
//                           with a Warning Event (the region is leaked).
//    A claim whose owner replica died (its heartbeat Lease
//    "<lease_name>-owner-<identity>" unrenewed for the Lease's duration, as
//    seen from here) is taken over by the same compare-and-set; a region
//    the dead owner composed for the allocation is adopted by its tag.
//    Heartbeat Leases of departed replicas are deleted by the Lease
//    holder's resync once unrenewed for owner_lease_gc_durations.
//    Events on the claim: Composed, Materialized, HostAdded, ComposeFailed,
//    FabricUnreachable, FabricReachable, RegionLost, OwnerTakenOver,
//    FreeRetrying, FreeFailed, Freed. On the slice: FabricUnreachable,
//    FabricReachable, BindingConditionsOff, AnnotationMode,
//    ConsumableCapacity.
//  - /metrics, /healthz and /readyz on `metrics_listen` (controller/metrics.h):
//    /healthz 200 while the process serves (JSON: fabricReachable, leader);
//    /readyz 200 once the claim informer has synced and this replica holds
//    its owner Lease, else 503 (JSON: ready, informerSynced, ownerLease).
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
  // "binding-conditions": the scheduler waits in PreBind for
  // cxlkv.dev/composed; "paper": no binding conditions, the paper's flow
  // (the controller waits up to consumer_wait for a consumer, composes,
  // patches status; prepare answers "not ready yet" until the CDI ids are
  // there; status re-read every paper_poll); "auto": binding conditions
  // unless a dry-run slice shows the apiserver drops them.
  std::string flow = "auto";
  // "consumable": one device per blade, allowMultipleAllocations, capacity
  // `memory` the scheduler accounts (DRAConsumableCapacity); "annotation"
  // (paper §2.2): the fallback when that gate is off: `annotation_devices`
  // fixed devices per blade (at most one per minimum region, at most 64),
  // each allocatable once, capacity `memory` = the blade's free bytes at
  // the last resync (informational: the scheduler does not subtract),
  // size, share count and QoS from the claim's cxlkv.dev/capacity-mib,
  // share-count and qos annotations; two claims can then be admitted
  // against the same free bytes and the second fails at compose (Event
  // ComposeFailed). "auto": consumable unless the dry-run slice at start,
  // or any later slice write, comes back without those fields; in
  // annotation mode every resync period repeats the dry run, and once the
  // fields come back intact the controller returns to consumable capacity
  // (log line, metric 0, Event ConsumableCapacity on each slice).
  std::string capacity_mode = "auto";
  int annotation_devices = 64;
  std::chrono::milliseconds consumer_wait{30000};
  std::chrono::milliseconds paper_poll{1500};
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
  explicit Controller(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

// Parses a Kubernetes quantity ("2Gi", "1536Mi", "2147483648", "2G") into
// bytes. InvalidArgument for anything else or a fractional byte count.
Status ParseQuantityBytes(const std::string& q, int64_t* bytes);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_CONTROLLER_H_
