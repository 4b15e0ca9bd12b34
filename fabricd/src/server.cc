// Copyright cxlkv authors.
//
// HTTP(S) front end: listening, basic auth, injected faults, error bodies.
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <regex>
#include <set>
#include <thread>

#include "cxlkv/base/daemon.h"
#include "cxlkv/base/json.h"
#include "cxlkv/fabric/json_codec.h"
#include "server_internal.h"

namespace cxlkv::fabric {

Status FabricServer::Open(const FabricConfig& config, const std::string& host, int port,
                          int* bound_port, std::unique_ptr<FabricServer>* out) {
  auto server = std::make_unique<internal::HttpFabricServer>(config);
  // The port before the state: recovery rolls back compositions and removes
  // backing files no region owns, which a second daemon started by mistake
  // on a running one's state must not do to it.
  CXLKV_RETURN_IF_ERROR(server->Bind(host, port, bound_port));
  std::unique_ptr<internal::FabricManager> m;
  CXLKV_RETURN_IF_ERROR(internal::FabricManager::Open(config, &m));
  server->Attach(std::move(m));
  *out = std::move(server);
  return Status::OK();
}

namespace internal {

using nlohmann::json;

void ReplyJson(httplib::Response& res, int code, const json& body) {
  res.status = code;
  // Error details may echo request bytes that are not UTF-8; replace them
  // rather than throw.
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

namespace {
const char* Reason(int code) {
  switch (code) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 422:
      return "Unprocessable Entity";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return code < 500 ? "Client Error" : "Server Error";
  }
}
}  // namespace

void ReplyError(const httplib::Request& req, httplib::Response& res, int code,
                const std::string& details) {
  const char* msg = Reason(code);
  ReplyJson(
      res, code,
      {{"uri", req.path}, {"details", details}, {"status", {{"code", code}, {"message", msg}}}});
}

void ReplyStatus(const httplib::Request& req, httplib::Response& res, const Status& s) {
  int code = 500;
  switch (s.code()) {
    case Status::Code::kNotFound:
      code = 404;
      break;
    case Status::Code::kInvalidArgument:
    case Status::Code::kUnsupported:
      code = 400;
      break;
    case Status::Code::kBusy:
    case Status::Code::kNoSpace:
      code = 409;
      break;
    default:
      code = 500;
  }
  if (code == 500) spdlog::error("{} {}: {}", req.method, req.path, s.ToString());
  ReplyError(req, res, code, s.message());
}

bool ParseBody(const httplib::Request& req, httplib::Response& res, json* out) {
  Status s = base::ParseJson(req.body.empty() ? "{}" : req.body, out);
  if (!s.ok()) {
    ReplyError(req, res, 400, s.message());
    return false;
  }
  if (!out->is_object()) {
    ReplyError(req, res, 400, "request body must be a JSON object");
    return false;
  }
  return true;
}

namespace {
std::string Base64(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}
}  // namespace

HttpFabricServer::HttpFabricServer(const FabricConfig& config) : config_(config) {
  if (!config_.tls_cert.empty()) {
    http_ = std::make_unique<httplib::SSLServer>(config_.tls_cert.c_str(), config_.tls_key.c_str());
  } else {
    http_ = std::make_unique<httplib::Server>();
  }
  http_->set_socket_options(base::ListenSocketOptions);  // a taken port is refused
  if (!config_.username.empty()) {
    expected_auth_ = "Basic " + Base64(config_.username + ":" + config_.password);
  }
  // One request per connection: httplib keeps a connection alive after a
  // request line it could not parse, and the unread body of that request
  // would then be read as the next request.
  http_->set_keep_alive_max_count(1);
  InstallRoutes();
}

void HttpFabricServer::InstallRoutes() {
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!expected_auth_.empty() && req.get_header_value("Authorization") != expected_auth_) {
      res.set_header("WWW-Authenticate", "Basic realm=\"cfm-service\"");
      ReplyError(req, res, 401, "authentication required");
      return httplib::Server::HandlerResponse::Handled;
    }
    // Fault injection never applies to its own control endpoint.
    FaultRule rule;
    if (req.path.rfind("/cxlkv/v1/faults", 0) != 0 &&
        manager_->MatchFault(req.method, req.path, &rule)) {
      if (rule.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(rule.delay_ms));
      if (rule.status != 0) {
        ReplyError(req, res, rule.status, "injected fault");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    static const std::set<std::string> kKnown = {"GET",   "HEAD",   "POST",   "PUT",
                                                 "PATCH", "DELETE", "OPTIONS"};
    if (res.status == 400 && !kKnown.count(req.method)) {
      // httplib refuses methods it does not parse (TRACE, ...) with 400.
      // For methods it does not know at all (QUERY, ...) httplib leaves
      // req.path empty; the raw target still names the resource.
      std::string path = req.path;
      if (path.empty()) path = req.target.substr(0, req.target.find('?'));
      for (const auto& [pattern, allowed] : methods_) {
        if (!std::regex_match(path, std::regex(pattern))) continue;
        std::string allow;
        for (const auto& m : allowed) allow += (allow.empty() ? "" : ", ") + m;
        res.set_header("Allow", allow);
        break;
      }
      ReplyError(req, res, 405, req.method + " is not supported");
    } else if (res.status == 404) {
      ReplyError(req, res, 404, "no such resource: " + req.path);
    } else if (res.status == 400 || res.status == 405 || res.status == 413 || res.status == 414) {
      // A request to an endpoint: say what it takes (a PUT, POST or PATCH
      // without Content-Length is refused 400 before any handler runs), or
      // which methods it is served with.
      const base::HttpAnswer a = base::AnswerUnhandled(
          endpoints_, req.method, req.path, req.has_header("Content-Length"), res.status);
      if (a.status == 404) {
        ReplyError(req, res, res.status,
                   "request rejected by the HTTP layer (status " + std::to_string(res.status) +
                       "); GET /cfm/v1 lists the resources");
      } else {
        if (!a.allow.empty()) res.set_header("Allow", a.allow);
        ReplyError(req, res, a.status, a.message);
      }
    } else {
      ReplyError(req, res, res.status, "HTTP error");
    }
  });
  http_->set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        spdlog::error("{} {}: unhandled exception: {}", req.method, req.path, what);
        ReplyError(req, res, 500, "internal error: " + what);
      });
  On("GET", "/", [](const httplib::Request&, httplib::Response& res) {
    ReplyJson(res, 200, "cxlkv-fabricd: Composable Fabric Manager Service API emulator");
  });
  On("GET", "/cfm",
     [](const httplib::Request&, httplib::Response& res) { ReplyJson(res, 200, "v1"); });
  On("GET", "/cfm/v1", [](const httplib::Request&, httplib::Response& res) {
    json resources = json::array();
    auto add = [&](const char* uri, const char* methods, const char* d) {
      resources.push_back({{"uri", uri}, {"methods", methods}, {"description", d}});
    };
    add("/cfm/v1/appliances", "GET, POST", "memory appliances");
    add("/cfm/v1/hosts", "GET, POST", "CXL hosts");
    add("/cfm/v1/discover", "GET", "device discovery");
    ReplyJson(res, 200, {{"version", "1.7.0"}, {"resources", resources}});
  });
  InstallApplianceRoutes();
  InstallBladeRoutes();
  InstallMemoryRoutes();
  InstallHostRoutes();
  InstallExtensionRoutes();
  InstallMethodNotAllowed();
}

void HttpFabricServer::On(const std::string& method, const std::string& pattern,
                          httplib::Server::Handler h) {
  On(method, pattern, base::kNoHttpBody, std::move(h));
}

void HttpFabricServer::On(const std::string& method, const std::string& pattern, const char* body,
                          httplib::Server::Handler h) {
  methods_[pattern].insert(method);
  endpoints_.push_back({method, pattern, body});
  if (method == "GET")
    http_->Get(pattern, std::move(h));
  else if (method == "POST")
    http_->Post(pattern, std::move(h));
  else if (method == "PUT")
    http_->Put(pattern, std::move(h));
  else if (method == "PATCH")
    http_->Patch(pattern, std::move(h));
  else if (method == "DELETE")
    http_->Delete(pattern, std::move(h));
}

void HttpFabricServer::InstallMethodNotAllowed() {
  for (const auto& [pattern, allowed] : methods_) {
    std::string allow;
    for (const auto& m : allowed) allow += (allow.empty() ? "" : ", ") + m;
    auto h = [allow](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allow);
      ReplyError(req, res, 405, req.method + " is not allowed here; allowed: " + allow);
    };
    for (const char* m : {"GET", "POST", "PUT", "PATCH", "DELETE"}) {
      if (allowed.count(m)) continue;
      if (std::string(m) == "GET")
        http_->Get(pattern, h);
      else if (std::string(m) == "POST")
        http_->Post(pattern, h);
      else if (std::string(m) == "PUT")
        http_->Put(pattern, h);
      else if (std::string(m) == "PATCH")
        http_->Patch(pattern, h);
      else
        http_->Delete(pattern, h);
    }
    http_->Options(pattern, h);
  }
}

Status HttpFabricServer::Bind(const std::string& host, int port, int* bound_port) {
  if (!http_->is_valid()) {
    return Status::IOError("listen " + host + ":" + std::to_string(port) +
                           ": TLS certificate or key could not be loaded");
  }
  int p = port;
  if (port == 0) {
    p = http_->bind_to_any_port(host.c_str());
  } else if (!http_->bind_to_port(host.c_str(), port)) {
    p = -1;
  }
  if (p <= 0) return base::ListenError("--listen", host, port, errno);
  *bound_port = p;
  return Status::OK();
}

Status HttpFabricServer::Serve() {
  // The gate: a Stop (SIGTERM) that comes before the accept loop is up is
  // not lost (base/daemon.h, ServeGate).
  const bool failed = gate_.Enter() && !http_->listen_after_bind();
  gate_.Exit();
  if (failed) return Status::IOError("serve: listener stopped with an error");
  return Status::OK();
}

void HttpFabricServer::Stop() {
  gate_.Stop([this] { return http_->is_running(); }, [this] { http_->stop(); });
}

}  // namespace internal
}  // namespace cxlkv::fabric
