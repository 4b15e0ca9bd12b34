// Copyright cxlkv authors.
#include "http.h"

#include <fstream>
#include <sstream>

namespace cxlkv::kube::internal {

Transport::Transport(const Config& config, const ClientOptions& options)
    : config_(config), options_(options) {}

Transport::~Transport() = default;

Status Transport::AuthHeader(std::string* out) const {
  out->clear();
  std::string token = config_.token;
  if (!config_.token_file.empty()) {
    // Service-account tokens rotate; read the file for every request.
    std::ifstream f(config_.token_file);
    if (!f) {
      return Status::Error(Status::Code::kInvalidArgument,
                           "read token " + config_.token_file + ": cannot open");
    }
    std::ostringstream ss;
    ss << f.rdbuf();
    token = ss.str();
    while (!token.empty() && (token.back() == '\n' || token.back() == ' ')) token.pop_back();
  }
  if (!token.empty()) *out = "Authorization: Bearer " + token;
  return Status::OK();
}

Status Transport::Do(const HttpRequest& req, HttpResponse* resp) {
  resp->status = 0;
  resp->body.clear();
  std::string auth;
  Status s = AuthHeader(&auth);
  if (!s.ok()) return s;

  base::HttpRequest r;
  r.method = req.method;
  r.url = config_.server + req.path_and_query;
  if (!auth.empty()) r.headers.push_back(std::move(auth));
  r.content_type = req.content_type;
  r.body = req.body;
  r.timeout_ms = req.timeout_ms;
  r.connect_timeout_ms = options_.connect_timeout_ms;
  r.user_agent = options_.user_agent;
  r.ca_pem = config_.ca_pem;
  r.client_cert_pem = config_.client_cert_pem;
  r.client_key_pem = config_.client_key_pem;
  r.proxy_from_environment = true;
  r.on_data = req.on_data;
  r.stop = req.stop;
  base::HttpResponse out;
  const cxlkv::Status done = http_.Do(r, &out);
  resp->status = static_cast<int>(out.status);
  resp->body = std::move(out.body);
  if (out.cancelled) {
    return Status::Error(Status::Code::kCancelled,
                         req.method + " " + req.path_and_query + ": stopped");
  }
  if (!done.ok()) return Status::Error(Status::Code::kTransport, done.message());
  return Status::OK();
}

Status ErrorFromResponse(const HttpResponse& resp) {
  std::string reason, message;
  Json j = Json::parse(resp.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.value("kind", "") == "Status") {
    reason = j.value("reason", "");
    message = j.value("message", "");
  } else {
    message = resp.body.substr(0, 512);
  }
  return Status::FromHttp(resp.status, reason, message);
}

}  // namespace cxlkv::kube::internal
