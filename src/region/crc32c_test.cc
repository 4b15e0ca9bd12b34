// Copyright cxlkv authors.
//
// Every CRC32C implementation the build has computes the same checksum: the
// one in use, the portable table (the fallback, built everywhere) and, on
// x86, the SSE4.2 instruction where the CPU has it.
#include "crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "crc32c_arch.h"

namespace cxlkv::internal {
namespace {

uint32_t Whole(uint32_t (*extend)(uint32_t, const void*, size_t), const void* p, size_t n) {
  return Crc32cFinish(extend(kCrc32cInit, p, n));
}

std::vector<uint32_t (*)(uint32_t, const void*, size_t)> Implementations() {
  std::vector<uint32_t (*)(uint32_t, const void*, size_t)> v = {&Crc32cExtend,
                                                                &Crc32cExtendPortable};
#if defined(CXLKV_ARCH_X86) && CXLKV_ARCH_X86
  if (Crc32cX86Supported()) v.push_back(&Crc32cExtendSse42);
#endif
  return v;
}

TEST(Crc32cTest, KnownVectorsForEveryImplementation) {
  // RFC 3720 B.4 and the common check value.
  const std::string check = "123456789";
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  for (auto extend : Implementations()) {
    EXPECT_EQ(Whole(extend, check.data(), check.size()), 0xE3069283u);
    EXPECT_EQ(Whole(extend, zeros.data(), 32), 0x8A9136AAu);
    EXPECT_EQ(Whole(extend, ones.data(), 32), 0x62A8AB43u);
    EXPECT_EQ(Whole(extend, inc.data(), 32), 0x46DD794Eu);
    EXPECT_EQ(Whole(extend, nullptr, 0), 0u);
  }
}

TEST(Crc32cTest, ImplementationsAgreeOnEveryLengthAlignmentAndSplit) {
  std::mt19937_64 rng(42);
  std::vector<uint8_t> buf(4096 + 16);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const auto impls = Implementations();
  for (size_t off = 0; off < 8; ++off) {
    for (size_t n : {0, 1, 7, 8, 9, 15, 16, 63, 64, 65, 1000, 4096}) {
      const uint32_t want = Whole(&Crc32cExtendPortable, buf.data() + off, n);
      for (auto extend : impls) {
        EXPECT_EQ(Whole(extend, buf.data() + off, n), want) << "off " << off << " n " << n;
        // Streaming over two chunks gives the same checksum.
        const size_t cut = n / 3;
        uint32_t s = extend(kCrc32cInit, buf.data() + off, cut);
        s = extend(s, buf.data() + off + cut, n - cut);
        EXPECT_EQ(Crc32cFinish(s), want) << "off " << off << " n " << n << " cut " << cut;
      }
    }
  }
}

TEST(Crc32cTest, ImplementationNameIsOneOfTheKnown) {
  const std::string name = Crc32cImplementation();
  EXPECT_TRUE(name == "isa-l" || name == "sse4.2" || name == "table") << name;
#if defined(CXLKV_HAVE_ISAL)
  EXPECT_EQ(name, "isa-l");
#endif
}

}  // namespace
}  // namespace cxlkv::internal
