// Copyright cxlkv authors.
//
// Claim JSON: reading the fields of a ResourceClaim (and of the regions the
// controller composes for it) that the controller's concepts share. The
// write side, a JSON Patch led by a resourceVersion test, is
// Controller::Rep::PatchClaim (claim_json.cc).
//
// Thread-safety: pure functions.
#ifndef CXLKV_DRA_CONTROLLER_CLAIM_JSON_H_
#define CXLKV_DRA_CONTROLLER_CLAIM_JSON_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "cxlkv/fabric/composer.h"
#include "cxlkv/status.h"

namespace cxlkv::dra {

inline constexpr int64_t kMiB = int64_t{1} << 20;

// JSON Pointer escaping (RFC 6901) for keys such as "cxlkv.dev/owner".
std::string EscapePointer(const std::string& s);

// Now in RFC 3339, UTC, seconds (a condition's lastTransitionTime).
std::string Now3339();

// The value of annotation `key` of an object; "" when absent.
std::string Annotation(const nlohmann::json& obj, const std::string& key);

// A claim annotation holding a positive integer (decimal, at most `max`);
// *out = 0 when absent. InvalidArgument names the annotation otherwise.
Status PositiveAnnotation(const nlohmann::json& claim, const std::string& key, int64_t max,
                          int64_t* out);

// Whether the claim carries the driver's finalizer (kFinalizer).
bool HasFinalizer(const nlohmann::json& obj);

// A pool's name in slices and claims: "<appliance>/<blade>".
std::string PoolName(const fabric::Pool& p);

// The tag a compose carries (the fabric manager's claimUid): the driver,
// the claim UID and the allocation it is for, so a cleared and redone
// allocation is a different compose and the sweep can tell which regions
// back a live allocation.
std::string ComposeTag(const std::string& driver, const std::string& uid, const std::string& ts);

// Splits a tag made by ComposeTag; false for any other tag (a region some
// other user of the fabric composed: never swept).
bool ParseComposeTag(const std::string& driver, const std::string& tag, std::string* uid,
                     std::string* ts);

// The driver's results in a claim's allocation (empty when not allocated).
nlohmann::json OurResults(const nlohmann::json& claim, const std::string& driver);

// A status.devices[] entry's identity for one allocation result (driver,
// pool, device and shareID when the result has one).
nlohmann::json DeviceEntry(const nlohmann::json& result, const std::string& driver);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_CLAIM_JSON_H_
