// Copyright cxlkv authors.
//
// cxlkv-dra-kubeletplugin: the cxlkv DRA driver's node plugin (a DaemonSet).
// Registers with the kubelet, serves DRAPlugin v1/v1beta1 and
// DRAResourceHealth v1/v1alpha1, prepares claims through the local hostd.
//   cxlkv-dra-kubeletplugin --node-name node-a --hostd-url http://127.0.0.1:8091
// Every flag is also read from the environment variable named in --help.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/metrics.h"
#include "common/status_server.h"
#include "cxlkv/hostd/client.h"
#include "cxlkv/kube/client.h"
#include "cxlkv/kube/config.h"
#include "kubeletplugin/driver.h"
#include "kubeletplugin/health.h"
#include "kubeletplugin/state.h"

int main(int argc, char** argv) {
  CLI::App app{"cxlkv-dra-kubeletplugin: the cxlkv DRA driver's kubelet plugin"};
  cxlkv::dra::DriverOptions dopt;
  cxlkv::dra::StateOptions sopt;
  std::string state_dir = "/var/lib/cxlkv-dra", hostd_url = "http://127.0.0.1:8091";
  std::string kubeconfig, log_level = "info", http_listen = "0.0.0.0:9095";
  int hostd_timeout_ms = 3000, health_interval_ms = 5000, cleanup_interval_s = 600;
  int release_retry_ms = 5000;
  app.add_option("--driver-name", dopt.driver_name, "DRA driver name")
      ->envname("CXLKV_DRA_DRIVER_NAME");
  app.add_option("--node-name", sopt.node_name, "this node's name")
      ->required()
      ->envname("NODE_NAME");
  app.add_option("--kubelet-root-dir", dopt.kubelet_root_dir,
                 "the kubelet's --root-dir (sockets go in plugins_registry/ and plugins/)")
      ->envname("CXLKV_KUBELET_ROOT_DIR");
  app.add_option("--pod-uid", dopt.pod_uid,
                 "this plugin pod's UID: per-pod socket names for rolling updates")
      ->envname("POD_UID");
  app.add_option("--state-dir", state_dir, "where checkpoint.json lives")
      ->envname("CXLKV_DRA_STATE_DIR");
  app.add_option("--hostd-url", hostd_url, "the local cxlkv-hostd")->envname("CXLKV_HOSTD_URL");
  app.add_option("--hostd-timeout-ms", hostd_timeout_ms, "bound on each hostd call")
      ->envname("CXLKV_HOSTD_TIMEOUT_MS");
  app.add_option("--release-retry-ms", release_retry_ms,
                 "period of retrying releases that did not go through (a prepare of the "
                 "region on this node finishes its pending release at once, whatever this is)")
      ->check(CLI::Range(100, 3600000))
      ->envname("CXLKV_DRA_RELEASE_RETRY_MS");
  app.add_option("--cdi-dir", sopt.cdi_dir, "where hostd writes CDI specs (checked on prepare)")
      ->envname("CXLKV_CDI_DIR");
  app.add_option("--kubeconfig", kubeconfig,
                 "kubeconfig file (default: in a pod, its service account; else $KUBECONFIG, "
                 "else ~/.kube/config)")
      ->envname("KUBECONFIG");
  app.add_option("--health-interval-ms", health_interval_ms, "device health check period")
      ->envname("CXLKV_DRA_HEALTH_INTERVAL_MS");
  app.add_option("--cleanup-interval", cleanup_interval_s,
                 "seconds between checks for checkpointed claims that were deleted")
      ->envname("CXLKV_DRA_CLEANUP_INTERVAL");
  app.add_option("--boot-id-file", sopt.boot_id_path, "this boot's id")
      ->envname("CXLKV_BOOT_ID_FILE");
  app.add_option("--http-listen", http_listen,
                 "ADDR:PORT serving /metrics and /healthz (\"\" = off)")
      ->envname("CXLKV_DRA_HTTP_LISTEN");
  app.add_option("--log-level", log_level)->envname("CXLKV_LOG_LEVEL");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  sopt.driver_name = dopt.driver_name;
  sopt.checkpoint_path = state_dir + "/checkpoint.json";
  cxlkv::dra::Metrics metrics;
  cxlkv::dra::DeclarePluginMetrics(&metrics);
  sopt.metrics = &metrics;

  // Block the stop signals before any thread starts; main waits for them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  // --http-listen is bound before the plugin acts: a plugin that cannot
  // have its port (another plugin holds it, e.g. two on the host network
  // with the default) exits before it rewrites the checkpoint, drops the
  // entries of deleted claims (releasing their regions) or starts its
  // driver, which would take over the sockets of a plugin with the same
  // names and remove them at exit, deregistering that plugin. /healthz
  // answers 503 until the driver's sockets are up.
  std::atomic<const cxlkv::dra::Driver*> serving{nullptr};
  std::unique_ptr<cxlkv::dra::StatusServer> status_server;
  if (!http_listen.empty()) {
    int port = 0;
    cxlkv::Status s = cxlkv::dra::StatusServer::Start(
        http_listen, &metrics,
        [&serving]() -> std::string {
          const cxlkv::dra::Driver* d = serving.load();
          return d != nullptr ? d->Check() : "starting: the driver's sockets are not up yet";
        },
        &status_server, &port);
    if (!s.ok()) {
      std::fprintf(stderr, "cxlkv-dra-kubeletplugin: %s\n", s.ToString().c_str());
      return 1;
    }
    spdlog::info("serving /metrics and /healthz on port {}", port);
  }

  cxlkv::kube::Config kcfg;
  cxlkv::kube::Status ks = kubeconfig.empty() ? cxlkv::kube::LoadDefault(&kcfg)
                                              : cxlkv::kube::LoadKubeconfig(kubeconfig, &kcfg);
  if (!ks.ok()) {
    // Outside a pod the default is a kubeconfig file: say how to name one
    // (unless the error already does: a missing file's does).
    const bool outside = kubeconfig.empty() && std::getenv("KUBERNETES_SERVICE_HOST") == nullptr &&
                         ks.message().find("--kubeconfig") == std::string::npos;
    std::fprintf(stderr, "cxlkv-dra-kubeletplugin: kube config: %s%s\n", ks.ToString().c_str(),
                 outside ? " (outside a pod: pass --kubeconfig FILE or set KUBECONFIG)" : "");
    return 1;
  }
  cxlkv::kube::ClientOptions kopt;
  kopt.user_agent = "cxlkv-dra-kubeletplugin/" + sopt.node_name;
  kopt.request_timeout_ms = 10000;  // well under the kubelet's 45 s per call
  std::unique_ptr<cxlkv::kube::Client> kube;
  ks = cxlkv::kube::Client::New(kcfg, kopt, &kube);
  if (!ks.ok()) {
    std::fprintf(stderr, "cxlkv-dra-kubeletplugin: kube client: %s\n", ks.ToString().c_str());
    return 1;
  }
  if (::mkdir(state_dir.c_str(), 0750) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "cxlkv-dra-kubeletplugin: mkdir %s: %s\n", state_dir.c_str(),
                 std::strerror(errno));
    return 1;
  }
  cxlkv::hostd::Client hostd({hostd_url, hostd_timeout_ms});
  std::unique_ptr<cxlkv::dra::DeviceState> state;
  cxlkv::Status s = cxlkv::dra::DeviceState::Open(sopt, kube.get(), &hostd, &state);
  if (!s.ok()) {
    std::fprintf(stderr, "cxlkv-dra-kubeletplugin: %s\n", s.ToString().c_str());
    return 1;
  }
  int dropped = 0;
  s = state->Cleanup(&dropped);
  if (!s.ok()) spdlog::warn("checkpoint cleanup: {}", s.ToString());
  cxlkv::dra::HealthMonitor health(state.get(), &hostd,
                                   std::chrono::milliseconds(health_interval_ms));
  health.Start();
  std::unique_ptr<cxlkv::dra::Driver> driver;
  s = cxlkv::dra::Driver::Start(dopt, state.get(), &health, &driver);
  if (!s.ok()) {
    std::fprintf(stderr, "cxlkv-dra-kubeletplugin: %s\n", s.ToString().c_str());
    return 1;
  }
  serving.store(driver.get());

  // Periodic cleanup of claims deleted behind our back, until a stop signal.
  auto next_cleanup = std::chrono::steady_clock::now() + std::chrono::seconds(cleanup_interval_s);
  auto next_release = std::chrono::steady_clock::now();
  for (;;) {
    struct timespec ts = {1, 0};
    int sig = sigtimedwait(&sigs, nullptr, &ts);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("signal {}: stopping", sig);
      break;
    }
    // Releases that did not go through at unprepare (hostd or the fabric
    // manager down): a few seconds apart, so a node gives back its view soon.
    if (std::chrono::steady_clock::now() >= next_release) {
      (void)state->RetryReleases();
      next_release = std::chrono::steady_clock::now() + std::chrono::milliseconds(release_retry_ms);
    }
    if (cleanup_interval_s > 0 && std::chrono::steady_clock::now() >= next_cleanup) {
      s = state->Cleanup(&dropped);
      if (!s.ok()) spdlog::warn("checkpoint cleanup: {}", s.ToString());
      next_cleanup = std::chrono::steady_clock::now() + std::chrono::seconds(cleanup_interval_s);
    }
  }
  if (status_server) status_server->Stop();
  driver->Stop();
  health.Stop();
  return 0;
}
