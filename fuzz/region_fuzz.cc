// Copyright cxlkv authors.
//
// libFuzzer target: attach to and inspect a region whose bytes are
// arbitrary. The input either overwrites the start of a valid formatted
// region image or, in patch mode (first byte 'P'), patches it anywhere (so
// mutations reach the header, registry, namespaces, directory and data); then we attach as an
// observer or a participant and exercise inspection, lookups, loads and the scrub. Property: no
// crash, no sanitizer report, no hang; every load either misses or returns bytes that match their
// CRC.
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
    (void)r->ReapDeadParticipants();
  }
  cxlkv::Region::ScrubReport rep;
  (void)r->Verify(participant, &rep);
  r.reset();
  ::unlink(p.c_str());
  return 0;
}
