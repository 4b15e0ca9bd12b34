// Copyright cxlkv authors.
#include "common/status_server.h"

#include <httplib.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "cxlkv/base/daemon.h"

namespace cxlkv::dra {

struct StatusServer::Rep {
  httplib::Server http;
  base::ServeGate gate;  // a Stop right after Start is not lost
  std::thread thread;
  bool stopped = false;
};

StatusServer::StatusServer(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
StatusServer::~StatusServer() { Stop(); }

Status StatusServer::Start(const std::string& listen, Metrics* metrics, HealthCheck check,
                           std::unique_ptr<StatusServer>* out, int* bound_port) {
  Endpoint healthz = [check] {
    std::string why = check ? check() : "";
    return Reply{why.empty() ? 200 : 503, "text/plain; charset=utf-8",
                 why.empty() ? "ok\n" : why + "\n"};
  };
  return Start(listen, metrics, {{"/healthz", healthz}}, out, bound_port);
}

Status StatusServer::Start(const std::string& listen, Metrics* metrics,
                           const std::map<std::string, Endpoint>& endpoints,
                           std::unique_ptr<StatusServer>* out, int* bound_port) {
  std::string host;
  int port = 0;
  CXLKV_RETURN_IF_ERROR(base::ParseListenAddress(listen, &host, &port));
  if (host.empty()) host = "0.0.0.0";  // ":9090": every address
  auto rep = std::make_unique<Rep>();
  rep->http.set_socket_options(base::ListenSocketOptions);  // a taken port is refused
  rep->http.Get("/metrics", [metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  for (const auto& [path, endpoint] : endpoints) {
    rep->http.Get(path, [endpoint](const httplib::Request&, httplib::Response& res) {
      Reply r = endpoint();
      res.status = r.code;
      res.set_content(r.body, r.content_type);
    });
  }
  int p = port == 0 ? rep->http.bind_to_any_port(host.c_str())
                    : (rep->http.bind_to_port(host.c_str(), port) ? port : -1);
  if (p <= 0) {
    return base::ListenError("--metrics-listen (controller) or --http-listen (kubelet plugin)",
                             host, port, errno)
        .WithContext("status server");
  }
  *bound_port = p;
  Rep* r = rep.get();
  rep->thread = std::thread([r] {
    if (r->gate.Enter()) r->http.listen_after_bind();
    r->gate.Exit();
  });
  out->reset(new StatusServer(std::move(rep)));
  return Status::OK();
}

void StatusServer::Stop() {
  if (!rep_ || rep_->stopped) return;
  rep_->stopped = true;
  Rep* r = rep_.get();
  r->gate.Stop([r] { return r->http.is_running(); }, [r] { r->http.stop(); });
  if (rep_->thread.joinable()) rep_->thread.join();
}

}  // namespace cxlkv::dra
