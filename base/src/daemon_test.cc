// Copyright cxlkv authors.
#include "cxlkv/base/daemon.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace cxlkv::base {
namespace {

TEST(DaemonTest, ListenAddressIsAddrColonPort) {
  std::string host;
  int port = -1;
  ASSERT_TRUE(ParseListenAddress("127.0.0.1:8080", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 8080);
  ASSERT_TRUE(ParseListenAddress("0.0.0.0:0", &host, &port).ok());
  EXPECT_EQ(port, 0);
  for (const char* bad : {"8080", "host:", "host:x", "host:70000", "host:-1", "host:80x"}) {
    Status s = ParseListenAddress(bad, &host, &port);
    EXPECT_TRUE(s.IsInvalidArgument()) << bad;
    EXPECT_EQ(s.message(), std::string("--listen ") + bad + ": expected ADDR:PORT");
  }
}

TEST(DaemonTest, StopSignalRunsTheCallbackOnceAndJoinWithoutOneDoesNot) {
  std::atomic<int> got{0};
  {
    StopSignals signals;
    signals.Watch([&](int sig) { got = sig; });
    kill(getpid(), SIGTERM);
    for (int i = 0; i < 200 && got == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    signals.Join();
  }
  EXPECT_EQ(got, SIGTERM);
  got = 0;
  {
    StopSignals signals;
    signals.Watch([&](int sig) { got = sig; });
    signals.Join();
  }
  EXPECT_EQ(got, 0) << "Join's own wake-up is not a stop";
}

}  // namespace
}  // namespace cxlkv::base
