// Copyright cxlkv authors.
//
// cxlkv-hostd: materializes composed regions on this host and writes their
// CDI specs.
//   cxlkv-hostd --host-id node-a --listen 127.0.0.1:8091 --fabric http://127.0.0.1:8080
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <thread>

#include "cxlkv/base/daemon.h"
#include "cxlkv/hostd/agent.h"
#include "cxlkv/hostd/agent_server.h"
#include "cxlkv/hostd/devdax.h"

int main(int argc, char** argv) {
  CLI::App app{"cxlkv-hostd: materializes composed regions and writes CDI specs"};
  cxlkv::hostd::AgentOptions opt;
  std::string listen = "127.0.0.1:8091", backend = "file", dev_dir = "/run/cxlkv/dev";
  std::string sysfs_root = "/sys", dev_root = "/dev", log_level = "info";
  int dax_region = 0, resync_interval_s = 30;
  opt.fabric.timeout_ms = 10000;
  uint64_t dax_align = 2 << 20;
  app.add_option("--host-id", opt.host_id, "this host's id at the fabric manager")
      ->required()
      ->envname("CXLKV_HOST_ID");
  app.add_option("--listen", listen, "ADDR:PORT for the fabric manager's calls")
      ->envname("CXLKV_HOSTD_LISTEN");
  app.add_option("--fabric", opt.fabric.base_url, "fabric manager URL (resync)")
      ->envname("CXLKV_FABRIC_URL");
  app.add_option("--fabric-user", opt.fabric.username)->envname("CXLKV_FABRIC_USER");
  app.add_option("--fabric-password", opt.fabric.password)->envname("CXLKV_FABRIC_PASSWORD");
  app.add_option("--fabric-ca", opt.fabric.ca_file)->envname("CXLKV_FABRIC_CA");
  app.add_option("--cdi-dir", opt.cdi.cdi_dir, "CDI spec directory")->envname("CXLKV_CDI_DIR");
  app.add_option("--container-dir", opt.cdi.container_dir,
                 "where a file-backed region appears in containers (\"\" = host path)")
      ->envname("CXLKV_CONTAINER_DIR");
  app.add_option("--coherence", opt.cdi.coherence,
                 "hardware, or software: this host shares the blade's memory with other hosts "
                 "without hardware coherence (CXL 1.1/2.0 multi-host); every CDI spec then "
                 "sets CXL_COHERENCE, CXL_SOFTWARE_PARTITIONS and CXL_SOFTWARE_PARTITION")
      ->envname("CXLKV_COHERENCE");
  app.add_option("--software-hosts", opt.cdi.software_hosts,
                 "coherence=software: the host ids that may write the blade's regions, in "
                 "write-partition order (this host's index is its partition)")
      ->envname("CXLKV_SOFTWARE_HOSTS")
      ->delimiter(',');
  app.add_option("--state-dir", opt.state_dir)->envname("CXLKV_HOSTD_STATE_DIR");
  app.add_option("--backend", backend, "file (emulation) or devdax")
      ->envname("CXLKV_HOSTD_BACKEND");
  app.add_option("--dev-dir", dev_dir, "file backend: per-host region links")
      ->envname("CXLKV_HOSTD_DEV_DIR");
  std::vector<std::string> allowed_backing = {"/dev/shm/cxlkv-fabricd", "/dev/shm/cxlkv-pool"};
  app.add_option("--allowed-backing-dir", allowed_backing,
                 "file backend: directories region files (or pool devices) may come from")
      ->envname("CXLKV_HOSTD_ALLOWED_BACKING")
      ->delimiter(',');
  app.add_option("--sysfs-root", sysfs_root, "devdax backend: sysfs mount")
      ->envname("CXLKV_SYSFS_ROOT");
  app.add_option("--dev-root", dev_root, "devdax backend: where /dev/daxX.Y nodes live")
      ->envname("CXLKV_DEV_ROOT");
  app.add_option("--dax-region", dax_region, "devdax backend: dax region id")
      ->envname("CXLKV_DAX_REGION");
  app.add_option("--dax-align", dax_align, "devdax backend: sub-device alignment in bytes")
      ->envname("CXLKV_DAX_ALIGN");
  app.add_option("--resync-interval", resync_interval_s, "seconds between resyncs (0 = start only)")
      ->envname("CXLKV_RESYNC_INTERVAL");
  app.add_option("--log-level", log_level)->envname("CXLKV_LOG_LEVEL");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));

  std::string host;
  int port = 0;
  if (cxlkv::Status ls = cxlkv::base::ParseListenAddress(listen, &host, &port); !ls.ok()) {
    std::fprintf(stderr, "cxlkv-hostd: %s\n", ls.message().c_str());
    return 2;
  }
  std::unique_ptr<cxlkv::hostd::Materializer> m;
  if (backend == "file") {
    m = std::make_unique<cxlkv::hostd::FileMaterializer>(dev_dir, allowed_backing);
  } else if (backend == "devdax") {
    cxlkv::hostd::DevdaxOptions d;
    d.region_id = dax_region;
    d.align = dax_align;
    d.dev_root = dev_root;
    std::unique_ptr<cxlkv::hostd::DaxBus> bus =
        sysfs_root == "/sys" ? cxlkv::hostd::NewLibDaxctlBus()
                             : cxlkv::hostd::NewSysfsDaxBus(sysfs_root, nullptr);
    m = std::make_unique<cxlkv::hostd::DevdaxMaterializer>(std::move(bus), d);
  } else {
    std::fprintf(stderr, "cxlkv-hostd: --backend %s: expected file or devdax\n", backend.c_str());
    return 2;
  }
  // Before any thread starts: one thread alone waits for the stop signals.
  cxlkv::base::StopSignals signals;

  // The port first: opening the state removes orphan CDI specs and the
  // resync adds and removes devices, which a second daemon started by
  // mistake beside a running one (same dirs, its port taken) must not do.
  auto server = cxlkv::hostd::AgentServer::Create();
  int bound = 0;
  cxlkv::Status s = server->Bind(host, port, &bound);
  if (!s.ok()) {
    std::fprintf(stderr, "cxlkv-hostd: %s\n", s.message().c_str());
    return 1;
  }
  std::unique_ptr<cxlkv::hostd::HostAgent> agent;
  s = cxlkv::hostd::HostAgent::Open(opt, std::move(m), &agent);
  if (!s.ok()) {
    std::fprintf(stderr, "cxlkv-hostd: %s\n", s.message().c_str());
    return 1;
  }
  // First resync before serving: once "listening" is printed, this host's
  // devices match the fabric manager's view (or the manager was unreachable).
  // Calls that come meanwhile wait in the listen backlog.
  {
    cxlkv::hostd::ResyncResult r;
    cxlkv::Status rs = agent->Resync(&r);
    if (!rs.ok() && !rs.IsUnsupported()) spdlog::warn("{}", rs.message());
  }
  std::printf("listening %s:%d\n", host.c_str(), bound);
  std::fflush(stdout);

  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  // Periodic resync (a missed free, a power cycle). A manager that is down
  // is retried next time.
  std::thread resync([&] {
    std::unique_lock<std::mutex> l(mu);
    while (resync_interval_s > 0 &&
           !cv.wait_for(l, std::chrono::seconds(resync_interval_s), [&] { return stopping; })) {
      l.unlock();
      cxlkv::hostd::ResyncResult r;
      cxlkv::Status rs = agent->Resync(&r);
      if (!rs.ok() && !rs.IsUnsupported()) spdlog::warn("{}", rs.message());
      l.lock();
    }
  });
  signals.Watch([&](int) { server->Stop(); });
  s = server->Serve(agent.get());
  {
    std::lock_guard<std::mutex> l(mu);
    stopping = true;
  }
  cv.notify_all();
  resync.join();
  signals.Join();
  return s.ok() ? 0 : 1;
}
