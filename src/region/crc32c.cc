// Copyright cxlkv authors.
#include "crc32c.h"

#include <climits>
#include <cstring>

#if defined(CXLKV_HAVE_ISAL)
#include <isa-l/crc.h>
#elif defined(__SSE4_2__) || defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace cxlkv::internal {

#if defined(CXLKV_HAVE_ISAL)

uint32_t Crc32cExtend(uint32_t state, const void* data, size_t n) {
  // crc32_iscsi takes an int length.
  auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const size_t chunk = n > (1u << 30) ? (1u << 30) : n;
    state = crc32_iscsi(const_cast<unsigned char*>(p), static_cast<int>(chunk), state);
    p += chunk;
    n -= chunk;
  }
  return state;
}
const char* Crc32cImplementation() { return "isa-l"; }

#elif defined(__x86_64__)

__attribute__((target("sse4.2"))) uint32_t Crc32cExtend(uint32_t state, const void* data,
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
const char* Crc32cImplementation() { return "sse4.2"; }

#else

uint32_t Crc32cExtend(uint32_t state, const void* data, size_t n) {
  auto* p = static_cast<const unsigned char*>(data);
  while (n-- > 0) {
    state ^= *p++;
    for (int k = 0; k < 8; ++k) state = (state >> 1) ^ (0x82F63B78u & (0u - (state & 1u)));
  }
  return state;
}
const char* Crc32cImplementation() { return "table"; }

#endif

}  // namespace cxlkv::internal
