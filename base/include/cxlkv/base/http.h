// Copyright cxlkv authors.
//
// HttpClient: the one HTTP client wrapper of the tree, over libcurl. The
// apiserver client (kube/: bearer tokens, client certificates, streamed
// watches that a stop flag ends) and the fabric side (the fabric manager and
// the host agents: basic auth, a CA file, small JSON bodies) both send their
// requests through it, so TLS, timeouts, proxies and error text are decided
// here once.
//
// A request is one blocking call. The client keeps a few idle curl handles
// so that connections and TLS sessions are reused between requests (a
// handle's options are cleared between uses; its connection cache stays).
//
// Thread-safety: HttpClient::Do may be called concurrently from any thread
// (each call takes its own handle); the client must outlive its calls.
#ifndef CXLKV_BASE_HTTP_H_
#define CXLKV_BASE_HTTP_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "cxlkv/base/mutex.h"
#include "cxlkv/status.h"

namespace cxlkv::base {

struct HttpRequest {
  std::string method = "GET";
  std::string url;  // "https://host:port/path?query"
  std::vector<std::string>
      headers;               // extra "Name: value" lines; "Accept: application/json" is always sent
  std::string content_type;  // "Content-Type" of a body; "" = none sent
  std::string body;
  // POST, PUT and PATCH always carry a body (maybe empty), so that a
  // Content-Length goes out: servers may refuse a body-less POST.
  long timeout_ms = 0;          // whole request, milliseconds; 0 = none (a watch)
  long connect_timeout_ms = 0;  // 0 = libcurl's default
  std::string user_agent;       // "" = none sent

  // TLS. The peer is verified unless `insecure`; the trust anchor is ca_pem,
  // else ca_file, else the system store.
  std::string ca_pem;
  std::string ca_file;
  std::string client_cert_pem, client_key_pem;  // both set: client certificate
  bool insecure = false;
  std::string username, password;  // username set: HTTP basic auth

  // false: every peer is addressed directly (the fabric side's peers are on
  // the node or the management network); true: the http(s)_proxy and
  // no_proxy environment apply, as for any Kubernetes client.
  bool proxy_from_environment = false;

  // When set, a 2xx body goes here as it arrives (return false to end the
  // transfer early, which is not an error); any other body is buffered into
  // HttpResponse::body.
  std::function<bool(std::string_view)> on_data;
  // Polled about once a second while the transfer runs; raised = cancel.
  const std::atomic<bool>* stop = nullptr;
};

struct HttpResponse {
  long status = 0;         // HTTP status; 0 when no answer arrived
  std::string body;        // the body (or, with on_data, a non-2xx body only)
  bool cancelled = false;  // the request's stop flag ended it
};

class HttpClient {
 public:
  // Keeps at most `max_idle` idle handles for reuse.
  explicit HttpClient(size_t max_idle = 8);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Performs `req`. OK once an HTTP answer arrived, whatever its status (in
  // *resp), and when on_data ended the transfer. IOError "<METHOD> <url>:
  // <libcurl's reason>" when no answer came (refused, timed out, TLS
  // failure), and "<METHOD> <url>: stopped" with resp->cancelled when
  // req.stop ended it.
  Status Do(const HttpRequest& req, HttpResponse* resp);

 private:
  void* Acquire();
  void Release(void* handle);

  const size_t max_idle_;
  Mutex mu_;
  std::vector<void*> idle_ CXLKV_GUARDED_BY(mu_);  // CURL* handles ready for reuse
};

}  // namespace cxlkv::base

#endif  // CXLKV_BASE_HTTP_H_
