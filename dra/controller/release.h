// Copyright cxlkv authors.
//
// Release: a claim deallocated, or deleted with no consumers left, gets its
// region freed, its status.devices entries of this driver dropped (a stale
// condition must not meet the next allocation), and the region and owner
// annotations and the finalizer removed. After max_free_attempts failed
// frees the finalizer is dropped with a Warning Event (the region is
// leaked; the orphan sweep frees it later). Controller::Rep::Release and
// FreeRegion are in release.cc.
//
// Thread-safety: pure functions.
#ifndef CXLKV_DRA_CONTROLLER_RELEASE_H_
#define CXLKV_DRA_CONTROLLER_RELEASE_H_

#include <nlohmann/json.hpp>
#include <string>

namespace cxlkv::dra {

// The claim's status.devices without this driver's entries; *had_ours
// whether there were any.
nlohmann::json DevicesWithoutOurs(const nlohmann::json& claim, const std::string& driver,
                                  bool* had_ours);

// The JSON Patch operations (after the resourceVersion test) that let a
// claim go: remove the region and owner annotations and every copy of the
// finalizer (from the last, so the indices stay right). Empty when there is
// nothing to remove.
nlohmann::json LetGoOps(const nlohmann::json& claim);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_RELEASE_H_
