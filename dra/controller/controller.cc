// Copyright cxlkv authors.
#include "controller/controller.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/claim_status.h"
#include "common/node_selector.h"
#include "cxlkv/base/size.h"
#include "cxlkv/kube/event_recorder.h"
#include "cxlkv/kube/informer.h"
#include "cxlkv/kube/typed.h"
#include "cxlkv/kube/workqueue.h"

namespace cxlkv::dra {

using kube::Json;
using nlohmann::json;

namespace {

constexpr const char* kRegionAnnotation = "cxlkv.dev/region";
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

bool HasFinalizer(const json& obj) {
  for (const auto& f : obj["metadata"].value("finalizers", json::array())) {
    if (f == kFinalizer) return true;
  }
  return false;
}

// The region a claim's annotation names (teardown parameters).
struct RegionRef {
  std::string appliance_id, blade_id, memory_id, allocation_timestamp;
  bool ok() const { return !memory_id.empty(); }
};

RegionRef ParseRegionRef(const std::string& text) {
  RegionRef r;
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return r;
  r.appliance_id = j.value("applianceId", "");
  r.blade_id = j.value("bladeId", "");
  r.memory_id = j.value("memoryId", "");
  r.allocation_timestamp = j.value("allocationTimestamp", "");
  return r;
}

std::string PoolName(const fabric::Pool& p) { return p.appliance_id + "/" + p.blade_id; }

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
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;                         // guarded by mu
  std::map<std::string, int> free_failures;  // by claim UID; guarded by mu

  void Enqueue(const json& obj) { queue.Add(kube::ObjectKey(obj)); }
  void Worker();
  Status Sync(const std::string& key, bool* requeue_soon);
  Status Release(json& claim);
  Status Own(const json& claim);
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
  kube::Status ks =
      kube::EventRecorder::New(kube, {"cxlkv.dev/dra-controller", opt.identity}, &rep->events);
  if (!ks.ok()) return Status::InvalidArgument("event recorder: " + ks.ToString());
  out->reset(new Controller(std::move(rep)));
  return Status::OK();
}

Controller::Controller(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
Controller::~Controller() { Stop(); }

Status Controller::PublishSlices() {
  std::vector<fabric::Pool> pools;
  CXLKV_RETURN_IF_ERROR(rep_->composer->ListPools(&pools).WithContext("list pools"));
  const std::string& drv = rep_->opt.driver_name;
  for (const auto& p : pools) {
    const int64_t step = p.block_mib * rep_->opt.qos * kMiB;
    json hosts = p.hosts;
    json device = {
        {"name", p.blade_id},
        {"attributes",
         {{"appliance", {{"string", p.appliance_id}}},
          {"blade", {{"string", p.blade_id}}},
          {"qos", {{"int", rep_->opt.qos}}},
          {"blockSizeBytes", {{"int", p.block_mib * kMiB}}}}},
        {"capacity",
         {{"memory",
           {{"value", std::to_string(p.total_mib * kMiB)},
            {"requestPolicy",
             {{"default", std::to_string(step)},
              {"validRange", {{"min", std::to_string(step)}, {"step", std::to_string(step)}}}}}}}}},
        {"allowMultipleAllocations", true},
        {"bindingConditions", {kConditionComposed}},
        {"bindingFailureConditions", {kConditionComposeFailed}}};
    std::string name = drv + "-" + p.appliance_id + "-" + p.blade_id;
    json slice = {
        {"metadata", {{"name", name}}},
        {"spec",
         {{"driver", drv},
          {"pool", {{"name", PoolName(p)}, {"generation", 1}, {"resourceSliceCount", 1}}},
          {"nodeSelector",
           {{"nodeSelectorTerms",
             {{{"matchExpressions",
                {{{"key", "kubernetes.io/hostname"}, {"operator", "In"}, {"values", hosts}}}}}}}}},
          {"devices", {device}}}}};
    auto slices = kube::ResourceSliceClient(rep_->kube);
    json cur;
    kube::Status ks = slices.Get(name, &cur);
    json stored;
    if (ks.IsNotFound()) {
      ks = slices.Create(slice, &stored);
    } else if (ks.ok()) {
      if (cur["spec"] == slice["spec"]) continue;
      slice["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"];
      int64_t gen = cur["spec"]["pool"].value("generation", int64_t{1});
      slice["spec"]["pool"]["generation"] = gen + 1;
      ks = slices.Update(slice, &stored);
    }
    if (!ks.ok()) return Status::IOError("publish slice " + name + ": " + ks.ToString());
    // A disabled gate makes the apiserver drop fields silently: compare.
    const json& got = stored["spec"]["devices"][0];
    if (!got.contains("allowMultipleAllocations") || !got.contains("bindingConditions") ||
        !got["capacity"]["memory"].contains("requestPolicy")) {
      spdlog::error(
          "slice {}: the apiserver dropped consumable-capacity or binding-condition "
          "fields (feature gates off?)",
          name);
    }
    spdlog::info("published slice {} (pool {}, hosts {})", name, PoolName(p), hosts.dump());
  }
  return Status::OK();
}

Status Controller::Start() {
  CXLKV_RETURN_IF_ERROR(PublishSlices());
  Rep* r = rep_.get();
  kube::InformerHandlers h;
  h.on_add = [r](const Json& o) { r->Enqueue(o); };
  h.on_update = [r](const Json&, const Json& o) { r->Enqueue(o); };
  h.on_delete = [r](const Json& o) { r->Enqueue(o); };
  kube::InformerOptions io;
  io.resync_period = std::chrono::seconds(30);
  r->informer = std::make_unique<kube::Informer>(r->kube, kube::ResourceClaims(), io, h);
  r->informer->Start();
  for (int i = 0; i < r->opt.workers; ++i) r->threads.emplace_back([r] { r->Worker(); });
  r->threads.emplace_back([this, r] {
    std::unique_lock<std::mutex> l(r->mu);
    while (!r->cv.wait_for(l, r->opt.slice_period, [r] { return r->stop; })) {
      l.unlock();
      Status s = PublishSlices();
      if (!s.ok()) spdlog::warn("{}", s.ToString());
      l.lock();
    }
  });
  return Status::OK();
}

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
  for (auto& t : rep_->threads) t.join();
  rep_->threads.clear();
  if (rep_->events) rep_->events->Flush(std::chrono::seconds(2));
}

void Controller::Rep::Worker() {
  std::string key;
  while (queue.Get(&key)) {
    bool soon = false;
    Status s = Sync(key, &soon);
    if (!s.ok()) {
      spdlog::warn("claim {}: {}", key, s.ToString());
      queue.AddRateLimited(key);
    } else {
      queue.Forget(key);
      if (soon) queue.AddAfter(key, opt.materialize_poll);
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

Status Controller::Rep::Sync(const std::string& key, bool* requeue_soon) {
  auto slash = key.find('/');
  const std::string ns = key.substr(0, slash), name = key.substr(slash + 1);
  json claim;
  kube::Status ks = kube::ResourceClaimClient(kube, ns).Get(name, &claim);
  if (ks.IsNotFound()) return Status::OK();  // gone; a finalizer would have kept it
  if (!ks.ok()) return Status::IOError("get claim " + key + ": " + ks.ToString());

  json ours = json::array();
  const json& status = claim.contains("status") ? claim["status"] : json::object();
  const bool allocated = status.contains("allocation") && status["allocation"].is_object();
  if (allocated && status["allocation"].contains("devices")) {
    for (const auto& r : status["allocation"]["devices"].value("results", json::array())) {
      if (r.value("driver", "") == opt.driver_name) ours.push_back(r);
    }
  }
  const bool deleting = claim["metadata"].contains("deletionTimestamp");
  const bool reserved = !status.value("reservedFor", json::array()).empty();
  RegionRef ref = ParseRegionRef(Annotation(claim, kRegionAnnotation));
  const std::string owner = Annotation(claim, kOwnerAnnotation);
  if (!owner.empty() && owner != opt.identity) return Status::OK();  // another replica's

  if (ours.empty() || (deleting && !reserved)) {
    if (ref.ok() || HasFinalizer(claim) || !owner.empty()) return Release(claim);
    return Status::OK();
  }
  if (deleting) return Status::OK();  // consumers still hold it
  if (owner.empty()) {
    CXLKV_RETURN_IF_ERROR(Own(claim));
    *requeue_soon = true;
    return Status::OK();
  }
  const std::string ts = status["allocation"].value("allocationTimestamp", "");
  if (ref.ok() && ref.allocation_timestamp != ts) {
    // A cleared and redone allocation: a new compose; the old region goes.
    spdlog::info("claim {}: allocation changed ({} -> {}), freeing region {}", key,
                 ref.allocation_timestamp, ts, ref.memory_id);
    Status fs = composer->Free(ref.appliance_id, ref.blade_id, ref.memory_id);
    if (!fs.ok() && !fs.IsNotFound()) return fs.WithContext("free old region " + ref.memory_id);
    ref = RegionRef();
  }
  if (!ref.ok()) {
    Status s = Compose(claim, ours, &ref);
    if (!s.ok()) return s;
    *requeue_soon = true;
    return Status::OK();
  }
  fabric::MemoryRegion region;
  Status s = composer->Get(ref.appliance_id, ref.blade_id, ref.memory_id, &region);
  if (s.IsNotFound()) {
    // The region vanished (appliance power cycle): the policy is to compose
    // again for this allocation; consumers see "not ready yet" meanwhile.
    Event(claim, true, "RegionLost",
          "region " + ref.memory_id + " is gone from the fabric; composing again");
    json out;
    CXLKV_RETURN_IF_ERROR(PatchClaim(
        claim,
        json::array(
            {{{"op", "remove"}, {"path", "/metadata/annotations/" + Escape(kRegionAnnotation)}}}),
        &out));
    *requeue_soon = true;
    return Status::OK();
  }
  if (!s.ok()) return s.WithContext("get region " + ref.memory_id);
  bool all = false;
  CXLKV_RETURN_IF_ERROR(WriteStatus(claim, ours, ref, region, &all));
  *requeue_soon = !all;
  return Status::OK();
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
  std::string cap = Annotation(claim, "cxlkv.dev/capacity-mib");
  if (bytes == 0 && !cap.empty()) bytes = std::strtoll(cap.c_str(), nullptr, 10) * kMiB;
  if (bytes <= 0) {
    return Status::InvalidArgument("claim " + key + ": no memory capacity requested");
  }
  req.size_mib = (bytes + kMiB - 1) / kMiB;
  req.qos = opt.qos;
  req.claim_uid = claim["metadata"].value("uid", "");
  if (alloc.contains("nodeSelector"))
    req.candidate_hosts = SelectorHostnames(alloc["nodeSelector"]);
  req.share_count = std::max<int>(1, static_cast<int>(req.candidate_hosts.size()));
  fabric::ComposeResult res;
  const std::string appliance = pool.substr(0, slash), blade = pool.substr(slash + 1);
  Status s = composer->Compose(appliance, blade, req, &res);
  if (!s.ok()) {
    Event(claim, true, "ComposeFailed", s.ToString());
    return s.WithContext("compose for claim " + key);
  }
  ref->appliance_id = appliance;
  ref->blade_id = blade;
  ref->memory_id = res.region.id;
  ref->allocation_timestamp = alloc.value("allocationTimestamp", "");
  json ann = {{"applianceId", appliance},
              {"bladeId", blade},
              {"memoryId", res.region.id},
              {"allocationTimestamp", ref->allocation_timestamp},
              {"sizeMiB", res.region.size_mib}};
  json out;
  s = PatchClaim(claim,
                 json::array({{{"op", "add"},
                               {"path", "/metadata/annotations/" + Escape(kRegionAnnotation)},
                               {"value", ann.dump()}}}),
                 &out);
  if (!s.ok()) {
    // The teardown parameters could not be recorded: do not leave the
    // region behind.
    Status fs = composer->Free(appliance, blade, res.region.id);
    if (!fs.ok())
      spdlog::error("claim {}: free unrecorded region {}: {}", key, res.region.id, fs.ToString());
    return s;
  }
  Event(claim, false, "Composed",
        "region " + res.region.id + " (" + std::to_string(res.region.size_mib) + " MiB) on " +
            pool + " for " + std::to_string(req.share_count) + " host(s)");
  spdlog::info("claim {}: composed region {} ({} MiB) on {}", key, res.region.id,
               res.region.size_mib, pool);
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
    std::string cstatus = *all ? "True" : "False";
    std::string since = Now3339();
    if (prev.is_object()) {
      for (const auto& c : prev.value("conditions", json::array())) {
        if (c.value("type", "") == kConditionComposed && c.value("status", "") == cstatus) {
          since = c.value("lastTransitionTime", since);
        }
      }
    }
    entry["conditions"] = {{{"type", kConditionComposed},
                            {"status", cstatus},
                            {"reason", *all ? "Materialized" : "Materializing"},
                            {"message", *all ? "region " + region.id + " materialized on every host"
                                             : "waiting for " + pending},
                            {"lastTransitionTime", since}}};
    entry["data"] = data;
    if (!prev.is_object() || prev.value("data", json()) != data ||
        prev.value("conditions", json()) != entry["conditions"]) {
      changed = true;
    }
    devices.push_back(entry);
  }
  if (!changed) return Status::OK();
  json out;
  CXLKV_RETURN_IF_ERROR(PatchClaim(
      claim, json::array({{{"op", "add"}, {"path", "/status/devices"}, {"value", devices}}}), &out,
      "status"));
  if (*all) {
    Event(claim, false, "Materialized",
          "region " + region.id + " materialized on " + std::to_string(hosts.size()) + " host(s)");
  }
  return Status::OK();
}

Status Controller::Rep::Release(json& claim) {
  const std::string key = kube::ObjectKey(claim);
  const std::string uid = claim["metadata"].value("uid", "");
  RegionRef ref = ParseRegionRef(Annotation(claim, kRegionAnnotation));
  bool leaked = false;
  if (ref.ok()) {
    Status s = composer->Free(ref.appliance_id, ref.blade_id, ref.memory_id);
    if (!s.ok() && !s.IsNotFound()) {
      int n;
      {
        std::lock_guard<std::mutex> l(mu);
        n = ++free_failures[uid];
      }
      if (n < opt.max_free_attempts) {
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
