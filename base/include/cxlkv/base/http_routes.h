// Copyright cxlkv authors.
//
// What the daemons' HTTP servers (cxlkv-hostd, cxlkv-fabricd) answer a
// request that no handler ran for. cpp-httplib (0.11.4) refuses a PUT, POST
// or PATCH without a Content-Length header with a bare 400 before any
// handler runs, and a path or method it has no handler for with a 404; a
// client then learns nothing. Each server keeps a table of its endpoints
// (the patterns its handlers are registered with, and the body each takes),
// and AnswerUnhandled turns the refusal into an answer saying what is wrong
// and how to go on. The server writes it in its own error shape.
#ifndef CXLKV_BASE_HTTP_ROUTES_H_
#define CXLKV_BASE_HTTP_ROUTES_H_

#include <string>
#include <vector>

namespace cxlkv::base {

// For an endpoint that takes no body.
inline constexpr const char* kNoHttpBody = "no body: send an empty one (Content-Length: 0)";

struct HttpEndpoint {
  std::string method;   // "GET", "PUT", ...
  std::string pattern;  // the handler's regex; "([^/]+)" groups read as ID in lists
  std::string body;     // what it takes (kNoHttpBody for none)
};

struct HttpAnswer {
  int status = 0;
  std::string allow;    // the Allow header's value (405), else ""
  std::string message;  // says what is wrong and how to go on
};

// `status` is the HTTP layer's refusal, `has_content_length` whether the
// request carried that header. A request to an endpoint without a
// Content-Length: 400 naming what body the endpoint takes; a method not
// served at that path: 405 with Allow; a path not served: 404 listing the
// endpoints; anything else: `status`, naming the endpoint's body.
HttpAnswer AnswerUnhandled(const std::vector<HttpEndpoint>& endpoints, const std::string& method,
                           const std::string& path, bool has_content_length, int status);

// "GET /a, PUT /a/ID, ...": the endpoints, for a 404.
std::string HttpEndpointList(const std::vector<HttpEndpoint>& endpoints);

}  // namespace cxlkv::base

#endif  // CXLKV_BASE_HTTP_ROUTES_H_
