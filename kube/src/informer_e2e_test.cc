// Copyright cxlkv authors.
//
// Informer against the real apiserver: list then watch, handlers, resync,
// relist after a forced 410, and surviving an apiserver restart.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "cxlkv/kube/informer.h"
#include "cxlkv/kube/typed.h"
#include "testing/e2e_env.h"

namespace cxlkv::kube {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::E2ETest;

// Records handler calls as "add x", "update x", "delete x", "resync x".
struct Recorder {
  std::mutex mu;
  std::vector<std::string> calls;
  InformerHandlers Handlers() {
    InformerHandlers h;
    h.on_add = [this](const Json& o) { Push("add " + o["metadata"].value("name", "")); };
    h.on_update = [this](const Json& a, const Json& b) {
      bool same = a["metadata"]["resourceVersion"] == b["metadata"]["resourceVersion"];
      Push((same ? "resync " : "update ") + b["metadata"].value("name", ""));
    };
    h.on_delete = [this](const Json& o) { Push("delete " + o["metadata"].value("name", "")); };
    return h;
  }
  void Push(const std::string& s) {
    std::lock_guard<std::mutex> l(mu);
    calls.push_back(s);
  }
  int Count(const std::string& s) {
    std::lock_guard<std::mutex> l(mu);
    return static_cast<int>(std::count(calls.begin(), calls.end(), s));
  }
};

class InformerE2ETest : public E2ETest {
 protected:
  Status MakeLease(const std::string& name) {
    Json out;
    return LeaseClient(client_.get(), ns_).Create({{"metadata", {{"name", name}}}}, &out);
  }
};

TEST_F(InformerE2ETest, ListsThenWatchesWithHandlers) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(MakeLease("pre-" + std::to_string(i)).ok());
  Recorder rec;
  InformerOptions o;
  o.ns = ns_;
  o.page_size = 2;  // the initial list takes two pages
  Informer inf(client_.get(), Leases(), o, rec.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(seconds(30)));
  EXPECT_EQ(inf.List().size(), 3u);
  EXPECT_EQ(rec.Count("add pre-1"), 1);

  ASSERT_TRUE(MakeLease("live").ok());
  ASSERT_TRUE(Eventually([&] { return rec.Count("add live") == 1; }, seconds(30)));
  Json obj;
  ResourceClient leases = LeaseClient(client_.get(), ns_);
  ASSERT_TRUE(leases.Get("live", &obj).ok());
  obj["spec"]["holderIdentity"] = "x";
  ASSERT_TRUE(leases.Update(obj, &obj).ok());
  ASSERT_TRUE(Eventually([&] { return rec.Count("update live") == 1; }, seconds(30)));
  Json cached;
  ASSERT_TRUE(inf.Get(ns_ + "/live", &cached));
  EXPECT_EQ(cached["spec"]["holderIdentity"], "x");
  ASSERT_TRUE(leases.Delete("live").ok());
  ASSERT_TRUE(Eventually([&] { return rec.Count("delete live") == 1; }, seconds(30)));
  EXPECT_FALSE(inf.Get(ns_ + "/live", &cached));
  inf.Stop();
}

TEST_F(InformerE2ETest, ResyncRedeliversCachedObjects) {
  ASSERT_TRUE(MakeLease("r").ok());
  Recorder rec;
  InformerOptions o;
  o.ns = ns_;
  o.resync_period = milliseconds(300);
  Informer inf(client_.get(), Leases(), o, rec.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(seconds(30)));
  EXPECT_TRUE(Eventually([&] { return rec.Count("resync r") >= 2; }, seconds(30)));
  EXPECT_EQ(rec.Count("add r"), 1);
}

// The apiserver is stopped and started again under a running informer: the
// watch breaks, the informer backs off and reconnects (relisting if its
// version expired), and later changes still arrive.
TEST_F(InformerE2ETest, SurvivesApiserverRestart) {
  ASSERT_TRUE(MakeLease("before").ok());
  ASSERT_TRUE(MakeLease("doomed").ok());
  Recorder rec;
  InformerOptions o;
  o.ns = ns_;
  o.backoff_max = milliseconds(2000);
  Informer inf(client_.get(), Leases(), o, rec.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(seconds(30)));
  auto before = inf.counters();

  ASSERT_EQ(ClusterCommand("restart-apiserver"), 0) << "needs CXLKV_E2E_CLUSTER (cluster.sh env)";

  Json v;
  ASSERT_TRUE(
      Eventually([&] { return client_->Raw("GET", "/readyz", "", "", "", &v).ok(); }, seconds(60)));
  ASSERT_TRUE(MakeLease("after").ok());
  ASSERT_TRUE(LeaseClient(client_.get(), ns_).Delete("doomed").ok());
  EXPECT_TRUE(Eventually([&] { return rec.Count("add after") == 1; }, seconds(60)));
  EXPECT_TRUE(Eventually([&] { return rec.Count("delete doomed") == 1; }, seconds(60)));
  Json cached;
  EXPECT_TRUE(inf.Get(ns_ + "/before", &cached));
  EXPECT_TRUE(inf.Get(ns_ + "/after", &cached));
  auto after = inf.counters();
  EXPECT_GT(after.watches, before.watches) << "the watch was never re-established";
  EXPECT_GE(after.errors, 1) << "the restart did not break the watch";
}

}  // namespace
}  // namespace cxlkv::kube
