// Copyright cxlkv authors.
//
// Ownership: a claim allocated on our devices is taken by one replica with
// a JSON Patch [test resourceVersion, add owner annotation, add finalizer],
// a real compare-and-set (two controllers: one wins, one gets 409). Each
// replica renews a heartbeat Lease "<lease_name>-owner-<identity>"; a claim
// whose owner's heartbeat went unrenewed for the Lease's duration, as seen
// from here, is taken over by the same compare-and-set, and a region the
// dead owner composed is adopted by its tag. The Lease holder's resync
// deletes heartbeat Leases of departed replicas once unrenewed for
// owner_lease_gc_durations (Controller::Rep::Own, OwnerAlive, TakeOver,
// CollectOwnerLeases in ownership.cc).
//
// Thread-safety: pure functions.
#ifndef CXLKV_DRA_CONTROLLER_OWNERSHIP_H_
#define CXLKV_DRA_CONTROLLER_OWNERSHIP_H_

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace cxlkv::dra {

// A replica's heartbeat Lease: "<singleton lease>-owner-<identity>", the
// identity folded into a DNS-1123 name (lower case; anything else '-').
std::string OwnerLeaseName(const std::string& lease_name, const std::string& identity);

// The JSON Patch operations (after the resourceVersion test) that make
// `identity` the claim's owner: the annotation, and the finalizer unless
// the claim has it.
nlohmann::json OwnOps(const nlohmann::json& claim, const std::string& identity);

// A heartbeat Lease as OwnerAlive reads it. lease: the object, or nullptr
// when there is none.
struct OwnerLeaseView {
  bool released = false;                  // holderIdentity empty: a clean stop released it
  std::string record;                     // "<holder>@<renewTime>", or "absent"
  std::chrono::milliseconds duration{0};  // leaseDurationSeconds, else the default
};
OwnerLeaseView ViewOwnerLease(const nlohmann::json* lease,
                              std::chrono::milliseconds default_duration);

// When a Lease record was first seen unchanged, by this replica's clock
// (the LeaderElector's way: the replicas' clocks need not agree).
struct LeaseSeen {
  std::string record;
  std::chrono::steady_clock::time_point since;
};
// Records `record` as seen at `now` and returns how long it has been seen
// unchanged (0 when it just changed).
std::chrono::milliseconds UnchangedFor(LeaseSeen* seen, const std::string& record,
                                       std::chrono::steady_clock::time_point now);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_OWNERSHIP_H_
