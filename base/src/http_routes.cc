// Copyright cxlkv authors.
#include "cxlkv/base/http_routes.h"

#include <regex>

namespace cxlkv::base {

std::string HttpEndpointList(const std::vector<HttpEndpoint>& endpoints) {
  std::string out;
  for (const HttpEndpoint& e : endpoints) {
    std::string path = e.pattern;
    for (size_t at; (at = path.find("([^/]+)")) != std::string::npos;) path.replace(at, 7, "ID");
    out += (out.empty() ? "" : ", ") + e.method + " " + path;
  }
  return out;
}

HttpAnswer AnswerUnhandled(const std::vector<HttpEndpoint>& endpoints, const std::string& method,
                           const std::string& path, bool has_content_length, int status) {
  const HttpEndpoint* exact = nullptr;
  std::string allow;
  for (const HttpEndpoint& e : endpoints) {
    if (!std::regex_match(path, std::regex(e.pattern))) continue;
    if (method == e.method) exact = &e;
    if (allow.find(e.method) == std::string::npos) allow += (allow.empty() ? "" : ", ") + e.method;
  }
  const std::string what = method + " " + path;
  HttpAnswer a;
  if (exact != nullptr && status == 400 && !has_content_length) {
    a.status = 400;
    a.message = what +
                ": no Content-Length header, so no body could be read; this endpoint takes " +
                exact->body;
  } else if (exact == nullptr && !allow.empty()) {
    a.status = 405;
    a.allow = allow;
    a.message = what + ": method not allowed here; allowed: " + allow;
  } else if (exact == nullptr) {
    a.status = 404;
    a.message = "no such endpoint: " + what + "; the endpoints: " + HttpEndpointList(endpoints);
  } else {
    a.status = status;
    a.message = what + ": refused by the HTTP layer (status " + std::to_string(status) +
                "); this endpoint takes " + exact->body;
  }
  return a;
}

}  // namespace cxlkv::base
