// Copyright cxlkv authors.
//
// DeviceState's pending releases (docs/dra-design.md, "Release protocol") against a
// stand-in for hostd's release endpoint (an in-process HTTP server that
// records each request and answers as hostd would): a retry names the
// assignment epoch recorded with the release; a region that a new claim has
// started to prepare is still released (a timed-out attempt may be on its
// way: dropping the release would let the prepare run on the old device), a
// completed preparation keeps the node's view; hostd's 409 (superseded: the
// host was assigned again since) drops the release; a failure keeps it.
// The real hostd and fabric manager drive the same path in the fabric and
// DRA e2e stages.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "kubeletplugin/state.h"

namespace cxlkv::dra {
namespace {

class StateReleaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cxlkv-dra-release-test.XXXXXX";
    root_ = mkdtemp(tmpl);
    std::ofstream(root_ + "/boot_id") << "boot-1\n";
    hostd_http_.Post(R"(/cxlkv/v1/regions/([^/]+)/release)", [this](const httplib::Request& req,
                                                                    httplib::Response& res) {
      std::lock_guard<std::mutex> l(mu_);
      calls_.push_back({req.matches[1], nlohmann::json::parse(req.body, nullptr, false)});
      res.status = answer_;
      res.set_content(R"({"error": "stand-in answer"})", "application/json");
    });
    port_ = hostd_http_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    server_ = std::thread([this] { hostd_http_.listen_after_bind(); });
    while (!hostd_http_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    kube::Config cfg;
    cfg.server = "https://127.0.0.1:1";  // never asked: releases need no apiserver
    ASSERT_TRUE(kube::Client::New(cfg, {}, &kube_).ok());
    hostd_ = std::make_unique<hostd::Client>(
        hostd::ClientOptions{"http://127.0.0.1:" + std::to_string(port_), 2000});
  }
  void TearDown() override {
    hostd_http_.stop();
    server_.join();
    std::system(("rm -rf " + root_).c_str());
  }
  // A checkpoint with a pending release of mem-1 (epoch 3) and, when given,
  // a claim on mem-1 in `state`; then the state opened on it.
  void OpenWith(const PrepareState* state) {
    Checkpoint cp;
    cp.boot_id = "boot-1";
    cp.node_name = "node-a";
    cp.pending_releases = {"mem-1"};
    cp.release_epochs = {{"mem-1", 3}};
    if (state != nullptr) {
      ClaimEntry e;
      e.uid = "uid-new";
      e.ns = "default";
      e.name = "next";
      e.memory_id = "mem-1";
      e.state = *state;
      cp.claims[e.uid] = e;
    }
    ASSERT_TRUE(SaveCheckpoint(root_ + "/checkpoint.json", cp).ok());
    StateOptions so;
    so.node_name = "node-a";
    so.checkpoint_path = root_ + "/checkpoint.json";
    so.boot_id_path = root_ + "/boot_id";
    so.cdi_dir = "";
    ASSERT_TRUE(DeviceState::Open(so, kube_.get(), hostd_.get(), &state_).ok());
  }
  size_t Calls() {
    std::lock_guard<std::mutex> l(mu_);
    return calls_.size();
  }
  Checkpoint Saved() {
    Checkpoint cp;
    EXPECT_TRUE(LoadCheckpoint(root_ + "/checkpoint.json", &cp).ok());
    return cp;
  }

  std::string root_;
  httplib::Server hostd_http_;
  int port_ = 0;
  std::thread server_;
  std::mutex mu_;
  std::vector<std::pair<std::string, nlohmann::json>> calls_;  // guarded by mu_
  int answer_ = 200;                                           // guarded by mu_
  std::unique_ptr<kube::Client> kube_;
  std::unique_ptr<hostd::Client> hostd_;
  std::unique_ptr<DeviceState> state_;
};

TEST_F(StateReleaseTest, ARetryNamesTheRecordedEpochAndGoesThrough) {
  OpenWith(nullptr);
  EXPECT_EQ(state_->RetryReleases(), 0);
  ASSERT_EQ(Calls(), 1u);
  EXPECT_EQ(calls_[0].first, "mem-1");
  EXPECT_EQ(calls_[0].second, nlohmann::json({{"assignEpoch", 3}}));
  EXPECT_TRUE(Saved().pending_releases.empty());
  EXPECT_TRUE(Saved().release_epochs.empty());
}

// The race the retry used to lose: a new consumer's prepare has started (its
// entry is PrepareStarted) while the release is pending. The release is not
// dropped: it is sent, and the consumer waits for the host to be added back.
TEST_F(StateReleaseTest, AStartedPrepareDoesNotCancelAPendingRelease) {
  const PrepareState started = PrepareState::kPrepareStarted;
  OpenWith(&started);
  EXPECT_EQ(state_->RetryReleases(), 0);
  ASSERT_EQ(Calls(), 1u) << "the pending release was dropped without being sent";
  EXPECT_EQ(calls_[0].second.value("assignEpoch", 0), 3);
  EXPECT_EQ(Saved().claims.count("uid-new"), 1u) << "the new claim's entry stays";
}

TEST_F(StateReleaseTest, ACompletedPreparationKeepsTheNodesView) {
  const PrepareState done = PrepareState::kPrepareCompleted;
  OpenWith(&done);
  EXPECT_EQ(state_->RetryReleases(), 0);
  EXPECT_EQ(Calls(), 0u);
  EXPECT_TRUE(Saved().pending_releases.empty());
}

TEST_F(StateReleaseTest, SupersededIsDroppedAndAFailureIsKept) {
  {
    std::lock_guard<std::mutex> l(mu_);
    answer_ = 500;
  }
  OpenWith(nullptr);
  EXPECT_EQ(state_->RetryReleases(), 1) << "a failed release stays pending";
  EXPECT_EQ(Saved().release_epochs.at("mem-1"), 3u);
  {
    std::lock_guard<std::mutex> l(mu_);
    answer_ = 409;  // hostd: superseded, the manager refused the stale unassign
  }
  EXPECT_EQ(state_->RetryReleases(), 0);
  EXPECT_EQ(Calls(), 2u);
  EXPECT_TRUE(Saved().pending_releases.empty());
}

}  // namespace
}  // namespace cxlkv::dra
