// Copyright cxlkv authors.
//
// CPU hints the engine's hot paths use, one definition per architecture and
// a portable fallback (-DCXLKV_GENERIC_ARCH=ON builds the engine with the
// fallback only; the region_generic_arch test compiles it). Hints only:
// none of them changes what the code computes.
#ifndef CXLKV_SRC_REGION_CPU_H_
#define CXLKV_SRC_REGION_CPU_H_

namespace cxlkv::internal {

// Tells the core we are spinning on a shared word (the holder's cache line
// is left alone for a few cycles; on SMT the sibling thread runs).
inline void CpuRelax() {
#if defined(CXLKV_GENERIC_ARCH) && CXLKV_GENERIC_ARCH
  // Nothing: the spin loops bound their spins and then yield to the OS.
#elif defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();                           // PAUSE (SSE2, every x86-64)
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

// Starts loading the cache line at `p` for reading (GCC and Clang lower
// the builtin to each architecture's prefetch, or to nothing).
inline void PrefetchForRead(const void* p) {
#if defined(CXLKV_GENERIC_ARCH) && CXLKV_GENERIC_ARCH
  (void)p;
#else
  __builtin_prefetch(p, /*rw=*/0, /*locality=*/3);  // as _mm_prefetch(_MM_HINT_T0)
#endif
}

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_REGION_CPU_H_
