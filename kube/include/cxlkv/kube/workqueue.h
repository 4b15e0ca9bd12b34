// Copyright cxlkv authors.
//
// WorkQueue: a rate-limited queue of string keys for controllers.
//
// Per key: Add() queues a key at most once (adding a queued key is a no-op);
// a key handed out by Get() is "processing" until Done(); an Add() while
// processing marks it dirty and it is queued again at Done(), so one key is
// never processed by two workers at once.
// Retry: AddRateLimited() re-adds after max(per-key exponential backoff
// base_delay * 2^failures capped at max_delay, the overall token bucket's
// delay); Forget() resets the key's failure count after a success.
//
// Thread-safety: all methods are thread-safe.
#ifndef CXLKV_KUBE_WORKQUEUE_H_
#define CXLKV_KUBE_WORKQUEUE_H_

#include <chrono>
#include <memory>
#include <string>

namespace cxlkv::kube {

struct WorkQueueOptions {
  // Per-key backoff: first retry after base_delay, doubling per failure, at
  // most max_delay.
  std::chrono::milliseconds base_delay{5};
  std::chrono::milliseconds max_delay{60000};
  // Overall token bucket for rate-limited adds: qps sustained, burst at once.
  double qps = 10;
  int burst = 100;
};

class WorkQueue {
 public:
  explicit WorkQueue(WorkQueueOptions options = {});
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `key` now (see the per-key rules above). Ignored after ShutDown().
  void Add(const std::string& key);
  // Queues `key` once `delay` has passed.
  void AddAfter(const std::string& key, std::chrono::milliseconds delay);
  // Queues `key` after its rate-limit delay and counts one more failure.
  void AddRateLimited(const std::string& key);
  // Clears the failure count of `key` (call after it was processed successfully).
  void Forget(const std::string& key);
  // Failures counted for `key` since the last Forget().
  int NumRequeues(const std::string& key) const;
  // The delay the next AddRateLimited(key) would get from the per-key backoff.
  std::chrono::milliseconds PerKeyDelay(const std::string& key) const;

  // Blocks until a key is ready, fills *key and marks it processing; returns
  // false once ShutDown() was called and the queue is drained.
  bool Get(std::string* key);
  // Marks `key` processed; re-queues it if it was added meanwhile.
  void Done(const std::string& key);
  // Wakes all Get() callers; later adds are dropped.
  void ShutDown();
  // Keys ready to be handed out (not counting delayed ones).
  size_t Len() const;

 private:
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

}  // namespace cxlkv::kube

#endif  // CXLKV_KUBE_WORKQUEUE_H_
