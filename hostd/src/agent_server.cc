// Copyright cxlkv authors.
#include "cxlkv/hostd/agent_server.h"

#include <httplib.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "cxlkv/base/daemon.h"
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

class HttpAgentServer : public AgentServer {
 public:
  explicit HttpAgentServer(HostAgent* agent) : agent_(agent) {
    http_.set_keep_alive_max_count(1);
    http_.Put(R"(/cxlkv/v1/regions/([^/]+))",
              [this](const httplib::Request& req, httplib::Response& res) {
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
    http_.Post(R"(/cxlkv/v1/regions/([^/]+)/spec)",
               [this](const httplib::Request& req, httplib::Response& res) {
                 Device d;
                 Status s = agent_->RewriteSpec(req.matches[1], &d);
                 if (!s.ok()) return ReplyStatus(res, s);
                 Reply(res, 200, DeviceJson(d));
               });
    // The DRA kubelet plugin's last unprepare of a region on this host. Body
    // (optional): {"assignEpoch": N}, the assignment it undoes; 409 when
    // the host was assigned again since (superseded: nothing removed).
    http_.Post(R"(/cxlkv/v1/regions/([^/]+)/release)",
               [this](const httplib::Request& req, httplib::Response& res) {
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
    http_.Delete(R"(/cxlkv/v1/regions/([^/]+))",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   Status s = agent_->Remove(req.matches[1]);
                   if (!s.ok()) return ReplyStatus(res, s);
                   Reply(res, 200, {{"allocationId", req.matches[1]}});
                 });
    http_.Get("/cxlkv/v1/regions", [this](const httplib::Request&, httplib::Response& res) {
      json arr = json::array();
      for (const auto& d : agent_->List()) arr.push_back(DeviceJson(d));
      Reply(res, 200, {{"hostId", agent_->options().host_id}, {"regions", arr}});
    });
    http_.Post("/cxlkv/v1/resync", [this](const httplib::Request&, httplib::Response& res) {
      ResyncResult r;
      Status s = agent_->Resync(&r);
      if (!s.ok()) return ReplyStatus(res, s);
      Reply(res, 200,
            {{"materialized", r.materialized}, {"removed", r.removed}, {"failed", r.failed}});
    });
    http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (res.body.empty()) Reply(res, res.status, {{"error", "no such endpoint: " + req.path}});
    });
  }

  Status Bind(const std::string& host, int port, int* bound_port) override {
    int p = port == 0 ? http_.bind_to_any_port(host.c_str())
                      : (http_.bind_to_port(host.c_str(), port) ? port : -1);
    if (p <= 0) {
      return Status::IOError("listen " + host + ":" + std::to_string(port) + ": " +
                             std::strerror(errno));
    }
    *bound_port = p;
    return Status::OK();
  }
  Status Serve() override {
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
  HostAgent* const agent_;
  httplib::Server http_;
  base::ServeGate gate_;
};

}  // namespace

std::unique_ptr<AgentServer> AgentServer::Create(HostAgent* agent) {
  return std::make_unique<HttpAgentServer>(agent);
}

}  // namespace cxlkv::hostd
