// Copyright cxlkv authors.
//
// Open: map, format-or-attach, validate, register, prefault.
//
// Format protocol (atomic, crash-tolerant, no file locks so it also works on
// a device shared by several hosts):
//   1. magic == kMagic          -> formatted: validate and attach.
//   2. CAS format_lock 0->nonce -> we format: zero the metadata (advancing
//      format_progress as we go), write the header image, CAS
//      format_lock nonce->nonce|1, and only then store magic (release).
//   3. otherwise someone is formatting: wait for magic. If (format_lock,
//      format_progress) does not change for format_stall_ns, the formatter
//      is presumed dead: CAS its nonce -> ours and format again. The final
//      CAS in step 2 makes "finish" and "take over" mutually exclusive.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>

#include "crc32c.h"
#include "cxlkv/lifecycle.h"
#include "failpoint.h"
#include "lifecycle_internal.h"
#include "region_impl.h"

namespace cxlkv {

using internal::kLayoutVersion;
using internal::kMagic;

Status Region::Open(const std::string& path, const RegionOptions& options,
                    std::unique_ptr<Region>* out) {
  return internal::OpenRegion(path, options, nullptr, out);
}

Status RegionInternal::OpenWithVisibility(const std::string& path, const RegionOptions& options,
                                          std::unique_ptr<internal::Visibility> visibility,
                                          std::unique_ptr<Region>* out) {
  if (visibility == nullptr) return Status::InvalidArgument("visibility layer is null");
  return internal::OpenRegion(path, options, std::move(visibility), out);
}

namespace internal {

uint32_t HeaderCrc(const Superblock& sb) {
  const auto* p = reinterpret_cast<const uint8_t*>(&sb);
  return Crc32c(p + offsetof(Superblock, layout_version),
                offsetof(Superblock, header_crc) - offsetof(Superblock, layout_version));
}

std::string SwMagicNotSetText(const std::string& path, uint32_t partitions) {
  const std::string h = std::to_string(partitions);
  return "region " + path + ": its header is an intact coherence=software one (layout 6, " + h +
         " write partitions) but its magic word is damaged or not yet written. Only the holder "
         "of write partition 0 writes the superblock: it restores the magic (or finishes its "
         "format) when it attaches, and `cxlkv format --region " +
         path + " --coherence software --partitions " + h +
         "` attaches as partition 0 for a moment and does (its blocks are kept)";
}

namespace {

std::string DescribeShortFile(const std::string& path, int fd, uint64_t offset, uint64_t file_size,
                              uint64_t size, uint64_t slot_size);

}  // namespace

Status OpenRegion(const std::string& path, const RegionOptions& options,
                  std::unique_ptr<Visibility> visibility, std::unique_ptr<Region>* out) {
  if (path.empty()) return Status::InvalidArgument("region path is empty");
  if (options.register_participant &&
      options.liveness_timeout_ns < 4 * options.heartbeat_interval_ns) {
    return Status::InvalidArgument(
        "liveness_timeout_ns must be at least 4 x heartbeat_interval_ns");
  }
  // Lifecycle tools watch heartbeats for 4 x the longest interval accepted
  // here (lifecycle.h): a longer one would make a live user look dead.
  if (options.register_participant && options.heartbeat_interval_ns > kMaxHeartbeatIntervalNs) {
    return Status::InvalidArgument("heartbeat_interval_ns " +
                                   std::to_string(options.heartbeat_interval_ns) +
                                   " is longer than the longest accepted, " +
                                   std::to_string(kMaxHeartbeatIntervalNs) + " (60 s)");
  }
  std::unique_ptr<internal::Mapping> map;
  internal::MappingOptions mo;
  mo.offset = options.offset;
  mo.size = options.size;
  mo.create = options.create_if_missing;
  mo.sysfs_root = options.sysfs_root;
  mo.describe_short = [&path, &options](int fd, uint64_t offset, uint64_t file_size,
                                        uint64_t size) {
    return DescribeShortFile(path, fd, offset, file_size, size, options.config.slot_size);
  };
  CXLKV_RETURN_IF_ERROR(internal::Mapping::Open(path, mo, &map));
  if (map->size() < internal::kSuperblockBytes) {
    return Status::InvalidArgument(
        "region " + path + " is " + std::to_string(map->size()) +
        " bytes, smaller than its 4096-byte header: too small to be a region, so it holds no "
        "blocks; `cxlkv format --force --region-size N --slot-size S` formats it as one");
  }
  internal::Mapping* raw = map.get();
  auto impl =
      std::make_unique<internal::RegionImpl>(std::move(map), options, std::move(visibility));
  if (Status s = impl->Init(); !s.ok()) {
    // Remove a file we created only while no format of it was ever
    // claimed: if another process won the format race, the region it
    // formatted stays even though it does not match our options.
    const auto* sb = reinterpret_cast<const internal::Superblock*>(raw->base());
    if (!raw->lost() && sb->magic.load(std::memory_order_acquire) == 0 &&
        sb->format_lock.load(std::memory_order_acquire) == 0) {
      raw->RemoveIfCreatedAndUnused();
    }
    return s;
  }
  *out = std::move(impl);
  return Status::OK();
}

namespace {

uint64_t RandomNonZero() {
  std::random_device rd;
  uint64_t v = (uint64_t(rd()) << 32) ^ rd() ^
               uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  v = Mix64(v ^ uint64_t(::getpid()));
  return v == 0 ? 1 : v & ~1ull;  // low bit marks "format finished"
}

std::string FieldMismatch(const std::string& path, const char* field, const std::string& region,
                          const std::string& mine) {
  return "region " + path + ": " + field + " mismatch: the region has " + region +
         ", this process expects " + mine;
}

// Why a file shorter than the size asked is refused (Mapping::Open never
// grows one that holds bytes), from its first 4 KiB after the offset (read
// here, untrusted: they only choose the words). "" for a blank file: the
// mapping's own message then.
std::string DescribeShortFile(const std::string& path, int fd, uint64_t offset, uint64_t file_size,
                              uint64_t size, uint64_t slot_size) {
  uint8_t head[kSuperblockBytes] = {};
  const uint64_t have = file_size > offset ? file_size - offset : 0;
  const uint64_t want = std::min<uint64_t>(have, sizeof head);
  for (uint64_t got = 0; got < want;) {
    const ssize_t n = ::pread(fd, head + got, want - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "";
    got += static_cast<uint64_t>(n);
  }
  Superblock sb;
  std::memcpy(static_cast<void*>(&sb), head, sizeof sb);
  const bool ours = sb.magic.load(std::memory_order_relaxed) == kMagic;
  const bool intact = ours && sb.layout_version != 0 && HeaderCrc(sb) == sb.header_crc &&
                      sb.region_size >= kSuperblockBytes;
  if (slot_size == 0 && intact) slot_size = sb.slot_size;
  const std::string asked = std::to_string(size);
  const std::string reformat = "`cxlkv format --force --region-size " + asked + " --slot-size " +
                               (slot_size != 0 ? std::to_string(slot_size) : "S") + "`";
  const std::string lead = "region " + path + " holds " + std::to_string(have) +
                           " bytes from its offset, fewer than the " + asked + " asked";
  if (intact && sb.region_size > have) {
    return lead + ", and its header records a region of " + std::to_string(sb.region_size) +
           " bytes: it was truncated, and its blocks past the cut are lost. A truncated region "
           "is never grown back (zeros past the cut would be read as the blocks its directory "
           "names): reformat it with " +
           reformat + " (it is a cache)";
  }
  if (intact) {
    const std::string recorded = std::to_string(sb.region_size);
    return FieldMismatch(path, "region_size", recorded, asked) +
           " (the file holds a region formatted at " + recorded +
           " bytes, and a formatted region is never grown): open it with size " + recorded +
           " (or 0: the whole file) to attach it, or reformat it at the new size with " + reformat +
           " (its blocks are lost; it is a cache)";
  }
  std::string detail;
  const RegionKind kind = ours ? RegionKind::kDamaged : ClassifyHead(head, &detail);
  if (ours) detail = "this layout's magic over a header that does not validate";
  if (kind == RegionKind::kBlank) return "";
  if (kind == RegionKind::kDamaged) {
    return lead + ": a cxlkv region that does not validate (" + detail +
           "), and it is never grown: reformat it with " + reformat +
           " (its blocks are lost; it is a cache)";
  }
  return lead +
         ": not a cxlkv region (its first 4 KiB are neither one nor blank), so it is "
         "neither grown nor formatted over (`cxlkv format --force` does not either): remove or "
         "zero the file yourself if it is not needed, or open another path";
}

}  // namespace

bool FormatBegunHere(const uint8_t* head) {
  static constexpr char kJsonPrefix[] = "{\"coherence\":\"";
  Superblock sb;
  std::memcpy(static_cast<void*>(&sb), head, sizeof sb);
  if (sb.magic.load(std::memory_order_relaxed) != 0 ||
      sb.format_lock.load(std::memory_order_relaxed) == 0) {
    return false;
  }
  // The formatter writes the config JSON (which, with sorted keys, always
  // starts like this) before the header: with it there, the header may be
  // half copied.
  if (std::memcmp(head + sizeof(Superblock), kJsonPrefix, sizeof kJsonPrefix - 1) == 0) {
    return true;
  }
  for (uint64_t i = offsetof(Superblock, layout_version); i < kSuperblockBytes; ++i)
    if (head[i] != 0) return false;
  return true;
}

RegionImpl::RegionImpl(std::unique_ptr<Mapping> map, const RegionOptions& options,
                       std::unique_ptr<Visibility> visibility)
    : map_(std::move(map)), opts_(options), vis_(std::move(visibility)) {
  base_ = map_->base();
  sb_ = reinterpret_cast<Superblock*>(base_);
}

Status RegionImpl::Init() {
  try {
    return InitOrThrow();
  } catch (const std::exception& e) {  // e.g. bad_alloc: never cross the API
    return Status::IOError("open region " + map_->path() + ": " + e.what());
  }
}

Status RegionImpl::InitOrThrow() {
  const RegionConfig& c = opts_.config;
  if (c.hash_algorithm.size() > 31) {
    return Status::InvalidArgument("hash_algorithm '" + c.hash_algorithm +
                                   "' longer than 31 bytes");
  }
  for (char ch : c.hash_algorithm) {
    if (ch < 0x21 || ch > 0x7e) {
      return Status::InvalidArgument("hash_algorithm must be printable ASCII without spaces");
    }
  }
  if (opts_.register_participant && opts_.heartbeat_interval_ns < 1'000'000) {
    return Status::InvalidArgument("heartbeat_interval_ns must be at least 1 ms");
  }
  if (c.metadata_json.size() > 2048) {
    return Status::InvalidArgument("metadata_json is " + std::to_string(c.metadata_json.size()) +
                                   " bytes, more than 2048");
  }
  if (c.coherence == CoherenceMode::kSoftware) return SwInitOrThrow();
  if (c.software_partitions != 0 || opts_.software_partition != -1) {
    return Status::InvalidArgument(
        "software_partitions and software_partition are for coherence=software only");
  }
  CXLKV_RETURN_IF_ERROR(FormatOrWait());
  CXLKV_RETURN_IF_ERROR(Validate());
  obs_.resize(geo_.max_participants);
  if (opts_.register_participant) {
    CXLKV_RETURN_IF_ERROR(RegisterSelf());
    heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  }
  return StartPrefault();
}

Status RegionImpl::FormatOrWait() {
  using Clock = std::chrono::steady_clock;
  const std::string& path = map_->path();
  const auto deadline = Clock::now() + std::chrono::nanoseconds(opts_.format_wait_ns);
  uint64_t seen_lock = ~0ull, seen_progress = ~0ull;
  auto seen_since = Clock::now();
  auto all_zero = [this](uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < to; ++i)
      if (reinterpret_cast<volatile const uint8_t*>(base_)[i] != 0) return false;
    return true;
  };
  const Status not_ours = Status::InvalidArgument(
      "region " + path +
      " holds bytes that are neither a cxlkv region nor blank (its first 4 KiB are not zero); "
      "refusing to format over them (`cxlkv format --force` does not either: remove or zero "
      "the file yourself if it is not needed)");
  // `lock` below is read before the bytes it is judged with. Another opener
  // that claims the lock in between zeroes and writes the metadata (its
  // format, then its users' records and blocks): those bytes are not
  // foreign, and its format is to be waited for, not refused. Only a lock
  // still free after reading them makes them someone else's. (Under load
  // this was MultiProcessTest.EightProcessesRacingToFormat's flake: a child
  // descheduled between the reads failed its Open with "neither a cxlkv
  // region nor blank".)
  auto lock_taken_since = [this] {
    std::atomic_thread_fence(std::memory_order_acquire);
    return sb_->format_lock.load(std::memory_order_acquire) != 0;
  };
  auto moved_on = [this](uint64_t lock) {
    std::atomic_thread_fence(std::memory_order_acquire);
    return sb_->magic.load(std::memory_order_acquire) == kMagic ||
           sb_->format_lock.load(std::memory_order_acquire) != lock;
  };
  for (;;) {
    if (sb_->magic.load(std::memory_order_acquire) == kMagic) return Status::OK();
    const uint64_t lock = sb_->format_lock.load(std::memory_order_acquire);
    const uint64_t progress = sb_->format_progress.load(std::memory_order_acquire);
    const auto now = Clock::now();
    if (lock != seen_lock || progress != seen_progress) {
      seen_lock = lock;
      seen_progress = progress;
      seen_since = now;
    }
    const bool stalled = now - seen_since > std::chrono::nanoseconds(opts_.format_stall_ns);
    uint8_t head[kSuperblockBytes];
    std::memcpy(head, base_, sizeof head);
    Superblock copy;
    std::memcpy(static_cast<void*>(&copy), head, sizeof copy);
    const bool header_intact = HeaderCrc(copy) == copy.header_crc && copy.layout_version != 0;
    const bool blank_header = all_zero(offsetof(Superblock, layout_version), sizeof(Superblock));
    const bool blank_rest = all_zero(sizeof(Superblock), kSuperblockBytes);
    // Decision table (docs/region_format.md, "Format protocol").
    bool claim = false;
    if (header_intact && copy.layout_version == kLayoutVersionSoftware) {
      // coherence=software: the superblock is partition 0's line, which no
      // other host may write (software.cc restores the magic).
      return Status::Corruption(SwMagicNotSetText(path, copy.partitions));
    }
    if (header_intact) {
      if (lock == 0) {
        return Status::Corruption("region " + path +
                                  ": magic number damaged but the header is "
                                  "intact; refusing to format over it (reformat with `cxlkv "
                                  "format --force`)");
      }
      if ((lock & 1) || stalled) {
        // The header is written last after zeroing and the JSON, so an
        // intact header means a complete format: either its formatter is
        // between its last two steps, the magic word was damaged, or the
        // formatter died right before publishing. Finish it on its behalf
        // (idempotent; a formatter that resumes finds its CAS lost).
        uint64_t expected = lock;
        if (!(lock & 1)) sb_->format_lock.compare_exchange_strong(expected, lock | 1);
        sb_->magic.store(kMagic, std::memory_order_release);
        continue;
      }
      // else: a formatter between its header copy and its final CAS.
    } else if (lock == 0) {
      if (!blank_header || !blank_rest) {
        if (lock_taken_since()) continue;
        return not_ours;
      }
      claim = true;
    } else if (!FormatBegunHere(head)) {
      // A lock word over bytes no format of ours writes (foreign bytes,
      // whose first words only look like a lock: docs/region_format.md),
      // unless the format finished or was taken over while they were read.
      if (moved_on(lock)) continue;
      return not_ours;
    } else if (stalled) {
      claim = true;  // our format stopped making progress: presumed dead, take over
    }
    if (claim) {
      if (!opts_.create_if_missing) {
        return Status::NotFound("region " + path + " is not formatted" +
                                (lock ? " (a format was abandoned mid-way)" : ""));
      }
      if (opts_.config.slot_size == 0) {
        return Status::InvalidArgument("region " + path +
                                       " is not formatted and no slot_size was given to format it");
      }
      // A fresh claim formats over the whole metadata area, not only the
      // header: all of it must be blank (a file with zeros at its start
      // and data after, like an ISO image's system area, is not blank).
      // A file this process just created is blank by construction.
      if (lock == 0 && !map_->created()) {
        Status blank = CheckMetadataAreaBlank();
        if (!blank.ok()) {
          if (lock_taken_since()) continue;
          return blank;
        }
      }
      const uint64_t nonce = RandomNonZero();
      uint64_t expected = lock;
      if (sb_->format_lock.compare_exchange_strong(expected, nonce, std::memory_order_acq_rel)) {
        Status s = Format(nonce);
        if (s.ok() || !s.IsBusy()) return s;
        // Busy: someone took the format over from us; wait for theirs.
      }
      seen_since = Clock::now();
      continue;
    }
    if (now > deadline) {
      return Status::Busy("region " + path + ": another process's format did not finish within " +
                          std::to_string(opts_.format_wait_ns / 1000000) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status RegionImpl::CheckMetadataAreaBlank() const {
  // The metadata of the layout this format writes (layout 6's index is
  // twice layout 4's, and its hint rings follow it).
  Geometry g;
  Status s = opts_.config.coherence == CoherenceMode::kSoftware
                 ? ComputeSoftwareGeometry(map_->size(), opts_.config.slot_size,
                                           opts_.config.max_participants,
                                           opts_.config.software_partitions, &g)
                 : ComputeGeometry(map_->size(), opts_.config.slot_size,
                                   opts_.config.max_participants, true, &g);
  if (!s.ok()) return s.WithContext("format region " + map_->path());
  const auto* words = reinterpret_cast<const volatile uint64_t*>(base_);
  for (uint64_t i = 0; i < g.data_off / 8; ++i) {
    if (words[i] == 0) continue;
    return Status::InvalidArgument(
        "region " + map_->path() +
        " holds bytes that are neither a cxlkv region nor blank (non-zero bytes at offset " +
        std::to_string(i * 8) + ", inside the first " + std::to_string(g.data_off) +
        " bytes that formatting would overwrite); refusing to format over them (`cxlkv format "
        "--force` does not either: remove or zero the file yourself if it is not needed)");
  }
  return Status::OK();
}

Status RegionImpl::CheckFormatTarget(uint64_t lock) const {
  uint8_t head[kSuperblockBytes];
  std::memcpy(head, base_, sizeof head);
  if (lock != 0 && FormatBegunHere(head)) return Status::OK();
  bool blank = lock == 0;
  for (uint64_t i = 0; blank && i < kSuperblockBytes; ++i) blank = head[i] == 0;
  if (!blank) {
    return Status::InvalidArgument(
        "region " + map_->path() +
        " holds bytes that are neither a cxlkv region nor blank (its first 4 KiB are not zero" +
        (lock != 0 ? ", and they are not a format of ours begun" : "") +
        "); refusing to format over them (`cxlkv format --force` does not either: remove or "
        "zero the file yourself if it is not needed)");
  }
  return map_->created() ? Status::OK() : CheckMetadataAreaBlank();
}

Status BuildHeader(const Geometry& g, const RegionConfig& c, uint32_t layout_version,
                   uint32_t partitions, Superblock* out, std::string* json_text) {
  nlohmann::json meta = nlohmann::json::object();
  if (!c.metadata_json.empty()) {
    try {
      meta = nlohmann::json::parse(c.metadata_json);
    } catch (const std::exception& e) {
      return Status::InvalidArgument(std::string("metadata_json is not valid JSON: ") + e.what());
    }
  }
  Superblock& img = *out;
  std::memset(static_cast<void*>(&img), 0, sizeof img);
  img.layout_version = layout_version;
  img.partitions = partitions;
  img.superblock_bytes = kSuperblockBytes;
  img.region_size = g.region_size;
  img.slot_size = g.slot_size;
  img.max_participants = g.max_participants;
  img.coherence = static_cast<uint32_t>(c.coherence);
  img.hash_seed_fingerprint = c.hash_seed_fingerprint;
  std::memcpy(img.hash_algorithm, c.hash_algorithm.data(), c.hash_algorithm.size());
  img.format_epoch = RandomNonZero();
  img.num_slots = g.num_slots;
  img.num_sets = g.num_sets;
  img.ways = g.ways;
  img.pin_words = g.pin_words;
  img.slot_stride = g.slot_stride;
  img.data_align = g.data_align;
  img.registry_off = g.registry_off;
  img.namespaces_off = g.namespaces_off;
  img.retired_off = g.retired_off;
  img.tags_off = g.tags_off;
  img.meta_off = g.meta_off;
  img.pins_off = g.pins_off;
  img.data_off = g.data_off;
  if (g.decoupled) {
    img.num_entries = g.num_entries;
    img.dwords_off = g.dwords_off;
  }
  if (g.partitions > 0) {  // layout 6: the hint rings where layout 5 has data words
    img.num_entries = g.num_entries;
    img.dwords_off = g.rings_off;
  }

  nlohmann::json cfg = {
      {"layout_version", layout_version},
      {"slot_size", g.slot_size},
      {"hash_algorithm", c.hash_algorithm},
      {"hash_seed_fingerprint", c.hash_seed_fingerprint},
      {"coherence", CoherenceModeName(c.coherence)},
      {"max_participants", g.max_participants},
      {"metadata", meta},
  };
  if (partitions != 0) cfg["software_partitions"] = partitions;
  // Replace invalid UTF-8 rather than throw: no exception leaves the library.
  const std::string text = cfg.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kConfigJsonMax) {
    return Status::InvalidArgument("config JSON is " + std::to_string(text.size()) +
                                   " bytes, more than " + std::to_string(kConfigJsonMax));
  }
  img.config_json_off = sizeof(Superblock);
  img.config_json_len = static_cast<uint32_t>(text.size());
  img.config_json_crc = Crc32c(text.data(), text.size());
  img.header_crc = HeaderCrc(img);

  *json_text = text;
  return Status::OK();
}

Status RegionImpl::Format(uint64_t nonce) {
  const RegionConfig& c = opts_.config;
  Geometry g;
  Status s = ComputeGeometry(map_->size(), c.slot_size, c.max_participants, true, &g);
  if (!s.ok()) {
    sb_->format_lock.store(0, std::memory_order_release);
    return s.WithContext("format region " + map_->path());
  }
  // The header image is built privately first (bad metadata JSON is refused
  // before anything is written), then copied in at once at the end.
  Superblock img;
  std::string text;
  s = BuildHeader(g, c, kLayoutVersion, 0, &img, &text);
  if (!s.ok()) {
    sb_->format_lock.store(0, std::memory_order_release);
    return s;
  }
  CXLKV_FAILPOINT_HIT("format.after_lock");

  // Zero all metadata after the superblock (data slots need no zeroing: a
  // slot is only read after a READY state word is published for it).
  const uint64_t chunk = 1ull << 20;
  // Check that the format is still ours right before every write: a
  // formatter paused past format_stall_ns has been taken over, and must not
  // touch a region that may already be live. (A pause landing between the
  // check and the write itself is not covered: docs/region_format.md.)
  auto still_ours = [&] { return sb_->format_lock.load(std::memory_order_acquire) == nonce; };
  for (uint64_t off = kSuperblockBytes; off < g.data_off; off += chunk) {
    const uint64_t n = std::min(chunk, g.data_off - off);
    if (!still_ours()) return Status::Busy("format of " + map_->path() + " was taken over");
    std::memset(base_ + off, 0, n);
    sb_->format_progress.fetch_add(1, std::memory_order_release);
    if (off == kSuperblockBytes) CXLKV_FAILPOINT_HIT("format.mid_zero");
  }

  if (!still_ours()) return Status::Busy("format of " + map_->path() + " was taken over");
  std::memset(base_ + sizeof(Superblock), 0, kSuperblockBytes - sizeof(Superblock));
  std::memcpy(base_ + sizeof(Superblock), text.data(), text.size());
  std::memcpy(reinterpret_cast<uint8_t*>(sb_) + offsetof(Superblock, layout_version),
              reinterpret_cast<const uint8_t*>(&img) + offsetof(Superblock, layout_version),
              sizeof(Superblock) - offsetof(Superblock, layout_version));
  uint64_t expected = nonce;
  if (!sb_->format_lock.compare_exchange_strong(expected, nonce | 1, std::memory_order_acq_rel)) {
    return Status::Busy("format of " + map_->path() + " was taken over");
  }
  // Magic last: everything above is visible to whoever sees it (release).
  sb_->magic.store(kMagic, std::memory_order_release);
  return Status::OK();
}

Status RegionImpl::Validate() {
  const std::string& path = map_->path();
  // Validate a private copy: the region can change under us.
  Superblock sb;
  std::memcpy(static_cast<void*>(&sb), sb_, sizeof sb);
  if (sb.layout_version == internal::kLayoutVersionHardwareV2) {
    return Status::Unsupported(
        "region " + path +
        " has layout version 2 (coherence=hardware with each key's block in one of its 32 ways); "
        "this build reads layout version " +
        std::to_string(kLayoutVersion) +
        " (coherence=hardware, an index decoupled from the data slots) and layout version " +
        std::to_string(kLayoutVersionSoftware) +
        " (coherence=software): reformat it with `cxlkv format --force` (its blocks are lost; "
        "every process attached to it must run this build)");
  }
  if (sb.layout_version == internal::kLayoutVersionSoftwareV3) {
    return Status::Unsupported(
        "region " + path +
        " has layout version 3 (coherence=software as v0.1.0 wrote it: a writer paused past its "
        "lease could have its block served); this build reads layout version " +
        std::to_string(kLayoutVersion) + " (coherence=hardware) and layout version " +
        std::to_string(kLayoutVersionSoftware) + " (coherence=software): format it again");
  }
  if (sb.layout_version == internal::kLayoutVersionSoftwareV4) {
    return Status::Unsupported(
        "region " + path +
        " has layout version 4 (coherence=software choosing its victims among a key's 32 ways "
        "only); this build reads layout version " +
        std::to_string(kLayoutVersion) + " (coherence=hardware) and layout version " +
        std::to_string(kLayoutVersionSoftware) +
        " (coherence=software, an index decoupled from the data slots in each write partition): "
        "format it again (its blocks are lost; every process attached to it must run this build)");
  }
  if (sb.layout_version > std::max(kLayoutVersion, kLayoutVersionSoftware)) {
    // A newer engine's region (a layout this build predates): never read,
    // and never formatted over by Open; the message says both ways on.
    const std::string v = std::to_string(sb.layout_version);
    return Status::Unsupported(
        "region " + path + " has layout version " + v +
        ", newer than this build: this build reads layout version " +
        std::to_string(kLayoutVersion) + " (coherence=hardware) and layout version " +
        std::to_string(kLayoutVersionSoftware) +
        " (coherence=software). Attach it with a build that reads version " + v +
        " (every process attached to a region must read its layout), or reformat it for this "
        "build with `cxlkv format --force` (its blocks are lost; it is a cache)");
  }
  if (sb.layout_version != kLayoutVersion && sb.layout_version != kLayoutVersionSoftware) {
    return Status::Unsupported("region " + path + " has layout version " +
                               std::to_string(sb.layout_version) + "; this build reads layout " +
                               "version " + std::to_string(kLayoutVersion) +
                               " (coherence=hardware) and layout version " +
                               std::to_string(kLayoutVersionSoftware) + " (coherence=software)");
  }
  const uint32_t crc = HeaderCrc(sb);
  if (crc != sb.header_crc) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "stored 0x%08x, computed 0x%08x", sb.header_crc, crc);
    return Status::Corruption("region " + path + ": header checksum mismatch (" + buf +
                              "); the header was damaged: reformat with `cxlkv format --force`");
  }
  if (sb.superblock_bytes != kSuperblockBytes) {
    return Status::Corruption("region " + path + ": superblock_bytes " +
                              std::to_string(sb.superblock_bytes) + ", expected 4096");
  }
  Status s = CheckRecordedGeometry(sb, map_->size(), opts_.size != 0, &geo_);
  if (!s.ok()) return s.WithContext("region " + path);
  const uint32_t version_mode = sb.layout_version == kLayoutVersionSoftware
                                    ? static_cast<uint32_t>(CoherenceMode::kSoftware)
                                    : static_cast<uint32_t>(CoherenceMode::kHardware);
  if (sb.coherence != version_mode) {
    return Status::Corruption("region " + path + ": coherence mode " +
                              std::to_string(sb.coherence) + " in a layout version " +
                              std::to_string(sb.layout_version) + " header (expected " +
                              std::to_string(version_mode) + ")");
  }
  const bool software = sb.layout_version == kLayoutVersionSoftware;
  if (software ? (sb.partitions < 1 || sb.partitions > kMaxSoftwarePartitions ||
                  sb.partitions > sb.num_sets)
               : sb.partitions != 0) {
    return Status::Corruption("region " + path + ": partitions " + std::to_string(sb.partitions) +
                              " out of range for layout version " +
                              std::to_string(sb.layout_version));
  }
  if (std::memchr(sb.hash_algorithm, 0, sizeof sb.hash_algorithm) == nullptr) {
    return Status::Corruption("region " + path + ": hash_algorithm is not terminated");
  }
  // Config JSON: bounds, checksum, parse, agreement with the binary header.
  if (sb.config_json_off != sizeof(Superblock) || sb.config_json_len > kConfigJsonMax) {
    return Status::Corruption("region " + path + ": config JSON at offset " +
                              std::to_string(sb.config_json_off) + " length " +
                              std::to_string(sb.config_json_len) + " is out of bounds");
  }
  std::string text(reinterpret_cast<const char*>(base_) + sb.config_json_off, sb.config_json_len);
  if (Crc32c(text.data(), text.size()) != sb.config_json_crc) {
    return Status::Corruption("region " + path + ": config JSON checksum mismatch");
  }
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(text);
    if (cfg.at("slot_size").get<uint64_t>() != sb.slot_size ||
        cfg.at("layout_version").get<uint32_t>() != sb.layout_version ||
        cfg.at("max_participants").get<uint32_t>() != sb.max_participants ||
        cfg.at("hash_algorithm").get<std::string>() != std::string(sb.hash_algorithm) ||
        cfg.at("hash_seed_fingerprint").get<uint64_t>() != sb.hash_seed_fingerprint ||
        cfg.value("software_partitions", 0u) != sb.partitions) {
      return Status::Corruption("region " + path + ": config JSON disagrees with the header");
    }
  } catch (const std::exception& e) {
    return Status::Corruption("region " + path + ": config JSON unreadable: " + e.what());
  }

  // Region-level fields every attacher must match.
  const RegionConfig& want = opts_.config;
  auto num = [](uint64_t v) { return std::to_string(v); };
  if (opts_.size != 0 && opts_.size != sb.region_size) {
    return Status::InvalidArgument(
        FieldMismatch(path, "region_size", num(sb.region_size), num(opts_.size)));
  }
  if (want.slot_size != 0 && want.slot_size != sb.slot_size) {
    return Status::InvalidArgument(
        FieldMismatch(path, "slot_size", num(sb.slot_size), num(want.slot_size)));
  }
  if (!want.hash_algorithm.empty() && want.hash_algorithm != sb.hash_algorithm) {
    return Status::InvalidArgument(FieldMismatch(path, "hash_algorithm",
                                                 "'" + std::string(sb.hash_algorithm) + "'",
                                                 "'" + want.hash_algorithm + "'"));
  }
  if (want.hash_seed_fingerprint != 0 && want.hash_seed_fingerprint != sb.hash_seed_fingerprint) {
    return Status::InvalidArgument(FieldMismatch(path, "hash_seed_fingerprint",
                                                 num(sb.hash_seed_fingerprint),
                                                 num(want.hash_seed_fingerprint)) +
                                   " (is PYTHONHASHSEED / the hash seed the same everywhere?)");
  }
  const auto region_coherence = static_cast<CoherenceMode>(sb.coherence);
  if (want.coherence != region_coherence) {
    return Status::InvalidArgument(FieldMismatch(
        path, "coherence", CoherenceModeName(region_coherence), CoherenceModeName(want.coherence)));
  }
  if (want.software_partitions != 0 && want.software_partitions != sb.partitions) {
    return Status::InvalidArgument(FieldMismatch(path, "software_partitions", num(sb.partitions),
                                                 num(want.software_partitions)));
  }
  // max_participants: 64 is the default, so only an explicit non-default
  // value is a demand the region must meet.
  if (want.max_participants != 0 && want.max_participants != 64 &&
      want.max_participants != sb.max_participants) {
    return Status::InvalidArgument(FieldMismatch(path, "max_participants", num(sb.max_participants),
                                                 num(want.max_participants)));
  }

  parts_ = reinterpret_cast<ParticipantRecord*>(base_ + geo_.registry_off);
  nss_ = reinterpret_cast<NamespaceRecord*>(base_ + geo_.namespaces_off);
  retired_ = reinterpret_cast<CounterBlock*>(base_ + geo_.retired_off);
  tags_ = reinterpret_cast<SetTags*>(base_ + geo_.tags_off);
  meta_ = reinterpret_cast<SlotMeta*>(base_ + geo_.meta_off);
  pins_ = reinterpret_cast<std::atomic<uint64_t>*>(base_ + geo_.pins_off);
  dwords_ =
      geo_.decoupled ? reinterpret_cast<std::atomic<uint64_t>*>(base_ + geo_.dwords_off) : nullptr;
  data_ = base_ + geo_.data_off;

  info_.path = path;
  info_.backend = map_->is_devdax() ? "devdax" : "file";
  info_.offset = map_->offset();
  info_.size = geo_.region_size;
  info_.layout_version = sb.layout_version;
  info_.slot_size = geo_.slot_size;
  info_.slot_stride = geo_.slot_stride;
  info_.num_slots = geo_.num_slots;
  info_.num_entries = geo_.num_entries;
  info_.num_sets = geo_.num_sets;
  info_.ways = geo_.ways;
  info_.data_offset = geo_.data_off;
  info_.config.slot_size = sb.slot_size;
  info_.config.hash_algorithm = sb.hash_algorithm;
  info_.config.hash_seed_fingerprint = sb.hash_seed_fingerprint;
  info_.config.coherence = region_coherence;
  info_.config.max_participants = sb.max_participants;
  info_.config.software_partitions = sb.partitions;
  info_.config.metadata_json =
      cfg.contains("metadata")
          ? cfg["metadata"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
          : "{}";
  info_.format_epoch = sb.format_epoch;
  return Status::OK();
}

Status RegionImpl::StartPrefault() {
  if (opts_.prefault == Prefault::kNone) return Status::OK();
  // In the background nobody can be told of a failure; the pages then
  // fault on first use (guarded: mapping.h).
  auto work = [this] { (void)map_->Prefault(0, geo_.region_size); };
  if (opts_.prefault == Prefault::kMetadata) {
    // Small (a few MiB for thousands of slots), so done here: nothing of it
    // is left to run beside the first requests.
    return map_->Prefault(0, geo_.data_off);
  }
  if (opts_.prefault == Prefault::kAtAttach) {
    // Split across a few threads: populate is bound by page-table work,
    // which scales with cores.
    const unsigned n = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
    const uint64_t per = (geo_.region_size / n + 4095) / 4096 * 4096;
    std::vector<std::thread> ts;
    std::vector<Status> results(n);
    for (unsigned i = 0; i < n; ++i) {
      const uint64_t b = i * per, e = std::min(geo_.region_size, b + per);
      if (b < e) ts.emplace_back([this, b, e, &results, i] { results[i] = map_->Prefault(b, e); });
    }
    for (auto& t : ts) t.join();
    for (auto& s : results) CXLKV_RETURN_IF_ERROR(s);
  } else {
    prefault_ = std::thread(work);
  }
  return Status::OK();
}

}  // namespace internal
}  // namespace cxlkv
