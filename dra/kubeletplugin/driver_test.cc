// Copyright cxlkv authors.
//
// The kubelet plugin's sockets and gRPC contract, without a kubelet: the
// registration socket names of the Go helper (rolling updates), GetInfo's
// advertised services, and per-claim errors that never become gRPC errors.
// The kubelet's own code drives the plugin in the DRA e2e stage.
#include "kubeletplugin/driver.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "dra_v1.grpc.pb.h"
#include "health_v1.grpc.pb.h"
#include "pluginregistration_v1.grpc.pb.h"

namespace cxlkv::dra {
namespace {

const std::string kUid = "6e3d2f1a-8b7c-4d5e-9f01-23456789abcd";

TEST(RegistrationSocketNameTest, FollowsTheGoHelpersRules) {
  EXPECT_EQ(RegistrationSocketName("/var/lib/kubelet/plugins_registry", "cxlkv.dev", ""),
            "cxlkv.dev-reg.sock");
  EXPECT_EQ(RegistrationSocketName("/var/lib/kubelet/plugins_registry", "cxlkv.dev", kUid),
            "cxlkv.dev-" + kUid + "-reg.sock");
  // Too long for the full UID: a hash of it (values from Python's hashlib).
  // "/" + 70 + "/" + the 55-byte full name is 127 bytes; with the 30-byte
  // hashed name, 102.
  std::string dir(70, 'd');
  EXPECT_EQ(RegistrationSocketName("/" + dir, "cxlkv.dev", kUid), "cxlkv.dev-ORhraqlDY-0-reg.sock");
  std::string longer(80, 'x');
  EXPECT_EQ(RegistrationSocketName("/" + longer, "cxlkv.dev", kUid),
            "dra-0vkhEnQeLcTxraDcN9jGPw-reg.sock");
}

class DriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cxlkv-dra-driver-test.XXXXXX";
    root_ = mkdtemp(tmpl);
    std::ofstream(root_ + "/boot_id") << "boot-1\n";
    kube::Config cfg;
    cfg.server = "https://127.0.0.1:1";  // nothing listens: every GET fails fast
    ASSERT_TRUE(kube::Client::New(cfg, {}, &kube_).ok());
    hostd_ = std::make_unique<hostd::Client>(hostd::ClientOptions{"http://127.0.0.1:1", 500});
    StateOptions so;
    so.node_name = "node-a";
    so.checkpoint_path = root_ + "/checkpoint.json";
    so.boot_id_path = root_ + "/boot_id";
    ASSERT_TRUE(DeviceState::Open(so, kube_.get(), hostd_.get(), &state_).ok());
    health_ =
        std::make_unique<HealthMonitor>(state_.get(), hostd_.get(), std::chrono::milliseconds(100));
    health_->Start();
    DriverOptions dopt;
    dopt.kubelet_root_dir = root_ + "/kubelet";
    dopt.pod_uid = "pod-1";
    Status s = Driver::Start(dopt, state_.get(), health_.get(), &driver_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void TearDown() override {
    driver_.reset();
    health_.reset();
    std::system(("rm -rf " + root_).c_str());
  }
  std::shared_ptr<grpc::Channel> Dial(const std::string& path) {
    return grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials());
  }
  std::string root_;
  std::unique_ptr<kube::Client> kube_;
  std::unique_ptr<hostd::Client> hostd_;
  std::unique_ptr<DeviceState> state_;
  std::unique_ptr<HealthMonitor> health_;
  std::unique_ptr<Driver> driver_;
};

TEST_F(DriverTest, SocketsSitWhereTheKubeletLooks) {
  EXPECT_EQ(driver_->registration_socket(),
            root_ + "/kubelet/plugins_registry/cxlkv.dev-pod-1-reg.sock");
  EXPECT_EQ(driver_->dra_socket(), root_ + "/kubelet/plugins/cxlkv.dev/dra-pod-1.sock");
  EXPECT_EQ(access(driver_->registration_socket().c_str(), F_OK), 0);
  EXPECT_EQ(access(driver_->dra_socket().c_str(), F_OK), 0);
  driver_->Stop();
  EXPECT_NE(access(driver_->registration_socket().c_str(), F_OK), 0);
  EXPECT_NE(access(driver_->dra_socket().c_str(), F_OK), 0);
}

TEST_F(DriverTest, GetInfoAdvertisesBothDraAndBothHealthVersions) {
  auto stub = pluginregistration::Registration::NewStub(Dial(driver_->registration_socket()));
  grpc::ClientContext ctx;
  pluginregistration::PluginInfo info;
  ASSERT_TRUE(stub->GetInfo(&ctx, {}, &info).ok());
  EXPECT_EQ(info.type(), "DRAPlugin");
  EXPECT_EQ(info.name(), "cxlkv.dev");
  EXPECT_EQ(info.endpoint(), driver_->dra_socket());
  std::vector<std::string> v(info.supported_versions().begin(), info.supported_versions().end());
  EXPECT_EQ(v, (std::vector<std::string>{"v1.DRAPlugin", "v1beta1.DRAPlugin",
                                         "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"}));
  EXPECT_FALSE(driver_->registered());
  grpc::ClientContext ctx2;
  pluginregistration::RegistrationStatus st;
  st.set_plugin_registered(true);
  pluginregistration::RegistrationStatusResponse r;
  ASSERT_TRUE(stub->NotifyRegistrationStatus(&ctx2, st, &r).ok());
  EXPECT_TRUE(driver_->registered());
}

// An apiserver that cannot be reached fails each claim, not the call; an
// unknown claim unprepares as success.
TEST_F(DriverTest, FailuresArePerClaim) {
  namespace pb = ::k8s::io::kubelet::pkg::apis::dra::v1;
  auto stub = pb::DRAPlugin::NewStub(Dial(driver_->dra_socket()));
  pb::NodePrepareResourcesRequest req;
  for (const char* uid : {"u1", "u2"}) {
    auto* c = req.add_claims();
    c->set_namespace_("ns");
    c->set_name(std::string("claim-") + uid);
    c->set_uid(uid);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  pb::NodePrepareResourcesResponse resp;
  grpc::Status gs = stub->NodePrepareResources(&ctx, req, &resp);
  ASSERT_TRUE(gs.ok()) << gs.error_message();
  ASSERT_EQ(resp.claims().size(), 2u);
  for (const char* uid : {"u1", "u2"}) {
    EXPECT_NE(resp.claims().at(uid).error().find("get claim ns/claim-"), std::string::npos)
        << resp.claims().at(uid).error();
    EXPECT_EQ(resp.claims().at(uid).devices_size(), 0);
  }
  pb::NodeUnprepareResourcesRequest ureq;
  *ureq.add_claims() = req.claims(0);
  grpc::ClientContext uctx;
  pb::NodeUnprepareResourcesResponse uresp;
  ASSERT_TRUE(stub->NodeUnprepareResources(&uctx, ureq, &uresp).ok());
  ASSERT_EQ(uresp.claims().count("u1"), 1u);
  EXPECT_EQ(uresp.claims().at("u1").error(), "");
}

TEST_F(DriverTest, HealthStreamSendsTheDeviceList) {
  auto stub = ::v1::DRAResourceHealth::NewStub(Dial(driver_->dra_socket()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto reader = stub->NodeWatchResources(&ctx, {});
  ::v1::NodeWatchResourcesResponse r;
  // Nothing is prepared: an empty list, sent again on every check.
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.devices_size(), 0);
  ASSERT_TRUE(reader->Read(&r));
  ctx.TryCancel();
}

}  // namespace
}  // namespace cxlkv::dra
