// Copyright cxlkv authors.
//
// The metrics registry's text format and the status server over real HTTP.
#include "common/metrics.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "common/status_server.h"

namespace cxlkv::dra {
namespace {

TEST(MetricsTest, RendersCountersGaugesAndCumulativeHistograms) {
  Metrics m;
  m.Declare("ops_total", Metrics::Kind::kCounter, "Operations.");
  m.Declare("in_flight", Metrics::Kind::kGauge, "Running now.");
  m.Declare("latency_seconds", Metrics::Kind::kHistogram, "Latency.", {0.1, 1});
  m.Add("ops_total", {{"operation", "prepare"}, {"result", "success"}});
  m.Add("ops_total", {{"operation", "prepare"}, {"result", "success"}}, 2);
  m.Add("in_flight", {}, 1);
  m.Add("in_flight", {}, -1);
  m.Observe("latency_seconds", {{"operation", "prepare"}}, 0.05);
  m.Observe("latency_seconds", {{"operation", "prepare"}}, 0.5);
  m.Observe("latency_seconds", {{"operation", "prepare"}}, 5);
  EXPECT_EQ(m.Value("ops_total", {{"operation", "prepare"}, {"result", "success"}}), 3);
  EXPECT_EQ(m.Value("latency_seconds", {{"operation", "prepare"}}), 3);
  EXPECT_EQ(m.Value("ops_total", {{"operation", "unprepare"}, {"result", "success"}}), 0);
  EXPECT_EQ(m.Render(),
            "# HELP in_flight Running now.\n"
            "# TYPE in_flight gauge\n"
            "in_flight 0\n"
            "# HELP latency_seconds Latency.\n"
            "# TYPE latency_seconds histogram\n"
            "latency_seconds_bucket{operation=\"prepare\",le=\"0.1\"} 1\n"
            "latency_seconds_bucket{operation=\"prepare\",le=\"1\"} 2\n"
            "latency_seconds_bucket{operation=\"prepare\",le=\"+Inf\"} 3\n"
            "latency_seconds_sum{operation=\"prepare\"} 5.55\n"
            "latency_seconds_count{operation=\"prepare\"} 3\n"
            "# HELP ops_total Operations.\n"
            "# TYPE ops_total counter\n"
            "ops_total{operation=\"prepare\",result=\"success\"} 3\n");
}

TEST(MetricsTest, EscapesLabelValues) {
  EXPECT_EQ(RenderLabels({{"claim", "a\"b\\c\nd"}}), "{claim=\"a\\\"b\\\\c\\nd\"}");
  EXPECT_EQ(RenderLabels({}), "");
}

TEST(StatusServerTest, ServesMetricsAndHealthOverHttp) {
  Metrics m;
  m.Declare("up", Metrics::Kind::kGauge, "Up.");
  m.Set("up", {}, 1);
  std::atomic<bool> healthy{true};
  std::unique_ptr<StatusServer> srv;
  int port = 0;
  ASSERT_TRUE(StatusServer::Start(
                  "127.0.0.1:0", &m, [&] { return healthy ? std::string() : std::string("down"); },
                  &srv, &port)
                  .ok());
  ASSERT_GT(port, 0);
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("up 1\n"), std::string::npos) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
  r = c.Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  healthy = false;
  r = c.Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "down\n");
  r = c.Get("/nothing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  srv->Stop();
}

// A second status server on a port one listens on is refused, naming the
// port and its holder (this process); the first keeps serving.
TEST(StatusServerTest, ASecondServerOnATakenPortIsRefusedNamingTheHolder) {
  Metrics m;
  std::unique_ptr<StatusServer> first, second;
  int port = 0, again = 0;
  ASSERT_TRUE(StatusServer::Start("127.0.0.1:0", &m, nullptr, &first, &port).ok());
  const std::string listen = "127.0.0.1:" + std::to_string(port);
  Status s = StatusServer::Start(listen, &m, nullptr, &second, &again);
  ASSERT_FALSE(s.ok()) << "a second server bound " << listen;
  EXPECT_NE(s.message().find("listen " + listen + ": address already in use"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("held by pid " + std::to_string(::getpid())), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("--metrics-listen"), std::string::npos) << s.ToString();
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  first->Stop();
}

TEST(StatusServerTest, RefusesABadAddress) {
  Metrics m;
  std::unique_ptr<StatusServer> srv;
  int port = 0;
  EXPECT_TRUE(StatusServer::Start("no-port", &m, nullptr, &srv, &port).IsInvalidArgument());
}

}  // namespace
}  // namespace cxlkv::dra
