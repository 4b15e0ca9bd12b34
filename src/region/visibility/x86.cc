// Copyright cxlkv authors.
//
// The x86 visibility layer: CLWB / CLFLUSHOPT / CLFLUSH and SFENCE / MFENCE
// (Intel SDM vol. 2A, "CLFLUSHOPT", "CLWB"; vol. 3A §11.12 ordering of
// CLFLUSHOPT and CLWB: they are ordered by SFENCE/MFENCE, not by ordinary
// stores, so every Flush in the protocol is followed by a fence).
// CPUID decides at run time: leaf 7.0 EBX bit 24 CLWB, bit 23 CLFLUSHOPT;
// leaf 1 EDX bit 19 CLFLUSH (every x86-64 has it).
#include <cpuid.h>
#include <immintrin.h>

#include <cstring>

#include "visibility.h"

namespace cxlkv::internal {
namespace {

enum class FlushInsn { kClwb, kClflushopt, kClflush };

struct CpuFlushSupport {
  bool clwb = false;
  bool clflushopt = false;
};

CpuFlushSupport ProbeCpu() {
  CpuFlushSupport s;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    s.clwb = (b >> 24) & 1;
    s.clflushopt = (b >> 23) & 1;
  }
  return s;
}

__attribute__((target("clwb"))) void ClwbRange(const void* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{kLineBytes - 1};
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  for (uintptr_t l = a; l < end; l += kLineBytes) _mm_clwb(reinterpret_cast<void*>(l));
}

__attribute__((target("clflushopt"))) void ClflushoptRange(const void* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{kLineBytes - 1};
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  for (uintptr_t l = a; l < end; l += kLineBytes) _mm_clflushopt(reinterpret_cast<void*>(l));
}

void ClflushRange(const void* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{kLineBytes - 1};
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  for (uintptr_t l = a; l < end; l += kLineBytes) _mm_clflush(reinterpret_cast<void*>(l));
}

// Reads of region bytes race, by design, with another thread's rewrite of
// the same slot: the protocol re-reads the state word (and checks the CRC)
// afterwards. Under ThreadSanitizer the copy is a byte loop outside its
// instrumentation, as the hardware-mode reader's copy is (read.cc).
#if defined(__SANITIZE_THREAD__) || defined(CXLKV_TSAN)
__attribute__((no_sanitize("thread"))) void CopyOut(void* dst, const void* src, size_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const volatile uint8_t*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = s[i];
}
#else
void CopyOut(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }
#endif

class X86Visibility final : public Visibility {
 public:
  explicit X86Visibility(CpuFlushSupport s)
      : flush_(s.clwb ? FlushInsn::kClwb
                      : (s.clflushopt ? FlushInsn::kClflushopt : FlushInsn::kClflush)),
        inval_opt_(s.clflushopt) {}

  const char* Name() const override {
    switch (flush_) {
      case FlushInsn::kClwb:
        return inval_opt_ ? "x86-clwb+clflushopt" : "x86-clwb+clflush";
      case FlushInsn::kClflushopt:
        return "x86-clflushopt";
      case FlushInsn::kClflush:
        break;
    }
    return "x86-clflush";
  }

  // Word accesses are atomic so that threads and processes of one host
  // (which are coherent with each other) stay race-free; ordering between
  // hosts comes from the fences only, so relaxed would do there.
  uint64_t Load64(const void* p) override {
    return __atomic_load_n(static_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE);
  }
  uint32_t Load32(const void* p) override {
    return __atomic_load_n(static_cast<const uint32_t*>(p), __ATOMIC_ACQUIRE);
  }
  void Store64(void* p, uint64_t v) override {
    __atomic_store_n(static_cast<uint64_t*>(p), v, __ATOMIC_RELEASE);
  }
  void Store32(void* p, uint32_t v) override {
    __atomic_store_n(static_cast<uint32_t*>(p), v, __ATOMIC_RELEASE);
  }
  void CopyFromRegion(void* dst, const void* src, size_t n) override { CopyOut(dst, src, n); }
  void CopyToRegion(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }

  void Flush(const void* p, size_t n) override {
    if (n == 0) return;
    switch (flush_) {
      case FlushInsn::kClwb:
        ClwbRange(p, n);
        return;
      case FlushInsn::kClflushopt:
        ClflushoptRange(p, n);
        return;
      case FlushInsn::kClflush:
        ClflushRange(p, n);
        return;
    }
  }
  // CLWB may keep the line cached, so it cannot invalidate.
  void Invalidate(const void* p, size_t n) override {
    if (n == 0) return;
    if (inval_opt_) {
      ClflushoptRange(p, n);
    } else {
      ClflushRange(p, n);
    }
  }
  void StoreFence() override { _mm_sfence(); }
  void FullFence() override { _mm_mfence(); }

 private:
  const FlushInsn flush_;
  const bool inval_opt_;
};

}  // namespace

std::unique_ptr<Visibility> NewCpuVisibility() {
  return std::make_unique<X86Visibility>(ProbeCpu());
}

}  // namespace cxlkv::internal
