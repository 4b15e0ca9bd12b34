// Copyright cxlkv authors.
//
// The two alpha/beta DRA features cxlkv builds on, through the real
// kube-scheduler: consumable capacity (the scheduler, not a driver loop,
// prevents overcommit of a shared device) and binding conditions (the pod
// waits in PreBind until a controller reports the device attached). Each
// test needs its gate on (CXLKV_E2E_GATES) and skips with the reason if not.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "cxlkv/kube/leader_election.h"  // FormatMicroTime
#include "cxlkv/kube/typed.h"
#include "testing/e2e_env.h"

namespace cxlkv::kube {
namespace {

using std::chrono::seconds;
using testing::E2ETest;

bool GateOn(const std::string& gate) {
  const char* g = std::getenv("CXLKV_E2E_GATES");
  return g != nullptr && std::string(g).find(gate + "=true") != std::string::npos;
}

class DraGatesE2ETest : public E2ETest {
 protected:
  void TearDown() override {
    DeleteOptions now;
    now.grace_period_seconds = 0;
    for (const auto& p : pods_) (void)PodClient(client_.get(), ns_).Delete(p, now);
    if (!slice_.empty()) (void)ResourceSliceClient(client_.get()).Delete(slice_);
    if (!class_.empty()) (void)DeviceClassClient(client_.get()).Delete(class_);
    E2ETest::TearDown();
  }

  // A DeviceClass selecting `driver_`.
  void MakeClass() {
    driver_ = UniqueName("gates") + ".e2e.cxlkv.dev";
    class_ = UniqueName("gates-class");
    Json out;
    Status s =
        DeviceClassClient(client_.get())
            .Create(
                {{"metadata", {{"name", class_}}},
                 {"spec",
                  {{"selectors",
                    Json::array(
                        {{{"cel", {{"expression", "device.driver == \"" + driver_ + "\""}}}}})}}}},
                &out);
    ASSERT_TRUE(s.ok()) << s.ToString();
    Json sa;
    ASSERT_TRUE(Eventually(
        [&] {
          return client_
              ->Get(ResourceType{"", "v1", "serviceaccounts", "ServiceAccount", true}, ns_,
                    "default", &sa)
              .ok();
        },
        seconds(60)));
  }

  void MakeSlice(const Json& device) {
    slice_ = UniqueName("gates-slice");
    Json out;
    Status s =
        ResourceSliceClient(client_.get())
            .Create({{"metadata", {{"name", slice_}}},
                     {"spec",
                      {{"driver", driver_},
                       {"nodeName", "fake-node-1"},
                       {"pool", {{"name", slice_}, {"generation", 1}, {"resourceSliceCount", 1}}},
                       {"devices", Json::array({device})}}}},
                    &out);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  void MakeClaimAndPod(const std::string& name, const std::string& memory) {
    Json request = {{"deviceClassName", class_}};
    if (!memory.empty()) request["capacity"] = {{"requests", {{"memory", memory}}}};
    Json out;
    Status s =
        ResourceClaimClient(client_.get(), ns_)
            .Create(
                {{"metadata", {{"name", name}}},
                 {"spec",
                  {{"devices",
                    {{"requests", Json::array({{{"name", "region"}, {"exactly", request}}})}}}}}},
                &out);
    ASSERT_TRUE(s.ok()) << s.ToString();
    s = PodClient(client_.get(), ns_)
            .Create({{"metadata", {{"name", name}}},
                     {"spec",
                      {{"automountServiceAccountToken", false},
                       {"resourceClaims",
                        Json::array({{{"name", "mem"}, {"resourceClaimName", name}}})},
                       {"containers",
                        Json::array(
                            {{{"name", "c"},
                              {"image", "registry.k8s.io/pause:3.10"},
                              {"resources", {{"claims", Json::array({{{"name", "mem"}}})}}}}})}}}},
                    &out);
    ASSERT_TRUE(s.ok()) << s.ToString();
    pods_.push_back(name);
  }

  std::string NodeOf(const std::string& pod) {
    Json p;
    if (!PodClient(client_.get(), ns_).Get(pod, &p).ok()) return "";
    return p["spec"].value("nodeName", "");
  }
  bool Unschedulable(const std::string& pod) {
    Json p;
    if (!PodClient(client_.get(), ns_).Get(pod, &p).ok()) return false;
    for (const auto& c : p["status"].value("conditions", Json::array())) {
      if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "False" &&
          c.value("reason", "") == "Unschedulable") {
        return true;
      }
    }
    return false;
  }

  std::string driver_, class_, slice_;
  std::vector<std::string> pods_;
};

// One shared device of 32Gi: two claims of 20Gi cannot both be placed on it;
// a 10Gi claim still fits next to the first.
TEST_F(DraGatesE2ETest, ConsumableCapacityPreventsOvercommit) {
  if (!GateOn("DRAConsumableCapacity"))
    GTEST_SKIP() << "DRAConsumableCapacity is off in this cluster";
  MakeClass();
  MakeSlice({{"name", "region-0"},
             {"allowMultipleAllocations", true},
             {"capacity",
              {{"memory",
                {{"value", "32Gi"},
                 {"requestPolicy",
                  {{"default", "1Gi"}, {"validRange", {{"min", "1Gi"}, {"step", "1Gi"}}}}}}}}}});
  MakeClaimAndPod("first", "20Gi");
  ASSERT_TRUE(Eventually([&] { return !NodeOf("first").empty(); }, seconds(60)));
  EXPECT_EQ(NodeOf("first"), "fake-node-1");
  Json claim;
  ASSERT_TRUE(ResourceClaimClient(client_.get(), ns_).Get("first", &claim).ok());
  const Json& r = claim["status"]["allocation"]["devices"]["results"][0];
  EXPECT_EQ(r["consumedCapacity"]["memory"], "20Gi") << r.dump();
  EXPECT_FALSE(r.value("shareID", "").empty()) << r.dump();

  MakeClaimAndPod("second", "20Gi");
  ASSERT_TRUE(Eventually([&] { return Unschedulable("second"); }, seconds(60)));
  EXPECT_EQ(NodeOf("second"), "");

  MakeClaimAndPod("third", "10Gi");
  ASSERT_TRUE(Eventually([&] { return !NodeOf("third").empty(); }, seconds(60)));
  EXPECT_EQ(NodeOf("second"), "") << "the device was overcommitted";
}

// A device with a binding condition: the scheduler allocates it but holds
// the pod in PreBind until the condition turns True in the claim's
// status.devices, written through /status as an external controller would.
TEST_F(DraGatesE2ETest, BindingConditionHoldsPodUntilControllerReportsReady) {
  if (!GateOn("DRADeviceBindingConditions"))
    GTEST_SKIP() << "DRADeviceBindingConditions is off in this cluster";
  MakeClass();
  MakeSlice({{"name", "region-0"},
             {"bindsToNode", true},
             {"bindingConditions", {"cxlkv.dev/Attached"}},
             {"bindingFailureConditions", {"cxlkv.dev/AttachFailed"}}});
  MakeClaimAndPod("bound-later", "");
  ResourceClient claims = ResourceClaimClient(client_.get(), ns_);
  Json claim;
  ASSERT_TRUE(Eventually(
      [&] {
        return claims.Get("bound-later", &claim).ok() && claim["status"].contains("allocation");
      },
      seconds(60)))
      << claim.dump();
  const Json& r = claim["status"]["allocation"]["devices"]["results"][0];
  EXPECT_EQ(r["bindingConditions"], Json({"cxlkv.dev/Attached"})) << r.dump();
  // Allocated, but not bound while the condition is missing.
  std::this_thread::sleep_for(seconds(3));
  EXPECT_EQ(NodeOf("bound-later"), "") << "bound before the binding condition was met";

  Json patch = {
      {"status",
       {{"devices",
         Json::array(
             {{{"driver", r["driver"]},
               {"pool", r["pool"]},
               {"device", r["device"]},
               {"conditions",
                Json::array({{{"type", "cxlkv.dev/Attached"},
                              {"status", "True"},
                              {"reason", "RegionAttached"},
                              {"message", "attached by the test"},
                              {"lastTransitionTime",
                               FormatMicroTime(std::chrono::system_clock::now()).substr(0, 19) +
                                   "Z"}}})}}})}}}};
  Json out;
  Status s = claims.Patch("bound-later", PatchType::kMerge, patch, &out, {}, "status");
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(Eventually([&] { return !NodeOf("bound-later").empty(); }, seconds(60)));
  EXPECT_EQ(NodeOf("bound-later"), "fake-node-1");
}

}  // namespace
}  // namespace cxlkv::kube
