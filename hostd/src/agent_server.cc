// Copyright cxlkv authors.
#include "cxlkv/hostd/agent_server.h"

#include <httplib.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cxlkv/base/daemon.h"
#include "cxlkv/base/http_routes.h"
#include "cxlkv/base/json.h"
#include "cxlkv/fabric/json_codec.h"
#include "cxlkv/hostd/cdi.h"
#include "wire.h"

namespace cxlkv::hostd {
namespace {

using nlohmann::json;

void Reply(httplib::Response& res, int code, const json& j) {
  res.status = code;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void ReplyStatus(httplib::Response& res, const Status& s) {
  int code = 500;
  if (s.IsNotFound()) code = 404;
  if (s.IsInvalidArgument() || s.IsUnsupported()) code = 400;
  if (s.IsBusy() || s.IsNoSpace()) code = 409;
  Reply(res, code, {{"error", s.message()}});
}

json DeviceJson(const Device& d) { return wire::DeviceToJson(d, CdiDeviceName(d.allocation_id)); }

// The endpoints (the patterns the handlers below are registered with) and
// the body each takes, for the answers the HTTP layer gives before any
// handler runs (base/http_routes.h).
constexpr const char* kRegions = "/cxlkv/v1/regions";
constexpr const char* kRegion = R"(/cxlkv/v1/regions/([^/]+))";
constexpr const char* kSpec = R"(/cxlkv/v1/regions/([^/]+)/spec)";
constexpr const char* kRelease = R"(/cxlkv/v1/regions/([^/]+)/release)";
constexpr const char* kResync = "/cxlkv/v1/resync";

const std::vector<base::HttpEndpoint>& Endpoints() {
  static const std::vector<base::HttpEndpoint> kEndpoints = {
      {"GET", kRegions, base::kNoHttpBody},
      {"PUT", kRegion,
       "a JSON region request, {\"sizeBytes\": N} with optional offsetBytes, assignEpoch and "
       "backingPath, sent with its Content-Length"},
      {"DELETE", kRegion, base::kNoHttpBody},
      {"POST", kSpec, base::kNoHttpBody},
      {"POST", kRelease,
       "an optional JSON object {\"assignEpoch\": N} (the assignment released), sent with its "
       "Content-Length; for none, an empty body (Content-Length: 0)"},
      {"POST", kResync, base::kNoHttpBody},
  };
  return kEndpoints;
}

// The answer for a request no handler answered: cpp-httplib refuses a PUT
// or POST without Content-Length (400) and a path or method it has no
// handler for (404) before any handler runs.
void ReplyUnhandled(const httplib::Request& req, httplib::Response& res) {
  const base::HttpAnswer a = base::AnswerUnhandled(Endpoints(), req.method, req.path,
                                                   req.has_header("Content-Length"), res.status);
  if (!a.allow.empty()) res.set_header("Allow", a.allow);
  Reply(res, a.status, {{"error", a.message}});
}

class HttpAgentServer : public AgentServer {
 public:
  HttpAgentServer() {
    http_.set_keep_alive_max_count(1);
    http_.set_socket_options(base::ListenSocketOptions);  // a taken port is refused
    http_.Put(kRegion, [this](const httplib::Request& req, httplib::Response& res) {
      json body;
      Status s = base::ParseJson(req.body.empty() ? "{}" : req.body, &body);
      if (!s.ok()) return ReplyStatus(res, s);
      RegionRequest r;
      r.allocation_id = req.matches[1];
      s = wire::RegionRequestFromJson(body, &r);
      if (!s.ok()) return ReplyStatus(res, s);
      Device d;
      s = agent_->Materialize(r, &d);
      if (!s.ok()) return ReplyStatus(res, s);
      Reply(res, 200, DeviceJson(d));
    });
    http_.Post(kSpec, [this](const httplib::Request& req, httplib::Response& res) {
      Device d;
      Status s = agent_->RewriteSpec(req.matches[1], &d);
      if (!s.ok()) return ReplyStatus(res, s);
      Reply(res, 200, DeviceJson(d));
    });
    // The DRA kubelet plugin's last unprepare of a region on this host. Body
    // (optional): {"assignEpoch": N}, the assignment it undoes; 409 when
    // the host was assigned again since (superseded: nothing removed).
    http_.Post(kRelease, [this](const httplib::Request& req, httplib::Response& res) {
      json body;
      Status s = base::ParseJson(req.body.empty() ? "{}" : req.body, &body);
      if (s.ok() && !body.is_object())
        s = Status::InvalidArgument("release: body must be an object");
      uint64_t epoch = 0;
      if (s.ok()) s = fabric::OptEpoch(body, "assignEpoch", &epoch);
      if (!s.ok()) return ReplyStatus(res, s);
      ReleaseResult r;
      s = agent_->Release(req.matches[1], epoch, &r);
      // 501: nothing to release through (no fabric manager), not a bad request.
      if (s.IsUnsupported()) return Reply(res, 501, {{"error", s.message()}});
      if (!s.ok()) return ReplyStatus(res, s);
      Reply(res, 200,
            {{"allocationId", req.matches[1]},
             {"unassigned", r.unassigned},
             {"removed", r.removed},
             {"assignEpoch", r.assign_epoch}});
    });
    http_.Delete(kRegion, [this](const httplib::Request& req, httplib::Response& res) {
      Status s = agent_->Remove(req.matches[1]);
      if (!s.ok()) return ReplyStatus(res, s);
      Reply(res, 200, {{"allocationId", req.matches[1]}});
    });
    http_.Get(kRegions, [this](const httplib::Request&, httplib::Response& res) {
      json arr = json::array();
      for (const auto& d : agent_->List()) arr.push_back(DeviceJson(d));
      Reply(res, 200, {{"hostId", agent_->options().host_id}, {"regions", arr}});
    });
    http_.Post(kResync, [this](const httplib::Request&, httplib::Response& res) {
      ResyncResult r;
      Status s = agent_->Resync(&r);
      if (!s.ok()) return ReplyStatus(res, s);
      Reply(res, 200,
            {{"materialized", r.materialized}, {"removed", r.removed}, {"failed", r.failed}});
    });
    http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (res.body.empty()) ReplyUnhandled(req, res);  // else a handler's own answer
    });
  }

  Status Bind(const std::string& host, int port, int* bound_port) override {
    int p = port == 0 ? http_.bind_to_any_port(host.c_str())
                      : (http_.bind_to_port(host.c_str(), port) ? port : -1);
    if (p <= 0) return base::ListenError("--listen", host, port, errno);
    *bound_port = p;
    return Status::OK();
  }
  Status Serve(HostAgent* agent) override {
    // Before the accept loop starts, so every handler sees it.
    agent_ = agent;
    // A Stop (SIGTERM) before the accept loop is up is not lost (ServeGate).
    const bool failed = gate_.Enter() && !http_.listen_after_bind();
    gate_.Exit();
    if (failed) return Status::IOError("serve: listener stopped with an error");
    return Status::OK();
  }
  void Stop() override {
    gate_.Stop([this] { return http_.is_running(); }, [this] { http_.stop(); });
  }

 private:
  HostAgent* agent_ = nullptr;  // set by Serve, before any request is served
  httplib::Server http_;
  base::ServeGate gate_;
};

}  // namespace

std::unique_ptr<AgentServer> AgentServer::Create() { return std::make_unique<HttpAgentServer>(); }

}  // namespace cxlkv::hostd
