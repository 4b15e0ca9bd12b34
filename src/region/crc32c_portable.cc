// Copyright cxlkv authors.
//
// CRC32C without any CPU extension: the reflected Castagnoli polynomial
// 0x82F63B78 (RFC 3720 appendix B.4), one table lookup per byte.
#include <array>

#include "crc32c_arch.h"

namespace cxlkv::internal {
namespace {

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

}  // namespace

uint32_t Crc32cExtendPortable(uint32_t state, const void* data, size_t n) {
  auto* p = static_cast<const unsigned char*>(data);
  while (n-- > 0) state = (state >> 8) ^ kTable[(state ^ *p++) & 0xFFu];
  return state;
}

}  // namespace cxlkv::internal
