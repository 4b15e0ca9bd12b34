// Copyright cxlkv authors.
//
// Smoke test of the DRA path through the real kube-scheduler: a pod that
// references a ResourceClaim stays unscheduled while no device matches, and
// is bound to a fake node once a ResourceSlice for that node is published.
// The slice is trivial and published by the test; no driver is involved.
#include <gtest/gtest.h>

#include <cstdlib>

#include "cxlkv/kube/typed.h"
#include "testing/e2e_env.h"

namespace cxlkv::kube {
namespace {

using std::chrono::seconds;
using testing::E2ETest;

class DraSmokeE2ETest : public E2ETest {
 protected:
  void TearDown() override {
    Json ignored;
    DeleteOptions now;
    now.grace_period_seconds = 0;
    if (!pod_.empty()) (void)PodClient(client_.get(), ns_).Delete(pod_, now);
    if (!slice_.empty()) (void)ResourceSliceClient(client_.get()).Delete(slice_);
    if (!class_.empty()) (void)DeviceClassClient(client_.get()).Delete(class_);
    E2ETest::TearDown();
  }
  std::string pod_, slice_, class_;
};

TEST_F(DraSmokeE2ETest, PodWithClaimIsScheduledOnceASliceExists) {
  const std::string driver = UniqueName("smoke") + ".e2e.cxlkv.dev";
  const std::string node = "fake-node-0";
  class_ = UniqueName("smoke-class");
  slice_ = UniqueName("smoke-slice");
  pod_ = "consumer";
  Json out;
  Status s =
      DeviceClassClient(client_.get())
          .Create({{"metadata", {{"name", class_}}},
                   {"spec",
                    {{"selectors",
                      Json::array(
                          {{{"cel", {{"expression", "device.driver == \"" + driver + "\""}}}}})}}}},
                  &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = ResourceClaimClient(client_.get(), ns_)
          .Create(
              {{"metadata", {{"name", "mem"}}},
               {"spec",
                {{"devices",
                  {{"requests", Json::array({{{"name", "region"},
                                              {"exactly", {{"deviceClassName", class_}}}}})}}}}}},
              &out);
  ASSERT_TRUE(s.ok()) << s.ToString();

  Json sa;
  ASSERT_TRUE(Eventually(
      [&] {
        return client_
            ->Get(ResourceType{"", "v1", "serviceaccounts", "ServiceAccount", true}, ns_, "default",
                  &sa)
            .ok();
      },
      seconds(60)));
  ResourceClient pods = PodClient(client_.get(), ns_);
  s = pods.Create(
      {{"metadata", {{"name", pod_}}},
       {"spec",
        {{"automountServiceAccountToken", false},
         {"resourceClaims", Json::array({{{"name", "mem"}, {"resourceClaimName", "mem"}}})},
         {"containers",
          Json::array({{{"name", "c"},
                        {"image", "registry.k8s.io/pause:3.10"},
                        {"resources", {{"claims", Json::array({{{"name", "mem"}}})}}}}})}}}},
      &out);
  ASSERT_TRUE(s.ok()) << s.ToString();

  // No device yet: the scheduler reports the pod unschedulable.
  Json pod;
  ASSERT_TRUE(Eventually(
      [&] {
        if (!pods.Get(pod_, &pod).ok()) return false;
        for (const auto& c : pod["status"].value("conditions", Json::array())) {
          if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "False")
            return true;
        }
        return false;
      },
      seconds(60)))
      << pod.dump();
  EXPECT_EQ(pod["spec"].value("nodeName", ""), "");

  s = ResourceSliceClient(client_.get())
          .Create(
              {{"metadata", {{"name", slice_}}},
               {"spec",
                {{"driver", driver},
                 {"nodeName", node},
                 {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
                 {"devices", Json::array({{{"name", "region-0"},
                                           {"attributes", {{"type", {{"string", "cxl-mem"}}}}},
                                           {"capacity", {{"memory", {{"value", "64Gi"}}}}}}})}}}},
              &out);
  ASSERT_TRUE(s.ok()) << s.ToString();

  ASSERT_TRUE(Eventually(
      [&] { return pods.Get(pod_, &pod).ok() && !pod["spec"].value("nodeName", "").empty(); },
      seconds(90)))
      << pod.dump();
  EXPECT_EQ(pod["spec"]["nodeName"], node);

  Json claim;
  ASSERT_TRUE(ResourceClaimClient(client_.get(), ns_).Get("mem", &claim).ok());
  const Json& results = claim["status"]["allocation"]["devices"]["results"];
  ASSERT_EQ(results.size(), 1u) << claim.dump();
  EXPECT_EQ(results[0]["driver"], driver);
  EXPECT_EQ(results[0]["device"], "region-0");
  EXPECT_EQ(results[0]["pool"], node);
  ASSERT_EQ(claim["status"]["reservedFor"].size(), 1u);
  EXPECT_EQ(claim["status"]["reservedFor"][0]["uid"], pod["metadata"]["uid"]);
}

// The consumable-capacity fields survive a round trip exactly when the
// DRAConsumableCapacity gate is on; with it off the apiserver drops them
// silently (which a driver must detect by comparing what it wrote).
TEST_F(DraSmokeE2ETest, ConsumableCapacityFieldsFollowTheGate) {
  const char* gates = std::getenv("CXLKV_E2E_GATES");
  ASSERT_NE(gates, nullptr) << "CXLKV_E2E_GATES comes from cluster.sh env";
  const bool on = std::string(gates).find("DRAConsumableCapacity=true") != std::string::npos;
  slice_ = UniqueName("cc-slice");
  Json out;
  Status s =
      ResourceSliceClient(client_.get())
          .Create({{"metadata", {{"name", slice_}}},
                   {"spec",
                    {{"driver", "cc.e2e.cxlkv.dev"},
                     {"allNodes", true},
                     {"pool", {{"name", slice_}, {"generation", 1}, {"resourceSliceCount", 1}}},
                     {"devices",
                      Json::array(
                          {{{"name", "region-0"},
                            {"allowMultipleAllocations", true},
                            {"capacity",
                             {{"memory",
                               {{"value", "512Gi"},
                                {"requestPolicy",
                                 {{"default", "16Gi"},
                                  {"validRange", {{"min", "1Gi"}, {"step", "1Gi"}}}}}}}}}}})}}}},
                  &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const Json& dev = out["spec"]["devices"][0];
  EXPECT_EQ(dev.value("allowMultipleAllocations", false), on) << dev.dump();
  EXPECT_EQ(dev["capacity"]["memory"].contains("requestPolicy"), on) << dev.dump();
}

}  // namespace
}  // namespace cxlkv::kube
