// Copyright cxlkv authors.
#include "cxlkv/fabric/http_client.h"

#include "cxlkv/base/http.h"

namespace cxlkv::fabric {

Status HttpDo(const HttpOptions& opt, const std::string& method, const std::string& url,
              const std::string& body, HttpResponse* resp) {
  // One client for the process: its idle handles keep the connections to the
  // fabric manager and the host agents open between calls.
  static base::HttpClient* const client = new base::HttpClient();
  base::HttpRequest r;
  r.method = method;
  r.url = url;
  r.content_type = "application/json";
  r.body = body;
  r.timeout_ms = opt.timeout_ms;
  r.ca_file = opt.ca_file;
  r.insecure = opt.insecure;
  r.username = opt.username;
  r.password = opt.password;
  base::HttpResponse out;
  Status s = client->Do(r, &out);
  if (!s.ok()) return s;
  resp->status = out.status;
  resp->body = std::move(out.body);
  return Status::OK();
}

}  // namespace cxlkv::fabric
