// Copyright cxlkv authors.
//
// HttpDo: one blocking HTTP request over libcurl. The one HTTP client of the
// fabric side: FabricClient's calls to the fabric manager, and the hostd
// client (cxlkv/hostd/client.h) that the fabric manager, the DRA controller
// and the DRA kubelet plugin use to reach a host agent. (The apiserver's
// client, kube/, keeps its own pooled, streaming transport.)
//
// Thread-safety: HttpDo may be called concurrently (one curl handle per
// call; libcurl's global init runs once).
#ifndef CXLKV_FABRIC_HTTP_CLIENT_H_
#define CXLKV_FABRIC_HTTP_CLIENT_H_

#include <string>

#include "cxlkv/status.h"

namespace cxlkv::fabric {

struct HttpOptions {
  std::string username, password;  // both set: HTTP basic auth
  std::string ca_file;             // TLS trust anchor ("" = system store)
  bool insecure = false;           // skip TLS peer verification
  int timeout_ms = 10000;          // whole request (connect included), milliseconds
};

struct HttpResponse {
  long status = 0;
  std::string body;
};

// Sends `body` (JSON, may be empty; POST, PUT and PATCH always carry one) with
// `method` to `url`, no proxy. Any HTTP status is OK here, in *resp; IOError
// "<method> <url>: <curl error>" when no answer came.
Status HttpDo(const HttpOptions& opt, const std::string& method, const std::string& url,
              const std::string& body, HttpResponse* resp);

}  // namespace cxlkv::fabric

#endif  // CXLKV_FABRIC_HTTP_CLIENT_H_
