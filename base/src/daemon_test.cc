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

// A stand-in for an HTTP server's accept loop (what ServeGate wraps): it
// marks itself running some time after it is entered, as cpp-httplib's
// listen_after_bind() does, and its stop only acts while it runs.
struct FakeLoop {
  std::atomic<bool> running{false};
  std::atomic<bool> stop{false};
  std::atomic<int> stop_calls{0};
  void Serve(std::chrono::milliseconds start_delay) {
    std::this_thread::sleep_for(start_delay);
    running = true;
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    running = false;
  }
  void Stop() {
    ++stop_calls;
    if (running) stop = true;  // dropped otherwise, like Server::stop()
  }
};

TEST(ServeGateTest, StopBeforeServeMeansNoServe) {
  ServeGate gate;
  FakeLoop loop;
  gate.Stop([&] { return loop.running.load(); }, [&] { loop.Stop(); });
  EXPECT_FALSE(gate.Enter()) << "a stop that came first must keep the loop from starting";
  gate.Exit();
  EXPECT_EQ(loop.stop_calls, 0);
}

TEST(ServeGateTest, StopWhileTheLoopStartsWaitsForItAndStopsItOnce) {
  ServeGate gate;
  FakeLoop loop;
  std::atomic<bool> entered{false};
  std::thread server([&] {
    if (gate.Enter()) {
      entered = true;
      loop.Serve(std::chrono::milliseconds(50));  // not yet running for 50 ms
    }
    gate.Exit();
  });
  while (!entered) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The loop's own stop would be dropped now; the gate's is not.
  gate.Stop([&] { return loop.running.load(); }, [&] { loop.Stop(); });
  EXPECT_TRUE(loop.stop) << "Stop returned before the loop was stopped";
  EXPECT_EQ(loop.stop_calls, 1);
  server.join();
  // A second Stop after the serve ended returns at once and calls nothing.
  gate.Stop([&] { return loop.running.load(); }, [&] { loop.Stop(); });
  EXPECT_EQ(loop.stop_calls, 1);
}

}  // namespace
}  // namespace cxlkv::base
