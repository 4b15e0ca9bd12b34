// Copyright cxlkv authors.
#include "kubeletplugin/health.h"

#include <algorithm>
#include <ctime>
#include <map>
#include <set>

namespace cxlkv::dra {

HealthMonitor::HealthMonitor(DeviceState* state, const hostd::Client* hostd,
                             std::chrono::milliseconds interval)
    : state_(state), hostd_(hostd), interval_(interval) {}

HealthMonitor::~HealthMonitor() { Stop(); }

void HealthMonitor::Start() {
  std::lock_guard<std::mutex> l(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void HealthMonitor::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t HealthMonitor::timeout_seconds() const {
  auto s = std::chrono::duration_cast<std::chrono::seconds>(interval_ * 3).count();
  return std::max<int64_t>(s, 1);
}

void HealthMonitor::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    l.unlock();
    CheckNow();
    l.lock();
    cv_.wait_for(l, interval_, [this] { return stop_; });
  }
}

void HealthMonitor::CheckNow() {
  std::vector<hostd::HostRegion> regions;
  Status hs = hostd_->List(&regions);
  std::set<std::string> here;
  for (const auto& r : regions) here.insert(r.allocation_id);
  const int64_t now = static_cast<int64_t>(std::time(nullptr));

  // One entry per blade device; Unhealthy wins over Healthy.
  std::map<std::pair<std::string, std::string>, DeviceHealthInfo> by_device;
  for (const auto& e : state_->Prepared()) {
    if (e.state != PrepareState::kPrepareCompleted) continue;
    for (const auto& d : e.devices) {
      auto& h = by_device[{d.pool_name, d.device_name}];
      if (h.pool_name.empty()) {
        h.pool_name = d.pool_name;
        h.device_name = d.device_name;
        h.health = DeviceHealthInfo::Health::kHealthy;
        h.updated_unix = now;
      }
      std::string why;
      if (!hs.ok()) {
        why = "hostd unreachable: " + hs.message();
      } else if (!here.count(e.memory_id)) {
        why = "region " + e.memory_id + " of claim " + e.ns + "/" + e.name +
              " is no longer materialized on this host";
      }
      if (!why.empty()) {
        h.health = DeviceHealthInfo::Health::kUnhealthy;
        if (h.message.find(why) == std::string::npos) {
          h.message += (h.message.empty() ? "" : "; ") + why;
        }
      }
    }
  }
  std::vector<DeviceHealthInfo> list;
  for (auto& [k, h] : by_device) {
    // The kubelet keeps at most 1024 characters; cut here so the cut is ours.
    if (h.message.size() > 1024) h.message = h.message.substr(0, 1021) + "...";
    list.push_back(std::move(h));
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    devices_ = std::move(list);
    ++published_;
  }
  cv_.notify_all();
}

bool HealthMonitor::Wait(uint64_t* seen, std::vector<DeviceHealthInfo>* devices,
                         const std::function<bool()>& stop, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> l(mu_);
  while (published_ <= *seen) {
    if (stop_ || stop() || std::chrono::steady_clock::now() >= deadline) return false;
    // Short waits: `stop` (a cancelled stream) cannot signal the condition.
    cv_.wait_for(l, std::chrono::milliseconds(200));
  }
  *seen = published_;
  *devices = devices_;
  return true;
}

}  // namespace cxlkv::dra
