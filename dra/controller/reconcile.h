// Copyright cxlkv authors.
//
// Reconcile: one claim's Sync (Controller::Rep::Sync, reconcile.cc), run by
// the workers for every change of a claim and on the informer's resync:
//      unowned -> owned     the owner annotation and finalizer by
//                           compare-and-set (ownership.cc);
//      owned -> composed    compose through the Composer (compose.cc);
//      composed -> ready    status.devices[] with cxlkv.dev/composed True
//                           once every target host reports Materialized
//                           (conditions.cc), polled until then;
//      deallocated/deleted  free the region, drop annotation and finalizer
//                           (release.cc).
// A claim another live replica owns is left alone; one whose owner died is
// taken over (ownership.cc).
//
// Thread-safety: pure functions.
#ifndef CXLKV_DRA_CONTROLLER_RECONCILE_H_
#define CXLKV_DRA_CONTROLLER_RECONCILE_H_

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace cxlkv::dra {

// What a claim needs first, from the claim alone.
enum class SyncStep : uint8_t {
  kIdle,          // nothing to do: not ours and nothing left, or deleting with consumers
  kForeignOwner,  // another replica's: left alone unless that replica died
  kRelease,       // deallocated, or deleted without consumers: free and let go
  kOwn,           // allocated on our device, unowned: take it
  kReconcile,     // ours: compose, or bring the status up to date
};
SyncStep FirstStep(const nlohmann::json& claim, const std::string& driver,
                   const std::string& identity);

// The delay before re-reading a claim only because a consumer has not
// started on a host the region maps (the release race), in its `round`-th
// consecutive such poll: from `poll`, doubling, at most 2 s.
std::chrono::milliseconds WatchDelay(std::chrono::milliseconds poll, int round);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_RECONCILE_H_
