// Copyright cxlkv authors.
#include "controller/reconcile.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/claim_status.h"
#include "controller/claim_json.h"
#include "controller/controller_internal.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::dra {

SyncStep FirstStep(const json& claim, const std::string& driver, const std::string& identity) {
  const json ours = OurResults(claim, driver);
  const json& status = claim.contains("status") ? claim["status"] : json::object();
  const bool deleting = claim["metadata"].contains("deletionTimestamp");
  const bool reserved = !status.value("reservedFor", json::array()).empty();
  const std::string owner = Annotation(claim, kOwnerAnnotation);
  if (!owner.empty() && owner != identity) return SyncStep::kForeignOwner;
  if (ours.empty() || (deleting && !reserved)) {
    const bool recorded = ParseRegionAnnotation(Annotation(claim, kRegionAnnotation)).ok();
    return recorded || HasFinalizer(claim) || !owner.empty() ? SyncStep::kRelease : SyncStep::kIdle;
  }
  if (deleting) return SyncStep::kIdle;  // consumers still hold it
  if (owner.empty()) return SyncStep::kOwn;
  return SyncStep::kReconcile;
}

std::chrono::milliseconds WatchDelay(std::chrono::milliseconds poll, int round) {
  const int n = std::min(round, 8);
  return std::min<std::chrono::milliseconds>(poll * (1 << n), std::chrono::milliseconds(2000));
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
  return WatchDelay(Poll(), watch_rounds[key]++);
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

  switch (FirstStep(claim, opt.driver_name, opt.identity)) {
    case SyncStep::kForeignOwner: {
      // Another replica's claim, unless that replica died: its heartbeat
      // Lease not renewed for the Lease's duration. Then one survivor takes
      // the claim over by the same compare-and-set and carries on from the
      // claim's state (a compose it left in flight is adopted by its tag).
      const std::string owner = Annotation(claim, kOwnerAnnotation);
      bool alive = true;
      std::string why;
      Status as = OwnerAlive(owner, &alive, &why);
      if (!as.ok()) spdlog::warn("claim {}: owner {}: {}", key, owner, as.ToString());
      if (!as.ok() || alive) return Status::OK();
      CXLKV_RETURN_IF_ERROR(Timed("takeover", [&] { return TakeOver(claim, owner, why); }));
      *requeue_after = Poll();
      return Status::OK();
    }
    case SyncStep::kRelease:
      return Release(claim);
    case SyncStep::kIdle:
      return Status::OK();
    case SyncStep::kOwn:
      CXLKV_RETURN_IF_ERROR(Timed("own", [&] { return Own(claim); }));
      *requeue_after = Poll();
      return Status::OK();
    case SyncStep::kReconcile:
      break;
  }

  const json ours = OurResults(claim, opt.driver_name);
  const json& status = claim["status"];
  const bool reserved = !status.value("reservedFor", json::array()).empty();
  RegionRef ref = ParseRegionAnnotation(Annotation(claim, kRegionAnnotation));
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
  if (!ref.ok() && prepare_wait && !reserved) {
    // The prepare-wait flow: wait (at most consumer_wait) for a consumer,
    // so the region is composed for the nodes that will use it.
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
    if (prepare_wait) {
      std::lock_guard<std::mutex> l(mu);
      first_seen.erase(claim["metadata"].value("uid", "") + "@" + ts);
    }
    Status s = Compose(claim, ours, &ref);
    if (s.IsNoSpace() && fixed_devices && !IsBudgetExceeded(s)) {  // a budget is not the blade
      s = s.WithContext(
          "annotation mode: the scheduler does not account blade capacity, so "
          "this claim was "
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
      if (!prepare_wait) return fs;
      // The prepare-wait flow: the pod is bound already; the conditions
      // tell whoever reads the claim why prepare is not ready, and the
      // compose is retried with backoff (capacity may come free).
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
        json::array({{{"op", "remove"},
                      {"path", "/metadata/annotations/" + EscapePointer(kRegionAnnotation)}}}),
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

}  // namespace cxlkv::dra
