// Copyright cxlkv authors.
//
// The controller's concepts, each through its own entry point: the pure
// functions in each concept's header (the Rep's operations against a fake
// fabric::Composer and a fake hostd: controller_rep_test.cc). The
// apiserver-bound steps (the compare-and-set patches, the dry-run probe,
// slice writes, Leases) run against a real control plane in the dra stage
// (scripts/test.d/55-dra.sh, test/e2e/dra-*.bats).
#include <gtest/gtest.h>

#include <map>

#include "common/claim_status.h"
#include "controller/claim_json.h"
#include "controller/compose.h"
#include "controller/conditions.h"
#include "controller/controller_test_util.h"
#include "controller/feature_probe.h"
#include "controller/ownership.h"
#include "controller/quota.h"
#include "controller/reconcile.h"
#include "controller/release.h"
#include "controller/resync.h"
#include "controller/slices.h"
#include "cxlkv/fabric/local_composer.h"

namespace cxlkv::dra {
namespace {

using namespace ctltest;  // NOLINT: the shared claim, pool and regions

using nlohmann::json;
using std::chrono::milliseconds;

// claim JSON ---------------------------------------------------------------

TEST(ClaimJsonTest, ComposeTagsRoundTripAndForeignTagsAreNotOurs) {
  std::string uid, ts;
  ASSERT_TRUE(ParseComposeTag(kDriver, ComposeTag(kDriver, "u1", "t1"), &uid, &ts));
  EXPECT_EQ(uid, "u1");
  EXPECT_EQ(ts, "t1");
  EXPECT_FALSE(ParseComposeTag(kDriver, "other.dev/u1@t1", &uid, &ts));
  EXPECT_FALSE(ParseComposeTag(kDriver, "someone's region", &uid, &ts));
  EXPECT_FALSE(ParseComposeTag(kDriver, std::string(kDriver) + "/@t1", &uid, &ts));
}

TEST(ClaimJsonTest, AnnotationsPointersAndResults) {
  EXPECT_EQ(EscapePointer("cxlkv.dev/owner~x"), "cxlkv.dev~1owner~0x");
  int64_t n = -1;
  EXPECT_TRUE(PositiveAnnotation(Claim(), "cxlkv.dev/qos", 8, &n).ok());
  EXPECT_EQ(n, 0);
  json c = Claim({{"metadata", {{"annotations", {{"cxlkv.dev/qos", "8"}}}}}});
  EXPECT_TRUE(PositiveAnnotation(c, "cxlkv.dev/qos", 8, &n).ok());
  EXPECT_EQ(n, 8);
  for (const char* bad : {"9", "0", "-1", "2x", "99999999999999999999"}) {
    c["metadata"]["annotations"]["cxlkv.dev/qos"] = bad;
    EXPECT_TRUE(PositiveAnnotation(c, "cxlkv.dev/qos", 8, &n).IsInvalidArgument()) << bad;
  }
  const json ours = OurResults(Claim(), kDriver);
  ASSERT_EQ(ours.size(), 1u);
  EXPECT_EQ(ours[0]["device"], "blade-0");
  EXPECT_TRUE(OurResults(json{{"metadata", json::object()}}, kDriver).empty());
  json r = ours[0];
  r["shareID"] = "s-1";
  EXPECT_EQ(DeviceEntry(r, kDriver), (json{{"driver", kDriver},
                                           {"pool", "cma-0/blade-0"},
                                           {"device", "blade-0"},
                                           {"shareID", "s-1"}}));
}

// slices -------------------------------------------------------------------

TEST(SlicesTest, TheConsumableDeviceStepsInBlockTimesQosWithConditionsAndTaint) {
  ControllerOptions opt;
  opt.qos = 2;
  json d = DeviceFor(Pool(), opt, 1234, /*down=*/false, /*binding=*/true);
  EXPECT_EQ(d["capacity"]["memory"]["value"], "1234");
  EXPECT_EQ(d["capacity"]["memory"]["requestPolicy"]["validRange"]["step"],
            std::to_string(256 * 2 * kMiB));
  EXPECT_EQ(d["bindingConditions"], json::array({kConditionComposed}));
  EXPECT_EQ(d["bindingFailureConditions"], json::array({kConditionComposeFailed}));
  EXPECT_FALSE(d.contains("taints"));
  EXPECT_TRUE(d["allowMultipleAllocations"].get<bool>());
  d = DeviceFor(Pool(), opt, 1234, /*down=*/true, /*binding=*/false);
  EXPECT_FALSE(d.contains("bindingConditions"));
  EXPECT_EQ(d["taints"][0]["key"], kTaintFabricUnreachable);
}

TEST(SlicesTest, FixedDevicesOnePerSmallestRegionAtMostTheCount) {
  ControllerOptions opt;  // qos 4: a smallest region is 1 GiB on 256 MiB blocks
  json one = DevicesFor(Pool(8192), opt, 0, false, false, /*fixed_devices=*/false);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0]["name"], "blade-0");
  json fixed = DevicesFor(Pool(8192), opt, 0, false, /*prepare_wait=*/true, true);
  ASSERT_EQ(fixed.size(), 8u);
  EXPECT_EQ(fixed[7]["name"], "blade-0-7");
  EXPECT_FALSE(fixed[0].contains("allowMultipleAllocations"));
  EXPECT_FALSE(fixed[0]["capacity"]["memory"].contains("requestPolicy"));
  EXPECT_FALSE(fixed[0].contains("bindingConditions"));  // prepare-wait: none
  opt.fixed_device_count = 3;
  EXPECT_EQ(DevicesFor(Pool(8192), opt, 0, false, false, true).size(), 3u);
  opt.fixed_device_count = 1000;
  EXPECT_EQ(DevicesFor(Pool(1 << 20), opt, 0, false, false, true).size(), 64u);
  EXPECT_EQ(DevicesFor(Pool(100), opt, 0, false, false, true).size(), 1u);
}

TEST(SlicesTest, CapacityHoldsBackUnusableAndUnderFixedDevicesLiveBytes) {
  const std::map<std::string, int64_t> unusable = {{"cma-0/blade-0", 1024 * kMiB}};
  const std::map<std::string, int64_t> live = {{"cma-0/blade-0", 2048 * kMiB}};
  EXPECT_EQ(SliceCapacity(Pool(8192), unusable, live, false), 7168 * kMiB);
  EXPECT_EQ(SliceCapacity(Pool(8192), unusable, live, true), 5120 * kMiB);
  EXPECT_EQ(SliceCapacity(Pool(2048), unusable, live, true), 0);
  EXPECT_EQ(SliceCapacity(Pool(8192), {}, {}, true), 8192 * kMiB);
}

TEST(SlicesTest, ALocalPoolIsANodeSliceAFabricPoolSelectsItsHosts) {
  json s = SliceFor(Pool(), kDriver, json::array());
  EXPECT_EQ(s["metadata"]["name"], "cxlkv.dev-cma-0-blade-0");
  EXPECT_EQ(s["spec"]["pool"]["name"], "cma-0/blade-0");
  EXPECT_EQ(s["spec"]["nodeSelector"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"],
            json::array({"node-a", "node-b"}));
  fabric::Pool local = Pool();
  local.appliance_id = fabric::LocalComposer::kApplianceId;
  local.hosts = {"node-a"};
  s = SliceFor(local, kDriver, json::array());
  EXPECT_FALSE(s["spec"].contains("nodeSelector"));
  EXPECT_EQ(s["spec"]["nodeName"], "node-a");
}

// feature probe ------------------------------------------------------------

TEST(FeatureProbeTest, ReadsWhichFieldsTheApiserverKept) {
  ControllerOptions opt;
  json probe = ProbeSlice(opt);
  EXPECT_EQ(probe["spec"]["driver"], kDriver);
  ProbeResult r = ReadProbe(probe);  // all kept
  EXPECT_TRUE(r.binding_conditions);
  EXPECT_TRUE(r.consumable);
  json dropped = probe;
  dropped["spec"]["devices"][0].erase("bindingConditions");
  r = ReadProbe(dropped);
  EXPECT_FALSE(r.binding_conditions);
  EXPECT_TRUE(r.consumable);
  dropped = probe;
  dropped["spec"]["devices"][0]["capacity"]["memory"].erase("requestPolicy");
  EXPECT_FALSE(ReadProbe(dropped).consumable);
  dropped = probe;
  dropped["spec"]["devices"][0].erase("allowMultipleAllocations");
  EXPECT_FALSE(ReadProbe(dropped).consumable);
  EXPECT_FALSE(ReadProbe(json::object()).consumable);
}

// resync -------------------------------------------------------------------

TEST(ResyncTest, AccountsLiveOrphanedPendingAndForeignRegions) {
  const std::string ts = "2026-01-01T00:00:00Z";
  json named =
      Claim({{"metadata",
              {{"uid", "uid-2"},
               {"name", "c2"},
               {"annotations",
                {{kRegionAnnotation,
                  EncodeRegionAnnotation({"cma-0", "blade-0", "m-pending", "old", 0})}}}}}});
  named["status"].erase("allocation");  // deallocated, its free still pending
  const std::vector<json> claims = {Claim(), named};
  std::map<std::string, std::vector<fabric::MemoryRegion>> regions;
  regions["cma-0/blade-0"] = {
      Region("m-live", ComposeTag(kDriver, "uid-1", ts), 2048),
      Region("m-realloc", ComposeTag(kDriver, "uid-1", "an older allocation"), 1024),
      Region("m-gone", ComposeTag(kDriver, "uid-9", ts), 512),
      Region("m-pending", ComposeTag(kDriver, "uid-2", "old"), 256),
      Region("m-foreign", "someone else", 128)};
  PoolAccounting a = AccountPools({Pool()}, regions, claims, kDriver, false);
  EXPECT_EQ(a.live["cma-0/blade-0"], 2048 * kMiB);
  EXPECT_EQ(a.unusable["cma-0/blade-0"], (256 + 128) * kMiB);
  ASSERT_EQ(a.orphans.size(), 2u);
  EXPECT_EQ(a.orphans[0].region.id, "m-realloc");
  EXPECT_EQ(a.orphans[1].region.id, "m-gone");
  EXPECT_EQ(a.orphans[1].pool.blade_id, "blade-0");
}

TEST(ResyncTest, ALiveRegionTheSchedulerDoesNotCountIsHeldBackUnderConsumableCapacity) {
  json fixed_alloc = Claim();
  fixed_alloc["status"]["allocation"]["devices"]["results"][0].erase("consumedCapacity");
  std::map<std::string, std::vector<fabric::MemoryRegion>> regions;
  regions["cma-0/blade-0"] = {
      Region("m1", ComposeTag(kDriver, "uid-1", "2026-01-01T00:00:00Z"), 1024)};
  PoolAccounting a = AccountPools({Pool()}, regions, {fixed_alloc}, kDriver, false);
  EXPECT_EQ(a.live["cma-0/blade-0"], 1024 * kMiB);
  EXPECT_EQ(a.unusable["cma-0/blade-0"], 1024 * kMiB);
  a = AccountPools({Pool()}, regions, {fixed_alloc}, kDriver, true);
  EXPECT_EQ(a.unusable["cma-0/blade-0"], 0);
  EXPECT_TRUE(a.orphans.empty());
}

// reconcile ----------------------------------------------------------------

TEST(ReconcileTest, FirstStepFollowsOwnerAllocationAndDeletion) {
  const std::string me = "ctl-a";
  EXPECT_EQ(FirstStep(Claim(), kDriver, me), SyncStep::kOwn);
  json owned = Claim(
      {{"metadata", {{"annotations", {{kOwnerAnnotation, me}}}, {"finalizers", {kFinalizer}}}}});
  EXPECT_EQ(FirstStep(owned, kDriver, me), SyncStep::kReconcile);
  EXPECT_EQ(FirstStep(owned, kDriver, "ctl-b"), SyncStep::kForeignOwner);
  json deleting = owned;
  deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z";
  EXPECT_EQ(FirstStep(deleting, kDriver, me), SyncStep::kRelease);
  deleting["status"]["reservedFor"] = {{{"resource", "pods"}, {"name", "p"}, {"uid", "u"}}};
  EXPECT_EQ(FirstStep(deleting, kDriver, me),
            SyncStep::kIdle);  // consumers still hold it
  json deallocated = owned;
  deallocated["status"].erase("allocation");
  EXPECT_EQ(FirstStep(deallocated, kDriver, me), SyncStep::kRelease);
  json nothing = Claim();
  nothing["status"].erase("allocation");
  EXPECT_EQ(FirstStep(nothing, kDriver, me), SyncStep::kIdle);
}

TEST(ReconcileTest, TheReleaseRaceWatchDoublesToTwoSeconds) {
  EXPECT_EQ(WatchDelay(milliseconds(500), 0), milliseconds(500));
  EXPECT_EQ(WatchDelay(milliseconds(500), 1), milliseconds(1000));
  EXPECT_EQ(WatchDelay(milliseconds(500), 2), milliseconds(2000));
  EXPECT_EQ(WatchDelay(milliseconds(500), 50), milliseconds(2000));
  EXPECT_EQ(WatchDelay(milliseconds(100), 3), milliseconds(800));
}

// ownership ----------------------------------------------------------------

TEST(OwnershipTest, HeartbeatLeaseNamesAreDns1123) {
  EXPECT_EQ(OwnerLeaseName("cxlkv-dra-controller", "Ctl_A.1"),
            "cxlkv-dra-controller-owner-ctl-a.1");
  EXPECT_EQ(OwnerLeaseName("l", "x-"), "l-owner-x");
  EXPECT_EQ(OwnerLeaseName("l", std::string(300, 'a')).size(), 253u);
}

TEST(OwnershipTest, OwnAddsTheAnnotationAndTheFinalizerOnce) {
  json ops = OwnOps(Claim(), "ctl-a");
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0]["path"], "/metadata/annotations");
  EXPECT_EQ(ops[1]["path"], "/metadata/annotations/cxlkv.dev~1owner");
  EXPECT_EQ(ops[1]["value"], "ctl-a");
  EXPECT_EQ(ops[2]["path"], "/metadata/finalizers");
  json c = Claim({{"metadata", {{"annotations", {{"x", "y"}}}, {"finalizers", {"other"}}}}});
  ops = OwnOps(c, "ctl-a");
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[1]["path"], "/metadata/finalizers/-");
  c["metadata"]["finalizers"] = {"other", kFinalizer};
  EXPECT_EQ(OwnOps(c, "ctl-a").size(), 1u);
}

TEST(OwnershipTest, AnOwnerIsDeadOnceItsLeaseRecordStandsStillForItsDuration) {
  const milliseconds def(15000);
  OwnerLeaseView v = ViewOwnerLease(nullptr, def);
  EXPECT_FALSE(v.released);
  EXPECT_EQ(v.record, "absent");
  EXPECT_EQ(v.duration, def);
  json lease = {{"spec",
                 {{"holderIdentity", "ctl-b"},
                  {"renewTime", "2026-01-01T00:00:00.000000Z"},
                  {"leaseDurationSeconds", 6}}}};
  v = ViewOwnerLease(&lease, def);
  EXPECT_EQ(v.record, "ctl-b@2026-01-01T00:00:00.000000Z");
  EXPECT_EQ(v.duration, milliseconds(6000));
  lease["spec"]["holderIdentity"] = "";
  EXPECT_TRUE(ViewOwnerLease(&lease, def).released);

  LeaseSeen seen;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(UnchangedFor(&seen, "a@1", t0), milliseconds(0));
  EXPECT_EQ(UnchangedFor(&seen, "a@1", t0 + milliseconds(7000)), milliseconds(7000));
  EXPECT_EQ(UnchangedFor(&seen, "a@2", t0 + milliseconds(8000)),
            milliseconds(0));  // renewed
  EXPECT_EQ(UnchangedFor(&seen, "a@2", t0 + milliseconds(9000)), milliseconds(1000));
}

// compose and consumers ----------------------------------------------------

TEST(ComposeTest, TheRequestTakesSizeQosHostsAndShareFromTheClaim) {
  ControllerOptions opt;
  json c = Claim({{"status",
                   {{"allocation",
                     {{"nodeSelector",
                       {{"nodeSelectorTerms",
                         {{{"matchExpressions",
                            {{{"key", "kubernetes.io/hostname"},
                              {"operator", "In"},
                              {"values", {"node-a", "node-b", "node-c"}}}}}}}}}}}}}}});
  const json ours = OurResults(c, kDriver);
  fabric::ComposeRequest req;
  std::string appliance, blade;
  ASSERT_TRUE(
      BuildComposeRequest(c, ours, opt, false, {"node-b"}, true, &req, &appliance, &blade).ok());
  EXPECT_EQ(appliance, "cma-0");
  EXPECT_EQ(blade, "blade-0");
  EXPECT_EQ(req.size_mib, 2048);
  EXPECT_EQ(req.qos, 4);
  EXPECT_EQ(req.claim_uid, ComposeTag(kDriver, "uid-1", "2026-01-01T00:00:00Z"));
  EXPECT_EQ(req.candidate_hosts, std::vector<std::string>({"node-b"}));
  EXPECT_EQ(req.share_count, 1);
  // Consumers not all known: every host the selector allows.
  ASSERT_TRUE(
      BuildComposeRequest(c, ours, opt, false, {"node-b"}, false, &req, &appliance, &blade).ok());
  EXPECT_EQ(req.candidate_hosts, std::vector<std::string>({"node-a", "node-b", "node-c"}));
  EXPECT_EQ(req.share_count, 3);
  // A byte count that is not whole MiB rounds up.
  json odd = ours;
  odd[0]["consumedCapacity"]["memory"] = "1048577";
  ASSERT_TRUE(BuildComposeRequest(c, odd, opt, false, {}, false, &req, &appliance, &blade).ok());
  EXPECT_EQ(req.size_mib, 2);
  // Share count from the annotation; the other allowed hosts follow.
  c["metadata"]["annotations"] = {{"cxlkv.dev/share-count", "2"}};
  ASSERT_TRUE(
      BuildComposeRequest(c, ours, opt, false, {"node-c"}, true, &req, &appliance, &blade).ok());
  EXPECT_EQ(req.share_count, 2);
  EXPECT_EQ(req.candidate_hosts, std::vector<std::string>({"node-c", "node-a", "node-b"}));
}

TEST(ComposeTest, FixedDevicesTakeSizeAndQosFromAnnotations) {
  ControllerOptions opt;
  json c =
      Claim({{"metadata",
              {{"annotations", {{"cxlkv.dev/capacity-mib", "1536"}, {"cxlkv.dev/qos", "2"}}}}}});
  json ours = OurResults(c, kDriver);
  ours[0].erase("consumedCapacity");
  fabric::ComposeRequest req;
  std::string a, b;
  ASSERT_TRUE(BuildComposeRequest(c, ours, opt, true, {}, false, &req, &a, &b).ok());
  EXPECT_EQ(req.size_mib, 1536);
  EXPECT_EQ(req.qos, 2);
  ASSERT_TRUE(BuildComposeRequest(c, ours, opt, false, {}, false, &req, &a, &b).ok());
  EXPECT_EQ(req.qos, 4);  // consumable: the device's steps are in opt.qos
  c["metadata"]["annotations"]["cxlkv.dev/qos"] = "3";
  EXPECT_TRUE(BuildComposeRequest(c, ours, opt, true, {}, false, &req, &a, &b).IsInvalidArgument());
  c["metadata"]["annotations"].erase("cxlkv.dev/capacity-mib");
  c["metadata"]["annotations"].erase("cxlkv.dev/qos");
  Status s = BuildComposeRequest(c, ours, opt, true, {}, false, &req, &a, &b);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("cxlkv.dev/capacity-mib"), std::string::npos);
  ours[0]["pool"] = "no-slash";
  EXPECT_TRUE(BuildComposeRequest(c, ours, opt, true, {}, false, &req, &a, &b).IsInvalidArgument());
}

TEST(ComposeTest, ConsumersNodesAndTheHostsToAdd) {
  EXPECT_EQ(PodNode({{"spec", {{"nodeName", "n1"}}}, {"status", {{"nominatedNodeName", "n2"}}}}),
            "n1");
  EXPECT_EQ(PodNode({{"spec", json::object()}, {"status", {{"nominatedNodeName", "n2"}}}}), "n2");
  EXPECT_EQ(PodNode({{"spec", json::object()}}), "");
  EXPECT_TRUE(PodLeaving({{"metadata", {{"deletionTimestamp", "x"}}}}));
  EXPECT_TRUE(PodLeaving({{"metadata", json::object()}, {"status", {{"phase", "Succeeded"}}}}));
  EXPECT_FALSE(PodLeaving({{"metadata", json::object()}, {"status", {{"phase", "Running"}}}}));

  fabric::MemoryRegion r = Region("m1", "t", 1024);
  r.mappings = {Mapped("node-a", fabric::Materialization::kMaterialized)};
  bool watch = true;
  EXPECT_EQ(HostsToAdd(r, {"node-a", "node-b", "node-z"}, {}, {"node-a", "node-b"}, &watch),
            std::vector<std::string>({"node-b"}));
  EXPECT_FALSE(watch);
  EXPECT_EQ(HostsToAdd(r, {"node-a"}, {"node-a"}, {}, &watch), std::vector<std::string>());
  EXPECT_TRUE(watch);  // a consumer not started on a mapped host: the release race
  EXPECT_EQ(HostsToAdd(r, {"node-z"}, {}, {}, &watch), std::vector<std::string>({"node-z"}));
}

// conditions ---------------------------------------------------------------

TEST(ConditionsTest, ComposedTurnsTrueOnceEveryHostIsMaterializedAndStaysForThatRegion) {
  const json ours = OurResults(Claim(), kDriver);
  const RegionRef ref{"cma-0", "blade-0", "m1", "2026-01-01T00:00:00Z", 2048};
  fabric::MemoryRegion r = Region("m1", "t", 2048);
  r.mappings = {Mapped("node-a", fabric::Materialization::kMaterialized),
                Mapped("node-b", fabric::Materialization::kPending)};
  json claim = Claim({{"status", {{"devices", {{{"driver", "other.dev"}, {"device", "d"}}}}}}});
  StatusUpdate u = ClaimStatusUpdate(claim, ours, ref, r, kDriver);
  EXPECT_TRUE(u.changed);
  EXPECT_FALSE(u.all_materialized);
  ASSERT_EQ(u.devices.size(), 2u);
  EXPECT_EQ(u.devices[0]["driver"], "other.dev");  // others' entries kept, first
  const json& cond = u.devices[1]["conditions"][0];
  EXPECT_EQ(cond["type"], kConditionComposed);
  EXPECT_EQ(cond["status"], "False");
  EXPECT_EQ(cond["reason"], "Materializing");
  EXPECT_EQ(cond["message"], "waiting for node-b Pending");
  EXPECT_EQ(u.devices[1]["data"]["sizeBytes"], 2048 * kMiB);
  EXPECT_EQ(u.newly_materialized, std::vector<std::string>({"node-a"}));

  claim["status"]["devices"] = u.devices;
  r.mappings[1].materialization = fabric::Materialization::kMaterialized;
  u = ClaimStatusUpdate(claim, ours, ref, r, kDriver);
  EXPECT_TRUE(u.all_materialized);
  EXPECT_TRUE(u.became_true);
  EXPECT_EQ(u.devices[1]["conditions"][0]["status"], "True");
  EXPECT_EQ(u.devices[1]["conditions"][0]["reason"], "Materialized");
  EXPECT_EQ(u.newly_materialized, std::vector<std::string>({"node-b"}));

  claim["status"]["devices"] = u.devices;
  EXPECT_FALSE(ClaimStatusUpdate(claim, ours, ref, r, kDriver).changed);  // nothing new
  // A later consumer's host: still True for this region.
  r.mappings.push_back(Mapped("node-c", fabric::Materialization::kPending));
  u = ClaimStatusUpdate(claim, ours, ref, r, kDriver);
  EXPECT_EQ(u.devices[1]["conditions"][0]["status"], "True");
  EXPECT_EQ(u.devices[1]["conditions"][0]["reason"], "AddingHosts");
  EXPECT_FALSE(u.became_true);
  // A new region (recomposed after a loss) starts False again.
  fabric::MemoryRegion again = Region("m2", "t", 2048);
  again.mappings = {Mapped("node-a", fabric::Materialization::kPending)};
  u = ClaimStatusUpdate(claim, ours, ref, again, kDriver);
  EXPECT_EQ(u.devices[1]["conditions"][0]["status"], "False");
  EXPECT_EQ(u.devices[1]["conditions"][0]["reason"], "Recomposing");
}

TEST(ConditionsTest, FabricDownOnceAndComposeFailedReasons) {
  const json ours = OurResults(Claim(), kDriver);
  bool changed = false;
  json devices = FabricDownDevices(Claim(), ours, kDriver, Status::IOError("down"), &changed);
  EXPECT_TRUE(changed);
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0]["conditions"][0]["type"], kConditionFabricReachable);
  EXPECT_EQ(devices[0]["conditions"][0]["status"], "False");
  json claim = Claim({{"status", {{"devices", devices}}}});
  FabricDownDevices(claim, ours, kDriver, Status::IOError("down"), &changed);
  EXPECT_FALSE(changed);  // the transition only

  json failed = ComposeFailedDevices(Claim(), ours, kDriver, Status::NoSpace("full"));
  EXPECT_EQ(failed[0]["conditions"][0]["status"], "False");
  EXPECT_EQ(failed[0]["conditions"][1]["type"], kConditionComposeFailed);
  EXPECT_EQ(failed[0]["conditions"][1]["reason"], "NoSpace");
  failed = ComposeFailedDevices(Claim(), ours, kDriver, Status::InvalidArgument("x"));
  EXPECT_EQ(failed[0]["conditions"][1]["reason"], "InvalidRequest");
}

// release ------------------------------------------------------------------

TEST(ReleaseTest, LetGoRemovesBothAnnotationsAndEveryFinalizerFromTheLast) {
  json c = Claim({{"metadata",
                   {{"annotations", {{kOwnerAnnotation, "ctl-a"}, {kRegionAnnotation, "{}"}}},
                    {"finalizers", {kFinalizer, "other", kFinalizer}}}}});
  json ops = LetGoOps(c);
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_EQ(ops[0]["path"], "/metadata/annotations/cxlkv.dev~1region");
  EXPECT_EQ(ops[1]["path"], "/metadata/annotations/cxlkv.dev~1owner");
  EXPECT_EQ(ops[2]["path"], "/metadata/finalizers/2");
  EXPECT_EQ(ops[3]["path"], "/metadata/finalizers/0");
  // The ops apply as the apiserver applies them.
  json after = c.patch(ops);
  EXPECT_EQ(after["metadata"]["finalizers"], json::array({"other"}));
  EXPECT_TRUE(LetGoOps(after).empty());
  bool had = false;
  json keep = DevicesWithoutOurs(
      Claim({{"status", {{"devices", {{{"driver", kDriver}}, {{"driver", "other.dev"}}}}}}}),
      kDriver, &had);
  EXPECT_TRUE(had);
  EXPECT_EQ(keep, json::array({{{"driver", "other.dev"}}}));
}

}  // namespace
}  // namespace cxlkv::dra
