// Copyright cxlkv authors.
//
// Block keys and namespaces: how a KV block is named inside a region.
//
// A key is 128 bits taken from the block hash ([Fan26] §3.2 used 64, and
// could alias). A namespace says whose block it is (model, dtype, KV layout,
// TP rank, KV group): the same key in two namespaces names two different
// blocks, so models or tenants with equal slot geometry can share a region
// without ever colliding.
#ifndef CXLKV_KEY_H_
#define CXLKV_KEY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cxlkv/status.h"

namespace cxlkv {

struct BlockKey {
  uint64_t hi = 0;
  uint64_t lo = 0;

  // The first 16 bytes of a block hash (big-endian: bytes[0] is the most
  // significant byte of `hi`). REQUIRES: n >= 16.
  static BlockKey FromBytes(const uint8_t* bytes, size_t n);
  // 32 hex digits (the first 128 bits of a hex digest; longer input is
  // truncated, shorter is kInvalidArgument).
  static Status FromHex(std::string_view hex, BlockKey* out);
  // Mixes a 64-bit id into a well-spread 128-bit key (for traces whose block
  // ids are small integers).
  static BlockKey FromId(uint64_t id);
  std::string ToHex() const;

  friend bool operator==(const BlockKey& a, const BlockKey& b) {
    return a.hi == b.hi && a.lo == b.lo;
  }
};

// Identity of the producer of a block. Two descriptors are the same
// namespace only if every field is equal.
struct NamespaceDesc {
  std::string model;      // e.g. "Qwen/Qwen2.5-7B-Instruct"; at most 127 bytes
  std::string dtype;      // e.g. "bfloat16"; at most 23 bytes
  std::string kv_layout;  // e.g. "NHD/28x2x512x4x128"; at most 63 bytes
  uint32_t tp_rank = 0;   // tensor-parallel rank whose shard the block holds
  uint32_t kv_group = 0;  // KV-cache group (hybrid models have several)

  std::string ToString() const;
};

// Handle to a namespace registered in one region; valid for that region only.
using NamespaceId = uint32_t;

}  // namespace cxlkv

#endif  // CXLKV_KEY_H_
