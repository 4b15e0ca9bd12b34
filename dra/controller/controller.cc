// Copyright cxlkv authors.
//
// The controller's lifecycle: options, Start (the apiserver's DRA version,
// the feature probe, the status server, the claim informer, the workers,
// the Leases, the resync loop) and Stop.
#include "controller/controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "controller/controller_internal.h"
#include "controller/ownership.h"
#include "cxlkv/base/size.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::dra {

using kube::Json;

Status ParseQuantityBytes(const std::string& q, int64_t* bytes) {
  return base::ParseQuantity(q, bytes);
}

Status CanonicalModes(ControllerOptions* opt) {
  // The names before they said what they do, kept as aliases (docs/dra.md,
  // "Upgrades").
  if (opt->flow == "paper") opt->flow = "prepare-wait";
  if (opt->capacity_mode == "annotation") opt->capacity_mode = "fixed-devices";
  if (opt->flow != "prepare-wait" && opt->flow != "auto" && opt->flow != "binding-conditions") {
    return Status::InvalidArgument("--flow \"" + opt->flow +
                                   "\" ($CXLKV_DRA_FLOW): give binding-conditions, prepare-wait "
                                   "(alias paper) or auto");
  }
  if (opt->capacity_mode != "auto" && opt->capacity_mode != "consumable" &&
      opt->capacity_mode != "fixed-devices") {
    return Status::InvalidArgument("--capacity-mode \"" + opt->capacity_mode +
                                   "\" ($CXLKV_DRA_CAPACITY_MODE): give consumable, "
                                   "fixed-devices (alias annotation) or auto");
  }
  return Status::OK();
}

StatusServer::Reply HealthReply(bool fabric_reachable, bool leader) {
  // Alive and working; the fabric manager's state is reported, not fatal
  // (restarting the controller would not bring it back).
  json j = {{"ok", true}, {"fabricReachable", fabric_reachable}, {"leader", leader}};
  return {200, "application/json", j.dump()};
}

StatusServer::Reply ReadyReply(bool informer_synced, bool owner_lease) {
  // Ready to work claims: the claim informer has listed them all and this
  // replica holds its owner Lease (without it, other replicas would take
  // over whatever it composes).
  const bool ready = informer_synced && owner_lease;
  json j = {{"ready", ready}, {"informerSynced", informer_synced}, {"ownerLease", owner_lease}};
  return {ready ? 200 : 503, "application/json", j.dump()};
}

Status Controller::New(const ControllerOptions& opt, kube::Client* kube, fabric::Composer* composer,
                       std::unique_ptr<Controller>* out) {
  if (opt.identity.empty()) return Status::InvalidArgument("controller identity is required");
  auto rep = std::make_unique<Rep>();
  rep->opt = opt;
  CXLKV_RETURN_IF_ERROR(CanonicalModes(&rep->opt));
  rep->kube = kube;
  rep->composer = composer;
  rep->budget = std::make_unique<NamespaceBudget>(kube, opt.driver_name, opt.lease_namespace);
  kube::Status ks =
      kube::EventRecorder::New(kube, {"cxlkv.dev/dra-controller", opt.identity}, &rep->events);
  if (!ks.ok()) return Status::InvalidArgument("event recorder: " + ks.ToString());
  out->reset(new Controller(std::move(rep)));
  return Status::OK();
}

Controller::Controller(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
Controller::~Controller() { Stop(); }

void Controller::Rep::Event(const json& obj, bool warning, const std::string& reason,
                            const std::string& note) {
  if (events) {
    events->Record(
        obj, warning ? kube::EventRecorder::Type::kWarning : kube::EventRecorder::Type::kNormal,
        reason, reason, note);
  }
}

namespace {

// resource.k8s.io/v1 only: the v1beta* shapes differ and are off by default
// in 1.37; say so rather than fail on the first write.
Status CheckResourceV1(kube::Client* kube) {
  Json group;
  kube::Status ks = kube->Raw("GET", "/apis/resource.k8s.io", "", "", "", &group);
  if (ks.IsNotFound()) {
    return Status::Unsupported(
        "the apiserver does not serve resource.k8s.io "
        "at all: DRA needs Kubernetes 1.34+ "
        "(resource.k8s.io/v1)");
  }
  if (!ks.ok()) return Status::IOError("discover resource.k8s.io: " + ks.ToString());
  std::string served;
  bool v1 = false;
  for (const auto& v : group.value("versions", json::array())) {
    const std::string ver = v.value("version", "");
    served += (served.empty() ? "" : ", ") + ver;
    if (ver == "v1") v1 = true;
  }
  if (!v1) {
    return Status::Unsupported("the apiserver serves resource.k8s.io " +
                               (served.empty() ? std::string("with no versions") : served) +
                               " but not v1; cxlkv needs resource.k8s.io/v1 (Kubernetes 1.34+)");
  }
  return Status::OK();
}

}  // namespace

Status Controller::Start() {
  Rep* r = rep_.get();
  CXLKV_RETURN_IF_ERROR(CheckResourceV1(r->kube));
  if (r->opt.flow == "prepare-wait") r->prepare_wait = true;
  if (r->opt.capacity_mode == "fixed-devices") {
    r->EnterFixedDevices(nullptr, "--capacity-mode fixed-devices");
  }
  if (r->opt.flow == "auto" || r->opt.capacity_mode == "auto") {
    CXLKV_RETURN_IF_ERROR(r->ProbeGates());
  }
  // The words the e2e tests read (test/e2e/dra-gates-off.bats, dra-gates-capacity-off.bats).
  spdlog::info("flow: {}; capacity: {}",
               r->prepare_wait ? "paper (consumer wait, prepare polls)" : "binding conditions",
               r->fixed_devices ? "annotation mode (fixed devices, cxlkv.dev/capacity-mib)"
                                : "consumable (the scheduler accounts memory)");
  if (!r->opt.metrics_listen.empty()) {
    std::map<std::string, StatusServer::Endpoint> endpoints;
    endpoints["/healthz"] = [r] {
      return HealthReply(r->fabric_reachable.load(), r->elector && r->elector->IsLeader());
    };
    endpoints["/readyz"] = [r] {
      const bool started = r->started.load(std::memory_order_acquire);
      return ReadyReply(started && r->informer->HasSynced(), started && r->heartbeat->IsLeader());
    };
    Status ss = StatusServer::Start(r->opt.metrics_listen, r->metrics.registry(), endpoints,
                                    &r->status_server, &r->http_port);
    if (!ss.ok()) return ss.WithContext("metrics");
  }
  kube::InformerHandlers h;
  h.on_add = [r](const Json& o) { r->Enqueue(o); };
  h.on_update = [r](const Json&, const Json& o) { r->Enqueue(o); };
  h.on_delete = [r](const Json& o) { r->Enqueue(o); };
  kube::InformerOptions io;
  io.resync_period = r->opt.resync_period;
  r->informer = std::make_unique<kube::Informer>(r->kube, kube::ResourceClaims(), io, h);
  r->informer->Start();
  for (int i = 0; i < r->opt.workers; ++i) r->threads.emplace_back([r] { r->Worker(); });

  kube::LeaderElectionOptions lo;
  lo.ns = r->opt.lease_namespace;
  lo.lease_name = r->opt.lease_name;
  lo.identity = r->opt.identity;
  lo.lease_duration = r->opt.lease_duration;
  lo.renew_deadline = r->opt.lease_duration * 2 / 3;
  lo.retry_period = std::max<std::chrono::milliseconds>(std::chrono::milliseconds(200),
                                                        r->opt.lease_duration / 7);
  lo.on_started_leading = [r] {
    spdlog::info("{} holds Lease {}/{}: resync and slices run here", r->opt.identity,
                 r->opt.lease_namespace, r->opt.lease_name);
    r->metrics.SetLeader(true);
    {
      std::lock_guard<std::mutex> l(r->mu);
      r->resync_now = true;
    }
    r->cv.notify_all();
  };
  lo.on_stopped_leading = [r] {
    spdlog::warn("{} lost Lease {}/{}", r->opt.identity, r->opt.lease_namespace, r->opt.lease_name);
    r->metrics.SetLeader(false);
  };
  if (!kube::LeaderElector::New(r->kube, lo, &r->elector).ok()) {
    return Status::InvalidArgument("lease options");
  }
  r->elector->Start();
  // The heartbeat: one contender per Lease, so this replica holds it as
  // long as it can renew; a restart under the same name renews it again.
  kube::LeaderElectionOptions ho = lo;
  ho.lease_name = OwnerLeaseName(r->opt.lease_name, r->opt.identity);
  ho.on_started_leading = [r, name = ho.lease_name] {
    spdlog::info("{} renews its owner Lease {}/{}", r->opt.identity, r->opt.lease_namespace, name);
  };
  ho.on_stopped_leading = [r, name = ho.lease_name] {
    spdlog::warn(
        "{} could not renew its owner Lease {}: other replicas may "
        "take its claims",
        r->opt.identity, name);
  };
  if (!kube::LeaderElector::New(r->kube, ho, &r->heartbeat).ok()) {
    return Status::InvalidArgument("owner lease options");
  }
  r->heartbeat->Start();
  r->started.store(true, std::memory_order_release);
  r->threads.emplace_back([r] { r->ResyncLoop(); });
  return Status::OK();
}

void Controller::Rep::ResyncLoop() {
  // While the manager is unreachable: 1 s, 2 s, 4 s, ... up to the period.
  std::chrono::milliseconds wait = opt.resync_period;
  std::chrono::milliseconds backoff{0};
  std::unique_lock<std::mutex> l(mu);
  for (;;) {
    cv.wait_for(l, wait, [this] { return stop || resync_now; });
    if (stop) return;
    resync_now = false;
    wait = opt.resync_period;
    l.unlock();
    // Every replica: its own mode decides claim sizes and QoS.
    ReprobeConsumable();
    if (!elector->IsLeader()) {
      l.lock();
      continue;
    }
    Status s = ResyncPass();
    l.lock();
    if (!s.ok()) spdlog::warn("{}", s.ToString());
    if (fabric_down) {
      backoff = backoff.count() == 0 ? std::chrono::milliseconds(1000) : backoff * 2;
      wait = std::min(backoff, opt.resync_period);
    } else {
      backoff = std::chrono::milliseconds(0);
    }
  }
}

int Controller::metrics_port() const { return rep_->http_port > 0 ? rep_->http_port : 0; }

void Controller::Stop() {
  if (!rep_) return;
  {
    std::lock_guard<std::mutex> l(rep_->mu);
    if (rep_->stop) return;
    rep_->stop = true;
  }
  rep_->cv.notify_all();
  rep_->queue.ShutDown();
  if (rep_->informer) rep_->informer->Stop();
  if (rep_->elector) rep_->elector->Stop();
  // Released on a clean stop: other replicas take this one's claims at once.
  if (rep_->heartbeat) rep_->heartbeat->Stop();
  if (rep_->status_server) rep_->status_server->Stop();
  for (auto& t : rep_->threads) t.join();
  rep_->threads.clear();
  if (rep_->events) rep_->events->Flush(std::chrono::seconds(2));
}

}  // namespace cxlkv::dra
