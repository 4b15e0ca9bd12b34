// Copyright cxlkv authors.
#include "cxlkv/kube/workqueue.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "cxlkv/base/mutex.h"

namespace cxlkv::kube {

using Clock = std::chrono::steady_clock;

struct WorkQueue::Rep {
  explicit Rep(WorkQueueOptions o) : opts(o), tokens(o.burst), last_refill(Clock::now()) {}
  const WorkQueueOptions opts;

  mutable base::Mutex mu;
  base::CondVar cv;
  std::deque<std::string> queue CXLKV_GUARDED_BY(mu);
  std::set<std::string> dirty CXLKV_GUARDED_BY(mu);       // queued, or to be re-queued at Done
  std::set<std::string> processing CXLKV_GUARDED_BY(mu);  // handed out, Done not yet called
  std::multimap<Clock::time_point, std::string> delayed CXLKV_GUARDED_BY(mu);
  std::map<std::string, int> failures CXLKV_GUARDED_BY(mu);
  double tokens CXLKV_GUARDED_BY(mu);
  Clock::time_point last_refill CXLKV_GUARDED_BY(mu);
  bool shutting_down CXLKV_GUARDED_BY(mu) = false;

  void AddLocked(const std::string& key) CXLKV_REQUIRES(mu) {
    if (shutting_down || dirty.count(key)) return;
    dirty.insert(key);
    if (processing.count(key)) return;  // re-queued by Done
    queue.push_back(key);
    cv.Signal();
  }
  // Moves due delayed keys into the queue.
  void PromoteDue() CXLKV_REQUIRES(mu) {
    auto now = Clock::now();
    while (!delayed.empty() && delayed.begin()->first <= now) {
      std::string key = delayed.begin()->second;
      delayed.erase(delayed.begin());
      AddLocked(key);
    }
  }
  std::chrono::milliseconds BackoffLocked(const std::string& key) const CXLKV_REQUIRES(mu) {
    auto it = failures.find(key);
    int n = it == failures.end() ? 0 : it->second;
    // Cap the exponent before shifting so the multiplication cannot overflow.
    double d =
        static_cast<double>(opts.base_delay.count()) * static_cast<double>(1ULL << std::min(n, 40));
    return std::chrono::milliseconds(
        static_cast<int64_t>(std::min(d, static_cast<double>(opts.max_delay.count()))));
  }
  // Reserves one token; returns how long until it is ours.
  std::chrono::milliseconds ReserveToken() CXLKV_REQUIRES(mu) {
    auto now = Clock::now();
    double elapsed = std::chrono::duration<double>(now - last_refill).count();
    last_refill = now;
    tokens = std::min<double>(opts.burst, tokens + elapsed * opts.qps);
    tokens -= 1;
    if (tokens >= 0 || opts.qps <= 0) return std::chrono::milliseconds(0);
    return std::chrono::milliseconds(static_cast<int64_t>(-tokens / opts.qps * 1000.0));
  }
};

WorkQueue::WorkQueue(WorkQueueOptions options) : rep_(std::make_unique<Rep>(options)) {}
WorkQueue::~WorkQueue() { ShutDown(); }

void WorkQueue::Add(const std::string& key) {
  base::MutexLock l(&rep_->mu);
  rep_->AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, std::chrono::milliseconds delay) {
  base::MutexLock l(&rep_->mu);
  if (rep_->shutting_down) return;
  if (delay.count() <= 0) {
    rep_->AddLocked(key);
    return;
  }
  rep_->delayed.emplace(Clock::now() + delay, key);
  rep_->cv.SignalAll();  // a Get() may need to wake earlier
}

void WorkQueue::AddRateLimited(const std::string& key) {
  std::chrono::milliseconds d;
  {
    base::MutexLock l(&rep_->mu);
    d = std::max(rep_->BackoffLocked(key), rep_->ReserveToken());
    rep_->failures[key]++;
  }
  AddAfter(key, d);
}

void WorkQueue::Forget(const std::string& key) {
  base::MutexLock l(&rep_->mu);
  rep_->failures.erase(key);
}

int WorkQueue::NumRequeues(const std::string& key) const {
  base::MutexLock l(&rep_->mu);
  auto it = rep_->failures.find(key);
  return it == rep_->failures.end() ? 0 : it->second;
}

std::chrono::milliseconds WorkQueue::PerKeyDelay(const std::string& key) const {
  base::MutexLock l(&rep_->mu);
  return rep_->BackoffLocked(key);
}

bool WorkQueue::Get(std::string* key) {
  base::MutexLock l(&rep_->mu);
  for (;;) {
    rep_->PromoteDue();
    if (!rep_->queue.empty()) break;
    if (rep_->shutting_down) return false;
    if (rep_->delayed.empty()) {
      rep_->cv.Wait(&rep_->mu);
    } else {
      (void)rep_->cv.WaitUntil(&rep_->mu, rep_->delayed.begin()->first);
    }
  }
  *key = rep_->queue.front();
  rep_->queue.pop_front();
  rep_->processing.insert(*key);
  rep_->dirty.erase(*key);
  return true;
}

void WorkQueue::Done(const std::string& key) {
  base::MutexLock l(&rep_->mu);
  rep_->processing.erase(key);
  if (rep_->dirty.count(key)) {
    rep_->queue.push_back(key);
    rep_->cv.Signal();
  }
}

void WorkQueue::ShutDown() {
  base::MutexLock l(&rep_->mu);
  rep_->shutting_down = true;
  rep_->delayed.clear();
  rep_->cv.SignalAll();
}

size_t WorkQueue::Len() const {
  base::MutexLock l(&rep_->mu);
  return rep_->queue.size();
}

}  // namespace cxlkv::kube
