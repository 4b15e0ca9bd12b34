// Copyright cxlkv authors.
//
// Controller::Rep: the controller's state and its per-concept operations,
// one .cc file per concept (LevelDB's *_internal.h: extra access for the
// controller's own files and its tests, never widening controller.h):
//
//   controller.cc     lifecycle: Start/Stop, the status server, the informer,
//                     the workers, the Leases, the resync loop
//   claim_json.cc     reading a claim; writing it by compare-and-set
//   slices.cc         ResourceSlices: the blade device, publishing
//   feature_probe.cc  the dry-run slice: which gates the apiserver keeps
//   resync.cc         the orphan sweep and the pools' accounting
//   reconcile.cc      a claim's Sync: which step comes next
//   ownership.cc      the owner annotation, heartbeat Leases, takeover
//   compose.cc        compose, the claim's consumers, add-host, local hostd
//   conditions.cc     the claim's status.devices and their conditions
//   release.cc        freeing a region, dropping annotation and finalizer
//
// The pure parts of each concept (no apiserver, no fabric) are declared in
// the concept's own header for its tests.
//
// Thread-safety: as annotated per member; Rep's operations are called by the
// workers, the resync thread and the status server's threads.
#ifndef CXLKV_DRA_CONTROLLER_CONTROLLER_INTERNAL_H_
#define CXLKV_DRA_CONTROLLER_CONTROLLER_INTERNAL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status_server.h"
#include "controller/annotations.h"
#include "controller/controller.h"
#include "controller/metrics.h"
#include "controller/ownership.h"
#include "controller/quota.h"
#include "cxlkv/fabric/composer.h"
#include "cxlkv/hostd/client.h"
#include "cxlkv/kube/event_recorder.h"
#include "cxlkv/kube/informer.h"
#include "cxlkv/kube/leader_election.h"
#include "cxlkv/kube/workqueue.h"

namespace cxlkv::dra {

using nlohmann::json;

// lifecycle (controller.cc)
// /healthz: 200 while the process serves, JSON {ok, fabricReachable, leader}.
StatusServer::Reply HealthReply(bool fabric_reachable, bool leader);
// /readyz: 200 once the claim informer has synced and this replica holds its
// owner Lease, else 503; JSON {ready, informerSynced, ownerLease}.
StatusServer::Reply ReadyReply(bool informer_synced, bool owner_lease);

struct Controller::Rep {
  // Immutable after New.
  ControllerOptions opt;
  kube::Client* kube;
  fabric::Composer* composer;
  std::unique_ptr<NamespaceBudget> budget;  // controller/quota.h
  std::unique_ptr<kube::EventRecorder> events;

  // Set up by Start (lifecycle).
  std::unique_ptr<kube::Informer> informer;
  kube::WorkQueue queue{kube::WorkQueueOptions{std::chrono::milliseconds(200),
                                               std::chrono::milliseconds(10000), 50, 100}};
  std::unique_ptr<kube::LeaderElector> elector;
  // This replica's own Lease (OwnerLeaseName(identity)), renewed while it
  // runs: the heartbeat by which other replicas tell a dead owner.
  std::unique_ptr<kube::LeaderElector> heartbeat;
  std::unique_ptr<StatusServer> status_server;  // /metrics, /healthz, /readyz
  int http_port = 0;
  // Set once informer and heartbeat exist: /readyz reads them only then.
  std::atomic<bool> started{false};
  std::vector<std::thread> threads;
  ControllerMetrics metrics;

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;        // guarded by mu
  bool resync_now = false;  // guarded by mu: leadership just won
  // Other owners' Leases as last read: the record seen (holder and
  // renewTime) and when this replica first saw it, by owner; guarded by mu.
  std::map<std::string, LeaseSeen> owners;
  // Consecutive polls of a claim only because a consumer has not started
  // on a mapped host (the release race), by claim key; guarded by mu.
  std::map<std::string, int> watch_rounds;
  std::map<std::string, int> free_failures;  // by claim UID; guarded by mu
  // Prepare-wait flow: when an allocation was first seen without a
  // consumer, by "<uid>@<allocationTimestamp>"; guarded by mu.
  std::map<std::string, std::chrono::steady_clock::time_point> first_seen;

  // The resync thread only.
  // Heartbeat Leases of other replicas as the resync last listed them, by
  // Lease name: the garbage collection's clock.
  std::map<std::string, LeaseSeen> lease_records;
  std::vector<fabric::Pool> last_pools;  // the last pools the manager listed
  bool fabric_down = false;
  std::set<std::string> fixed_device_events;  // slices told of fixed devices
  // Slices told that consumable capacity is back, since fixed devices were
  // left.
  std::set<std::string> consumable_events;
  bool left_fixed_devices = false;

  // Read by any thread.
  std::atomic<bool> fabric_reachable{true};  // /healthz
  // The prepare-wait flow (no binding conditions; ControllerOptions::flow):
  // set at start by the flow option or the dry-run probe, or when a slice
  // write drops them.
  std::atomic<bool> prepare_wait{false};
  // Fixed devices (ControllerOptions::capacity_mode): set at start, or when
  // a slice write comes back without consumable capacity.
  std::atomic<bool> fixed_devices{false};

  // lifecycle (controller.cc)
  void ResyncLoop();
  std::chrono::milliseconds Poll() const {
    return prepare_wait ? opt.prepare_wait_poll : opt.materialize_poll;
  }
  Status Timed(const char* op, const std::function<Status()>& fn) {
    ControllerMetrics::Op m(&metrics, op);
    return m.Done(fn());
  }
  void Event(const json& obj, bool warning, const std::string& reason, const std::string& note);

  // claim JSON (claim_json.cc): every claim write is a JSON Patch led by a
  // test of the resourceVersion read. Busy: the claim changed meanwhile
  // (409, or 422 from the failed test); IOError otherwise.
  Status PatchClaim(const json& claim, const json& ops, json* out, const std::string& sub = "");

  // slices (slices.cc)
  // The slice's devices in the current mode (slices.h, DevicesFor).
  json Devices(const fabric::Pool& p, int64_t capacity, bool down) const;
  // unusable_bytes: per pool, what backs no live allocation; live_bytes:
  // what backs live allocations, which only fixed devices subtract (the
  // scheduler accounts it under consumable capacity).
  Status PublishSlices(const std::vector<fabric::Pool>& pools,
                       const std::map<std::string, int64_t>& unusable_bytes,
                       const std::map<std::string, int64_t>& live_bytes, bool fabric_down);
  // One pool's slice; *mode_changed when its write showed dropped fields.
  Status PublishSlice(const fabric::Pool& p, const std::map<std::string, int64_t>& unusable_bytes,
                      const std::map<std::string, int64_t>& live_bytes, bool fabric_down,
                      bool* mode_changed);

  // feature probe (feature_probe.cc)
  // The dry-run slice: what the apiserver keeps.
  Status DryRunProbe(bool* binding_conditions, bool* consumable);
  // At start: the flow and capacity mode "auto" settle on what it keeps.
  Status ProbeGates();
  // Fixed devices are on from here (idempotent): log line, metric, and an
  // Event on `slice` when there is one.
  void EnterFixedDevices(const json* slice, const std::string& why);
  // Fixed devices under capacity mode auto only: the dry-run slice again;
  // when its consumable-capacity fields come back intact, fixed devices are
  // off from here (log line, metric 0; each slice gets an Event
  // ConsumableCapacity on its next write, in the consumable shape).
  void ReprobeConsumable();

  // resync (resync.cc): the orphan sweep, then the slices.
  Status ResyncPass();

  // reconcile (reconcile.cc)
  void Enqueue(const json& obj) { queue.Add(kube::ObjectKey(obj)); }
  void Worker();
  // *requeue_after: when to look at the claim again without an event (0:
  // not before its next change or the informer's resync).
  Status Sync(const std::string& key, std::chrono::milliseconds* requeue_after);
  // The delay after a sync that left a host materializing (`in_progress`)
  // or a consumer not yet started on a mapped host (`watch`), else 0.
  std::chrono::milliseconds NextPoll(const std::string& key, bool in_progress, bool watch);

  // ownership (ownership.cc)
  Status Own(const json& claim);
  // Whether `owner`'s heartbeat Lease was renewed within its duration, as
  // seen from here (IOError: the Lease could not be read; callers then
  // assume alive).
  Status OwnerAlive(const std::string& owner, bool* alive, std::string* why);
  Status TakeOver(const json& claim, const std::string& owner, const std::string& why);
  // The Lease holder's resync: deletes heartbeat Leases of departed
  // replicas (ControllerOptions::owner_lease_gc_durations).
  void CollectOwnerLeases();

  // compose and consumers (compose.cc)
  Status Compose(json& claim, const json& ours, RegionRef* ref);
  // The reserving pods' nodes, in reservedFor order, when every consumer is
  // a pod whose node is known; *all_known false otherwise.
  // skip_leaving: leave out pods being deleted or finished, which will not
  // prepare again (their node's plugin releases its view of the region).
  // starting: when given, the nodes of consumers that are bound or
  // nominated there but not yet Running (their prepare is still to come).
  // read_error: when given, the first failure to read a reserving pod other
  // than NotFound (a missing `get pods` right shows here, not as a later
  // consumer silently never added).
  std::vector<std::string> ConsumerNodes(const json& claim, bool* all_known,
                                         bool skip_leaving = false,
                                         std::set<std::string>* starting = nullptr,
                                         Status* read_error = nullptr);
  // Adds the hosts of staying consumers the region does not map. *watch:
  // a staying consumer has not started on a host the region maps: that
  // node's plugin may still be releasing the region (its last consumer
  // there just left), so the claim is re-read until the consumer runs.
  // *pod_error: a reserving pod that could not be read (its host may be
  // missing); the caller writes the status first, then retries with backoff.
  Status AddConsumerHosts(const json& claim, const RegionRef& ref, fabric::MemoryRegion* region,
                          bool* watch, Status* pod_error);
  // Local pool only: has the node's hostd materialize every mapping not yet
  // Materialized (idempotent there) and records the outcome in *region.
  void LocalMaterialize(fabric::MemoryRegion* region);
  // The local pool's hostd (ControllerOptions::local_hostd_url).
  hostd::Client LocalHostd() const;

  // conditions (conditions.cc)
  Status WriteStatus(const json& claim, const json& ours, const RegionRef& ref,
                     const fabric::MemoryRegion& region, bool* all_materialized);
  Status MarkFabricDown(const json& claim, const json& ours, const Status& why);
  Status ComposeFailed(const json& claim, const json& ours, const Status& why);

  // release (release.cc)
  Status Release(json& claim);
  // Frees a region; with a local pool the node's hostd drops its device
  // and CDI spec first (the fabric manager does that for fabric regions).
  Status FreeRegion(const std::string& aid, const std::string& bid, const std::string& mid);
};

// The Rep of a controller, for the concepts' tests (controller_test.cc).
class ControllerInternal {
 public:
  static Controller::Rep* rep(Controller* c) { return c->rep_.get(); }
};

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_CONTROLLER_INTERNAL_H_
