// Copyright cxlkv authors.
// base::HttpClient against a real HTTP server (cpp-httplib) on loopback.
#include "cxlkv/base/http.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace cxlkv::base {
namespace {

class HttpClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Get("/ok", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content("{\"accept\":\"" + req.get_header_value("Accept") + "\",\"auth\":\"" +
                          req.get_header_value("Authorization") + "\"}",
                      "application/json");
    });
    server_.Get("/missing", [](const httplib::Request&, httplib::Response& res) {
      res.status = 404;
      res.set_content("no such thing", "text/plain");
    });
    server_.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.get_header_value("Content-Length") + "|" +
                          req.get_header_value("Content-Type") + "|" + req.body,
                      "text/plain");
    });
    server_.Patch("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content("PATCH " + req.body, "text/plain");
    });
    // A watch-like response that never ends by itself.
    server_.Get("/stream", [this](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/plain", [this](size_t, httplib::DataSink& sink) {
        while (!stopping_.load()) {
          if (!sink.write("line\n", 5)) return false;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        sink.done();
        return true;
      });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // This cpp-httplib has no wait_until_ready: poll is_running.
    for (int i = 0; i < 500 && !server_.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(server_.is_running());
  }
  void TearDown() override {
    stopping_ = true;
    server_.stop();
    thread_.join();
  }
  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

  httplib::Server server_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  int port_ = 0;
};

TEST_F(HttpClientTest, AnswersCarryStatusBodyAndHeaders) {
  HttpClient client;
  HttpRequest req;
  req.url = Url("/ok");
  req.headers.push_back("Authorization: Bearer t0k");
  HttpResponse resp;
  ASSERT_TRUE(client.Do(req, &resp).ok());
  EXPECT_EQ(resp.status, 200);
  EXPECT_EQ(resp.body, "{\"accept\":\"application/json\",\"auth\":\"Bearer t0k\"}");
  // The handle went back to the pool; a second request reuses it cleanly
  // (its options were reset: no Authorization this time).
  req.headers.clear();
  ASSERT_TRUE(client.Do(req, &resp).ok());
  EXPECT_EQ(resp.body, "{\"accept\":\"application/json\",\"auth\":\"\"}");
}

TEST_F(HttpClientTest, AnErrorStatusIsAnAnswerNotAFailure) {
  HttpClient client;
  HttpRequest req;
  req.url = Url("/missing");
  HttpResponse resp;
  ASSERT_TRUE(client.Do(req, &resp).ok());
  EXPECT_EQ(resp.status, 404);
  EXPECT_EQ(resp.body, "no such thing");
}

TEST_F(HttpClientTest, PostCarriesItsBodyAndAnEmptyOneHasAContentLength) {
  HttpClient client;
  HttpRequest req;
  req.method = "POST";
  req.url = Url("/echo");
  req.content_type = "application/json";
  req.body = "{\"a\":1}";
  HttpResponse resp;
  ASSERT_TRUE(client.Do(req, &resp).ok());
  EXPECT_EQ(resp.body, "7|application/json|{\"a\":1}");
  req.body.clear();
  ASSERT_TRUE(client.Do(req, &resp).ok());
  EXPECT_EQ(resp.body, "0|application/json|");
  // No type named: none goes out (not libcurl's form default).
  req.content_type.clear();
  ASSERT_TRUE(client.Do(req, &resp).ok());
  EXPECT_EQ(resp.body, "0||");
  // A method with a body keeps its own name (not turned into POST).
  req.method = "PATCH";
  req.body = "x";
  ASSERT_TRUE(client.Do(req, &resp).ok());
  EXPECT_EQ(resp.body, "PATCH x");
}

TEST_F(HttpClientTest, NoAnswerIsAnIOErrorNamingTheRequest) {
  HttpClient client;
  HttpRequest req;
  // A port nothing listens on: bind one, close it.
  httplib::Server probe;
  const int dead = probe.bind_to_any_port("127.0.0.1");
  probe.stop();
  req.url = "http://127.0.0.1:" + std::to_string(dead) + "/x";
  req.method = "DELETE";
  req.timeout_ms = 2000;
  HttpResponse resp;
  Status s = client.Do(req, &resp);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("DELETE " + req.url + ": "), std::string::npos) << s.message();
  EXPECT_EQ(resp.status, 0);
  EXPECT_FALSE(resp.cancelled);
}

TEST_F(HttpClientTest, TheReaderEndsAStreamWithoutAnError) {
  HttpClient client;
  HttpRequest req;
  req.url = Url("/stream");
  int lines = 0;
  req.on_data = [&lines](std::string_view chunk) {
    for (char c : chunk) lines += c == '\n';
    return lines < 3;
  };
  HttpResponse resp;
  ASSERT_TRUE(client.Do(req, &resp).ok());
  EXPECT_EQ(resp.status, 200);
  EXPECT_GE(lines, 3);
  EXPECT_TRUE(resp.body.empty());  // streamed, not buffered
}

TEST_F(HttpClientTest, TheStopFlagCancelsAStream) {
  HttpClient client;
  HttpRequest req;
  req.url = Url("/stream");
  std::atomic<bool> stop{false};
  req.stop = &stop;
  req.on_data = [](std::string_view) { return true; };
  std::thread raiser([&stop] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop = true;
  });
  // The stream never ends by itself (until TearDown): Do returning at all
  // shows the flag ended it.
  HttpResponse resp;
  Status s = client.Do(req, &resp);
  raiser.join();
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(resp.cancelled);
  EXPECT_NE(s.message().find(": stopped"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace cxlkv::base
