// Copyright cxlkv authors.
//
// The visibility layer: every load, store, flush and invalidate that the
// engine makes on region memory in coherence=software mode goes through one
// Visibility object (docs/coherence.md, "The protocol"). On real hardware it
// is the CPU's own cache maintenance (x86.cc: CLWB / CLFLUSHOPT / CLFLUSH and
// SFENCE / MFENCE, chosen by CPUID at run time); in tests it can be wrapped
// to count every call (CountingVisibility) or replaced by an emulator that
// gives each simulated host a private cache of 64-byte lines which reach
// shared memory only on Flush or at random moments and are refreshed only on
// Invalidate (issue 14's non-coherence emulator).
//
// Addresses passed to the region-side arguments point into the mapped
// region; `n` is in bytes. Lines are 64 bytes (kLineBytes): Flush and
// Invalidate act on every line that [p, p + n) touches, whole lines.
// Word loads and stores (Load64 ...) REQUIRE natural alignment and never
// cross a line.
//
// Semantics an implementation must give (what the protocol relies on):
//  - Store*/CopyToRegion change this host's view at once; other hosts may
//    not see them until the lines are flushed.
//  - Flush(p, n) followed by StoreFence(): the lines' current bytes reach
//    shared memory before any store this host issues after the fence.
//  - Invalidate(p, n) followed by FullFence(): the next load of those lines
//    reads shared memory. Invalidating a line this host holds dirty writes
//    it back first (as CLFLUSH/CLFLUSHOPT do).
//  - A line reaches shared memory whole.
//
// Arm64 is not supported: its cache maintenance (DC CVAC / DC CIVAC, DSB)
// has not been built and tested here (no qemu-user run), so NewCpuVisibility
// returns null there and software mode is refused with kUnsupported.
//
// Thread-safety: the CPU implementation and CountingVisibility are safe for
// concurrent use by any number of threads (counters are relaxed atomics). An
// emulator states its own rules; the engine calls one Visibility from all
// the threads of its process.
#ifndef CXLKV_SRC_REGION_VISIBILITY_VISIBILITY_H_
#define CXLKV_SRC_REGION_VISIBILITY_VISIBILITY_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace cxlkv::internal {

inline constexpr size_t kLineBytes = 64;

class Visibility {
 public:
  virtual ~Visibility() = default;

  // A short name for reports: "x86-clwb", "x86-clflushopt", "x86-clflush",
  // "counting(<inner>)", or the emulator's.
  virtual const char* Name() const = 0;

  // Called once by the engine with the whole mapped region before any other
  // call, so an emulator can size its line tables. [base, base + len).
  virtual void Attach(uint8_t* base, uint64_t len) {
    (void)base;
    (void)len;
  }

  // ---- Loads and stores of region memory ----
  virtual uint64_t Load64(const void* p) = 0;
  virtual uint32_t Load32(const void* p) = 0;
  virtual void Store64(void* p, uint64_t v) = 0;
  virtual void Store32(void* p, uint32_t v) = 0;
  // Region bytes -> process memory, and back. Any alignment, any length.
  virtual void CopyFromRegion(void* dst, const void* region_src, size_t n) = 0;
  virtual void CopyToRegion(void* region_dst, const void* src, size_t n) = 0;

  // ---- Cache maintenance ----
  // Writes back the lines of [p, p + n) (they may stay cached).
  virtual void Flush(const void* p, size_t n) = 0;
  // Drops this host's cached copies of the lines of [p, p + n).
  virtual void Invalidate(const void* p, size_t n) = 0;
  // Orders earlier stores and flushes before later stores (x86: SFENCE).
  virtual void StoreFence() = 0;
  // Orders every earlier load, store, flush and invalidate before every
  // later one (x86: MFENCE).
  virtual void FullFence() = 0;
};

// The CPU's own implementation for this build's architecture, or null where
// there is none (arm64, -DCXLKV_GENERIC_ARCH=ON builds): software mode is
// then refused. The object is stateless; one per process is enough.
std::unique_ptr<Visibility> NewCpuVisibility();

// Every call to the inner Visibility, counted. For tests (a flush or
// invalidate site that is removed shows as a missing count) and for the
// bench's per-operation costs.
class CountingVisibility final : public Visibility {
 public:
  struct Counts {
    uint64_t loads = 0, stores = 0;         // word loads / stores
    uint64_t copy_in_bytes = 0;             // CopyToRegion
    uint64_t copy_out_bytes = 0;            // CopyFromRegion
    uint64_t flushes = 0, flush_lines = 0;  // Flush calls / lines they touch
    uint64_t invalidates = 0, invalidate_lines = 0;
    uint64_t store_fences = 0, full_fences = 0;
  };

  // REQUIRES: inner != null. Takes ownership.
  explicit CountingVisibility(std::unique_ptr<Visibility> inner);

  const char* Name() const override { return name_.c_str(); }
  void Attach(uint8_t* base, uint64_t len) override { inner_->Attach(base, len); }
  uint64_t Load64(const void* p) override;
  uint32_t Load32(const void* p) override;
  void Store64(void* p, uint64_t v) override;
  void Store32(void* p, uint32_t v) override;
  void CopyFromRegion(void* dst, const void* region_src, size_t n) override;
  void CopyToRegion(void* region_dst, const void* src, size_t n) override;
  void Flush(const void* p, size_t n) override;
  void Invalidate(const void* p, size_t n) override;
  void StoreFence() override;
  void FullFence() override;

  // A snapshot of the counts so far, and a reset to zero.
  Counts counts() const;
  void Reset();

 private:
  std::unique_ptr<Visibility> inner_;
  std::string name_;
  std::atomic<uint64_t> loads_{0}, stores_{0}, copy_in_{0}, copy_out_{0}, flushes_{0},
      flush_lines_{0}, invalidates_{0}, invalidate_lines_{0}, store_fences_{0}, full_fences_{0};
};

// Number of 64-byte lines that [p, p + n) touches (0 for n == 0).
inline uint64_t LinesTouched(const void* p, size_t n) {
  if (n == 0) return 0;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return ((a + n - 1) / kLineBytes) - (a / kLineBytes) + 1;
}

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_REGION_VISIBILITY_VISIBILITY_H_
