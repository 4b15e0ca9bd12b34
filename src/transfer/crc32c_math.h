// Copyright cxlkv authors.
//
// CRC32C arithmetic shared by the GPU kernels and the host: the byte tables
// of slicing-by-8 and multiplication in GF(2)[x] modulo the Castagnoli
// polynomial, which lets CRCs of separately checksummed pieces be combined.
//
// Representation: bit-reflected, as the CRC register itself. Bit 31 holds the
// coefficient of x^0 and bit 0 that of x^31, so "multiply by x" is a right
// shift, reduced by xoring the reflected polynomial 0x82F63B78.
//
// "Raw" CRCs below start from 0 and are not inverted. For a message M of L
// bytes: CRC32C(M) = raw(M) ^ (0xFFFFFFFF * x^(8L)) ^ 0xFFFFFFFF, and for
// M = A || B: raw(M) = raw(A) * x^(8|B|) ^ raw(B). Both follow from the CRC
// being linear over GF(2).
#ifndef CXLKV_SRC_TRANSFER_CRC32C_MATH_H_
#define CXLKV_SRC_TRANSFER_CRC32C_MATH_H_

#include <cstdint>

#if defined(__CUDACC__)
#define CXLKV_HD __host__ __device__ __forceinline__
#else
#define CXLKV_HD inline
#endif

namespace cxlkv::internal {

inline constexpr uint32_t kCrc32cPolyReflected = 0x82F63B78u;
inline constexpr uint32_t kGfOne = 0x80000000u;  // x^0

// a * b mod P.
CXLKV_HD uint32_t GfMul(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (int i = 0; i < 32; ++i) {
    // a's bit 31-i is the coefficient of x^i; b holds b * x^i at step i.
    if (a & (kGfOne >> i)) product ^= b;
    b = (b & 1u) ? (b >> 1) ^ kCrc32cPolyReflected : (b >> 1);
  }
  return product;
}

// x^(8n) mod P, from pow8[k] = x^(8 * 2^k) mod P (k = 0..63).
CXLKV_HD uint32_t XPow8n(uint64_t n, const uint32_t* pow8) {
  uint32_t r = kGfOne;
  for (int k = 0; n != 0; ++k, n >>= 1) {
    if (n & 1u) r = GfMul(r, pow8[k]);
  }
  return r;
}

// Fills pow8[0..63] for XPow8n.
inline void FillXPow8Table(uint32_t* pow8) {
  pow8[0] = kGfOne >> 8;  // x^8: degree below 32, needs no reduction
  for (int k = 1; k < 64; ++k) pow8[k] = GfMul(pow8[k - 1], pow8[k - 1]);
}

// Fills the 8 x 256 slicing tables: t[0] is the byte-at-a-time table, t[k]
// advances a byte through k further zero bytes.
inline void FillSlicingTables(uint32_t (*t)[256]) {
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int b = 0; b < 8; ++b) c = (c & 1u) ? (c >> 1) ^ kCrc32cPolyReflected : (c >> 1);
    t[0][i] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFFu];
  }
}

// CRC32C of a message of `len` bytes whose raw CRC is `raw`.
CXLKV_HD uint32_t FinishRaw(uint32_t raw, uint64_t len, const uint32_t* pow8) {
  return raw ^ GfMul(0xFFFFFFFFu, XPow8n(len, pow8)) ^ 0xFFFFFFFFu;
}

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_TRANSFER_CRC32C_MATH_H_
