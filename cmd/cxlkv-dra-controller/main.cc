// Copyright cxlkv authors.
//
// cxlkv-dra-controller: the cxlkv DRA driver's cluster side. Publishes one
// ResourceSlice per blade and composes, materializes and frees the region
// of every ResourceClaim allocated on one (dra/controller/controller.h).
//   cxlkv-dra-controller --fabric http://127.0.0.1:8080 --identity $(hostname)
// Every flag is also read from the environment variable named in --help.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "controller/controller.h"
#include "cxlkv/fabric/client.h"
#include "cxlkv/fabric/local_composer.h"
#include "cxlkv/kube/config.h"

int main(int argc, char** argv) {
  CLI::App app{"cxlkv-dra-controller: ResourceSlices per blade, compose/free per ResourceClaim"};
  cxlkv::dra::ControllerOptions opt;
  cxlkv::fabric::ClientOptions fopt;
  std::string kubeconfig, log_level = "info";
  double resync_period_s = 30, lease_duration_s = 15;
  app.add_option("--driver-name", opt.driver_name)->envname("CXLKV_DRA_DRIVER_NAME");
  app.add_option("--identity", opt.identity, "this replica's name in the owner annotation")
      ->required()
      ->envname("POD_NAME");
  cxlkv::fabric::LocalPoolOptions lopt;
  lopt.name.clear();
  auto* fabric_opt =
      app.add_option("--fabric", fopt.base_url, "fabric manager URL")->envname("CXLKV_FABRIC_URL");
  auto* local_opt =
      app.add_option("--local-pool-dir", lopt.dir,
                     "a node-local pool (tmpfs or hugetlbfs directory) instead of a fabric manager")
          ->envname("CXLKV_LOCAL_POOL_DIR");
  fabric_opt->excludes(local_opt);
  app.add_option("--local-pool-mib", lopt.capacity_mib, "local pool size (0 = the file system's)")
      ->envname("CXLKV_LOCAL_POOL_MIB");
  app.add_option("--local-block-mib", lopt.block_mib, "local pool granularity (0 = fs block)")
      ->envname("CXLKV_LOCAL_BLOCK_MIB");
  app.add_option("--local-pool-name", lopt.name, "local pool (blade) id; default: the node name")
      ->envname("CXLKV_LOCAL_POOL_NAME");
  app.add_option("--local-node", lopt.node_id, "the node the local pool is on")
      ->envname("NODE_NAME");
  app.add_option("--local-state-dir", lopt.state_dir)->envname("CXLKV_LOCAL_STATE_DIR");
  app.add_option("--local-hostd", opt.local_hostd_url, "the node's cxlkv-hostd (local pool)")
      ->envname("CXLKV_HOSTD_URL");
  app.add_option("--fabric-user", fopt.username)->envname("CXLKV_FABRIC_USER");
  app.add_option("--fabric-password", fopt.password)->envname("CXLKV_FABRIC_PASSWORD");
  app.add_option("--fabric-ca", fopt.ca_file)->envname("CXLKV_FABRIC_CA");
  app.add_option("--qos", opt.qos, "DIMM channels interleaved per region (1, 2, 4, 8)")
      ->envname("CXLKV_DRA_QOS");
  app.add_option("--coherence", opt.coherence,
                 "the blades' `coherence` attribute: hardware, or software when their hosts "
                 "share memory without hardware coherence (docs/dra.md)")
      ->envname("CXLKV_DRA_COHERENCE")
      ->check(CLI::IsMember({"hardware", "software"}));
  app.add_option("--workers", opt.workers)->envname("CXLKV_DRA_WORKERS");
  app.add_option("--resync-period,--slice-period", resync_period_s,
                 "seconds between orphan sweeps + slice publications (the Lease holder), and "
                 "between re-checks of owned claims")
      ->envname("CXLKV_DRA_RESYNC_PERIOD");
  app.add_option("--lease-namespace", opt.lease_namespace, "namespace of the singleton-jobs Lease")
      ->envname("POD_NAMESPACE");
  app.add_option("--lease-name", opt.lease_name)->envname("CXLKV_DRA_LEASE_NAME");
  app.add_option("--lease-duration", lease_duration_s, "seconds")
      ->envname("CXLKV_DRA_LEASE_DURATION");
  app.add_option("--owner-lease-gc", opt.owner_lease_gc_durations,
                 "delete a departed replica's heartbeat Lease once unrenewed for this many of "
                 "its durations (the Lease holder's resync; 0 = never)")
      ->check(CLI::NonNegativeNumber)
      ->envname("CXLKV_DRA_OWNER_LEASE_GC");
  app.add_option("--flow", opt.flow,
                 "binding-conditions (the scheduler waits in PreBind), prepare-wait (consumer "
                 "wait + prepare polls, the gate-off flow; alias: paper) or auto")
      ->envname("CXLKV_DRA_FLOW");
  app.add_option("--capacity-mode", opt.capacity_mode,
                 "consumable (one shared device per blade), fixed-devices (sizes from "
                 "cxlkv.dev/capacity-mib; alias: annotation) or auto (fixed devices when the "
                 "apiserver drops consumable-capacity fields)")
      ->envname("CXLKV_DRA_CAPACITY_MODE");
  app.add_option("--metrics-listen", opt.metrics_listen,
                 "host:port for /metrics, /healthz and /readyz (\"\" = off)")
      ->envname("CXLKV_DRA_METRICS_LISTEN");
  app.add_option("--kubeconfig", kubeconfig,
                 "kubeconfig file (default: in a pod, its service account; else $KUBECONFIG, "
                 "else ~/.kube/config)")
      ->envname("KUBECONFIG");
  app.add_option("--log-level", log_level)->envname("CXLKV_LOG_LEVEL");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  opt.resync_period = std::chrono::milliseconds(static_cast<int64_t>(resync_period_s * 1000));
  opt.lease_duration = std::chrono::milliseconds(static_cast<int64_t>(lease_duration_s * 1000));
  // Tests only (test/e2e/dra-controller.bats): see ControllerOptions::failpoint.
  if (const char* fp = std::getenv("CXLKV_DRA_FAILPOINT")) opt.failpoint = fp;
  // The mode names with the other flags, before the kubeconfig, the fabric
  // and the apiserver: a typo is told at once, not after (or hidden by) them.
  if (cxlkv::Status ms = cxlkv::dra::CanonicalModes(&opt); !ms.ok()) {
    std::fprintf(stderr, "cxlkv-dra-controller: %s\n", ms.message().c_str());
    return 2;
  }

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  cxlkv::kube::Config kcfg;
  cxlkv::kube::Status ks = kubeconfig.empty() ? cxlkv::kube::LoadDefault(&kcfg)
                                              : cxlkv::kube::LoadKubeconfig(kubeconfig, &kcfg);
  std::unique_ptr<cxlkv::kube::Client> kube;
  cxlkv::kube::ClientOptions copt;
  copt.user_agent = "cxlkv-dra-controller/" + opt.identity;
  if (ks.ok()) ks = cxlkv::kube::Client::New(kcfg, copt, &kube);
  if (!ks.ok()) {
    // Outside a pod the default is a kubeconfig file: say how to name one
    // (unless the error already does: a missing file's does).
    const bool outside = kubeconfig.empty() && std::getenv("KUBERNETES_SERVICE_HOST") == nullptr &&
                         ks.message().find("--kubeconfig") == std::string::npos;
    std::fprintf(stderr, "cxlkv-dra-controller: kube: %s%s\n", ks.ToString().c_str(),
                 outside ? " (outside a pod: pass --kubeconfig FILE or set KUBECONFIG)" : "");
    return 1;
  }
  std::unique_ptr<cxlkv::fabric::FabricClient> fabric;
  std::unique_ptr<cxlkv::fabric::LocalComposer> local;
  cxlkv::fabric::Composer* composer = nullptr;
  cxlkv::Status s;
  if (fopt.base_url.empty() == (local_opt->count() == 0)) {
    s = cxlkv::Status::InvalidArgument("give exactly one of --fabric and --local-pool-dir");
  } else if (!fopt.base_url.empty()) {
    s = cxlkv::fabric::FabricClient::Open(fopt, &fabric);
    composer = fabric.get();
  } else if (lopt.node_id.empty() || opt.local_hostd_url.empty()) {
    s = cxlkv::Status::InvalidArgument("a local pool needs --local-node and --local-hostd");
  } else {
    if (lopt.name.empty()) lopt.name = lopt.node_id;
    s = cxlkv::fabric::LocalComposer::Open(lopt, &local);
    composer = local.get();
  }
  std::unique_ptr<cxlkv::dra::Controller> ctl;
  if (s.ok()) s = cxlkv::dra::Controller::New(opt, kube.get(), composer, &ctl);
  if (s.ok()) s = ctl->Start();
  if (!s.ok()) {
    std::fprintf(stderr, "cxlkv-dra-controller: %s\n", s.ToString().c_str());
    return 1;
  }
  int sig = 0;
  sigwait(&sigs, &sig);
  spdlog::info("signal {}: stopping", sig);
  ctl->Stop();
  return 0;
}
