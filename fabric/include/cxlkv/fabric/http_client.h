// Copyright cxlkv authors.
//
// HttpDo: one blocking JSON request of the fabric side — FabricClient's calls
// to the fabric manager, and the hostd client (cxlkv/hostd/client.h) that the
// fabric manager, the DRA controller and the DRA kubelet plugin use to reach
// a host agent — sent through the tree's one HTTP client
// (cxlkv/base/http.h), which the apiserver client (kube/) uses too.
//
// Thread-safety: HttpDo may be called concurrently (each call takes its own
// handle from a process-wide client that keeps idle connections).
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
