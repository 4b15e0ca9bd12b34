// Copyright cxlkv authors.
//
// The controller's Rep operations that reach no apiserver, against a fake
// fabric::Composer and a fake hostd (release's retries, FreeRegion, a local
// pool's materialize), and the lifecycle: mode names, the status server.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "controller/controller_internal.h"
#include "controller/controller_test_util.h"

namespace cxlkv::dra {
namespace {

using namespace ctltest;  // NOLINT: the shared claim, pool and regions
using nlohmann::json;

// The Rep's operations against fakes -----------------------------------------

// A Composer that keeps regions in memory and fails on request.
class FakeComposer : public fabric::Composer {
 public:
  Status ListPools(std::vector<fabric::Pool>* pools) override {
    *pools = {Pool()};
    return Status::OK();
  }
  Status Compose(const std::string&, const std::string&, const fabric::ComposeRequest& req,
                 fabric::ComposeResult* result) override {
    result->region = Region("m" + std::to_string(regions_.size() + 1), req.claim_uid, req.size_mib);
    regions_[result->region.id] = result->region;
    return Status::OK();
  }
  Status Free(const std::string&, const std::string&, const std::string& id) override {
    ++frees;
    if (!free_error.ok()) return free_error;
    return regions_.erase(id) ? Status::OK() : Status::NotFound("region " + id);
  }
  Status Get(const std::string&, const std::string&, const std::string& id,
             fabric::MemoryRegion* region) override {
    auto it = regions_.find(id);
    if (it == regions_.end()) return Status::NotFound("region " + id);
    *region = it->second;
    return Status::OK();
  }
  Status List(const std::string&, const std::string&,
              std::vector<fabric::MemoryRegion>* regions) override {
    regions->clear();
    for (const auto& [id, r] : regions_) regions->push_back(r);
    return Status::OK();
  }
  Status AddHost(const std::string&, const std::string&, const std::string& id,
                 const std::string& host, fabric::MemoryRegion* region) override {
    fabric::MemoryRegion& r = regions_.at(id);
    r.mappings.push_back(Mapped(host, fabric::Materialization::kPending));
    *region = r;
    return Status::OK();
  }

  std::map<std::string, fabric::MemoryRegion> regions_;
  Status free_error;
  int frees = 0;
};

class RepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kube::Config cfg;
    cfg.server = "https://127.0.0.1:1";  // refused at once: these steps reach no
                                         // apiserver
    kube::ClientOptions ko;
    ko.request_timeout_ms = 500;
    ASSERT_TRUE(kube::Client::New(cfg, ko, &kube_).ok());
  }
  Controller::Rep* Make(ControllerOptions opt) {
    opt.identity = "ctl-a";
    EXPECT_TRUE(Controller::New(opt, kube_.get(), &composer_, &ctl_).ok());
    return ControllerInternal::rep(ctl_.get());
  }
  std::unique_ptr<kube::Client> kube_;
  FakeComposer composer_;
  std::unique_ptr<Controller> ctl_;
};

TEST_F(RepTest, ReleaseRetriesAFailedFreeUpToMaxAttemptsThenLetsGo) {
  ControllerOptions opt;
  opt.max_free_attempts = 3;
  Controller::Rep* rep = Make(opt);
  composer_.free_error = Status::IOError("manager down");
  json claim = Claim(
      {{"metadata",
        {{"annotations",
          {{kRegionAnnotation, EncodeRegionAnnotation({"cma-0", "blade-0", "m9", "t", 1024})}}}}}});
  for (int attempt = 1; attempt < 3; ++attempt) {
    Status s = rep->Release(claim);
    EXPECT_TRUE(s.IsIOError()) << s.ToString();
    EXPECT_NE(s.message().find("free region m9"), std::string::npos);
  }
  EXPECT_EQ(composer_.frees, 2);
  EXPECT_EQ(rep->metrics.registry()->Value("cxlkv_dra_free_retries_total", {}), 2);
  // The last attempt gives up on the region and goes on to let the claim go
  // (which here fails at the apiserver: the claim keeps its finalizer).
  Status s = rep->Release(claim);
  EXPECT_EQ(composer_.frees, 3);
  EXPECT_EQ(rep->metrics.registry()->Value("cxlkv_dra_free_retries_total", {}), 2);
  EXPECT_TRUE(s.IsIOError());
  EXPECT_NE(s.message().find("patch claim"), std::string::npos);
}

TEST_F(RepTest, FreeRegionCountsItsOperationAndPassesNotFound) {
  Controller::Rep* rep = Make({});
  EXPECT_TRUE(rep->FreeRegion("cma-0", "blade-0", "absent").IsNotFound());
  composer_.regions_["m1"] = Region("m1", "t", 1);
  EXPECT_TRUE(rep->FreeRegion("cma-0", "blade-0", "m1").ok());
  EXPECT_EQ(rep->metrics.registry()->Value("cxlkv_dra_operations_total",
                                           {{"operation", "free"}, {"result", "ok"}}),
            1);
}

TEST_F(RepTest, ALocalPoolsHostdMaterializesEveryMappingNotYetMaterialized) {
  httplib::Server hostd;
  std::mutex mu;
  std::vector<json> puts;
  hostd.Put(R"(/cxlkv/v1/regions/([^/]+))",
            [&](const httplib::Request& req, httplib::Response& res) {
              std::lock_guard<std::mutex> l(mu);
              puts.push_back(json::parse(req.body));
              if (puts.size() == 2) {
                res.status = 400;
                res.set_content(R"({"error": "no room"})", "application/json");
                return;
              }
              res.set_content(json({{"allocationId", std::string(req.matches[1])},
                                    {"device", "/dev/x"},
                                    {"cdiDevice", "cxlkv.dev/region=m1"},
                                    {"sizeBytes", 1 << 20}})
                                  .dump(),
                              "application/json");
            });
  const int port = hostd.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread t([&] { hostd.listen_after_bind(); });
  ControllerOptions opt;
  opt.local_hostd_url = "http://127.0.0.1:" + std::to_string(port);
  Controller::Rep* rep = Make(opt);
  fabric::MemoryRegion r = Region("m1", "t", 1);
  r.backing_path = "/dev/shm/pool/m1";
  r.mappings = {Mapped("node-a", fabric::Materialization::kPending),
                Mapped("node-b", fabric::Materialization::kPending),
                Mapped("node-c", fabric::Materialization::kMaterialized)};
  r.mappings[0].assign_epoch = 3;
  r.mappings[2].device = "/dev/y";
  rep->LocalMaterialize(&r);
  hostd.stop();
  t.join();
  ASSERT_EQ(puts.size(), 2u);  // node-c was materialized already
  EXPECT_EQ(puts[0]["sizeBytes"], 1 << 20);
  EXPECT_EQ(puts[0]["backingPath"], "/dev/shm/pool/m1");
  EXPECT_EQ(puts[0]["assignEpoch"], 3);  // the request the fabric manager sends
  EXPECT_EQ(r.mappings[0].materialization, fabric::Materialization::kMaterialized);
  EXPECT_EQ(r.mappings[0].device, "/dev/x");
  EXPECT_EQ(r.mappings[1].materialization, fabric::Materialization::kFailed);
  EXPECT_NE(r.mappings[1].error.find("no room"), std::string::npos);
}

// lifecycle ----------------------------------------------------------------

TEST(LifecycleTest, ModeNamesAndTheirAliases) {
  ControllerOptions opt;
  opt.flow = "paper";
  opt.capacity_mode = "annotation";
  ASSERT_TRUE(CanonicalModes(&opt).ok());
  EXPECT_EQ(opt.flow, "prepare-wait");
  EXPECT_EQ(opt.capacity_mode, "fixed-devices");
  for (const char* f : {"binding-conditions", "prepare-wait", "auto"}) {
    opt.flow = f;
    EXPECT_TRUE(CanonicalModes(&opt).ok()) << f;
    EXPECT_EQ(opt.flow, f);
  }
  opt.flow = "papers";
  EXPECT_TRUE(CanonicalModes(&opt).IsInvalidArgument());
  opt.flow = "auto";
  opt.capacity_mode = "annotations";
  EXPECT_TRUE(CanonicalModes(&opt).IsInvalidArgument());
  opt.capacity_mode = "consumable";
  EXPECT_TRUE(CanonicalModes(&opt).ok());
}

TEST(LifecycleTest, TheStatusServerAnswersHealthAndReadiness) {
  Metrics metrics;
  std::atomic<bool> synced{false};
  std::map<std::string, StatusServer::Endpoint> endpoints = {
      {"/healthz", [] { return HealthReply(false, true); }},
      {"/readyz", [&synced] { return ReadyReply(synced.load(), true); }}};
  std::unique_ptr<StatusServer> server;
  int port = 0;
  ASSERT_TRUE(StatusServer::Start("127.0.0.1:0", &metrics, endpoints, &server, &port).ok());
  httplib::Client c("127.0.0.1", port);
  auto res = c.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body),
            (json{{"ok", true}, {"fabricReachable", false}, {"leader", true}}));
  res = c.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(json::parse(res->body),
            (json{{"ready", false}, {"informerSynced", false}, {"ownerLease", true}}));
  synced = true;
  res = c.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(c.Get("/metrics"));
  server->Stop();
  EXPECT_TRUE(
      StatusServer::Start("nohostport", &metrics, endpoints, &server, &port).IsInvalidArgument());
}

}  // namespace
}  // namespace cxlkv::dra
