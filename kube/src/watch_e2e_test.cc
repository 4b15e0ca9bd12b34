// Copyright cxlkv authors.
//
// Client::Watch against the real apiserver: event order, bookmarks flag,
// 410 for a version outside the history window, and the stop flag.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "cxlkv/kube/typed.h"
#include "testing/e2e_env.h"

namespace cxlkv::kube {
namespace {

using testing::E2ETest;

class WatchE2ETest : public E2ETest {};

TEST_F(WatchE2ETest, DeliversAddModifyDeleteInOrder) {
  ResourceClient leases = LeaseClient(client_.get(), ns_);
  std::vector<Json> items;
  std::string rv;
  ASSERT_TRUE(leases.ListAll({}, 100, &items, &rv).ok());

  std::mutex mu;
  std::vector<std::string> seen;
  std::atomic<bool> stop{false};
  Status watch_status;
  std::thread t([&] {
    WatchOptions wo;
    wo.resource_version = rv;
    watch_status = leases.Watch(wo, [&](const WatchEvent& ev) {
      if (ev.type == "BOOKMARK") return true;
      std::lock_guard<std::mutex> l(mu);
      seen.push_back(ev.type + " " + ev.object["metadata"].value("name", "") + " " +
                     ev.object["spec"].value("holderIdentity", ""));
      return seen.size() < 3;
    }, &stop);
  });
  Json obj;
  ASSERT_TRUE(leases.Create({{"metadata", {{"name", "w"}}}, {"spec", {{"holderIdentity", "one"}}}}, &obj).ok());
  obj["spec"]["holderIdentity"] = "two";
  ASSERT_TRUE(leases.Update(obj, &obj).ok());
  ASSERT_TRUE(leases.Delete("w").ok());
  bool done = Eventually([&] {
    std::lock_guard<std::mutex> l(mu);
    return seen.size() == 3;
  }, std::chrono::seconds(30));
  stop = true;
  t.join();
  ASSERT_TRUE(done);
  EXPECT_TRUE(watch_status.ok()) << watch_status.ToString();  // ended by the handler
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED w one", "MODIFIED w two", "DELETED w two"}));
}

// A resourceVersion older than the apiserver's watch history is answered
// with 410 Gone (as an HTTP status or as an ERROR event carrying code 410).
TEST_F(WatchE2ETest, TooOldResourceVersionIsGone) {
  ResourceClient leases = LeaseClient(client_.get(), ns_);
  Json obj;
  ASSERT_TRUE(leases.Create({{"metadata", {{"name", "old"}}}}, &obj).ok());
  WatchOptions wo;
  wo.resource_version = "1";
  int error_code = 0;
  std::string error_reason;
  Status s = leases.Watch(wo, [&](const WatchEvent& ev) {
    if (ev.type == "ERROR") {
      error_code = ev.object.value("code", 0);
      error_reason = ev.object.value("reason", "");
      return false;
    }
    return true;
  });
  EXPECT_TRUE(s.IsGone() || error_code == 410) << s.ToString() << " code " << error_code;
  if (error_code == 410) {
    EXPECT_TRUE(error_reason == "Expired" || error_reason == "Gone") << error_reason;
  }
}

TEST_F(WatchE2ETest, StopFlagEndsAnIdleWatch) {
  std::atomic<bool> stop{false};
  Status s;
  std::thread t([&] {
    s = LeaseClient(client_.get(), ns_).Watch({}, [](const WatchEvent&) { return true; }, &stop);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  stop = true;
  t.join();
  EXPECT_TRUE(s.IsCancelled()) << s.ToString();
}

}  // namespace
}  // namespace cxlkv::kube
