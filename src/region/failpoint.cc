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

namespace cxlkv::internal {
namespace {

struct Config {
  std::string name;
  std::string action = "kill";
};

const Config* Parse() {
  const char* env = std::getenv("CXLKV_FAILPOINT");
  if (env == nullptr || *env == '\0') return nullptr;
  auto* c = new Config();  // lives for the process
  std::string s(env);
  auto colon = s.find(':');
  c->name = s.substr(0, colon);
  if (colon != std::string::npos) c->action = s.substr(colon + 1);
  return c;
}

std::atomic<const Config*> g_config{Parse()};

const Config* Load() { return g_config.load(std::memory_order_relaxed); }

}  // namespace

void ReloadFailpoints() { g_config.store(Parse(), std::memory_order_relaxed); }

bool FailpointsEnabled() { return Load() != nullptr; }

void FailpointHit(const char* name) {
  const Config* c = Load();
  if (c == nullptr || c->name != name) return;
  if (c->action == "kill") {
    ::raise(SIGKILL);
  } else if (c->action == "stop") {
    ::raise(SIGSTOP);
  } else if (c->action.rfind("sleep=", 0) == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(c->action.c_str() + 6)));
  }
}

}  // namespace cxlkv::internal
