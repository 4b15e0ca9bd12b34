// Copyright cxlkv authors.
//
// Client::Watch against the real apiserver: event order, bookmarks flag,
// 410 for a version outside the history window, and the stop flag.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "cxlkv/kube/informer.h"
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
    watch_status = leases.Watch(
        wo,
        [&](const WatchEvent& ev) {
          if (ev.type == "BOOKMARK") return true;
          std::lock_guard<std::mutex> l(mu);
          seen.push_back(ev.type + " " + ev.object["metadata"].value("name", "") + " " +
                         ev.object["spec"].value("holderIdentity", ""));
          return seen.size() < 3;
        },
        &stop);
  });
  Json obj;
  ASSERT_TRUE(
      leases.Create({{"metadata", {{"name", "w"}}}, {"spec", {{"holderIdentity", "one"}}}}, &obj)
          .ok());
  obj["spec"]["holderIdentity"] = "two";
  ASSERT_TRUE(leases.Update(obj, &obj).ok());
  ASSERT_TRUE(leases.Delete("w").ok());
  bool done = Eventually(
      [&] {
        std::lock_guard<std::mutex> l(mu);
        return seen.size() == 3;
      },
      std::chrono::seconds(30));
  stop = true;
  t.join();
  ASSERT_TRUE(done);
  EXPECT_TRUE(watch_status.ok()) << watch_status.ToString();  // ended by the handler
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED w one", "MODIFIED w two", "DELETED w two"}));
}

// A resourceVersion older than the apiserver's watch history is answered
// with 410 Gone (as an HTTP status or as an ERROR event carrying code 410).
// To force it for real: note a version, write once more, restart the
// apiserver (its watch cache then starts after the noted version).
TEST_F(WatchE2ETest, VersionFromBeforeRestartIsGone) {
  ResourceClient leases = LeaseClient(client_.get(), ns_);
  Json obj;
  ASSERT_TRUE(leases.Create({{"metadata", {{"name", "old"}}}}, &obj).ok());
  std::string old_rv = obj["metadata"]["resourceVersion"];
  ASSERT_TRUE(leases.Create({{"metadata", {{"name", "newer"}}}}, &obj).ok());
  ASSERT_EQ(ClusterCommand("restart-apiserver"), 0) << "needs CXLKV_E2E_CLUSTER (cluster.sh env)";

  WatchOptions wo;
  wo.resource_version = old_rv;
  int error_code = 0;
  std::string error_reason;
  std::atomic<bool> stop{false};
  std::thread guard([&] {  // a watch that is not refused would idle forever
    for (int i = 0; i < 300 && !stop; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop = true;
  });
  Status s = leases.Watch(
      wo,
      [&](const WatchEvent& ev) {
        if (ev.type == "ERROR") {
          error_code = ev.object.value("code", 0);
          error_reason = ev.object.value("reason", "");
          return false;
        }
        return true;
      },
      &stop);
  stop = true;
  guard.join();
  EXPECT_TRUE(s.IsGone() || error_code == 410) << s.ToString() << " code " << error_code;
  if (error_code == 410) {
    EXPECT_TRUE(error_reason == "Expired" || error_reason == "Gone") << error_reason;
  }

  // An informer resuming from that version gets the same 410 and relists.
  InformerOptions o;
  o.ns = ns_;
  o.start_resource_version = old_rv;
  Informer inf(client_.get(), Leases(), o, {});
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(std::chrono::seconds(30)));
  auto c = inf.counters();
  EXPECT_GE(c.gone, 1);
  EXPECT_GE(c.lists, 1);
  Json cached;
  EXPECT_TRUE(inf.Get(ns_ + "/old", &cached));
  EXPECT_TRUE(inf.Get(ns_ + "/newer", &cached));
}

TEST_F(WatchE2ETest, StopFlagEndsAnIdleWatch) {
  std::atomic<bool> stop{false};
  Status s;
  std::thread t([&] {
    s = LeaseClient(client_.get(), ns_)
            .Watch(
                {}, [](const WatchEvent&) { return true; }, &stop);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  stop = true;
  t.join();
  EXPECT_TRUE(s.IsCancelled()) << s.ToString();
}

}  // namespace
}  // namespace cxlkv::kube
