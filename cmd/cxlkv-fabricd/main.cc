// Copyright cxlkv authors.
//
// cxlkv-fabricd: a CFM cfm-service compatible fabric-manager emulator.
//   cxlkv-fabricd --config FILE --listen ADDR:PORT
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <thread>

#include "cxlkv/base/daemon.h"
#include "cxlkv/fabricd/config.h"
#include "cxlkv/fabricd/server.h"

int main(int argc, char** argv) {
  CLI::App app{"cxlkv-fabricd: CFM-compatible fabric manager emulator"};
  std::string config_path, listen = "127.0.0.1:8080", log_level = "info";
  app.add_option("--config", config_path, "YAML config (appliances, blades, hosts)")
      ->required()
      ->envname("CXLKV_FABRICD_CONFIG");
  app.add_option("--listen", listen, "ADDR:PORT to serve on")->envname("CXLKV_FABRICD_LISTEN");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->envname("CXLKV_LOG_LEVEL");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));

  std::string host;
  int port = 0;
  cxlkv::Status s = cxlkv::base::ParseListenAddress(listen, &host, &port);
  if (!s.ok()) {
    std::fprintf(stderr, "cxlkv-fabricd: %s\n", s.message().c_str());
    return 2;
  }

  cxlkv::fabric::FabricConfig config;
  s = cxlkv::fabric::LoadFabricConfig(config_path, &config);
  if (!s.ok()) {
    std::fprintf(stderr, "cxlkv-fabricd: %s\n", s.message().c_str());
    return 2;
  }
  // Before any thread starts: one thread alone waits for the stop signals.
  cxlkv::base::StopSignals signals;

  std::unique_ptr<cxlkv::fabric::FabricServer> server;
  int bound = 0;
  s = cxlkv::fabric::FabricServer::Open(config, host, port, &bound, &server);
  if (!s.ok()) {
    std::fprintf(stderr, "cxlkv-fabricd: %s\n", s.message().c_str());
    return 1;
  }
  spdlog::info("cxlkv-fabricd serving on {}:{} ({})", host, bound,
               config.tls_cert.empty() ? "http" : "https");
  // The bound port on stdout, for scripts that asked for port 0.
  std::printf("listening %s:%d\n", host.c_str(), bound);
  std::fflush(stdout);
  signals.Watch([&](int sig) {
    spdlog::info("signal {}: stopping", sig);
    server->Stop();
  });
  s = server->Serve();
  signals.Join();
  if (!s.ok()) {
    std::fprintf(stderr, "cxlkv-fabricd: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
