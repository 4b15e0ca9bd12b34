// Copyright cxlkv authors.
//
// Internal HTTPS transport to the apiserver: one request, either buffered or
// streamed to a callback, with the kubeconfig's credentials, over the tree's
// one HTTP client (cxlkv/base/http.h), which reuses connections and TLS
// sessions between requests.
//
// Thread-safety: Transport methods may be called concurrently.
#ifndef CXLKV_KUBE_SRC_HTTP_H_
#define CXLKV_KUBE_SRC_HTTP_H_

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "cxlkv/base/http.h"
#include "cxlkv/kube/client.h"
#include "cxlkv/kube/config.h"
#include "cxlkv/kube/status.h"

namespace cxlkv::kube::internal {

struct HttpRequest {
  std::string method = "GET";
  std::string path_and_query;  // "/api/v1/pods?limit=5"
  std::string content_type;    // used when body is not empty
  std::string body;
  long timeout_ms = 0;  // 0 = none (watch)
  // When set, body bytes go here as they arrive (return false to abort), and
  // only a non-2xx body is buffered into HttpResponse::body.
  std::function<bool(std::string_view)> on_data;
  const std::atomic<bool>* stop = nullptr;  // polled about once a second
};

struct HttpResponse {
  int status = 0;
  std::string body;
};

class Transport {
 public:
  Transport(const Config& config, const ClientOptions& options);
  ~Transport();
  // Performs `req`. Returns kTransport when no HTTP answer arrived,
  // kCancelled when req.stop was raised, OK otherwise (any HTTP status).
  Status Do(const HttpRequest& req, HttpResponse* resp);

 private:
  Status AuthHeader(std::string* out) const;

  const Config config_;
  const ClientOptions options_;
  base::HttpClient http_;
};

// Turns a non-2xx response into a Status carrying the apiserver's reason and
// message (from a `kind: Status` body when there is one).
Status ErrorFromResponse(const HttpResponse& resp);

}  // namespace cxlkv::kube::internal

#endif  // CXLKV_KUBE_SRC_HTTP_H_
