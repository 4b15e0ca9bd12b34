// Copyright cxlkv authors.
#include "controller/ownership.h"

#include <spdlog/spdlog.h>

#include <cctype>
#include <set>

#include "common/claim_status.h"
#include "controller/claim_json.h"
#include "controller/controller_internal.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::dra {

using kube::Json;

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

json OwnOps(const json& claim, const std::string& identity) {
  json ops = json::array();
  if (!claim["metadata"].contains("annotations")) {
    ops.push_back({{"op", "add"}, {"path", "/metadata/annotations"}, {"value", json::object()}});
  }
  ops.push_back({{"op", "add"},
                 {"path", "/metadata/annotations/" + EscapePointer(kOwnerAnnotation)},
                 {"value", identity}});
  if (!HasFinalizer(claim)) {
    if (claim["metadata"].contains("finalizers")) {
      ops.push_back({{"op", "add"}, {"path", "/metadata/finalizers/-"}, {"value", kFinalizer}});
    } else {
      ops.push_back({{"op", "add"}, {"path", "/metadata/finalizers"}, {"value", {kFinalizer}}});
    }
  }
  return ops;
}

OwnerLeaseView ViewOwnerLease(const json* lease, std::chrono::milliseconds default_duration) {
  OwnerLeaseView v;
  v.record = "absent";
  v.duration = default_duration;
  if (lease == nullptr) return v;
  const json spec = lease->value("spec", json::object());
  const std::string holder = spec.value("holderIdentity", "");
  if (holder.empty()) {
    v.released = true;
    return v;
  }
  v.record = holder + "@" + spec.value("renewTime", "");
  const int64_t secs = spec.value("leaseDurationSeconds", int64_t{0});
  if (secs > 0) v.duration = std::chrono::seconds(secs);
  return v;
}

std::chrono::milliseconds UnchangedFor(LeaseSeen* seen, const std::string& record,
                                       std::chrono::steady_clock::time_point now) {
  if (seen->record != record) {
    seen->record = record;
    seen->since = now;
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - seen->since);
}

Status Controller::Rep::Own(const json& claim) {
  json out;
  CXLKV_RETURN_IF_ERROR(PatchClaim(claim, OwnOps(claim, opt.identity), &out));
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
  const OwnerLeaseView v = ViewOwnerLease(ks.ok() ? &lease : nullptr, opt.lease_duration);
  if (v.released) {
    // Released by a clean stop: nobody renews it any more.
    *alive = false;
    *why = "its owner Lease " + name + " was released";
    return Status::OK();
  }
  // Judged by this replica's clock from when it first saw the record (as
  // the LeaderElector does), so the replicas' clocks need not agree. An
  // absent Lease (an owner that never had one, or one deleted by hand)
  // counts the same way: dead after one duration of absence.
  std::lock_guard<std::mutex> l(mu);
  const auto unchanged = UnchangedFor(&owners[owner], v.record, std::chrono::steady_clock::now());
  *alive = unchanged < v.duration;
  if (!*alive) {
    *why = "its owner Lease " + name + (v.record == "absent" ? " is absent" : " was not renewed") +
           " for " + std::to_string(unchanged.count() / 1000) + " s (duration " +
           std::to_string(v.duration.count() / 1000) + " s)";
  }
  return Status::OK();
}

Status Controller::Rep::TakeOver(const json& claim, const std::string& owner,
                                 const std::string& why) {
  // The same compare-and-set as Own: of several survivors one wins, the
  // others get 409/422 and see the new owner on their next read.
  json out;
  CXLKV_RETURN_IF_ERROR(
      PatchClaim(claim,
                 json::array({{{"op", "replace"},
                               {"path", "/metadata/annotations/" + EscapePointer(kOwnerAnnotation)},
                               {"value", opt.identity}}}),
                 &out));
  metrics.AddTakeover();
  Event(claim, true, "OwnerTakenOver",
        "owner " + owner + " is gone (" + why + "): taken over by " + opt.identity);
  spdlog::warn("claim {}: took over from {}: {}", kube::ObjectKey(claim), owner, why);
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
    LeaseSeen& seen = lease_records[name];
    const bool first = seen.record != record;
    const auto unchanged = UnchangedFor(&seen, record, now);
    if (first || unchanged < duration * opt.owner_lease_gc_durations) continue;
    // Only the Lease as read: one renewed meanwhile answers 409 and stays.
    kube::DeleteOptions del;
    del.resource_version = lease["metadata"].value("resourceVersion", "");
    kube::Status ds = leases.Delete(name, del);
    if (ds.ok() || ds.IsNotFound()) {
      metrics.AddOwnerLeaseCollected();
      spdlog::info(
          "deleted heartbeat Lease {}/{} of departed replica {}: not "
          "renewed for {} s ({} x its "
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

}  // namespace cxlkv::dra
