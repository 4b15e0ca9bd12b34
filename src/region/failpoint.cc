// Copyright cxlkv authors.
#include "failpoint.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace cxlkv::internal {
namespace {

struct Point {
  std::string name;
  std::string action = "kill";
};

using Config = std::vector<Point>;

const Config* Parse() {
  const char* env = std::getenv("CXLKV_FAILPOINT");
  if (env == nullptr || *env == '\0') return nullptr;
  auto* c = new Config();  // lives for the process
  std::string s(env);
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(start, end - start);
    if (!item.empty()) {
      Point p;
      const size_t colon = item.find(':');
      p.name = item.substr(0, colon);
      if (colon != std::string::npos) p.action = item.substr(colon + 1);
      c->push_back(std::move(p));
    }
    start = end + 1;
  }
  return c;
}

std::atomic<const Config*> g_config{Parse()};

const Config* Load() { return g_config.load(std::memory_order_relaxed); }

}  // namespace

void ReloadFailpoints() { g_config.store(Parse(), std::memory_order_relaxed); }

bool FailpointsEnabled() { return Load() != nullptr; }

namespace {
std::atomic<uint32_t> g_eviction_clock_skew{0};
}  // namespace

uint32_t EvictionClockSkewMs() { return g_eviction_clock_skew.load(std::memory_order_relaxed); }

void AdvanceEvictionClock(uint32_t ms) {
  g_eviction_clock_skew.fetch_add(ms, std::memory_order_relaxed);
}

void FailpointHit(const char* name) {
  const Config* c = Load();
  if (c == nullptr) return;
  for (const Point& p : *c) {
    if (p.name != name) continue;
    if (p.action == "kill") {
      ::raise(SIGKILL);
    } else if (p.action == "stop") {
      ::raise(SIGSTOP);
    } else if (p.action.rfind("sleep=", 0) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(p.action.c_str() + 6)));
    }
  }
}

}  // namespace cxlkv::internal
