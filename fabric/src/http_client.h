// Copyright cxlkv authors.
//
// One blocking HTTP request over libcurl, for the fabric client and for the
// fabric manager's calls to host agents.
#ifndef CXLKV_FABRIC_HTTP_CLIENT_H_
#define CXLKV_FABRIC_HTTP_CLIENT_H_

#include <string>

#include "cxlkv/status.h"

namespace cxlkv::fabric::internal {

struct HttpOptions {
  std::string username, password;  // both set: HTTP basic auth
  std::string ca_file;             // TLS trust anchor ("" = system store)
  bool insecure = false;           // skip TLS peer verification
  int timeout_ms = 10000;          // whole request
};

struct HttpResponse {
  long status = 0;
  std::string body;
};

// Sends `body` (JSON, may be empty) with `method` to `url`. Any HTTP status
// is OK here; IOError "<method> <url>: <curl error>" when no answer came.
Status HttpDo(const HttpOptions& opt, const std::string& method, const std::string& url,
              const std::string& body, HttpResponse* resp);

}  // namespace cxlkv::fabric::internal

#endif  // CXLKV_FABRIC_HTTP_CLIENT_H_
