// Copyright cxlkv authors.
//
// The CRC32C arithmetic the GPU kernels use, checked on the CPU against the
// region engine's own CRC32C (the one CommitWrite and Load use): if these
// hold, a GPU checksum and a CPU checksum of the same bytes agree.
#include "crc32c_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "crc32c.h"

namespace cxlkv::internal {
namespace {

struct Tables {
  uint32_t t[8][256];
  uint32_t pow8[64];
  Tables() {
    FillSlicingTables(t);
    FillXPow8Table(pow8);
  }
};

// Raw CRC (from 0, not inverted) a byte at a time with table t[0], the
// kernels' tail loop.
uint32_t RawBytewise(const Tables& tb, const uint8_t* p, size_t n) {
  uint32_t c = 0;
  for (size_t i = 0; i < n; ++i) c = (c >> 8) ^ tb.t[0][(c ^ p[i]) & 0xFF];
  return c;
}

// Raw CRC 8 bytes at a time with all eight tables, the kernels' main loop.
uint32_t RawSliced(const Tables& tb, const uint8_t* p, size_t n) {
  uint32_t c = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p + i, 4);
    std::memcpy(&hi, p + i + 4, 4);
    lo ^= c;
    const auto& t = tb.t;
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  for (; i < n; ++i) c = (c >> 8) ^ tb.t[0][(c ^ p[i]) & 0xFF];
  return c;
}

std::vector<uint8_t> Random(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(Crc32cMathTest, FinishedRawCrcMatchesCheckValue) {
  const Tables tb;
  const char* s = "123456789";
  const uint32_t raw = RawBytewise(tb, reinterpret_cast<const uint8_t*>(s), 9);
  EXPECT_EQ(FinishRaw(raw, 9, tb.pow8), 0xE3069283u);
  EXPECT_EQ(Crc32c(s, 9), 0xE3069283u);
  EXPECT_EQ(FinishRaw(0, 0, tb.pow8), Crc32c("", 0));
}

TEST(Crc32cMathTest, SlicedEqualsBytewiseAndEngineCrc) {
  const Tables tb;
  for (size_t n : {1u, 7u, 8u, 9u, 63u, 64u, 1000u, 4096u, 65537u}) {
    const auto v = Random(n, static_cast<uint32_t>(n));
    const uint32_t a = RawSliced(tb, v.data(), n);
    EXPECT_EQ(a, RawBytewise(tb, v.data(), n)) << n;
    EXPECT_EQ(FinishRaw(a, n, tb.pow8), Crc32c(v.data(), n)) << n;
  }
}

TEST(Crc32cMathTest, GfMulIsMultiplicationModP) {
  const Tables tb;
  std::mt19937 rng(7);
  for (int i = 0; i < 1000; ++i) {
    const uint32_t a = rng(), b = rng(), c = rng();
    EXPECT_EQ(GfMul(a, kGfOne), a);
    EXPECT_EQ(GfMul(a, b), GfMul(b, a));
    EXPECT_EQ(GfMul(a, b ^ c), GfMul(a, b) ^ GfMul(a, c));
    EXPECT_EQ(GfMul(GfMul(a, b), c), GfMul(a, GfMul(b, c)));
  }
  // x^(8(m+n)) = x^(8m) * x^(8n).
  for (uint64_t m : {0ull, 1ull, 3ull, 4096ull, 131072ull, 14680064ull}) {
    for (uint64_t n : {0ull, 5ull, 917504ull, (1ull << 33) + 17}) {
      EXPECT_EQ(XPow8n(m + n, tb.pow8), GfMul(XPow8n(m, tb.pow8), XPow8n(n, tb.pow8)));
    }
  }
}

// The kernels' folding: raw(A || B) = raw(A) * x^(8|B|) ^ raw(B), for any
// split, including empty sides; then finishing gives the engine's CRC.
TEST(Crc32cMathTest, CombiningPiecesEqualsWholeCrc) {
  const Tables tb;
  std::mt19937 rng(11);
  const auto v = Random(300000, 3);
  for (int trial = 0; trial < 50; ++trial) {
    const size_t n = rng() % v.size();
    // Cut [0, n) into up to 8 pieces at random points.
    std::vector<size_t> cuts = {0, n};
    for (int k = rng() % 8; k > 0; --k) cuts.push_back(n ? rng() % (n + 1) : 0);
    std::sort(cuts.begin(), cuts.end());
    uint32_t acc = 0;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      const size_t len = cuts[i + 1] - cuts[i];
      acc = GfMul(acc, XPow8n(len, tb.pow8)) ^ RawSliced(tb, v.data() + cuts[i], len);
    }
    EXPECT_EQ(FinishRaw(acc, n, tb.pow8), Crc32c(v.data(), n)) << "n=" << n;
  }
}

// The kernels' parallel form of the same identity: each part's raw CRC
// scaled by x^(8 * bytes after the part), all XORed together.
TEST(Crc32cMathTest, ScaledPartsXorToWholeCrc) {
  const Tables tb;
  std::mt19937 rng(13);
  const auto v = Random(200000, 9);
  for (int trial = 0; trial < 50; ++trial) {
    const size_t n = rng() % v.size();
    std::vector<size_t> cuts = {0, n};
    for (int k = rng() % 12; k > 0; --k) cuts.push_back(n ? rng() % (n + 1) : 0);
    std::sort(cuts.begin(), cuts.end());
    uint32_t acc = 0;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      const uint32_t part = RawSliced(tb, v.data() + cuts[i], cuts[i + 1] - cuts[i]);
      acc ^= GfMul(part, XPow8n(n - cuts[i + 1], tb.pow8));
    }
    EXPECT_EQ(FinishRaw(acc, n, tb.pow8), Crc32c(v.data(), n)) << "n=" << n;
  }
}

}  // namespace
}  // namespace cxlkv::internal
