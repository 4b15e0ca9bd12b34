// Copyright cxlkv authors.
//
// The namespace table: descriptors stored in full in the region, found by
// open addressing from a hash of the descriptor. Two processes registering
// the same descriptor start probing at the same entry; the one that loses
// the claim waits for the winner's READY and finds the match, so one
// descriptor never gets two ids. Entries are never removed.
#include <chrono>
#include <cstring>
#include <thread>

#include "crc32c.h"
#include "region_impl.h"

namespace cxlkv::internal {
namespace {

using Image = NamespaceImage;  // the descriptor fields as stored

Image MakeImage(const NamespaceDesc& d) { return MakeNamespaceImage(d); }

// Reads a record's descriptor with relaxed atomic byte loads (another
// process may be writing it), for comparison and checksum.
Image ReadImage(const NamespaceRecord& r) {
  Image im;
  auto load = [](const char* src, char* dst, size_t n) {
    for (size_t i = 0; i < n; ++i)
      dst[i] = reinterpret_cast<const std::atomic<char>*>(src + i)->load(std::memory_order_relaxed);
  };
  im.tp_rank =
      reinterpret_cast<const std::atomic<uint32_t>*>(&r.tp_rank)->load(std::memory_order_relaxed);
  im.kv_group =
      reinterpret_cast<const std::atomic<uint32_t>*>(&r.kv_group)->load(std::memory_order_relaxed);
  load(r.model, im.model, sizeof im.model);
  load(r.dtype, im.dtype, sizeof im.dtype);
  load(r.kv_layout, im.kv_layout, sizeof im.kv_layout);
  return im;
}

void WriteImage(NamespaceRecord& r, const Image& im) {
  auto store = [](char* dst, const char* src, size_t n) {
    for (size_t i = 0; i < n; ++i)
      reinterpret_cast<std::atomic<char>*>(dst + i)->store(src[i], std::memory_order_relaxed);
  };
  reinterpret_cast<std::atomic<uint32_t>*>(&r.tp_rank)
      ->store(im.tp_rank, std::memory_order_relaxed);
  reinterpret_cast<std::atomic<uint32_t>*>(&r.kv_group)
      ->store(im.kv_group, std::memory_order_relaxed);
  store(r.model, im.model, sizeof im.model);
  store(r.dtype, im.dtype, sizeof im.dtype);
  store(r.kv_layout, im.kv_layout, sizeof im.kv_layout);
  reinterpret_cast<std::atomic<uint32_t>*>(&r.desc_crc)
      ->store(Crc32c(&im, sizeof im), std::memory_order_relaxed);
}

bool Matches(const NamespaceRecord& r, const Image& want) {
  Image got = ReadImage(r);
  const uint32_t stored =
      reinterpret_cast<const std::atomic<uint32_t>*>(&r.desc_crc)->load(std::memory_order_relaxed);
  // A damaged record never matches (and is skipped), so a corrupted table
  // cannot merge two namespaces.
  return std::memcmp(&got, &want, sizeof got) == 0 && Crc32c(&got, sizeof got) == stored;
}

}  // namespace

NamespaceImage MakeNamespaceImage(const NamespaceDesc& d) {
  NamespaceImage im;
  std::memset(&im, 0, sizeof im);
  im.tp_rank = d.tp_rank;
  im.kv_group = d.kv_group;
  std::memcpy(im.model, d.model.data(), d.model.size());
  std::memcpy(im.dtype, d.dtype.data(), d.dtype.size());
  std::memcpy(im.kv_layout, d.kv_layout.data(), d.kv_layout.size());
  return im;
}

Status CheckNamespaceDesc(const NamespaceDesc& d) {
  if (d.model.size() > 127 || d.dtype.size() > 23 || d.kv_layout.size() > 63) {
    return Status::InvalidArgument(
        "namespace field too long (model <= 127, dtype <= 23, "
        "kv_layout <= 63 bytes): " +
        d.ToString());
  }
  if (d.model.find('\0') != std::string::npos || d.dtype.find('\0') != std::string::npos ||
      d.kv_layout.find('\0') != std::string::npos) {
    return Status::InvalidArgument("namespace fields must not contain NUL bytes");
  }
  return Status::OK();
}

Status RegionImpl::RegisterNamespace(const NamespaceDesc& d, NamespaceId* id) {
  if (soft_) return SwRegisterNamespace(d, id);
  CXLKV_RETURN_IF_ERROR(CheckNamespaceDesc(d));
  const Image want = MakeImage(d);
  const uint32_t start = Crc32c(&want, sizeof want) % kNamespaceEntries;
  for (uint32_t probe = 0; probe < kNamespaceEntries; ++probe) {
    const uint32_t i = (start + probe) % kNamespaceEntries;
    NamespaceRecord& r = nss_[i];
    auto writing_since = std::chrono::steady_clock::now();
    uint64_t writing_word = ~0ull;
    for (;;) {
      uint64_t w = r.state.load(std::memory_order_acquire);
      const uint8_t st = WordState(w);
      if (st == kNsReady) {
        if (Matches(r, want)) {
          *id = i;
          return Status::OK();
        }
        break;  // next probe
      }
      if (st == kNsWriting) {
        // Someone is registering here: a few microseconds, normally. Wait
        // for READY, unless the registrant is not a live participant or the
        // entry has been WRITING for kStaleWriting (damaged, or its writer
        // stalled): then reset it. A stalled writer's final CAS then fails
        // and it retries from the start.
        constexpr auto kStaleWriting = std::chrono::milliseconds(200);
        const auto now = std::chrono::steady_clock::now();
        if (w != writing_word) {
          writing_word = w;
          writing_since = now;
        }
        if (!ParticipantActive(WordOwner(w)) || now - writing_since > kStaleWriting) {
          r.state.compare_exchange_strong(w, 0, std::memory_order_acq_rel);
        }
        std::this_thread::yield();
        continue;
      }
      if (st != kNsFree) break;  // damaged state word: skip the entry
      if (self_ < 0) {
        return Status::NotFound("namespace " + d.ToString() + " is not registered in region " +
                                info_.path);
      }
      const uint64_t mine = PackWord(0, self_index(), kNsWriting);
      if (!r.state.compare_exchange_strong(w, mine, std::memory_order_acq_rel)) continue;
      WriteImage(r, want);
      uint64_t expected = mine;
      if (!r.state.compare_exchange_strong(expected, PackWord(0, 0, kNsReady),
                                           std::memory_order_acq_rel)) {
        return RegisterNamespace(d, id);  // our claim was reset as stale: start over
      }
      *id = i;
      return Status::OK();
    }
  }
  return Status::NoSpace("namespace table of region " + info_.path + " is full (" +
                         std::to_string(kNamespaceEntries) + " entries)");
}

}  // namespace cxlkv::internal
