// Copyright cxlkv authors.
//
// Helpers shared by the sections of cxlkv-bench-gpu: fail-fast checks (a
// bench that cannot measure what it claims stops with the reason) and the
// median timer.
#ifndef CXLKV_TOOLS_BENCH_GPU_BENCH_UTIL_H_
#define CXLKV_TOOLS_BENCH_GPU_BENCH_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cuda_status.h"
#include "cxlkv/status.h"

namespace cxlkv::bench {

// "a,b,c" of unsigned integers.
inline std::vector<uint64_t> ParseList(const char* s) {
  std::vector<uint64_t> v;
  for (const char* p = s; *p;) {
    char* end;
    v.push_back(std::strtoull(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) break;
  }
  return v;
}

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "cxlkv-bench-gpu: %s\n", what.c_str());
  std::exit(1);
}
inline void Check(const Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

// Median wall seconds of fn over iters runs, after one warm-up run; `after`
// (untimed) runs after each.
inline double Median(
    int iters, const std::function<void()>& fn, const std::function<void()>& after = [] {}) {
  fn();
  after();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    after();
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace cxlkv::bench

#define CU(call) ::cxlkv::bench::Check(::cxlkv::internal::CudaStatus((call), #call), "cuda")

#endif  // CXLKV_TOOLS_BENCH_GPU_BENCH_UTIL_H_
