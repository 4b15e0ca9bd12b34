// Copyright cxlkv authors.
//
// StatusServer: the DRA binaries' plain-HTTP endpoint for Prometheus and
// probes.
//   GET /metrics  -> 200, Metrics::Render() as text/plain; version=0.0.4
//   GET /healthz  -> 200 "ok", or 503 with the reason the check returned
//                    (the kubelet plugin), or
//   GET <path>    -> whatever the endpoint given for <path> answers (the
//                    controller: /healthz and /readyz in JSON)
// Anything else is 404. One listening thread; each request is answered from
// memory or by a callback, which must be fast (it runs on the server's
// thread and a kubelet probe times out after 1 s by default).
//
// Thread-safety: Start and Stop from one thread; the callbacks run on the
// server's threads.
#ifndef CXLKV_DRA_COMMON_STATUS_SERVER_H_
#define CXLKV_DRA_COMMON_STATUS_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "cxlkv/status.h"

namespace cxlkv::dra {

class StatusServer {
 public:
  // Returns "" when healthy, else why not (the 503 body).
  using HealthCheck = std::function<std::string()>;

  // One answer of an endpoint.
  struct Reply {
    int code = 200;
    std::string content_type = "application/json";
    std::string body;
  };
  using Endpoint = std::function<Reply()>;

  // Binds listen ("ADDR:PORT", port 0 = any free port; an empty ADDR is
  // every address, 0.0.0.0) and serves in its own thread: /metrics and
  // /healthz from `check`. *bound_port gets the port. InvalidArgument: a
  // malformed address; IOError: the address cannot be bound.
  // REQUIRES: metrics and the check's captures outlive the server.
  static Status Start(const std::string& listen, Metrics* metrics, HealthCheck check,
                      std::unique_ptr<StatusServer>* out, int* bound_port);

  // As above, with /metrics and the given endpoints by path (GET).
  // REQUIRES: metrics and the endpoints' captures outlive the server.
  static Status Start(const std::string& listen, Metrics* metrics,
                      const std::map<std::string, Endpoint>& endpoints,
                      std::unique_ptr<StatusServer>* out, int* bound_port);
  ~StatusServer();  // Stop()
  void Stop();

  struct Rep;

 private:
  explicit StatusServer(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_COMMON_STATUS_SERVER_H_
