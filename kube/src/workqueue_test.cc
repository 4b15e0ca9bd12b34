// Copyright cxlkv authors.
#include "cxlkv/kube/workqueue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace cxlkv::kube {
namespace {

using std::chrono::milliseconds;

TEST(WorkQueueTest, AddingAQueuedKeyTwiceQueuesItOnce) {
  WorkQueue q;
  q.Add("a");
  q.Add("a");
  q.Add("b");
  EXPECT_EQ(q.Len(), 2u);
  std::string k;
  ASSERT_TRUE(q.Get(&k));
  EXPECT_EQ(k, "a");
}

// A key re-added while a worker holds it is handed out again only after Done,
// so two workers never process one key at once.
TEST(WorkQueueTest, KeyAddedWhileProcessingIsRequeuedAtDone) {
  WorkQueue q;
  q.Add("a");
  std::string k;
  ASSERT_TRUE(q.Get(&k));
  q.Add("a");
  EXPECT_EQ(q.Len(), 0u);  // not handed out twice
  q.Done("a");
  EXPECT_EQ(q.Len(), 1u);
  ASSERT_TRUE(q.Get(&k));
  EXPECT_EQ(k, "a");
  q.Done("a");
  EXPECT_EQ(q.Len(), 0u);
}

TEST(WorkQueueTest, PerKeyBackoffDoublesUpToMaxAndForgetResets) {
  WorkQueueOptions o;
  o.base_delay = milliseconds(10);
  o.max_delay = milliseconds(50);
  WorkQueue q(o);
  EXPECT_EQ(q.PerKeyDelay("a"), milliseconds(10));
  q.AddRateLimited("a");
  EXPECT_EQ(q.PerKeyDelay("a"), milliseconds(20));
  q.AddRateLimited("a");
  EXPECT_EQ(q.PerKeyDelay("a"), milliseconds(40));
  q.AddRateLimited("a");
  EXPECT_EQ(q.PerKeyDelay("a"), milliseconds(50));
  EXPECT_EQ(q.NumRequeues("a"), 3);
  EXPECT_EQ(q.PerKeyDelay("b"), milliseconds(10));  // keys back off independently
  q.Forget("a");
  EXPECT_EQ(q.NumRequeues("a"), 0);
  EXPECT_EQ(q.PerKeyDelay("a"), milliseconds(10));
}

// A rate-limited key is not ready before its delay (checked with a delay long
// enough that the test cannot pass by accident) and is ready afterwards.
TEST(WorkQueueTest, RateLimitedKeyWaitsForItsDelay) {
  WorkQueueOptions o;
  o.base_delay = milliseconds(300);
  WorkQueue q(o);
  q.AddRateLimited("slow");
  q.Add("fast");
  std::string k;
  ASSERT_TRUE(q.Get(&k));
  EXPECT_EQ(k, "fast");
  EXPECT_EQ(q.Len(), 0u);  // "slow" still delayed
  ASSERT_TRUE(q.Get(&k));  // blocks until the delay passed
  EXPECT_EQ(k, "slow");
}

TEST(WorkQueueTest, TokenBucketDelaysBeyondBurst) {
  WorkQueueOptions o;
  o.base_delay = milliseconds(0);
  o.qps = 1;
  o.burst = 2;
  // The third add is about 1 s away, so "two ready, then none" holds only
  // while that second lasts: a run the machine stalled past it (a loaded
  // ThreadSanitizer run) says nothing either way and is done again, on a
  // fresh queue, instead of failing. A queue that did not delay the third
  // key fails every run, stalled or not.
  for (int run = 0; run < 5; ++run) {
    WorkQueue q(o);
    const auto t0 = std::chrono::steady_clock::now();
    q.AddRateLimited("a");
    q.AddRateLimited("b");
    q.AddRateLimited("c");  // third within the burst window: about 1 s away
    const size_t ready_after_adds = q.Len();
    std::string k;
    ASSERT_TRUE(q.Get(&k));
    ASSERT_TRUE(q.Get(&k));
    const size_t ready_after_gets = q.Len();
    if (std::chrono::steady_clock::now() - t0 >= milliseconds(900)) continue;  // stalled
    EXPECT_EQ(ready_after_adds, 2u) << "the key beyond the burst was not delayed";
    EXPECT_EQ(ready_after_gets, 0u);
    ASSERT_TRUE(q.Get(&k));
    EXPECT_EQ(k, "c");
    return;
  }
  FAIL() << "5 runs in a row were stalled past the 1 s delay";
}

TEST(WorkQueueTest, ShutDownWakesBlockedGet) {
  WorkQueue q;
  std::atomic<bool> returned{false};
  bool got = true;
  std::thread t([&] {
    std::string k;
    got = q.Get(&k);
    returned = true;
  });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(returned);
  q.ShutDown();
  t.join();
  EXPECT_FALSE(got);
  q.Add("x");  // dropped after shutdown
  EXPECT_EQ(q.Len(), 0u);
}

TEST(WorkQueueTest, ManyWorkersEachKeyProcessedByOneAtATime) {
  WorkQueue q;
  std::atomic<int> in_a{0}, max_in_a{0}, processed{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      std::string k;
      while (q.Get(&k)) {
        if (k == "a") {
          int now = ++in_a;
          int m = max_in_a;
          while (now > m && !max_in_a.compare_exchange_weak(m, now)) {
          }
          std::this_thread::sleep_for(milliseconds(1));
          --in_a;
        }
        ++processed;
        q.Done(k);
      }
    });
  }
  for (int i = 0; i < 200; ++i) {
    q.Add("a");
    q.Add("k" + std::to_string(i));
    if (i % 10 == 0) std::this_thread::sleep_for(milliseconds(1));
  }
  while (q.Len() > 0) std::this_thread::sleep_for(milliseconds(5));
  std::this_thread::sleep_for(milliseconds(50));
  q.ShutDown();
  for (auto& t : workers) t.join();
  EXPECT_EQ(max_in_a.load(), 1);
  EXPECT_GE(processed.load(), 201);
}

}  // namespace
}  // namespace cxlkv::kube
