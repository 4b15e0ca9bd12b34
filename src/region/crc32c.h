// Copyright cxlkv authors.
//
// CRC32C (Castagnoli), the per-slot checksum: ISA-L's crc32_iscsi when the
// build found it (CXLKV_HAVE_ISAL), else the SSE4.2 crc32 instruction on an
// x86 CPU that has it (the GPU machine's image has no ISA-L headers), else a
// portable table (crc32c_arch.h).
#ifndef CXLKV_SRC_REGION_CRC32C_H_
#define CXLKV_SRC_REGION_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace cxlkv::internal {

// Streaming form: state = Crc32cExtend(state, data, n) over consecutive
// chunks starting from kCrc32cInit; Crc32cFinish(state) is the checksum.
inline constexpr uint32_t kCrc32cInit = 0xFFFFFFFFu;
uint32_t Crc32cExtend(uint32_t state, const void* data, size_t n);
inline uint32_t Crc32cFinish(uint32_t state) { return state ^ 0xFFFFFFFFu; }

// CRC32C of one buffer; Crc32c("123456789", 9) == 0xE3069283.
inline uint32_t Crc32c(const void* data, size_t n) {
  return Crc32cFinish(Crc32cExtend(kCrc32cInit, data, n));
}

// Name of the implementation in use: "isa-l", "sse4.2" or "table".
const char* Crc32cImplementation();

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_REGION_CRC32C_H_
