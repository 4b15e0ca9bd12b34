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
std::atomic<bool> g_eviction_clock_held{false};
// Per clock, the reading it stands at while held (0: not read since the
// hold; a reading of 0 is stored as 1).
std::atomic<uint32_t> g_eviction_clock_at[2]{};
}  // namespace

uint32_t EvictionClockSkewMs() { return g_eviction_clock_skew.load(std::memory_order_relaxed); }

void AdvanceEvictionClock(uint32_t ms) {
  g_eviction_clock_skew.fetch_add(ms, std::memory_order_relaxed);
}

void HoldEvictionClock(bool hold) {
  for (auto& at : g_eviction_clock_at) at.store(0, std::memory_order_relaxed);
  g_eviction_clock_held.store(hold, std::memory_order_seq_cst);
}

uint32_t EvictionClock(EvictionClockId clock, uint32_t real_ms) {
  const uint32_t skew = EvictionClockSkewMs();
  if (!g_eviction_clock_held.load(std::memory_order_seq_cst)) return real_ms + skew;
  std::atomic<uint32_t>& at = g_eviction_clock_at[clock];
  uint32_t first = 0;
  // The first reader since the hold fixes the clock; the others take its.
  at.compare_exchange_strong(first, real_ms == 0 ? 1 : real_ms, std::memory_order_relaxed);
  return at.load(std::memory_order_relaxed) + skew;
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
