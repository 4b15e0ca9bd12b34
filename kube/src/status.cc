// Copyright cxlkv authors.
#include "cxlkv/kube/status.h"

#include <iterator>
#include <string>

namespace cxlkv::kube {

Status Status::FromHttp(int http, std::string_view reason, std::string_view message) {
  Code c;
  if (http >= 200 && http < 300) return Status();
  switch (http) {
    case 404:
      c = Code::kNotFound;
      break;
    case 409:
      c = reason == "AlreadyExists" ? Code::kAlreadyExists : Code::kConflict;
      break;
    case 410:
      c = Code::kGone;
      break;
    case 400:
    case 415:
    case 422:
      c = Code::kInvalid;
      break;
    case 401:
      c = Code::kUnauthorized;
      break;
    case 403:
      c = Code::kForbidden;
      break;
    case 429:
      c = Code::kTooManyRequests;
      break;
    default:
      c = Code::kServerError;
      break;
  }
  std::string msg(message);
  if (msg.empty()) msg = "HTTP " + std::to_string(http);
  return Status(c, msg, HttpAnswer{http, std::string(reason)});
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = CodeName(code());
  if (http_status() != 0) {
    s += " (HTTP " + std::to_string(http_status());
    if (!reason().empty()) s += " " + reason();
    s += ")";
  }
  return s + ": " + message();
}

Status Status::WithContext(std::string_view context) const {
  Status s(*this);
  s.PrependContext(context);
  return s;
}

const char* Status::CodeName(Code c) {
  static constexpr const char* kNames[] = {
      "OK",        "NotFound",     "AlreadyExists",   "Conflict",        "Gone",
      "Invalid",   "Unauthorized", "Forbidden",       "TooManyRequests", "ServerError",
      "Transport", "BadResponse",  "InvalidArgument", "Cancelled",
  };
  static_assert(std::size(kNames) == static_cast<size_t>(Code::kCancelled) + 1,
                "one name per Status::Code, in value order");
  return base::CodeNameIn(kNames, c);
}

}  // namespace cxlkv::kube
