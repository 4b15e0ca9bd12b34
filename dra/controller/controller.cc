// Copyright cxlkv authors.
#include "controller/controller.h"

#include <httplib.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/claim_status.h"
#include "common/node_selector.h"
#include "controller/annotations.h"
#include "controller/metrics.h"
#include "controller/quota.h"
#include "cxlkv/base/daemon.h"
#include "cxlkv/base/size.h"
#include "cxlkv/fabric/local_composer.h"
#include "cxlkv/hostd/client.h"
#include "cxlkv/kube/event_recorder.h"
#include "cxlkv/kube/informer.h"
#include "cxlkv/kube/leader_election.h"
#include "cxlkv/kube/typed.h"
#include "cxlkv/kube/workqueue.h"

namespace cxlkv::dra {

using kube::Json;
using nlohmann::json;

namespace {

constexpr int64_t kMiB = 1 << 20;

// JSON Pointer escaping (RFC 6901) for annotation keys such as "cxlkv.dev/owner".
std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Now3339() {
  char buf[32];
  std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string Annotation(const json& obj, const std::string& key) {
  const json& md = obj["metadata"];
  if (!md.contains("annotations") || !md["annotations"].is_object()) return "";
  return md["annotations"].value(key, "");
}

// A claim annotation holding a positive integer (decimal, at most `max`);
// *out = 0 when absent. InvalidArgument names the annotation otherwise.
Status PositiveAnnotation(const json& claim, const std::string& key, int64_t max, int64_t* out) {
  *out = 0;
  const std::string v = Annotation(claim, key);
  if (v.empty()) return Status::OK();
  int64_t n = 0;
  bool ok = v.size() <= 18;
  for (char c : v) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) n = n * 10 + (c - '0');
  }
  if (!ok || n < 1 || n > max) {
    return Status::InvalidArgument("claim " + kube::ObjectKey(claim) + ": " + key + " \"" + v +
                                   "\" is not an integer from 1 to " + std::to_string(max));
  }
  *out = n;
  return Status::OK();
}

bool HasFinalizer(const json& obj) {
  for (const auto& f : obj["metadata"].value("finalizers", json::array())) {
    if (f == kFinalizer) return true;
  }
  return false;
}

std::string PoolName(const fabric::Pool& p) { return p.appliance_id + "/" + p.blade_id; }

// A replica's heartbeat Lease: "<singleton lease>-owner-<identity>", the
// identity folded into a DNS-1123 name (lower case; anything else '-').
std::string OwnerLeaseName(const std::string& lease_name, const std::string& identity) {
  std::string n = lease_name + "-owner-";
  for (char c : identity) {
    const unsigned char u = static_cast<unsigned char>(c);
    n += (std::isalnum(u) || c == '.' || c == '-') ? static_cast<char>(std::tolower(u)) : '-';
  }
  if (n.size() > 253) n.resize(253);
  while (!n.empty() && !std::isalnum(static_cast<unsigned char>(n.back()))) n.pop_back();
  return n;
}

constexpr const char* kTaintFabricUnreachable = "cxlkv.dev/fabric-unreachable";

// The tag a compose carries (the fabric manager's claimUid): the driver,
// the claim UID and the allocation it is for, so a cleared and redone
// allocation is a different compose and the sweep can tell which regions
// back a live allocation.
std::string ComposeTag(const std::string& driver, const std::string& uid, const std::string& ts) {
  return driver + "/" + uid + "@" + ts;
}

// Splits a tag made by ComposeTag; false for any other tag (a region some
// other user of the fabric composed: never swept).
bool ParseComposeTag(const std::string& driver, const std::string& tag, std::string* uid,
                     std::string* ts) {
  const std::string prefix = driver + "/";
  if (tag.rfind(prefix, 0) != 0) return false;
  auto at = tag.find('@', prefix.size());
  if (at == std::string::npos) return false;
  *uid = tag.substr(prefix.size(), at - prefix.size());
  *ts = tag.substr(at + 1);
  return !uid->empty();
}

// The driver's results in a claim's allocation (empty when not allocated).
json OurResults(const json& claim, const std::string& driver) {
  json ours = json::array();
  if (!claim.contains("status")) return ours;
  const json& st = claim["status"];
  if (!st.contains("allocation") || !st["allocation"].is_object()) return ours;
  if (!st["allocation"].contains("devices")) return ours;
  for (const auto& r : st["allocation"]["devices"].value("results", json::array())) {
    if (r.value("driver", "") == driver) ours.push_back(r);
  }
  return ours;
}

}  // namespace

Status ParseQuantityBytes(const std::string& q, int64_t* bytes) {
  return base::ParseQuantity(q, bytes);
}

struct Controller::Rep {
  ControllerOptions opt;
  kube::Client* kube;
  fabric::Composer* composer;
  std::unique_ptr<kube::Informer> informer;
  kube::WorkQueue queue{kube::WorkQueueOptions{std::chrono::milliseconds(200),
                                               std::chrono::milliseconds(10000), 50, 100}};
  std::unique_ptr<kube::EventRecorder> events;
  std::unique_ptr<kube::LeaderElector> elector;
  // This replica's own Lease (OwnerLeaseName(identity)), renewed while it
  // runs: the heartbeat by which other replicas tell a dead owner.
  std::unique_ptr<kube::LeaderElector> heartbeat;
  // Other owners' Leases as last read: the record seen (holder and
  // renewTime) and when this replica first saw it, by owner; guarded by mu.
  struct OwnerSeen {
    std::string record;
    std::chrono::steady_clock::time_point since;
  };
  std::map<std::string, OwnerSeen> owners;
  // Heartbeat Leases of other replicas as the resync last listed them, by
  // Lease name (the resync thread only): the garbage collection's clock.
  std::map<std::string, OwnerSeen> lease_records;
  // Consecutive polls of a claim only because a consumer has not started
  // on a mapped host (the release race), by claim key; guarded by mu.
  std::map<std::string, int> watch_rounds;
  std::unique_ptr<NamespaceBudget> budget;  // controller/quota.h
  ControllerMetrics metrics;
  httplib::Server http;
  base::ServeGate http_gate;  // a Stop right after Start is not lost
  int http_port = 0;
  // Set once informer and heartbeat exist: /readyz reads them only then.
  std::atomic<bool> started{false};
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;                         // guarded by mu
  bool resync_now = false;                   // guarded by mu: leadership just won
  std::map<std::string, int> free_failures;  // by claim UID; guarded by mu
  // Resync state (the resync thread only).
  std::vector<fabric::Pool> last_pools;  // the last pools the manager listed
  bool fabric_down = false;
  std::atomic<bool> fabric_reachable{true};  // read by /healthz
  // The paper's flow (no binding conditions): set at start by the flow
  // option or the dry-run probe, or when a slice write drops them.
  std::atomic<bool> paper{false};
  // Annotation mode (paper §2.2; ControllerOptions::capacity_mode): set at
  // start, or when a slice write comes back without consumable capacity.
  std::atomic<bool> annotation{false};
  std::set<std::string> annotation_events;  // slices told so (resync thread)
  // Slices told that consumable capacity is back, since annotation mode
  // was left (resync thread).
  std::set<std::string> consumable_events;
  bool left_annotation = false;                                             // resync thread
  std::map<std::string, std::chrono::steady_clock::time_point> first_seen;  // guarded by mu
  // binding: with the binding conditions (not in the paper's flow).
  json DeviceFor(const fabric::Pool& p, int64_t capacity, bool down, bool binding) const;
  // The slice's devices in the current mode: the one consumable device, or
  // annotation mode's fixed devices "<blade>-<i>".
  json DevicesFor(const fabric::Pool& p, int64_t capacity, bool down) const;
  // Annotation mode is on from here (idempotent): log line, metric, and an
  // Event on `slice` when there is one.
  void EnterAnnotationMode(const json* slice, const std::string& why);
  // Annotation mode (capacity mode auto) only: the dry-run slice again;
  // when its consumable-capacity fields come back intact, annotation mode
  // is off from here (log line, metric 0; each slice gets an Event
  // ConsumableCapacity on its next write, in the consumable shape).
  void ReprobeConsumable();
  // The dry-run slice of ProbeGates: what the apiserver keeps.
  Status DryRunProbe(bool* binding_conditions, bool* consumable);
  Status ProbeGates();
  // The Lease holder's resync: deletes heartbeat Leases of departed
  // replicas (ControllerOptions::owner_lease_gc_durations).
  void CollectOwnerLeases();
  // Frees a region; with a local pool the node's hostd drops its device
  // and CDI spec first (the fabric manager does that for fabric regions).
  Status FreeRegion(const std::string& aid, const std::string& bid, const std::string& mid);
  // Local pool only: has the node's hostd materialize every mapping not yet
  // Materialized (idempotent there) and records the outcome in *region.
  void LocalMaterialize(fabric::MemoryRegion* region);
  // The local pool's hostd (ControllerOptions::local_hostd_url).
  hostd::Client LocalHostd() const;
  std::chrono::milliseconds Poll() const { return paper ? opt.paper_poll : opt.materialize_poll; }

  void Enqueue(const json& obj) { queue.Add(kube::ObjectKey(obj)); }
  void Worker();
  // *requeue_after: when to look at the claim again without an event (0:
  // not before its next change or the informer's resync).
  Status Sync(const std::string& key, std::chrono::milliseconds* requeue_after);
  // The delay after a sync that left a host materializing (`in_progress`)
  // or a consumer not yet started on a mapped host (`watch`), else 0.
  std::chrono::milliseconds NextPoll(const std::string& key, bool in_progress, bool watch);
  Status ResyncPass();
  // unusable_bytes: per pool, what backs no live allocation; live_bytes:
  // what backs live allocations, which only annotation mode subtracts (the
  // scheduler accounts it under consumable capacity).
  Status PublishSlices(const std::vector<fabric::Pool>& pools,
                       const std::map<std::string, int64_t>& unusable_bytes,
                       const std::map<std::string, int64_t>& live_bytes, bool fabric_down);
  // One pool's slice; *mode_changed when its write showed dropped fields.
  Status PublishSlice(const fabric::Pool& p, const std::map<std::string, int64_t>& unusable_bytes,
                      const std::map<std::string, int64_t>& live_bytes, bool fabric_down,
                      bool* mode_changed);
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
  Status MarkFabricDown(const json& claim, const json& ours, const Status& why);
  Status ComposeFailed(const json& claim, const json& ours, const Status& why);
  Status Timed(const char* op, const std::function<Status()>& fn) {
    ControllerMetrics::Op m(&metrics, op);
    return m.Done(fn());
  }
  Status Release(json& claim);
  Status Own(const json& claim);
  // Whether `owner`'s heartbeat Lease was renewed within its duration, as
  // seen from here (IOError: the Lease could not be read; callers then
  // assume alive).
  Status OwnerAlive(const std::string& owner, bool* alive, std::string* why);
  Status TakeOver(const json& claim, const std::string& owner, const std::string& why);
  Status Compose(json& claim, const json& ours, RegionRef* ref);
  Status WriteStatus(const json& claim, const json& ours, const RegionRef& ref,
                     const fabric::MemoryRegion& region, bool* all_materialized);
  Status PatchClaim(const json& claim, const json& ops, json* out, const std::string& sub = "");
  void Event(const json& claim, bool warning, const std::string& reason, const std::string& note) {
    if (events) {
      events->Record(
          claim, warning ? kube::EventRecorder::Type::kWarning : kube::EventRecorder::Type::kNormal,
          reason, reason, note);
    }
  }
};

Status Controller::New(const ControllerOptions& opt, kube::Client* kube, fabric::Composer* composer,
                       std::unique_ptr<Controller>* out) {
  if (opt.identity.empty()) return Status::InvalidArgument("controller identity is required");
  auto rep = std::make_unique<Rep>();
  rep->opt = opt;
  rep->kube = kube;
  rep->composer = composer;
  rep->budget = std::make_unique<NamespaceBudget>(kube, opt.driver_name, opt.lease_namespace);
  kube::Status ks =
      kube::EventRecorder::New(kube, {"cxlkv.dev/dra-controller", opt.identity}, &rep->events);
  if (!ks.ok()) return Status::InvalidArgument("event recorder: " + ks.ToString());
  out->reset(new Controller(std::move(rep)));
  return Status::OK();
}

Controller::Controller(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
Controller::~Controller() { Stop(); }

json Controller::Rep::DeviceFor(const fabric::Pool& p, int64_t capacity, bool down,
                                bool binding) const {
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

json Controller::Rep::DevicesFor(const fabric::Pool& p, int64_t capacity, bool down) const {
  if (!annotation) return json::array({DeviceFor(p, capacity, down, !paper)});
  // Without consumable capacity a device is allocated to one claim at a
  // time, so the blade offers fixed devices: at most one per smallest
  // region the blade can compose (more could only fail at compose), at most
  // annotation_devices (64: a slice's limit for devices with taints).
  const int64_t step = std::max<int64_t>(1, p.block_mib * opt.qos);
  const int64_t n =
      std::clamp<int64_t>(p.total_mib / step, 1, std::clamp(opt.annotation_devices, 1, 64));
  json devices = json::array();
  for (int64_t i = 0; i < n; ++i) {
    json d = DeviceFor(p, capacity, down, !paper);
    d["name"] = p.blade_id + "-" + std::to_string(i);
    d.erase("allowMultipleAllocations");
    // The value is the blade's free bytes at the last resync: a CEL
    // selector can prefer a blade with room, but nothing is reserved.
    d["capacity"]["memory"].erase("requestPolicy");
    devices.push_back(d);
  }
  return devices;
}

void Controller::Rep::EnterAnnotationMode(const json* slice, const std::string& why) {
  const bool was = annotation.exchange(true);
  metrics.SetAnnotationMode(true);
  if (slice != nullptr) left_annotation = false;
  if (!was) {
    spdlog::error(
        "annotation mode: {}: fixed devices per blade, claim sizes from cxlkv.dev/capacity-mib "
        "(the scheduler does not account capacity; a claim can fail at compose)",
        why);
  }
  if (slice == nullptr) return;
  const std::string name = (*slice)["metadata"].value("name", "");
  if (!annotation_events.insert(name).second) return;
  Event(*slice, true, "AnnotationMode",
        why + ": slice " + name +
            " offers fixed devices; claims give their size in cxlkv.dev/capacity-mib");
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
  const std::string& drv = opt.driver_name;
  const bool was_paper = paper, was_annotation = annotation;
  json hosts = p.hosts;
  auto u = unusable_bytes.find(PoolName(p));
  int64_t held = u == unusable_bytes.end() ? 0 : u->second;
  // Annotation mode: the scheduler subtracts nothing, so the live claims'
  // regions come off here too.
  auto lb = live_bytes.find(PoolName(p));
  if (annotation && lb != live_bytes.end()) held += lb->second;
  const int64_t capacity = std::max<int64_t>(0, p.total_mib * kMiB - held);
  json devices = DevicesFor(p, capacity, down);
  std::string name = drv + "-" + p.appliance_id + "-" + p.blade_id;
  // A local pool serves its own node only: a per-node slice (nodeName),
  // as node-local drivers publish.
  const bool local = p.appliance_id == fabric::LocalComposer::kApplianceId && p.hosts.size() == 1;
  json slice = {
      {"metadata", {{"name", name}}},
      {"spec",
       {{"driver", drv},
        {"pool", {{"name", PoolName(p)}, {"generation", 1}, {"resourceSliceCount", 1}}},
        {"nodeSelector",
         {{"nodeSelectorTerms",
           {{{"matchExpressions",
              {{{"key", "kubernetes.io/hostname"}, {"operator", "In"}, {"values", hosts}}}}}}}}},
        {"devices", devices}}}};
  if (local) {
    slice["spec"].erase("nodeSelector");
    slice["spec"]["nodeName"] = p.hosts[0];
  }
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
      if (annotation) EnterAnnotationMode(&cur, "the apiserver keeps no consumable capacity");
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
  if (!paper && !got.contains("bindingConditions")) {
    paper = true;
    spdlog::error("slice {}: the apiserver dropped bindingConditions: using the paper's flow",
                  name);
    Event(stored, true, "BindingConditionsOff",
          "the apiserver dropped bindingConditions: consumers wait in prepare instead");
  }
  if (!annotation && (!got.contains("allowMultipleAllocations") ||
                      !got["capacity"]["memory"].contains("requestPolicy"))) {
    if (opt.capacity_mode == "auto") {
      EnterAnnotationMode(&stored,
                          "the apiserver dropped allowMultipleAllocations/requestPolicy "
                          "(DRAConsumableCapacity off)");
    } else {
      // --capacity-mode consumable: say so, but keep the shape asked for.
      metrics.SetAnnotationMode(true);
      spdlog::error("slice {}: the apiserver dropped consumable-capacity fields", name);
      Event(stored, true, "FieldsDropped",
            "the apiserver dropped consumable-capacity fields of " + name);
    }
  } else if (annotation) {
    EnterAnnotationMode(&stored, "the apiserver keeps no consumable capacity");
  } else if (left_annotation && consumable_events.insert(name).second) {
    // The first write in the consumable shape since annotation mode was
    // left, and it came back intact.
    Event(stored, false, "ConsumableCapacity",
          "the apiserver keeps consumable capacity again: slice " + name +
              " offers one shared device; the scheduler accounts memory");
  }
  *mode_changed = was_paper != paper || was_annotation != annotation;
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
               hosts.dump(), capacity / kMiB,
               annotation ? ", " + std::to_string(devices.size()) + " fixed devices" : "",
               down ? ", tainted fabric-unreachable" : "");
  return Status::OK();
}

Status Controller::Resync() { return rep_->ResyncPass(); }

Status Controller::Rep::ResyncPass() {
  ControllerMetrics::Op op(&metrics, "resync");
  // Pools and regions first, claims second: a region composed after this
  // listing is not looked at, and a region listed here belongs to a claim
  // that is already allocated when the claims are listed below.
  std::vector<fabric::Pool> pools;
  Status s = Timed("list", [&] { return composer->ListPools(&pools); });
  std::map<std::string, std::vector<fabric::MemoryRegion>> regions;  // by pool name
  for (size_t i = 0; s.ok() && i < pools.size(); ++i) {
    s = Timed("list", [&] {
      return composer->List(pools[i].appliance_id, pools[i].blade_id, &regions[PoolName(pools[i])]);
    });
  }
  if (!s.ok()) {
    const bool was_down = fabric_down;
    fabric_down = true;
    fabric_reachable = false;
    metrics.SetFabricReachable(false);
    if (!was_down) spdlog::error("fabric manager unreachable: {}", s.ToString());
    // Keep the last capacities (unknown now) but taint every device, so the
    // scheduler admits nothing the controller could not compose.
    Status ps = PublishSlices(last_pools, {}, {}, true);
    if (!ps.ok()) spdlog::warn("{}", ps.ToString());
    return op.Done(s.WithContext("resync"));
  }
  if (fabric_down) spdlog::info("fabric manager reachable again");
  fabric_down = false;
  fabric_reachable = true;
  metrics.SetFabricReachable(true);
  last_pools = pools;

  std::vector<Json> claims;
  std::string rv;
  kube::Status ks = kube::ResourceClaimClient(kube, "").ListAll({}, 500, &claims, &rv);
  if (!ks.ok()) return op.Done(Status::IOError("resync: list claims: " + ks.ToString()));
  std::map<std::string, std::string> live;   // claim UID -> allocationTimestamp
  std::map<std::string, std::string> named;  // memory id -> claim (annotation)
  // Live claims whose allocation consumes no capacity the scheduler counts
  // (allocated in annotation mode, a fixed device): under consumable
  // capacity their regions come off the slice here, or the scheduler would
  // admit their bytes a second time.
  std::set<std::string> unaccounted;
  for (const auto& c : claims) {
    const std::string uid = c["metadata"].value("uid", "");
    const json ours = OurResults(c, opt.driver_name);
    if (!ours.empty()) {
      live[uid] = c["status"]["allocation"].value("allocationTimestamp", "");
      bool counted = false;
      for (const auto& r : ours) {
        counted = counted || (r.contains("consumedCapacity") && r["consumedCapacity"].is_object() &&
                              r["consumedCapacity"].contains("memory"));
      }
      if (!counted) unaccounted.insert(uid);
    }
    RegionRef ref = ParseRegionAnnotation(Annotation(c, kRegionAnnotation));
    if (ref.ok()) named[ref.memory_id] = kube::ObjectKey(c);
  }
  std::map<std::string, int64_t> unusable, live_bytes;
  int leaked = 0, freed = 0;
  for (const auto& p : pools) {
    const std::string pool = PoolName(p);
    int64_t composed = 0;
    for (const auto& r : regions[pool]) {
      const int64_t bytes = r.size_mib * kMiB;
      std::string uid, ts;
      const bool ours = ParseComposeTag(opt.driver_name, r.claim_uid, &uid, &ts);
      auto it = live.find(uid);
      if (ours && it != live.end() && it->second == ts) {
        composed += bytes;  // backs a live allocation: the scheduler counts it
        if (!annotation && unaccounted.count(uid)) unusable[pool] += bytes;  // ... unless it cannot
        continue;
      }
      if (ours && named.count(r.id) == 0) {
        // An orphan: its claim is gone, or reallocated and no annotation
        // names this region any more (its owner died, or gave up freeing).
        Status fs = FreeRegion(p.appliance_id, p.blade_id, r.id);
        if (fs.ok() || fs.IsNotFound()) {
          ++freed;
          spdlog::info("resync: freed orphaned region {} ({} MiB, tag {})", r.id, r.size_mib,
                       r.claim_uid);
          continue;
        }
        ++leaked;
        spdlog::warn("resync: region {} has no claim and could not be freed: {}", r.id,
                     fs.ToString());
      }
      // Pending free, leaked, or not ours: it holds blade memory the
      // scheduler does not know about.
      unusable[pool] += bytes;
    }
    live_bytes[pool] = composed;
    metrics.SetPoolBytes(pool, composed, unusable[pool]);
  }
  metrics.AddOrphansFreed(freed);
  metrics.SetLeakedRegions(leaked);
  CollectOwnerLeases();
  return op.Done(PublishSlices(pools, unusable, live_bytes, false));
}

Status Controller::Start() {
  Rep* r = rep_.get();
  // resource.k8s.io/v1 only: the v1beta* shapes differ and are off by
  // default in 1.37; say so rather than fail on the first write.
  Json group;
  kube::Status ks = r->kube->Raw("GET", "/apis/resource.k8s.io", "", "", "", &group);
  if (ks.IsNotFound()) {
    return Status::Unsupported(
        "the apiserver does not serve resource.k8s.io at all: DRA needs Kubernetes 1.34+ "
        "(resource.k8s.io/v1)");
  }
  if (!ks.ok()) return Status::IOError("discover resource.k8s.io: " + ks.ToString());
  std::string served;
  bool v1 = false;
  for (const auto& v : group.value("versions", json::array())) {
    const std::string ver = v.value("version", "");
    served += (served.empty() ? "" : ", ") + ver;
    if (ver == "v1") v1 = true;
  }
  if (!v1) {
    return Status::Unsupported("the apiserver serves resource.k8s.io " +
                               (served.empty() ? std::string("with no versions") : served) +
                               " but not v1; cxlkv needs resource.k8s.io/v1 (Kubernetes 1.34+)");
  }
  if (r->opt.flow != "paper" && r->opt.flow != "auto" && r->opt.flow != "binding-conditions") {
    return Status::InvalidArgument("flow \"" + r->opt.flow +
                                   "\": want binding-conditions, paper or auto");
  }
  if (r->opt.capacity_mode != "auto" && r->opt.capacity_mode != "consumable" &&
      r->opt.capacity_mode != "annotation") {
    return Status::InvalidArgument("capacity mode \"" + r->opt.capacity_mode +
                                   "\": want consumable, annotation or auto");
  }
  if (r->opt.flow == "paper") r->paper = true;
  if (r->opt.capacity_mode == "annotation") {
    r->EnterAnnotationMode(nullptr, "--capacity-mode annotation");
  }
  if (r->opt.flow == "auto" || r->opt.capacity_mode == "auto") {
    CXLKV_RETURN_IF_ERROR(r->ProbeGates());
  }
  spdlog::info("flow: {}; capacity: {}",
               r->paper ? "paper (consumer wait, prepare polls)" : "binding conditions",
               r->annotation ? "annotation mode (fixed devices, cxlkv.dev/capacity-mib)"
                             : "consumable (the scheduler accounts memory)");
  if (!r->opt.metrics_listen.empty()) {
    const std::string& l = r->opt.metrics_listen;
    auto colon = l.rfind(':');
    if (colon == std::string::npos) {
      return Status::InvalidArgument("metrics address \"" + l + "\" is not host:port");
    }
    std::string host = l.substr(0, colon);
    if (host.empty()) host = "0.0.0.0";
    const int port = std::atoi(l.c_str() + colon + 1);
    r->http.Get("/metrics", [r](const httplib::Request&, httplib::Response& res) {
      res.set_content(r->metrics.Render(), "text/plain; version=0.0.4");
    });
    r->http.Get("/healthz", [r](const httplib::Request&, httplib::Response& res) {
      // Alive and working; the fabric manager's state is reported, not
      // fatal (restarting the controller would not bring it back).
      json j = {{"ok", true},
                {"fabricReachable", r->fabric_reachable.load()},
                {"leader", r->elector && r->elector->IsLeader()}};
      res.set_content(j.dump(), "application/json");
    });
    r->http.Get("/readyz", [r](const httplib::Request&, httplib::Response& res) {
      // Ready to work claims: the claim informer has listed them all and
      // this replica holds its owner Lease (without it, other replicas
      // would take over whatever it composes).
      const bool started = r->started.load(std::memory_order_acquire);
      const bool synced = started && r->informer->HasSynced();
      const bool lease = started && r->heartbeat->IsLeader();
      json j = {{"ready", synced && lease}, {"informerSynced", synced}, {"ownerLease", lease}};
      res.status = synced && lease ? 200 : 503;
      res.set_content(j.dump(), "application/json");
    });
    r->http_port =
        port == 0 ? r->http.bind_to_any_port(host) : (r->http.bind_to_port(host, port) ? port : -1);
    if (r->http_port <= 0) return Status::IOError("metrics: cannot listen on " + l);
    r->threads.emplace_back([r] {
      if (r->http_gate.Enter()) r->http.listen_after_bind();
      r->http_gate.Exit();
    });
  }
  kube::InformerHandlers h;
  h.on_add = [r](const Json& o) { r->Enqueue(o); };
  h.on_update = [r](const Json&, const Json& o) { r->Enqueue(o); };
  h.on_delete = [r](const Json& o) { r->Enqueue(o); };
  kube::InformerOptions io;
  io.resync_period = r->opt.resync_period;
  r->informer = std::make_unique<kube::Informer>(r->kube, kube::ResourceClaims(), io, h);
  r->informer->Start();
  for (int i = 0; i < r->opt.workers; ++i) r->threads.emplace_back([r] { r->Worker(); });

  kube::LeaderElectionOptions lo;
  lo.ns = r->opt.lease_namespace;
  lo.lease_name = r->opt.lease_name;
  lo.identity = r->opt.identity;
  lo.lease_duration = r->opt.lease_duration;
  lo.renew_deadline = r->opt.lease_duration * 2 / 3;
  lo.retry_period = std::max<std::chrono::milliseconds>(std::chrono::milliseconds(200),
                                                        r->opt.lease_duration / 7);
  lo.on_started_leading = [r] {
    spdlog::info("{} holds Lease {}/{}: resync and slices run here", r->opt.identity,
                 r->opt.lease_namespace, r->opt.lease_name);
    r->metrics.SetLeader(true);
    {
      std::lock_guard<std::mutex> l(r->mu);
      r->resync_now = true;
    }
    r->cv.notify_all();
  };
  lo.on_stopped_leading = [r] {
    spdlog::warn("{} lost Lease {}/{}", r->opt.identity, r->opt.lease_namespace, r->opt.lease_name);
    r->metrics.SetLeader(false);
  };
  Status es = kube::LeaderElector::New(r->kube, lo, &r->elector).ok()
                  ? Status::OK()
                  : Status::InvalidArgument("lease options");
  if (!es.ok()) return es;
  r->elector->Start();
  // The heartbeat: one contender per Lease, so this replica holds it as
  // long as it can renew; a restart under the same name renews it again.
  kube::LeaderElectionOptions ho = lo;
  ho.lease_name = OwnerLeaseName(r->opt.lease_name, r->opt.identity);
  ho.on_started_leading = [r, name = ho.lease_name] {
    spdlog::info("{} renews its owner Lease {}/{}", r->opt.identity, r->opt.lease_namespace, name);
  };
  ho.on_stopped_leading = [r, name = ho.lease_name] {
    spdlog::warn("{} could not renew its owner Lease {}: other replicas may take its claims",
                 r->opt.identity, name);
  };
  if (!kube::LeaderElector::New(r->kube, ho, &r->heartbeat).ok()) {
    return Status::InvalidArgument("owner lease options");
  }
  r->heartbeat->Start();
  r->started.store(true, std::memory_order_release);
  r->threads.emplace_back([r] {
    // While the manager is unreachable: 1 s, 2 s, 4 s, ... up to the period.
    std::chrono::milliseconds wait = r->opt.resync_period;
    std::chrono::milliseconds backoff{0};
    std::unique_lock<std::mutex> l(r->mu);
    for (;;) {
      r->cv.wait_for(l, wait, [r] { return r->stop || r->resync_now; });
      if (r->stop) return;
      r->resync_now = false;
      wait = r->opt.resync_period;
      l.unlock();
      // Every replica: its own mode decides claim sizes and QoS.
      r->ReprobeConsumable();
      if (!r->elector->IsLeader()) {
        l.lock();
        continue;
      }
      Status s = r->ResyncPass();
      l.lock();
      if (!s.ok()) spdlog::warn("{}", s.ToString());
      if (r->fabric_down) {
        backoff = backoff.count() == 0 ? std::chrono::milliseconds(1000) : backoff * 2;
        wait = std::min(backoff, r->opt.resync_period);
      } else {
        backoff = std::chrono::milliseconds(0);
      }
    }
  });
  return Status::OK();
}

Status Controller::Rep::FreeRegion(const std::string& aid, const std::string& bid,
                                   const std::string& mid) {
  ControllerMetrics::Op op(&metrics, "free");
  if (!opt.local_hostd_url.empty()) {
    Status s = LocalHostd().Remove(mid);
    if (!s.ok() && !s.IsNotFound()) return op.Done(s.WithContext("remove region " + mid));
  }
  return op.Done(composer->Free(aid, bid, mid));
}

hostd::Client Controller::Rep::LocalHostd() const {
  // 3 s to connect plus 10 s to answer, as this call always allowed.
  return hostd::Client({opt.local_hostd_url, 13000});
}

void Controller::Rep::LocalMaterialize(fabric::MemoryRegion* region) {
  if (opt.local_hostd_url.empty()) return;
  for (auto& m : region->mappings) {
    if (m.materialization == fabric::Materialization::kMaterialized && !m.device.empty()) continue;
    // The request the fabric manager sends a host agent (fabricd's
    // Materialize), so hostd serves both alike; a local pool issues no
    // assignment epochs (0).
    hostd::MaterializeRequest req;
    req.allocation_id = region->id;
    req.size_bytes = static_cast<uint64_t>(region->size_mib * kMiB);
    req.backing_path = region->backing_path;
    req.appliance_id = region->appliance_id;
    req.blade_id = region->blade_id;
    req.appliance_port = m.appliance_port;
    req.host_port = m.host_port;
    req.assign_epoch = m.assign_epoch;
    ControllerMetrics::Op op(&metrics, "materialize");
    hostd::HostRegion got;
    Status s = LocalHostd().Materialize(req, &got);
    if (!s.ok()) {
      m.materialization = fabric::Materialization::kFailed;
      m.error = s.message();
      (void)op.Done(s);
      continue;
    }
    m.materialization = fabric::Materialization::kMaterialized;
    m.error.clear();
    m.device = got.device;
    (void)op.Done(Status::OK());
  }
}

Status Controller::Rep::DryRunProbe(bool* binding_conditions, bool* consumable) {
  // A server-side dry run of a slice with every field we use: what comes
  // back tells which gates the apiserver has on, without persisting
  // anything (DRADeviceBindingConditions, DRAConsumableCapacity). The
  // device is built in the consumable shape with binding conditions,
  // whatever the current mode.
  fabric::Pool probe;
  probe.appliance_id = "gate-probe";
  probe.blade_id = "gate-probe";
  probe.block_mib = 256;
  probe.total_mib = 256 * opt.qos * 8;  // validation wants steps to fit
  json slice = {{"metadata", {{"name", opt.driver_name + "-gate-probe"}}},
                {"spec",
                 {{"driver", opt.driver_name},
                  {"pool", {{"name", "gate-probe"}, {"generation", 1}, {"resourceSliceCount", 1}}},
                  {"nodeName", "gate-probe"},
                  {"devices", {DeviceFor(probe, probe.total_mib * kMiB, false, true)}}}}};
  kube::WriteOptions wo;
  wo.dry_run = true;
  json got;
  kube::Status ks = kube::ResourceSliceClient(kube).Create(slice, &got, wo);
  if (!ks.ok()) return Status::IOError("probe feature gates (dry-run slice): " + ks.ToString());
  const json& d = got["spec"]["devices"][0];
  *binding_conditions = d.contains("bindingConditions");
  *consumable = d.contains("allowMultipleAllocations") && d.contains("capacity") &&
                d["capacity"].contains("memory") &&
                d["capacity"]["memory"].contains("requestPolicy");
  return Status::OK();
}

void Controller::Rep::ReprobeConsumable() {
  if (!annotation || opt.capacity_mode != "auto") return;
  bool binding = false, consumable = false;
  Status s = DryRunProbe(&binding, &consumable);
  if (!s.ok()) {
    spdlog::warn("annotation mode: {}", s.ToString());
    return;
  }
  if (!consumable) return;
  if (!annotation.exchange(false)) return;
  metrics.SetAnnotationMode(false);
  annotation_events.clear();  // a later fallback tells every slice again
  consumable_events.clear();
  left_annotation = true;
  spdlog::warn(
      "annotation mode off: the dry-run slice kept allowMultipleAllocations/requestPolicy "
      "(DRAConsumableCapacity on again): one shared device per blade, the scheduler accounts "
      "memory");
}

Status Controller::Rep::ProbeGates() {
  bool binding = false, consumable = false;
  CXLKV_RETURN_IF_ERROR(DryRunProbe(&binding, &consumable));
  if (opt.flow == "auto" && !binding) {
    paper = true;
    spdlog::warn(
        "the apiserver drops bindingConditions (DRADeviceBindingConditions off): "
        "using the paper's flow");
  }
  if (!consumable) {
    if (opt.capacity_mode == "auto") {
      // The slices' Events follow on their first write (the probe is
      // never stored, so there is nothing to attach one to).
      EnterAnnotationMode(nullptr,
                          "the dry-run slice came back without allowMultipleAllocations/"
                          "requestPolicy (DRAConsumableCapacity off)");
    } else if (opt.capacity_mode == "consumable") {
      metrics.SetAnnotationMode(true);
      spdlog::error(
          "the apiserver drops consumable-capacity fields (DRAConsumableCapacity off), but "
          "--capacity-mode consumable: the scheduler will not account memory");
    }
  }
  return Status::OK();
}

int Controller::metrics_port() const { return rep_->http_port > 0 ? rep_->http_port : 0; }

void Controller::Stop() {
  if (!rep_) return;
  {
    std::lock_guard<std::mutex> l(rep_->mu);
    if (rep_->stop) return;
    rep_->stop = true;
  }
  rep_->cv.notify_all();
  rep_->queue.ShutDown();
  if (rep_->informer) rep_->informer->Stop();
  if (rep_->elector) rep_->elector->Stop();
  // Released on a clean stop: other replicas take this one's claims at once.
  if (rep_->heartbeat) rep_->heartbeat->Stop();
  Rep* r = rep_.get();
  r->http_gate.Stop([r] { return r->http.is_running(); }, [r] { r->http.stop(); });
  for (auto& t : rep_->threads) t.join();
  rep_->threads.clear();
  if (rep_->events) rep_->events->Flush(std::chrono::seconds(2));
}

void Controller::Rep::Worker() {
  std::string key;
  while (queue.Get(&key)) {
    std::chrono::milliseconds after{0};
    Status s = Sync(key, &after);
    if (!s.ok()) {
      spdlog::warn("claim {}: {}", key, s.ToString());
      queue.AddRateLimited(key);
    } else {
      queue.Forget(key);
      if (after.count() > 0) queue.AddAfter(key, after);
    }
    queue.Done(key);
  }
}

Status Controller::Rep::PatchClaim(const json& claim, const json& ops, json* out,
                                   const std::string& sub) {
  // Every write is a compare-and-set on the resourceVersion read: a claim
  // another replica changed meanwhile gives 409 and is re-read.
  json patch = json::array();
  patch.push_back({{"op", "test"},
                   {"path", "/metadata/resourceVersion"},
                   {"value", claim["metadata"]["resourceVersion"]}});
  for (const auto& op : ops) patch.push_back(op);
  const std::string ns = claim["metadata"].value("namespace", "");
  kube::Status ks = kube::ResourceClaimClient(kube, ns).Patch(
      claim["metadata"].value("name", ""), kube::PatchType::kJson, patch, out, {}, sub);
  if (ks.IsConflict() || ks.IsInvalid()) {
    // A failed `test` is 422 Invalid on JSON Patch; both mean "re-read".
    return Status::Busy("claim " + kube::ObjectKey(claim) + " changed: " + ks.message());
  }
  if (!ks.ok())
    return Status::IOError("patch claim " + kube::ObjectKey(claim) + ": " + ks.ToString());
  return Status::OK();
}

std::vector<std::string> Controller::Rep::ConsumerNodes(const json& claim, bool* all_known,
                                                        bool skip_leaving,
                                                        std::set<std::string>* starting,
                                                        Status* read_error) {
  std::vector<std::string> nodes;
  *all_known = true;
  const std::string ns = claim["metadata"].value("namespace", "");
  const json reserved = claim["status"].value("reservedFor", json::array());
  if (reserved.empty()) *all_known = false;
  for (const auto& c : reserved) {
    if (c.value("resource", "") != "pods" || c.value("apiGroup", "") != "") {
      *all_known = false;  // a PodGroup or another consumer kind
      continue;
    }
    json pod;
    kube::Status ks = kube::PodClient(kube, ns).Get(c.value("name", ""), &pod);
    if (!ks.ok() && !ks.IsNotFound() && read_error != nullptr && read_error->ok()) {
      *read_error = Status::IOError("read reserving pod " + ns + "/" + c.value("name", "") +
                                    " of claim " + kube::ObjectKey(claim) + ": " + ks.ToString());
    }
    if (!ks.ok() || pod["metadata"].value("uid", "") != c.value("uid", "")) {
      *all_known = false;
      continue;
    }
    // The scheduler writes status.nominatedNodeName before PreBind
    // (NominatedNodeNameForExpectation, on in 1.37); spec.nodeName once bound.
    std::string node = pod["spec"].value("nodeName", "");
    if (node.empty() && pod.contains("status")) node = pod["status"].value("nominatedNodeName", "");
    if (node.empty()) {
      *all_known = false;
      continue;
    }
    const std::string phase = pod.contains("status") ? pod["status"].value("phase", "") : "";
    if (skip_leaving && (pod["metadata"].contains("deletionTimestamp") || phase == "Succeeded" ||
                         phase == "Failed")) {
      continue;
    }
    if (starting != nullptr && phase != "Running") starting->insert(node);
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
  }
  return nodes;
}

Status Controller::Rep::MarkFabricDown(const json& claim, const json& ours, const Status& why) {
  // The claim keeps its data and its composed condition; only the
  // informational fabric-reachable condition turns False (once: the Event
  // and the write happen on the transition, not on every retry).
  const json down = {{"type", kConditionFabricReachable},
                     {"status", "False"},
                     {"reason", "FabricUnreachable"},
                     {"message", why.ToString().substr(0, 512)},
                     {"lastTransitionTime", Now3339()}};
  json devices = json::array();
  bool changed = false, have_ours = false;
  for (const auto& d : claim["status"].value("devices", json::array())) {
    if (d.value("driver", "") != opt.driver_name) {
      devices.push_back(d);
      continue;
    }
    have_ours = true;
    json e = d;
    json conds = json::array();
    bool already = false;
    for (const auto& c : e.value("conditions", json::array())) {
      if (c.value("type", "") != kConditionFabricReachable) {
        conds.push_back(c);
      } else if (c.value("status", "") == "False") {
        already = true;
        conds.push_back(c);
      }
    }
    if (!already) {
      conds.push_back(down);
      changed = true;
    }
    e["conditions"] = conds;
    devices.push_back(e);
  }
  if (!have_ours) {
    for (const auto& r : ours) {
      json e = {{"driver", opt.driver_name}, {"pool", r["pool"]}, {"device", r["device"]}};
      if (r.contains("shareID")) e["shareID"] = r["shareID"];
      e["conditions"] = {down};
      devices.push_back(e);
    }
    changed = true;
  }
  if (!changed) return Status::OK();
  Event(claim, true, "FabricUnreachable", "fabric manager unreachable: " + why.ToString());
  json out;
  return Timed("status_patch", [&] {
    return PatchClaim(
        claim, json::array({{{"op", "add"}, {"path", "/status/devices"}, {"value", devices}}}),
        &out, "status");
  });
}

Status Controller::Rep::ComposeFailed(const json& claim, const json& ours, const Status& why) {
  json devices = json::array();
  for (const auto& d : claim["status"].value("devices", json::array())) {
    if (d.value("driver", "") != opt.driver_name) devices.push_back(d);
  }
  const std::string msg = why.ToString().substr(0, 1024);
  const std::string now = Now3339();
  for (const auto& r : ours) {
    json e = {{"driver", opt.driver_name}, {"pool", r["pool"]}, {"device", r["device"]}};
    if (r.contains("shareID")) e["shareID"] = r["shareID"];
    e["conditions"] = {{{"type", kConditionComposed},
                        {"status", "False"},
                        {"reason", "ComposeFailed"},
                        {"message", msg},
                        {"lastTransitionTime", now}},
                       {{"type", kConditionComposeFailed},
                        {"status", "True"},
                        {"reason", IsBudgetExceeded(why) ? kBudgetExceededReason
                                   : why.IsNoSpace()     ? "NoSpace"
                                                         : "InvalidRequest"},
                        {"message", msg},
                        {"lastTransitionTime", now}}};
    devices.push_back(e);
  }
  json out;
  return Timed("status_patch", [&] {
    return PatchClaim(
        claim, json::array({{{"op", "add"}, {"path", "/status/devices"}, {"value", devices}}}),
        &out, "status");
  });
}

Status Controller::Rep::AddConsumerHosts(const json& claim, const RegionRef& ref,
                                         fabric::MemoryRegion* region, bool* watch,
                                         Status* pod_error) {
  *watch = false;
  bool all_known = false;
  // A leaving pod's node is not added back: its plugin has released (or is
  // releasing) that host's view on the last unprepare there.
  std::set<std::string> starting;
  *pod_error = Status::OK();
  std::vector<std::string> nodes =
      ConsumerNodes(claim, &all_known, /*skip_leaving=*/true, &starting, pod_error);
  std::vector<std::string> selector;
  const json& alloc = claim["status"]["allocation"];
  if (alloc.contains("nodeSelector")) selector = SelectorHostnames(alloc["nodeSelector"]);
  for (const auto& n : nodes) {
    bool mapped = false;
    for (const auto& m : region->mappings) mapped = mapped || m.host_id == n;
    if (mapped) {
      // Mapped now, but this consumer has not prepared yet: the node's
      // plugin may be releasing the region (the last consumer there left
      // just before; the release is a fabric call no claim change follows).
      // Once the consumer runs its preparation holds the node's view.
      if (starting.count(n)) *watch = true;
      continue;
    }
    if (!selector.empty() && std::find(selector.begin(), selector.end(), n) == selector.end()) {
      continue;  // not cabled: the plugin refuses prepare there (k/k#140087)
    }
    Status s = Timed("add_host", [&] {
      return composer->AddHost(ref.appliance_id, ref.blade_id, ref.memory_id, n, region);
    });
    if (!s.ok()) {
      Event(claim, true, "AddHostFailed",
            "add host " + n + " to region " + ref.memory_id + ": " + s.ToString());
      return s.WithContext("add host " + n + " to region " + ref.memory_id);
    }
    // The host's new assignment epoch: a release of its earlier assignment
    // (the node's last consumer left) that lands after this is refused by
    // the manager, so it cannot unmap the host under this consumer.
    uint64_t epoch = 0;
    for (const auto& m : region->mappings) {
      if (m.host_id == n) epoch = m.assign_epoch;
    }
    Event(claim, false, "HostAdded",
          "region " + ref.memory_id + " added to host " + n + " for a later consumer" +
              (epoch > 0 ? " (assignment epoch " + std::to_string(epoch) + ")" : ""));
    spdlog::info("claim {}: added host {} to region {} (assignment epoch {})",
                 kube::ObjectKey(claim), n, ref.memory_id, epoch);
  }
  return Status::OK();
}

std::chrono::milliseconds Controller::Rep::NextPoll(const std::string& key, bool in_progress,
                                                    bool watch) {
  std::lock_guard<std::mutex> l(mu);
  if (in_progress || !watch) {
    watch_rounds.erase(key);
    return in_progress ? Poll() : std::chrono::milliseconds(0);
  }
  // Only the release race is watched: from the poll period, doubling to
  // 2 s, so a consumer that takes long to start (or never does) costs a
  // read every 2 s, not every 500 ms.
  const int n = std::min(watch_rounds[key]++, 8);
  return std::min<std::chrono::milliseconds>(Poll() * (1 << n), std::chrono::milliseconds(2000));
}

Status Controller::Rep::Sync(const std::string& key, std::chrono::milliseconds* requeue_after) {
  *requeue_after = std::chrono::milliseconds(0);
  auto slash = key.find('/');
  const std::string ns = key.substr(0, slash), name = key.substr(slash + 1);
  json claim;
  kube::Status ks = kube::ResourceClaimClient(kube, ns).Get(name, &claim);
  if (ks.IsNotFound()) {
    std::lock_guard<std::mutex> l(mu);
    watch_rounds.erase(key);
    return Status::OK();  // gone; a finalizer would have kept it
  }
  if (!ks.ok()) return Status::IOError("get claim " + key + ": " + ks.ToString());

  json ours = OurResults(claim, opt.driver_name);
  const json& status = claim.contains("status") ? claim["status"] : json::object();
  const bool deleting = claim["metadata"].contains("deletionTimestamp");
  const bool reserved = !status.value("reservedFor", json::array()).empty();
  RegionRef ref = ParseRegionAnnotation(Annotation(claim, kRegionAnnotation));
  const std::string owner = Annotation(claim, kOwnerAnnotation);
  if (!owner.empty() && owner != opt.identity) {
    // Another replica's claim, unless that replica died: its heartbeat
    // Lease not renewed for the Lease's duration. Then one survivor takes
    // the claim over by the same compare-and-set and carries on from the
    // claim's state (a compose it left in flight is adopted by its tag).
    bool alive = true;
    std::string why;
    Status as = OwnerAlive(owner, &alive, &why);
    if (!as.ok()) spdlog::warn("claim {}: owner {}: {}", key, owner, as.ToString());
    if (!as.ok() || alive) return Status::OK();
    CXLKV_RETURN_IF_ERROR(Timed("takeover", [&] { return TakeOver(claim, owner, why); }));
    *requeue_after = Poll();
    return Status::OK();
  }

  if (ours.empty() || (deleting && !reserved)) {
    if (ref.ok() || HasFinalizer(claim) || !owner.empty()) return Release(claim);
    return Status::OK();
  }
  if (deleting) return Status::OK();  // consumers still hold it
  if (owner.empty()) {
    CXLKV_RETURN_IF_ERROR(Timed("own", [&] { return Own(claim); }));
    *requeue_after = Poll();
    return Status::OK();
  }
  const std::string ts = status["allocation"].value("allocationTimestamp", "");
  if (ref.ok() && ref.allocation_timestamp != ts) {
    // A cleared and redone allocation: a new compose; the old region goes.
    spdlog::info("claim {}: allocation changed ({} -> {}), freeing region {}", key,
                 ref.allocation_timestamp, ts, ref.memory_id);
    Status fs = FreeRegion(ref.appliance_id, ref.blade_id, ref.memory_id);
    if (fs.IsIOError()) {
      Status ms = MarkFabricDown(claim, ours, fs);
      if (!ms.ok()) spdlog::warn("claim {}: {}", key, ms.ToString());
    }
    if (!fs.ok() && !fs.IsNotFound()) return fs.WithContext("free old region " + ref.memory_id);
    ref = RegionRef();
  }
  if (!ref.ok() && paper && !reserved) {
    // The paper's flow: wait (at most consumer_wait) for a consumer, so the
    // region is composed for the nodes that will use it.
    const std::string uid = claim["metadata"].value("uid", "") + "@" + ts;
    bool wait = false;
    {
      std::lock_guard<std::mutex> l(mu);
      auto [it, fresh] = first_seen.emplace(uid, std::chrono::steady_clock::now());
      wait = std::chrono::steady_clock::now() - it->second < opt.consumer_wait;
      if (!wait) first_seen.erase(it);
    }
    if (wait) {
      *requeue_after = Poll();
      return Status::OK();
    }
  }
  if (!ref.ok()) {
    if (paper) {
      std::lock_guard<std::mutex> l(mu);
      first_seen.erase(claim["metadata"].value("uid", "") + "@" + ts);
    }
    Status s = Compose(claim, ours, &ref);
    if (s.IsNoSpace() && annotation && !IsBudgetExceeded(s)) {  // a budget is not the blade
      s = s.WithContext(
          "annotation mode: the scheduler does not account blade capacity, so this claim was "
          "admitted against memory another claim took (paper §2.2)");
    }
    // Every refusal is an Event a person can read (a lost CAS race is not).
    if (!s.ok() && !s.IsBusy()) {
      Event(claim, true, IsBudgetExceeded(s) ? kBudgetExceededReason : "ComposeFailed",
            s.ToString());
    }
    if (s.IsIOError()) {
      Status ms = MarkFabricDown(claim, ours, s);
      if (!ms.ok()) spdlog::warn("claim {}: {}", key, ms.ToString());
    }
    if (s.IsNoSpace() || s.IsInvalidArgument()) {
      // A compose this allocation cannot get: the binding failure condition
      // makes the scheduler clear the allocation and try again (with its
      // own backoff), rather than waiting out bindingTimeout.
      Status fs = ComposeFailed(claim, ours, s);
      if (!paper) return fs;
      // The paper's flow: the pod is bound already; the conditions tell
      // whoever reads the claim why prepare is not ready, and the compose
      // is retried with backoff (capacity may come free).
      if (!fs.ok()) spdlog::warn("claim {}: {}", key, fs.ToString());
    }
    if (!s.ok()) return s;
    *requeue_after = Poll();
    return Status::OK();
  }
  fabric::MemoryRegion region;
  Status s = Timed(
      "get", [&] { return composer->Get(ref.appliance_id, ref.blade_id, ref.memory_id, &region); });
  if (s.IsNotFound()) {
    // The region vanished (appliance power cycle). The policy: compose again
    // for this allocation; the claim's composed condition turns False
    // (reason Recomposing) until the new region is materialized everywhere,
    // prepare answers "not ready yet" meanwhile, and running consumers keep
    // a device whose bytes are gone (their node's health stream reports it
    // Unhealthy) until they are restarted onto the new region.
    Event(claim, true, "RegionLost",
          "region " + ref.memory_id + " is gone from the fabric; composing again");
    json out;
    CXLKV_RETURN_IF_ERROR(PatchClaim(
        claim,
        json::array(
            {{{"op", "remove"}, {"path", "/metadata/annotations/" + Escape(kRegionAnnotation)}}}),
        &out));
    *requeue_after = Poll();
    return Status::OK();
  }
  if (s.IsIOError()) {
    Status ms = MarkFabricDown(claim, ours, s);
    if (!ms.ok()) spdlog::warn("claim {}: {}", key, ms.ToString());
  }
  if (!s.ok()) return s.WithContext("get region " + ref.memory_id);
  bool watch = false;
  Status pod_error;
  CXLKV_RETURN_IF_ERROR(AddConsumerHosts(claim, ref, &region, &watch, &pod_error));
  LocalMaterialize(&region);
  bool all = false;
  CXLKV_RETURN_IF_ERROR(WriteStatus(claim, ours, ref, region, &all));
  // Polled only while a host is on its way to Materialized (or Failed, which
  // hostd's resync can mend). A region every host has released (no mapping
  // left) waits for an event: the next consumer changes reservedFor.
  bool in_progress = false;
  for (const auto& m : region.mappings) {
    if (!m.host_id.empty() && m.materialization != fabric::Materialization::kMaterialized) {
      in_progress = true;
    }
  }
  *requeue_after = NextPoll(key, in_progress, watch);
  return pod_error;
}

Status Controller::Rep::Own(const json& claim) {
  json ops = json::array();
  if (!claim["metadata"].contains("annotations")) {
    ops.push_back({{"op", "add"}, {"path", "/metadata/annotations"}, {"value", json::object()}});
  }
  ops.push_back({{"op", "add"},
                 {"path", "/metadata/annotations/" + Escape(kOwnerAnnotation)},
                 {"value", opt.identity}});
  if (!HasFinalizer(claim)) {
    if (claim["metadata"].contains("finalizers")) {
      ops.push_back({{"op", "add"}, {"path", "/metadata/finalizers/-"}, {"value", kFinalizer}});
    } else {
      ops.push_back({{"op", "add"}, {"path", "/metadata/finalizers"}, {"value", {kFinalizer}}});
    }
  }
  json out;
  CXLKV_RETURN_IF_ERROR(PatchClaim(claim, ops, &out));
  spdlog::info("claim {}: owned by {}", kube::ObjectKey(claim), opt.identity);
  return Status::OK();
}

Status Controller::Rep::OwnerAlive(const std::string& owner, bool* alive, std::string* why) {
  *alive = true;
  const std::string name = OwnerLeaseName(opt.lease_name, owner);
  json lease;
  kube::Status ks = kube::LeaseClient(kube, opt.lease_namespace).Get(name, &lease);
  if (!ks.ok() && !ks.IsNotFound()) {
    return Status::IOError("read owner Lease " + name + ": " + ks.ToString());
  }
  std::string record = "absent";
  std::chrono::milliseconds duration = opt.lease_duration;
  if (ks.ok()) {
    const json spec = lease.value("spec", json::object());
    const std::string holder = spec.value("holderIdentity", "");
    if (holder.empty()) {
      // Released by a clean stop: nobody renews it any more.
      *alive = false;
      *why = "its owner Lease " + name + " was released";
      return Status::OK();
    }
    record = holder + "@" + spec.value("renewTime", "");
    const int64_t secs = spec.value("leaseDurationSeconds", int64_t{0});
    if (secs > 0) duration = std::chrono::seconds(secs);
  }
  // Judged by this replica's clock from when it first saw the record (as
  // the LeaderElector does), so the replicas' clocks need not agree. An
  // absent Lease (an owner that never had one, or one deleted by hand)
  // counts the same way: dead after one duration of absence.
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> l(mu);
  OwnerSeen& seen = owners[owner];
  if (seen.record != record) {
    seen.record = record;
    seen.since = now;
  }
  const auto unchanged = std::chrono::duration_cast<std::chrono::milliseconds>(now - seen.since);
  *alive = unchanged < duration;
  if (!*alive) {
    *why = "its owner Lease " + name + (record == "absent" ? " is absent" : " was not renewed") +
           " for " + std::to_string(unchanged.count() / 1000) + " s (duration " +
           std::to_string(duration.count() / 1000) + " s)";
  }
  return Status::OK();
}

void Controller::Rep::CollectOwnerLeases() {
  if (opt.owner_lease_gc_durations <= 0) return;
  const std::string prefix = opt.lease_name + "-owner-";
  const std::string mine = OwnerLeaseName(opt.lease_name, opt.identity);
  auto leases = kube::LeaseClient(kube, opt.lease_namespace);
  std::vector<Json> items;
  std::string rv;
  kube::Status ks = leases.ListAll({}, 500, &items, &rv);
  if (!ks.ok()) {
    spdlog::warn("heartbeat Leases: list {}: {}", opt.lease_namespace, ks.ToString());
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  std::set<std::string> listed;
  for (const auto& lease : items) {
    const std::string name = lease["metadata"].value("name", "");
    if (name.rfind(prefix, 0) != 0 || name == mine) continue;
    listed.insert(name);
    const json spec = lease.value("spec", json::object());
    // Released (a clean stop) or not: what matters is that nobody renews
    // it. Judged by this replica's clock from when it first saw the record,
    // as OwnerAlive does, so the replicas' clocks need not agree.
    auto str = [&spec](const char* k) {
      return spec.contains(k) && spec[k].is_string() ? spec[k].get<std::string>() : std::string();
    };
    const std::string holder = str("holderIdentity");
    const std::string record = holder + "@" + str("renewTime") + "@" + str("acquireTime");
    std::chrono::milliseconds duration = opt.lease_duration;
    if (spec.contains("leaseDurationSeconds") && spec["leaseDurationSeconds"].is_number_integer() &&
        spec["leaseDurationSeconds"].get<int64_t>() > 0) {
      duration = std::chrono::seconds(spec["leaseDurationSeconds"].get<int64_t>());
    }
    OwnerSeen& seen = lease_records[name];
    if (seen.record != record) {
      seen.record = record;
      seen.since = now;
      continue;
    }
    const auto unchanged = std::chrono::duration_cast<std::chrono::milliseconds>(now - seen.since);
    if (unchanged < duration * opt.owner_lease_gc_durations) continue;
    // Only the Lease as read: one renewed meanwhile answers 409 and stays.
    kube::DeleteOptions del;
    del.resource_version = lease["metadata"].value("resourceVersion", "");
    kube::Status ds = leases.Delete(name, del);
    if (ds.ok() || ds.IsNotFound()) {
      metrics.AddOwnerLeaseCollected();
      spdlog::info(
          "deleted heartbeat Lease {}/{} of departed replica {}: not renewed for {} s ({} x its "
          "{} s duration{})",
          opt.lease_namespace, name, name.substr(prefix.size()), unchanged.count() / 1000,
          opt.owner_lease_gc_durations, duration.count() / 1000,
          holder.empty() ? "; released" : "");
      lease_records.erase(name);
      listed.erase(name);
    } else if (!ds.IsConflict()) {
      spdlog::warn("heartbeat Lease {}: delete: {}", name, ds.ToString());
    }
  }
  for (auto it = lease_records.begin(); it != lease_records.end();) {
    it = listed.count(it->first) ? std::next(it) : lease_records.erase(it);
  }
}

Status Controller::Rep::TakeOver(const json& claim, const std::string& owner,
                                 const std::string& why) {
  // The same compare-and-set as Own: of several survivors one wins, the
  // others get 409/422 and see the new owner on their next read.
  json out;
  CXLKV_RETURN_IF_ERROR(
      PatchClaim(claim,
                 json::array({{{"op", "replace"},
                               {"path", "/metadata/annotations/" + Escape(kOwnerAnnotation)},
                               {"value", opt.identity}}}),
                 &out));
  metrics.AddTakeover();
  Event(claim, true, "OwnerTakenOver",
        "owner " + owner + " is gone (" + why + "): taken over by " + opt.identity);
  spdlog::warn("claim {}: took over from {}: {}", kube::ObjectKey(claim), owner, why);
  return Status::OK();
}

Status Controller::Rep::Compose(json& claim, const json& ours, RegionRef* ref) {
  const std::string key = kube::ObjectKey(claim);
  const json& alloc = claim["status"]["allocation"];
  const json& first = ours[0];
  const std::string pool = first.value("pool", "");
  auto slash = pool.find('/');
  if (slash == std::string::npos) return Status::InvalidArgument("claim " + key + ": pool " + pool);
  fabric::ComposeRequest req;
  int64_t bytes = 0;
  for (const auto& r : ours) {
    int64_t b = 0;
    if (r.contains("consumedCapacity") && r["consumedCapacity"].contains("memory")) {
      CXLKV_RETURN_IF_ERROR(
          ParseQuantityBytes(r["consumedCapacity"]["memory"].get<std::string>(), &b));
    }
    bytes += b;
  }
  // Paper §2.2: size and QoS from the claim's annotations, which annotation
  // mode needs (the apiserver drops capacity.requests there).
  int64_t cap_mib = 0, qos = opt.qos;
  CXLKV_RETURN_IF_ERROR(
      PositiveAnnotation(claim, "cxlkv.dev/capacity-mib", int64_t{1} << 40, &cap_mib));
  if (bytes == 0) bytes = cap_mib * kMiB;
  if (bytes <= 0) {
    return Status::InvalidArgument(
        "claim " + key +
        (annotation ? ": no size: in annotation mode (this apiserver keeps no consumable "
                      "capacity) a claim gives its size in the annotation cxlkv.dev/capacity-mib"
                    : ": no memory capacity requested (capacity.requests.memory or the "
                      "annotation cxlkv.dev/capacity-mib)"));
  }
  if (annotation) {
    // Only here: under consumable capacity the device's request policy
    // steps in opt.qos blocks, so another QoS would not round the same.
    CXLKV_RETURN_IF_ERROR(PositiveAnnotation(claim, "cxlkv.dev/qos", 8, &qos));
    if (qos == 0) qos = opt.qos;
    if (qos != 1 && qos != 2 && qos != 4 && qos != 8) {
      return Status::InvalidArgument("claim " + key + ": cxlkv.dev/qos \"" +
                                     Annotation(claim, "cxlkv.dev/qos") + "\": want 1, 2, 4 or 8");
    }
  }
  req.size_mib = (bytes + kMiB - 1) / kMiB;
  req.qos = static_cast<int>(qos);
  const std::string uid = claim["metadata"].value("uid", "");
  const std::string ts = alloc.value("allocationTimestamp", "");
  req.claim_uid = ComposeTag(opt.driver_name, uid, ts);
  std::vector<std::string> selector;
  if (alloc.contains("nodeSelector")) selector = SelectorHostnames(alloc["nodeSelector"]);
  // Target hosts: the reserving pods' nodes when all are known (the
  // scheduler wrote nominatedNodeName before PreBind), else every host the
  // allocation allows. A later consumer elsewhere is added then
  // (AddConsumerHosts).
  bool all_known = false;
  std::vector<std::string> nodes = ConsumerNodes(claim, &all_known);
  bool in_selector = true;
  for (const auto& n : nodes) {
    if (!selector.empty() && std::find(selector.begin(), selector.end(), n) == selector.end()) {
      in_selector = false;
    }
  }
  req.candidate_hosts = all_known && in_selector && !nodes.empty() ? nodes : selector;
  int share = static_cast<int>(req.candidate_hosts.size());
  const std::string share_ann = Annotation(claim, "cxlkv.dev/share-count");
  if (!share_ann.empty()) {
    // Paper §2.2: the share count from the claim's annotation; the other
    // allowed hosts follow the known ones as candidates.
    share = std::atoi(share_ann.c_str());
    if (share < 1) {
      return Status::InvalidArgument("claim " + key + ": cxlkv.dev/share-count \"" + share_ann +
                                     "\" is not a positive integer");
    }
    for (const auto& h : selector) {
      if (std::find(req.candidate_hosts.begin(), req.candidate_hosts.end(), h) ==
          req.candidate_hosts.end()) {
        req.candidate_hosts.push_back(h);
      }
    }
  }
  req.share_count = std::max(1, share);
  // The namespace's byte budget (controller/quota.h): admitted through its
  // ledger before anything is composed; a retry of an admitted allocation
  // passes without a new reservation.
  CXLKV_RETURN_IF_ERROR(budget->Admit(claim, req.size_mib * kMiB, nullptr));
  fabric::ComposeResult res;
  const std::string appliance = pool.substr(0, slash), blade = pool.substr(slash + 1);
  // A region already tagged for this allocation is adopted: a controller
  // killed between compose and recording the annotation composed it.
  std::vector<fabric::MemoryRegion> existing;
  Status s = Timed("list", [&] { return composer->List(appliance, blade, &existing); });
  if (!s.ok()) return s.WithContext("list regions for claim " + key);
  bool adopted = false;
  for (const auto& r : existing) {
    if (r.claim_uid == req.claim_uid) {
      res.region = r;
      adopted = true;
      spdlog::info("claim {}: adopted region {} composed for this allocation before a restart", key,
                   r.id);
      break;
    }
  }
  if (!adopted) {
    s = Timed("compose", [&] { return composer->Compose(appliance, blade, req, &res); });
    if (!s.ok()) return s.WithContext("compose for claim " + key);
    if (opt.failpoint == "after-compose") {
      spdlog::warn("failpoint after-compose: SIGKILL after composing region {}", res.region.id);
      spdlog::default_logger()->flush();
      ::kill(::getpid(), SIGKILL);
    }
  }
  ref->appliance_id = appliance;
  ref->blade_id = blade;
  ref->memory_id = res.region.id;
  ref->allocation_timestamp = ts;
  ref->size_mib = res.region.size_mib;
  json out;
  s = PatchClaim(claim,
                 json::array({{{"op", "add"},
                               {"path", "/metadata/annotations/" + Escape(kRegionAnnotation)},
                               {"value", EncodeRegionAnnotation(*ref)}}}),
                 &out);
  if (!s.ok()) {
    // The teardown parameters could not be recorded: do not leave the
    // region behind.
    Status fs = FreeRegion(appliance, blade, res.region.id);
    if (!fs.ok())
      spdlog::error("claim {}: free unrecorded region {}: {}", key, res.region.id, fs.ToString());
    return s;
  }
  if (adopted) return Status::OK();
  std::string hosts;
  for (const auto& h : req.candidate_hosts) hosts += (hosts.empty() ? "" : ",") + h;
  Event(claim, false, "Composed",
        "region " + res.region.id + " (" + std::to_string(res.region.size_mib) + " MiB) on " +
            pool + " for " + std::to_string(req.share_count) + " host(s) of " + hosts);
  spdlog::info("claim {}: composed region {} ({} MiB) on {} for hosts {}", key, res.region.id,
               res.region.size_mib, pool, hosts);
  return Status::OK();
}

Status Controller::Rep::WriteStatus(const json& claim, const json& ours, const RegionRef& ref,
                                    const fabric::MemoryRegion& region, bool* all) {
  json hosts = json::object();
  *all = !region.mappings.empty();
  std::string pending;
  for (const auto& m : region.mappings) {
    if (m.host_id.empty()) continue;
    const std::string state = fabric::ToString(m.materialization);
    hosts[m.host_id] = {{"state", state}, {"cdiDevice", "cxlkv.dev/region=" + region.id}};
    if (!m.error.empty()) hosts[m.host_id]["error"] = m.error;
    if (!m.device.empty()) hosts[m.host_id]["device"] = m.device;
    // The fabric manager's assignment epoch of this host (docs/dra.md,
    // "Release protocol"): larger after a release and an add-host.
    if (m.assign_epoch > 0) hosts[m.host_id]["assignEpoch"] = m.assign_epoch;
    if (m.materialization != fabric::Materialization::kMaterialized) {
      *all = false;
      pending += (pending.empty() ? "" : ", ") + m.host_id + " " + state;
    }
  }
  json data = {{"memoryId", region.id},
               {"applianceId", ref.appliance_id},
               {"bladeId", ref.blade_id},
               {"sizeBytes", region.size_mib * kMiB},
               {"hosts", hosts}};
  json devices = json::array();
  const json& status = claim["status"];
  for (const auto& d : status.value("devices", json::array())) {
    if (d.value("driver", "") != opt.driver_name) devices.push_back(d);  // keep others'
  }
  bool changed = false;
  std::string prev_ids;  // the region the status named before, if any
  for (const auto& d : status.value("devices", json::array())) {
    if (d.value("driver", "") == opt.driver_name && d.contains("data") && d["data"].is_object()) {
      prev_ids = d["data"].value("memoryId", "");
    }
  }
  bool became_true = false;
  for (const auto& r : ours) {
    json entry = {{"driver", opt.driver_name}, {"pool", r["pool"]}, {"device", r["device"]}};
    if (r.contains("shareID")) entry["shareID"] = r["shareID"];
    json prev;
    for (const auto& d : status.value("devices", json::array())) {
      if (d.value("driver", "") == opt.driver_name && d.value("pool", "") == r.value("pool", "") &&
          d.value("device", "") == r.value("device", "") &&
          d.value("shareID", "") == r.value("shareID", "")) {
        prev = d;
      }
    }
    // Binding conditions are evaluated once per claim (k/k#140036): once
    // True for this region it stays True while a later consumer's host is
    // added (the plugin gates prepare on that host's state in data.hosts).
    // A new region (recomposed after a loss) starts False again.
    bool was_true = false, was_unreachable = false;
    std::string since = Now3339(), reach_since = since;
    const bool same_region = prev.is_object() && prev.contains("data") &&
                             prev["data"].is_object() &&
                             prev["data"].value("memoryId", "") == region.id;
    if (prev.is_object()) {
      for (const auto& c : prev.value("conditions", json::array())) {
        if (c.value("type", "") == kConditionComposed && c.value("status", "") == "True" &&
            same_region) {
          was_true = true;
        }
        if (c.value("type", "") == kConditionFabricReachable) {
          if (c.value("status", "") == "False") {
            was_unreachable = true;
          } else {
            reach_since = c.value("lastTransitionTime", reach_since);
          }
        }
      }
    }
    const bool ctrue = *all || was_true;
    std::string cstatus = ctrue ? "True" : "False";
    if (prev.is_object()) {
      for (const auto& c : prev.value("conditions", json::array())) {
        if (c.value("type", "") == kConditionComposed && c.value("status", "") == cstatus &&
            (same_region || !ctrue)) {
          since = c.value("lastTransitionTime", since);
        }
      }
    }
    std::string reason = *all ? "Materialized" : (ctrue ? "AddingHosts" : "Materializing");
    if (!ctrue && !prev_ids.empty() && prev_ids != region.id) reason = "Recomposing";
    entry["conditions"] = {{{"type", kConditionComposed},
                            {"status", cstatus},
                            {"reason", reason},
                            {"message", *all ? "region " + region.id + " materialized on every host"
                                             : "waiting for " + pending},
                            {"lastTransitionTime", since}},
                           {{"type", kConditionFabricReachable},
                            {"status", "True"},
                            {"reason", "Reachable"},
                            {"message", "the fabric manager answered"},
                            {"lastTransitionTime", reach_since}}};
    if (was_unreachable) {
      Event(claim, false, "FabricReachable", "fabric manager reachable again");
    }
    entry["data"] = data;
    if (!prev.is_object() || prev.value("data", json()) != data ||
        prev.value("conditions", json()) != entry["conditions"]) {
      changed = true;
    }
    if (*all && !was_true) became_true = true;
    devices.push_back(entry);
  }
  if (!changed) return Status::OK();
  json out;
  CXLKV_RETURN_IF_ERROR(Timed("status_patch", [&] {
    return PatchClaim(
        claim, json::array({{{"op", "add"}, {"path", "/status/devices"}, {"value", devices}}}),
        &out, "status");
  }));
  // One Event per host whose state became Materialized in this write.
  json prev_hosts = json::object();
  for (const auto& d : status.value("devices", json::array())) {
    if (d.value("driver", "") == opt.driver_name && d.contains("data") && d["data"].is_object() &&
        d["data"].value("memoryId", "") == region.id && d["data"].contains("hosts")) {
      prev_hosts = d["data"]["hosts"];
    }
  }
  for (const auto& [h, st] : hosts.items()) {
    if (st.value("state", "") != kHostMaterialized) continue;
    if (prev_hosts.contains(h) && prev_hosts[h].value("state", "") == kHostMaterialized) continue;
    Event(claim, false, "Materialized", "region " + region.id + " materialized on host " + h);
  }
  if (became_true) {
    spdlog::info("claim {}: region {} materialized on every host ({})", kube::ObjectKey(claim),
                 region.id, hosts.size());
  }
  return Status::OK();
}

Status Controller::Rep::Release(json& claim) {
  const std::string key = kube::ObjectKey(claim);
  const std::string uid = claim["metadata"].value("uid", "");
  RegionRef ref = ParseRegionAnnotation(Annotation(claim, kRegionAnnotation));
  bool leaked = false;
  if (ref.ok()) {
    Status s = FreeRegion(ref.appliance_id, ref.blade_id, ref.memory_id);
    if (!s.ok() && !s.IsNotFound()) {
      int n;
      {
        std::lock_guard<std::mutex> l(mu);
        n = ++free_failures[uid];
      }
      if (n < opt.max_free_attempts) {
        metrics.AddFreeRetry();
        Event(claim, true, "FreeRetrying",
              "free region " + ref.memory_id + " failed (attempt " + std::to_string(n) +
                  "): " + s.ToString());
        return s.WithContext("free region " + ref.memory_id);
      }
      leaked = true;
      Event(claim, true, "FreeFailed",
            "free region " + ref.memory_id + " failed " + std::to_string(n) +
                " times; dropping the finalizer, the region is leaked: " + s.ToString());
    } else {
      spdlog::info("claim {}: freed region {}", key, ref.memory_id);
    }
  }
  // Our status.devices entries describe a region that is gone; a stale
  // compose-failed or composed condition must not meet the next allocation.
  json keep = json::array();
  bool had_ours = false;
  const json cur_status = claim.contains("status") ? claim["status"] : json::object();
  for (const auto& d : cur_status.value("devices", json::array())) {
    if (d.value("driver", "") == opt.driver_name) {
      had_ours = true;
    } else {
      keep.push_back(d);
    }
  }
  if (had_ours && !claim["metadata"].contains("deletionTimestamp")) {
    json fresh;
    CXLKV_RETURN_IF_ERROR(Timed("status_patch", [&] {
      return PatchClaim(
          claim, json::array({{{"op", "add"}, {"path", "/status/devices"}, {"value", keep}}}),
          &fresh, "status");
    }));
    claim = fresh;
  }
  json ops = json::array();
  json ann = claim["metadata"].value("annotations", json::object());
  for (const char* a : {kRegionAnnotation, kOwnerAnnotation}) {
    if (ann.contains(a)) {
      ops.push_back({{"op", "remove"}, {"path", "/metadata/annotations/" + Escape(a)}});
    }
  }
  json fins = claim["metadata"].value("finalizers", json::array());
  for (size_t i = fins.size(); i-- > 0;) {
    if (fins[i] == kFinalizer) {
      ops.push_back({{"op", "remove"}, {"path", "/metadata/finalizers/" + std::to_string(i)}});
    }
  }
  if (ops.empty()) return Status::OK();
  json out;
  CXLKV_RETURN_IF_ERROR(PatchClaim(claim, ops, &out));
  {
    std::lock_guard<std::mutex> l(mu);
    free_failures.erase(uid);
  }
  if (!leaked && ref.ok()) Event(claim, false, "Freed", "region " + ref.memory_id + " freed");
  return Status::OK();
}

}  // namespace cxlkv::dra
