// Copyright cxlkv authors.
//
// CRC32C with the SSE4.2 crc32 instruction (x86 only; CMake builds this
// file for x86 targets unless -DCXLKV_GENERIC_ARCH=ON). Only this function
// is compiled for SSE4.2 (the target attribute), so the rest of the engine
// runs on any x86-64, and crc32c.cc calls it only where the CPU has it.
#include <nmmintrin.h>

#include <cstring>

#include "crc32c_arch.h"

namespace cxlkv::internal {

bool Crc32cX86Supported() { return __builtin_cpu_supports("sse4.2"); }

__attribute__((target("sse4.2"))) uint32_t Crc32cExtendSse42(uint32_t state, const void* data,
                                                             size_t n) {
  auto* p = static_cast<const unsigned char*>(data);
  uint64_t c = state;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

}  // namespace cxlkv::internal
