// Copyright cxlkv authors.
//
// kube::Status: the result of every fallible call of the Kubernetes client.
// Cheap on success (no allocation). On failure it carries a code, and, when
// the apiserver answered, the HTTP status plus the `reason` and `message` of
// the apiserver's `kind: Status` body, unchanged.
//
// Why not cxlkv::Status (base/, include/cxlkv/status.h; the two share their
// plumbing, base::StatusCore): that one is the engine's, with seven codes that each mean one thing
// to a caller of a region, and no room for an HTTP answer. A Kubernetes client's callers decide on
// distinctions the API makes and base's codes do not: create of an existing name (kAlreadyExists)
// vs a stale resourceVersion (kConflict) vs a watch too old (kGone, relist), throttled vs
// forbidden, and they log the apiserver's own reason and message. kube/ stays usable without the
// engine (CXLKV_ROOMS=kube). Code on both sides (the DRA driver) converts at
// the call with context: "get ResourceClaim ns/name: <kube status>".
//
// Thread-safety: a Status is a value; distinct objects may be used from
// different threads without synchronisation.
#ifndef CXLKV_KUBE_STATUS_H_
#define CXLKV_KUBE_STATUS_H_

#include <string>
#include <string_view>

#include "cxlkv/base/status_core.h"

namespace cxlkv::kube {

// Status::Code (declared here so that base::StatusCore can hold it).
// Each code means exactly one thing.
enum class StatusCode : unsigned char {
  kOk = 0,
  kNotFound,         // 404: the object (or namespace) does not exist
  kAlreadyExists,    // 409 reason AlreadyExists: create of an existing name
  kConflict,         // 409 otherwise: stale resourceVersion / failed precondition
  kGone,             // 410: resourceVersion or continue token too old (relist)
  kInvalid,          // 400/422: the apiserver rejected the request content
  kUnauthorized,     // 401: no valid credentials
  kForbidden,        // 403: credentials lack permission
  kTooManyRequests,  // 429: throttled (retry later)
  kServerError,      // 5xx or another unexpected HTTP status
  kTransport,        // no HTTP answer: connect, TLS or read failure, timeout
  kBadResponse,      // an answer that is not the JSON the API promises
  kInvalidArgument,  // the caller's request or configuration can never succeed
  kCancelled,        // the caller asked to stop (watch stop flag)
};

// What a failure carries beside code and message: the apiserver's answer.
struct HttpAnswer {
  int http = 0;        // HTTP status, 0 when there was no HTTP answer
  std::string reason;  // the Status body's reason, or ""
};

// ok(), code() and message() (the human-readable message with any context
// prefixes, "" when ok()) come from base::StatusCore
// (base/include/cxlkv/base/status_core.h), shared with cxlkv::Status.
class [[nodiscard]] Status : public base::StatusCore<StatusCode, HttpAnswer> {
 public:
  using Code = StatusCode;

  Status() noexcept = default;

  static Status OK() { return Status(); }
  // An error of `code` with no HTTP answer behind it (http_status() == 0).
  static Status Error(Code code, std::string_view message) { return Status(code, message, {}); }
  // Maps an HTTP answer to a code; `reason` and `message` come from the
  // apiserver's Status body (either may be empty).
  static Status FromHttp(int http_status, std::string_view reason, std::string_view message);

  bool IsNotFound() const { return code() == Code::kNotFound; }
  bool IsAlreadyExists() const { return code() == Code::kAlreadyExists; }
  bool IsConflict() const { return code() == Code::kConflict; }
  bool IsGone() const { return code() == Code::kGone; }
  bool IsInvalid() const { return code() == Code::kInvalid; }
  bool IsCancelled() const { return code() == Code::kCancelled; }

  // HTTP status the apiserver returned, 0 when there was no HTTP answer.
  int http_status() const { return ok() ? 0 : detail().http; }
  // The apiserver's machine-readable reason ("Conflict", "NotFound", ...), or "".
  const std::string& reason() const { return ok() ? Empty() : detail().reason; }
  // "<Code name> (HTTP <n> <reason>): <message>", or "OK".
  std::string ToString() const;
  // A copy whose message is "<context>: <message>". OK stays OK.
  Status WithContext(std::string_view context) const;

  // "OK", "NotFound", ... (the enumerator without its k).
  static const char* CodeName(Code c);

 private:
  Status(Code c, std::string_view msg, HttpAnswer answer) : StatusCore(c, msg, std::move(answer)) {}
};

}  // namespace cxlkv::kube

#endif  // CXLKV_KUBE_STATUS_H_
