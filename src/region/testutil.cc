// Copyright cxlkv authors.
#include "testutil.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

namespace cxlkv::test {

ScratchRegion::ScratchRegion(const std::string& tag) {
  static std::atomic<int> counter{0};
  ::mkdir("/dev/shm/cxlkv-test", 0770);
  path_ = "/dev/shm/cxlkv-test/" + tag + "-" + std::to_string(::getpid()) + "-" +
          std::to_string(counter.fetch_add(1));
  ::unlink(path_.c_str());
}

ScratchRegion::~ScratchRegion() { ::unlink(path_.c_str()); }

RegionOptions TestOptions(uint64_t size, uint64_t slot_size) {
  RegionOptions o;
  o.size = size;
  o.config.slot_size = slot_size;
  o.config.hash_algorithm = "test";
  o.config.hash_seed_fingerprint = 42;
  o.heartbeat_interval_ns = 5'000'000;
  o.liveness_timeout_ns = 150'000'000;
  o.format_stall_ns = 300'000'000;
  o.prefault = Prefault::kNone;
  return o;
}

std::unique_ptr<Region> MustOpen(const std::string& path, const RegionOptions& o) {
  std::unique_ptr<Region> r;
  Status s = Region::Open(path, o, &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return r;
}

void FillPattern(uint64_t id, void* dst, size_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  uint64_t x = id * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(x >> (8 * (i % 8)));
}

pid_t Spawn(const std::function<int()>& fn) {
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 1;
    try {
      rc = fn();
    } catch (...) {
      rc = 99;
    }
    ::_exit(rc);
  }
  return pid;
}

int Reap(pid_t pid) {
  int st = 0;
  if (::waitpid(pid, &st, 0) != pid) return -1;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}

bool WaitStopped(pid_t pid) {
  int st = 0;
  for (;;) {
    if (::waitpid(pid, &st, WUNTRACED) != pid) return false;
    if (WIFSTOPPED(st)) return true;
    if (WIFEXITED(st) || WIFSIGNALED(st)) return false;
  }
}

void* SharedAnonBytes(size_t n) {
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  return p;
}

bool WaitFor(const std::function<bool()>& cond, int limit_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  while (!cond()) {
    if (std::chrono::steady_clock::now() >= end) return cond();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace cxlkv::test
