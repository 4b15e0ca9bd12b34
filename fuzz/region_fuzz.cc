// Copyright cxlkv authors.
//
// libFuzzer target: attach to and inspect a region whose bytes are
// arbitrary. The input either overwrites the start of a valid formatted
// region image, or, in patch mode (first byte 'P'), patches it anywhere (so
// mutations reach the header, registry, namespaces, directory and data), or,
// in damage mode (first byte 'D'), applies coordinated multi-word faults to
// the directory (two slots' keys, tags, CRCs, namespaces, lengths, state
// words or bytes swapped; tags, state words and pin bits set) that random
// bit flips would almost never produce together. Then we attach as an
// observer or a participant and exercise inspection, lookups, loads, stores
// (again, of the damaged keys), leases and the scrub. Property: no crash, no
// sanitizer report, no hang; every load either misses or returns bytes that
// match their CRC.
//
// fuzz/seeds/ holds a few inputs of each mode (scripts/fuzz.sh passes it).
//
//   scripts/fuzz.sh 600     # build with clang + ASan/UBSan, run 600 s
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "crc32c.h"
#include "cxlkv/region.h"
#include "layout.h"

namespace {

constexpr uint64_t kRegion = 256 << 10;
constexpr uint64_t kSlot = 4096;
const cxlkv::NamespaceDesc kNs{"fuzz", "bf16", "NHD", 0, 0};

std::string Path() { return "/dev/shm/cxlkv-fuzz-" + std::to_string(::getpid()); }

cxlkv::RegionOptions Options(bool participant) {
  cxlkv::RegionOptions o;
  o.size = kRegion;
  o.create_if_missing = false;
  o.register_participant = participant;
  o.prefault = cxlkv::Prefault::kNone;
  o.format_stall_ns = 1'000'000;
  o.format_wait_ns = 50'000'000;
  o.heartbeat_interval_ns = 1'000'000'000;
  o.liveness_timeout_ns = 60'000'000'000;
  return o;
}

// A valid region image with a few blocks, made once.
const std::vector<uint8_t>& BaseImage() {
  static std::vector<uint8_t> image = [] {
    const std::string p = Path() + "-base";
    ::unlink(p.c_str());
    {
      cxlkv::RegionOptions o = Options(true);
      o.create_if_missing = true;
      o.config.slot_size = kSlot;
      std::unique_ptr<cxlkv::Region> r;
      if (cxlkv::Region::Open(p, o, &r).ok()) {
        cxlkv::NamespaceId ns;
        if (r->RegisterNamespace(kNs, &ns).ok()) {
          std::vector<uint8_t> d(kSlot);
          for (uint64_t i = 0; i < 12; ++i) {
            std::memset(d.data(), static_cast<int>(i), d.size());
            (void)r->Store(ns, cxlkv::BlockKey::FromId(i), d.data(), d.size());
          }
        }
      }
    }
    std::vector<uint8_t> img(kRegion);
    int fd = ::open(p.c_str(), O_RDONLY);
    if (fd >= 0) {
      if (::pread(fd, img.data(), img.size(), 0) < 0) img.assign(kRegion, 0);
      ::close(fd);
    }
    ::unlink(p.c_str());
    return img;
  }();
  return image;
}

// Damage mode: records of [u8 kind][u8 a][u8 b][u32 value] (7 bytes); a
// and b pick slots, value is what a field is set to. The geometry comes
// from the image's own (valid) superblock.
void ApplyDamage(std::vector<uint8_t>& img, const uint8_t* data, size_t size) {
  using cxlkv::internal::SlotMeta;
  using cxlkv::internal::Superblock;
  Superblock sb;
  std::memcpy(static_cast<void*>(&sb), img.data(), sizeof sb);
  if (sb.num_slots == 0 || sb.ways == 0 ||
      sb.meta_off + sb.num_slots * sizeof(SlotMeta) > kRegion ||
      sb.data_off + sb.num_slots * sb.slot_stride > kRegion ||
      sb.tags_off + sb.num_sets * 64 > kRegion ||
      sb.pins_off + sb.num_slots * sb.pin_words * 8 > kRegion || sb.pin_words == 0)
    return;
  auto meta = [&](uint64_t s) { return img.data() + sb.meta_off + s * sizeof(SlotMeta); };
  auto tag = [&](uint64_t s) {
    return img.data() + sb.tags_off + (s / sb.ways) * sizeof(cxlkv::internal::SetTags) +
           (s % sb.ways) * 4;
  };
  auto swap = [&](uint8_t* x, uint8_t* y, size_t n) {
    for (size_t i = 0; i < n; ++i) std::swap(x[i], y[i]);
  };
  for (size_t i = 1; i + 7 <= size; i += 7) {
    const uint8_t kind = data[i];
    const uint64_t a = data[i + 1] % sb.num_slots, b = data[i + 2] % sb.num_slots;
    uint32_t v;
    std::memcpy(&v, data + i + 3, 4);
    uint8_t* ma = meta(a);
    uint8_t* mb = meta(b);
    switch (kind % 12) {
      case 0:  // keys
        swap(ma + offsetof(SlotMeta, key_hi), mb + offsetof(SlotMeta, key_hi), 16);
        break;
      case 1:  // keys and tags
        swap(ma + offsetof(SlotMeta, key_hi), mb + offsetof(SlotMeta, key_hi), 16);
        swap(tag(a), tag(b), 4);
        break;
      case 2:  // keys, tags and CRCs
        swap(ma + offsetof(SlotMeta, key_hi), mb + offsetof(SlotMeta, key_hi), 16);
        swap(tag(a), tag(b), 4);
        swap(ma + offsetof(SlotMeta, crc), mb + offsetof(SlotMeta, crc), 4);
        break;
      case 3:  // namespaces and tags
        swap(ma + offsetof(SlotMeta, ns), mb + offsetof(SlotMeta, ns), 4);
        swap(tag(a), tag(b), 4);
        break;
      case 4:  // lengths
        swap(ma + offsetof(SlotMeta, len), mb + offsetof(SlotMeta, len), 4);
        break;
      case 5:  // state words (generations, owners)
        swap(ma, mb, 8);
        break;
      case 6:  // whole metadata lines and bytes
        swap(ma, mb, sizeof(SlotMeta));
        swap(tag(a), tag(b), 4);
        swap(img.data() + sb.data_off + a * sb.slot_stride,
             img.data() + sb.data_off + b * sb.slot_stride, sb.slot_stride);
        break;
      case 7:  // a tag set to a value (0 = lost)
        std::memcpy(tag(a), &v, 4);
        break;
      case 8: {  // a state word: [generation][owner][state] from v
        const uint64_t w = cxlkv::internal::PackWord(v >> 16, (v >> 4) & 0xFFF, v & 0xF);
        std::memcpy(ma, &w, 8);
        break;
      }
      case 9: {  // pin bits of slot a
        const uint64_t bits = uint64_t(v) << (b % 33);
        std::memcpy(img.data() + sb.pins_off + a * sb.pin_words * 8, &bits, 8);
        break;
      }
      case 10:  // a length set
        std::memcpy(ma + offsetof(SlotMeta, len), &v, 4);
        break;
      case 11:  // the generation of a state word moved by v
      {
        uint64_t w;
        std::memcpy(&w, ma, 8);
        w += uint64_t(v) << 16;
        std::memcpy(ma, &w, 8);
        break;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> img = BaseImage();
  if (size > 0 && data[0] == 'P') {
    // Patch mode: records of [u32 offset][u8 len][len bytes] anywhere in the
    // image, so short inputs reach the registry, directory and data.
    size_t i = 1;
    while (i + 5 <= size) {
      uint32_t off;
      std::memcpy(&off, data + i, 4);
      const size_t len = std::min<size_t>(data[i + 4], size - i - 5);
      off %= kRegion;
      std::memcpy(img.data() + off, data + i + 5, std::min<size_t>(len, kRegion - off));
      i += 5 + len;
    }
  } else if (size > 0 && data[0] == 'D') {
    ApplyDamage(img, data, size);
  } else {
    // Raw mode: the input is the region's first bytes.
    std::memcpy(img.data(), data, std::min<size_t>(size, img.size()));
  }
  const std::string p = Path();
  int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return 0;
  if (::pwrite(fd, img.data(), img.size(), 0) != static_cast<ssize_t>(img.size())) {
    ::close(fd);
    return 0;
  }
  ::close(fd);
  const bool participant = size > 0 && (cxlkv::internal::Crc32c(data, size) & 1);
  std::unique_ptr<cxlkv::Region> r;
  if (!cxlkv::Region::Open(p, Options(participant), &r).ok()) return 0;
  (void)r->info();
  (void)r->Participants();
  (void)r->RegionCounters();
  cxlkv::NamespaceId ns = 0;
  (void)r->RegisterNamespace(kNs, &ns);
  std::vector<cxlkv::BlockKey> keys;
  for (uint64_t i = 0; i < 14; ++i) keys.push_back(cxlkv::BlockKey::FromId(i));
  (void)r->LookupPrefix(ns, keys.data(), keys.size());
  std::vector<uint8_t> buf(kSlot);
  for (const auto& k : keys) {
    cxlkv::LoadInfo info;
    if (r->Load(ns, k, buf.data(), buf.size(), {}, &info).ok()) {
      // A hit is only ever CRC-verified bytes of the recorded length.
      if (info.len > kSlot) __builtin_trap();
    }
  }
  if (participant) {
    cxlkv::PinSet pins;
    (void)r->PinPrefix(ns, keys.data(), 4, &pins);
    std::vector<uint8_t> d(kSlot, 0x77);
    (void)r->Store(ns, cxlkv::BlockKey::FromId(100), d.data(), d.size());
    // Store the image's own keys again (damaged ones must stay storable or
    // be duplicates), then read them back.
    for (uint64_t i = 0; i < 12; i += 3) {
      std::memset(d.data(), static_cast<int>(i), d.size());
      cxlkv::StoreOutcome out;
      (void)r->Store(ns, keys[i], d.data(), d.size(), &out);
      (void)r->Load(ns, keys[i], buf.data(), buf.size());
    }
    cxlkv::WriteLease lease;
    if (r->BeginWrite(ns, cxlkv::BlockKey::FromId(101), kSlot / 2, &lease).ok() && lease.open()) {
      std::memset(lease.data(), 0x55, kSlot / 2);
      if (size & 2) {
        const uint32_t crc = cxlkv::internal::Crc32c(lease.data(), kSlot / 2);
        (void)r->CommitWrite(&lease, &crc);
      } else {
        r->AbortWrite(&lease);
      }
    }
    (void)r->Drop(ns, keys[1]);
    (void)r->ReapDeadParticipants();
  }
  cxlkv::Region::ScrubReport rep;
  (void)r->Verify(participant, &rep);
  r.reset();
  ::unlink(p.c_str());
  return 0;
}
