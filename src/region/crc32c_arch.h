// Copyright cxlkv authors.
//
// The CRC32C implementations behind Crc32cExtend where the build has no
// ISA-L (crc32c.cc picks one at run time): the portable one is built everywhere and is the
// reference the others are tested against (crc32c_test.cc).
#ifndef CXLKV_SRC_REGION_CRC32C_ARCH_H_
#define CXLKV_SRC_REGION_CRC32C_ARCH_H_

#include <cstddef>
#include <cstdint>

namespace cxlkv::internal {

// crc32c_portable.cc: byte-at-a-time with a 256-entry table (any CPU).
uint32_t Crc32cExtendPortable(uint32_t state, const void* data, size_t n);

#if defined(CXLKV_ARCH_X86) && CXLKV_ARCH_X86
// crc32c_x86.cc: the SSE4.2 crc32 instruction, 8 bytes at a time.
// REQUIRES: Crc32cX86Supported().
uint32_t Crc32cExtendSse42(uint32_t state, const void* data, size_t n);
bool Crc32cX86Supported();
#endif

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_REGION_CRC32C_ARCH_H_
