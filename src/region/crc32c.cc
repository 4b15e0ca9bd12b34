// Copyright cxlkv authors.
//
// Picks the CRC32C implementation once per process: ISA-L where the build
// found it, else the SSE4.2 instruction on an x86 CPU that has it, else the
// portable table (crc32c_arch.h).
#include "crc32c.h"

#if defined(CXLKV_HAVE_ISAL)
#include <isa-l/crc.h>
#endif

#include "crc32c_arch.h"

namespace cxlkv::internal {

#if defined(CXLKV_HAVE_ISAL)

// Direct, no dispatch: ISA-L picks its own kernel for the CPU.
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

#else

namespace {

using ExtendFn = uint32_t (*)(uint32_t, const void*, size_t);

struct Implementation {
  ExtendFn extend;
  const char* name;
};

Implementation Pick() {
#if defined(CXLKV_ARCH_X86) && CXLKV_ARCH_X86
  if (Crc32cX86Supported()) return {&Crc32cExtendSse42, "sse4.2"};
#endif
  return {&Crc32cExtendPortable, "table"};
}

const Implementation& Chosen() {
  static const Implementation chosen = Pick();
  return chosen;
}

}  // namespace

uint32_t Crc32cExtend(uint32_t state, const void* data, size_t n) {
  return Chosen().extend(state, data, n);
}

const char* Crc32cImplementation() { return Chosen().name; }

#endif

}  // namespace cxlkv::internal
