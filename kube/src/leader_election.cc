// Copyright cxlkv authors.
#include "cxlkv/kube/leader_election.h"

#include <atomic>
#include <cstdio>
#include <ctime>
#include <thread>

#include "cxlkv/base/mutex.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::kube {

using Clock = std::chrono::steady_clock;

std::string FormatMicroTime(std::chrono::system_clock::time_point t) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  time_t secs = static_cast<time_t>(us / 1000000);
  tm utc{};
  gmtime_r(&secs, &utc);
  char buf[64];
  snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", utc.tm_year + 1900,
           utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
           static_cast<long long>(us % 1000000));
  return buf;
}

struct LeaderElector::Rep {
  Rep(Client* c, LeaderElectionOptions o) : client(c), opts(std::move(o)) {}
  Client* const client;
  const LeaderElectionOptions opts;

  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<bool> leading{false};
  mutable base::Mutex mu;
  base::CondVar cv;
  std::string observed_holder CXLKV_GUARDED_BY(mu);
  // holder + renewTime + duration, to detect change
  std::string observed_record CXLKV_GUARDED_BY(mu);
  Clock::time_point observed_at CXLKV_GUARDED_BY(mu){};
  Clock::time_point last_renew CXLKV_GUARDED_BY(mu){};

  Json LeaseSpec(const Json& prev_spec, bool transition) const;
  bool TryAcquireOrRenew();
  void Release();
  void Run();
  void Observe(const std::string& holder, const std::string& record);
  std::string observed_holder_copy() {
    base::MutexLock l(&mu);
    return observed_holder;
  }
};

Json LeaderElector::Rep::LeaseSpec(const Json& prev, bool transition) const {
  Json spec = prev.is_object() ? prev : Json::object();
  std::string now = FormatMicroTime(std::chrono::system_clock::now());
  spec["holderIdentity"] = opts.identity;
  spec["leaseDurationSeconds"] = std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::seconds>(opts.lease_duration).count());
  spec["renewTime"] = now;
  if (transition || !spec.contains("acquireTime")) {
    spec["acquireTime"] = now;
    spec["leaseTransitions"] = spec.value("leaseTransitions", 0) + (prev.is_object() ? 1 : 0);
  }
  return spec;
}

void LeaderElector::Rep::Observe(const std::string& holder, const std::string& record) {
  bool changed_holder = false;
  {
    base::MutexLock l(&mu);
    if (record != observed_record) {
      observed_record = record;
      observed_at = Clock::now();
    }
    if (holder != observed_holder) {
      observed_holder = holder;
      changed_holder = true;
    }
  }
  if (changed_holder && opts.on_new_leader) opts.on_new_leader(holder);
}

bool LeaderElector::Rep::TryAcquireOrRenew() {
  ResourceClient leases = LeaseClient(client, opts.ns);
  Json lease;
  Status s = leases.Get(opts.lease_name, &lease);
  if (s.IsNotFound()) {
    Json obj = {{"metadata", {{"name", opts.lease_name}, {"namespace", opts.ns}}},
                {"spec", LeaseSpec(Json(), true)}};
    Json created;
    if (!leases.Create(obj, &created).ok()) return false;
    Observe(opts.identity, created["spec"].dump());
    return true;
  }
  if (!s.ok()) return false;
  const Json& spec = lease.contains("spec") ? lease["spec"] : Json::object();
  std::string holder = spec.value("holderIdentity", "");
  Observe(holder, spec.dump());
  if (!holder.empty() && holder != opts.identity) {
    base::MutexLock l(&mu);
    // The record's own lease duration governs, as written by its holder.
    auto dur = std::chrono::seconds(spec.value("leaseDurationSeconds", 15));
    if (Clock::now() < observed_at + dur) return false;
  }
  lease["spec"] = LeaseSpec(spec, holder != opts.identity);
  Json updated;
  if (!leases.Update(lease, &updated).ok()) return false;  // 409: someone else wrote first
  Observe(opts.identity, updated["spec"].dump());
  return true;
}

void LeaderElector::Rep::Release() {
  ResourceClient leases = LeaseClient(client, opts.ns);
  Json lease;
  if (!leases.Get(opts.lease_name, &lease).ok()) return;
  if (lease["spec"].value("holderIdentity", "") != opts.identity) return;
  lease["spec"].erase("holderIdentity");
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = FormatMicroTime(std::chrono::system_clock::now());
  Json ignored;
  (void)leases.Update(lease, &ignored);  // best effort: expiry frees it anyway
}

void LeaderElector::Rep::Run() {
  while (!stop) {
    bool ok = TryAcquireOrRenew();
    auto now = Clock::now();
    if (ok) {
      {
        base::MutexLock l(&mu);
        last_renew = now;
      }
      if (!leading.exchange(true) && opts.on_started_leading) opts.on_started_leading();
    } else if (leading) {
      bool expired;
      {
        base::MutexLock l(&mu);
        expired = now - last_renew >= opts.renew_deadline;
      }
      // Lost the record to another holder, or could not renew in time.
      std::string holder = observed_holder_copy();
      if (expired || (!holder.empty() && holder != opts.identity)) {
        leading = false;
        if (opts.on_stopped_leading) opts.on_stopped_leading();
      }
    }
    const auto deadline = Clock::now() + opts.retry_period;
    base::MutexLock l(&mu);
    while (!stop.load()) {
      if (!cv.WaitUntil(&mu, deadline)) break;
    }
  }
  if (leading) {
    Release();
    leading = false;
    if (opts.on_stopped_leading) opts.on_stopped_leading();
  }
}

Status LeaderElector::New(Client* client, LeaderElectionOptions options,
                          std::unique_ptr<LeaderElector>* out) {
  if (options.lease_name.empty() || options.identity.empty()) {
    return Status::Error(Status::Code::kInvalidArgument,
                         "create leader elector: lease name and identity are required");
  }
  if (options.renew_deadline >= options.lease_duration) {
    return Status::Error(Status::Code::kInvalidArgument,
                         "create leader elector: renew_deadline must be below lease_duration");
  }
  out->reset(new LeaderElector(std::make_unique<Rep>(client, std::move(options))));
  return Status::OK();
}

LeaderElector::LeaderElector(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  rep_->thread = std::thread([r = rep_.get()] { r->Run(); });
}

void LeaderElector::Stop() {
  {
    base::MutexLock l(&rep_->mu);
    rep_->stop = true;
  }
  rep_->cv.SignalAll();
  if (rep_->thread.joinable()) rep_->thread.join();
}

bool LeaderElector::IsLeader() const { return rep_->leading; }

std::string LeaderElector::leader() const {
  base::MutexLock l(&rep_->mu);
  return rep_->observed_holder;
}

}  // namespace cxlkv::kube
