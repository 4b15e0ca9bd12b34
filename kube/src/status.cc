// Copyright cxlkv authors.
#include "cxlkv/kube/status.h"

namespace cxlkv::kube {

namespace {
const std::string kEmpty;
}

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
  return Status(c, http, reason, msg);
}

const std::string& Status::reason() const { return state_ ? state_->reason : kEmpty; }
const std::string& Status::message() const { return state_ ? state_->msg : kEmpty; }

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = CodeName(code());
  if (state_->http != 0) {
    s += " (HTTP " + std::to_string(state_->http);
    if (!state_->reason.empty()) s += " " + state_->reason;
    s += ")";
  }
  return s + ": " + state_->msg;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return Status();
  std::string m(context);
  m += ": ";
  m += state_->msg;
  return Status(state_->code, state_->http, state_->reason, m);
}

const char* Status::CodeName(Code c) {
  switch (c) {
    case Code::kOk:
      return "OK";
    case Code::kNotFound:
      return "NotFound";
    case Code::kAlreadyExists:
      return "AlreadyExists";
    case Code::kConflict:
      return "Conflict";
    case Code::kGone:
      return "Gone";
    case Code::kInvalid:
      return "Invalid";
    case Code::kUnauthorized:
      return "Unauthorized";
    case Code::kForbidden:
      return "Forbidden";
    case Code::kTooManyRequests:
      return "TooManyRequests";
    case Code::kServerError:
      return "ServerError";
    case Code::kTransport:
      return "Transport";
    case Code::kBadResponse:
      return "BadResponse";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kCancelled:
      return "Cancelled";
  }
  return "Unknown";
}

}  // namespace cxlkv::kube
