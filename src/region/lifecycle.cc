// Copyright cxlkv authors.
//
// Lifecycle, first half: scans of an open region, probing a path, and the
// "is anyone attached" watch (the one definition: include/cxlkv/lifecycle.h).
#include "cxlkv/lifecycle.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "crc32c.h"
#include "lifecycle_internal.h"

namespace cxlkv {
namespace internal {
namespace {

using Clock = std::chrono::steady_clock;

// Any layout's magic starts "CLKVREG" (the last byte is the version digit).
constexpr char kMagicPrefix[] = "CLKVREG";

bool AllZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

bool SameRecord(const ParticipantInfo& a, const ParticipantInfo& b) {
  return a.incarnation == b.incarnation && a.heartbeat == b.heartbeat &&
         a.reclaiming == b.reclaiming;
}

}  // namespace

RegionKind ClassifyHead(const uint8_t* head, std::string* detail) {
  Superblock sb;
  std::memcpy(static_cast<void*>(&sb), head, sizeof sb);
  if (std::memcmp(head, kMagicPrefix, sizeof kMagicPrefix - 1) == 0) {
    *detail = "the magic of another cxlkv layout ('" +
              std::string(reinterpret_cast<const char*>(head), 8) + "')";
    return RegionKind::kDamaged;
  }
  // The header CRC covers bytes [layout_version, header_crc) (layout.h).
  const uint32_t crc =
      Crc32c(head + offsetof(Superblock, layout_version),
             offsetof(Superblock, header_crc) - offsetof(Superblock, layout_version));
  if (sb.layout_version != 0 && crc == sb.header_crc) {
    *detail = "magic number damaged, header intact";
    return RegionKind::kDamaged;
  }
  // The engine's open takes such a format over: the same rule (open.cc).
  if (FormatBegunHere(head)) {
    *detail = "a format that was begun and never finished";
    return RegionKind::kDamaged;
  }
  if (AllZero(head, kSuperblockBytes)) return RegionKind::kBlank;
  *detail = "neither a cxlkv region nor blank (its first 4 KiB are not zero)";
  return RegionKind::kForeign;
}

Status ProbePath(const std::string& path, const LifecycleOptions& o, Probe* out) {
  out->report = ProbeReport{};
  out->region.reset();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::OK();  // kAbsent
    return Status::IOError("stat " + path + ": " + std::strerror(errno));
  }
  out->dev = st.st_dev;
  out->ino = st.st_ino;
  out->regular = S_ISREG(st.st_mode);
  out->file_size = static_cast<uint64_t>(st.st_size);
  ProbeReport& r = out->report;
  if (!out->regular && !S_ISCHR(st.st_mode)) {
    r.kind = RegionKind::kForeign;
    r.detail = "neither a regular file nor a character device";
    return Status::OK();
  }
  if (out->regular && out->file_size <= o.offset) {
    r.kind = RegionKind::kEmpty;
    return Status::OK();
  }
  MappingOptions mo;
  mo.offset = o.offset;
  mo.size = o.size;
  mo.reserve = false;  // probing must not allocate the file's blocks
  mo.shared_lock = false;
  mo.sysfs_root = o.sysfs_root;
  std::unique_ptr<Mapping> map;
  Status s = Mapping::Open(path, mo, &map);
  if (!s.ok()) return s;
  if (map->size() < kSuperblockBytes) {
    r.kind = AllZero(map->base(), map->size()) ? RegionKind::kBlank : RegionKind::kForeign;
    if (r.kind == RegionKind::kForeign) r.detail = "shorter than a region header and not blank";
    out->extent = map->size();
    return Status::OK();
  }
  uint8_t head[kSuperblockBytes];
  std::memcpy(head, map->base(), sizeof head);
  const uint64_t mapped = map->size();
  if (map->lost()) return map->LostStatus();
  const auto* sb = reinterpret_cast<const Superblock*>(head);
  // The recorded size bounds the extent when plausible; else the mapping.
  out->extent =
      (sb->region_size >= kSuperblockBytes && sb->region_size <= mapped) ? sb->region_size : mapped;
  if (sb->magic.load(std::memory_order_relaxed) != kMagic) {
    r.kind = ClassifyHead(head, &r.detail);
    return Status::OK();
  }
  RegionOptions ro;
  ro.offset = o.offset;
  ro.size = o.size;
  ro.create_if_missing = false;
  ro.register_participant = false;
  ro.prefault = Prefault::kNone;
  ro.format_wait_ns = 0;
  ro.config.max_participants = 0;  // accept what the region records
  ro.sysfs_root = o.sysfs_root;
  // Inspect a region in its own coherence mode (version 6: software).
  if (sb->layout_version == kLayoutVersionSoftware) ro.config.coherence = CoherenceMode::kSoftware;
  auto impl = std::make_unique<RegionImpl>(std::move(map), ro, nullptr);
  s = impl->Init();
  if (!s.ok()) {
    r.kind = RegionKind::kDamaged;
    r.detail = s.ToString();
    return Status::OK();
  }
  r.kind = RegionKind::kRegion;
  r.info = impl->info();
  out->extent = r.info.size;
  out->region = std::move(impl);
  return Status::OK();
}

uint64_t Watch(const std::vector<WatchTarget*>& targets, uint64_t liveness_timeout_ns) {
  const auto start = Clock::now();
  auto window = [liveness_timeout_ns](const ParticipantInfo& p) {
    // The declared interval is untrusted: it counts up to the longest the
    // engine accepts, exactly like the engine's own reclaim rule.
    const uint64_t declared = std::min(p.heartbeat_interval_ns, kMaxHeartbeatIntervalNs);
    return std::max(liveness_timeout_ns, 4 * declared);
  };
  size_t undecided = 0;
  for (WatchTarget* t : targets) {
    t->seen.clear();
    t->window_ns = 0;
    for (const ParticipantInfo& p : t->region->Participants()) {
      t->seen[p.index] = p;
      t->window_ns = std::max(t->window_ns, window(p));
    }
    t->decided = t->seen.empty();  // no records: nobody registered
    t->attached = false;
    if (!t->decided) ++undecided;
  }
  while (undecided > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto elapsed = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
    for (WatchTarget* t : targets) {
      if (t->decided) continue;
      std::map<uint32_t, ParticipantInfo> now;
      for (const ParticipantInfo& p : t->region->Participants()) {
        auto it = t->seen.find(p.index);
        if (it == t->seen.end() || !SameRecord(it->second, p)) t->live.push_back(p);
        now[p.index] = p;
      }
      t->seen = std::move(now);  // records that became FREE have left
      if (!t->live.empty()) {
        t->attached = t->decided = true;
      } else if (t->seen.empty() || elapsed >= t->window_ns) {
        t->decided = true;
      }
      if (t->decided) --undecided;
    }
  }
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
}

bool ChangedSinceWatch(WatchTarget* t) {
  if (t->region == nullptr) return false;
  const auto now = t->region->Participants();
  if (now.size() > t->seen.size()) return true;
  for (const ParticipantInfo& p : now) {
    auto it = t->seen.find(p.index);
    if (it == t->seen.end() || !SameRecord(it->second, p)) {
      t->live.push_back(p);
      return true;
    }
  }
  return false;
}

FlockResult TryExclusive(const std::string& path, int flags, dev_t dev, ino_t ino, int* fd,
                         std::string* error) {
  *fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (*fd < 0) {
    *error = "open " + path + ": " + std::strerror(errno);
    return FlockResult::kError;
  }
  struct stat st {};
  if (::fstat(*fd, &st) != 0 || st.st_dev != dev || st.st_ino != ino) {
    *error = path + " was replaced while it was being examined";
    return FlockResult::kError;
  }
  if (::flock(*fd, LOCK_EX | LOCK_NB) == 0) return FlockResult::kAcquired;
  if (errno == EWOULDBLOCK) return FlockResult::kHeld;
  *error = "lock " + path + ": " + std::strerror(errno);
  return FlockResult::kError;
}

}  // namespace internal

using internal::RegionImpl;

const char* SlotStateName(SlotState s) {
  switch (s) {
    case SlotState::kFree:
      return "free";
    case SlotState::kWriting:
      return "writing";
    case SlotState::kReady:
      return "ready";
    case SlotState::kEvicting:
      return "evicting";
    case SlotState::kInvalid:
      break;
  }
  return "invalid";
}

const char* RegionKindName(RegionKind k) {
  switch (k) {
    case RegionKind::kAbsent:
      return "absent";
    case RegionKind::kEmpty:
      return "empty";
    case RegionKind::kBlank:
      return "blank";
    case RegionKind::kRegion:
      return "region";
    case RegionKind::kDamaged:
      return "damaged";
    case RegionKind::kForeign:
      return "foreign";
  }
  return "unknown";
}

namespace {

SlotState DecodeState(uint64_t word) {
  const uint8_t s = internal::WordState(word);
  return s <= 3 ? static_cast<SlotState>(s) : SlotState::kInvalid;
}

}  // namespace

Occupancy ScanOccupancy(const Region& region) {
  const auto& impl = static_cast<const RegionImpl&>(region);
  Occupancy o;
  for (uint64_t s = 0; s < region.info().num_entries; ++s) {
    const internal::SlotMeta& m = impl.Meta(s);
    switch (DecodeState(m.state.load(std::memory_order_acquire))) {
      case SlotState::kFree:
        break;  // counted below
      case SlotState::kWriting:
        ++o.writing;
        break;
      case SlotState::kReady:
        ++o.ready;
        o.ready_bytes += m.len.load(std::memory_order_relaxed);
        break;
      case SlotState::kEvicting:
        ++o.evicting;
        break;
      case SlotState::kInvalid:
        ++o.invalid;
        break;
    }
  }
  // Free capacity: data slots no entry holds (layouts 5 and 6 have two
  // entries per data slot, so FREE entries are not free room).
  const uint64_t used = o.writing + o.ready + o.evicting + o.invalid;
  o.free = region.info().num_slots > used ? region.info().num_slots - used : 0;
  // Layout 5 (coherence=hardware): the data words, and READY entries whose
  // data slot's word is not their lease. The orphan rule read here is
  // hardware mode's.
  if (!impl.geometry().decoupled || region.info().config.coherence != CoherenceMode::kHardware) {
    return o;
  }
  for (uint64_t d = 0; d < region.info().num_slots; ++d) {
    switch (static_cast<internal::DataState>(internal::WordState(impl.DataWord(d).load()))) {
      case internal::DataState::kFree:
        ++o.data_free;
        break;
      case internal::DataState::kHeld:
        ++o.data_held;
        break;
      case internal::DataState::kMoving:
        ++o.data_moving;
        break;
    }
    if (impl.DataSlotFate(d) != internal::DataFate::kKeep) ++o.data_unsettled;
  }
  for (uint64_t e = 0; e < region.info().num_entries; ++e) {
    const uint64_t w = impl.Meta(e).state.load(std::memory_order_acquire);
    if (internal::WordState(w) != internal::kReady) continue;
    if (impl.ReadyOffData(e, w)) ++o.ready_off_data;
  }
  return o;
}

Status ScanSlots(const Region& region, uint64_t first, uint64_t count, std::vector<SlotView>* out) {
  const uint64_t n = region.info().num_entries;
  if (first >= n) {
    return Status::InvalidArgument("slot " + std::to_string(first) + " is past the region's " +
                                   std::to_string(n) + " slots");
  }
  const auto& impl = static_cast<const RegionImpl&>(region);
  const uint64_t end = first + std::min(count, n - first);
  out->clear();
  out->reserve(end - first);
  for (uint64_t s = first; s < end; ++s) {
    const internal::SlotMeta& m = impl.Meta(s);
    const uint64_t w = m.state.load(std::memory_order_acquire);
    SlotView v;
    v.slot = s;
    v.state = DecodeState(w);
    v.generation = internal::WordGen(w);
    v.owner = internal::WordOwner(w);
    v.ns = m.ns.load(std::memory_order_relaxed);
    v.len = m.len.load(std::memory_order_relaxed);
    v.key.hi = m.key_hi.load(std::memory_order_relaxed);
    v.key.lo = m.key_lo.load(std::memory_order_relaxed);
    v.depth = internal::UnpackDepth(m.depth.load(std::memory_order_relaxed), w);
    v.data = region.info().layout_version == internal::kLayoutVersion ||
                     region.info().layout_version == internal::kLayoutVersionSoftware
                 ? m.data.load(std::memory_order_relaxed)
                 : s;
    out->push_back(v);
  }
  return Status::OK();
}

Status CheckMapping(const Region& region) {
  return static_cast<const RegionImpl&>(region).mapping().LostStatus();
}

Status ProbeRegion(const std::string& path, const LifecycleOptions& options, ProbeReport* out) {
  internal::Probe p;
  CXLKV_RETURN_IF_ERROR(internal::ProbePath(path, options, &p));
  *out = std::move(p.report);
  return Status::OK();
}

std::string AttachReport::ToString() const {
  if (locked_on_this_host) return "held open by a process on this host (flock)";
  if (!live.empty()) {
    std::string s = std::to_string(live.size()) + " live participant(s) (";
    for (size_t i = 0; i < live.size() && i < 3; ++i) {
      if (i) s += ", ";
      s += "pid " + std::to_string(live[i].pid) + " on " +
           (live[i].host.empty() ? "?" : live[i].host);
    }
    return s + (live.size() > 3 ? ", ...)" : ")");
  }
  return "nobody attached (heartbeats watched for " + std::to_string(watched_ns / 1'000'000) +
         " ms)";
}

Status CheckAttached(const std::string& path, const LifecycleOptions& options, AttachReport* out) {
  *out = AttachReport{};
  internal::Probe p;
  CXLKV_RETURN_IF_ERROR(internal::ProbePath(path, options, &p));
  if (p.report.kind == RegionKind::kAbsent) return Status::OK();
  if (p.regular) {
    int fd = -1;
    std::string err;
    const auto r = internal::TryExclusive(path, O_RDONLY, p.dev, p.ino, &fd, &err);
    if (fd >= 0) ::close(fd);  // closing releases the lock
    if (r == internal::FlockResult::kError) return Status::IOError(err);
    if (r == internal::FlockResult::kHeld) {
      out->attached = out->locked_on_this_host = true;
      return Status::OK();
    }
  }
  if (p.region == nullptr) return Status::OK();
  internal::WatchTarget t;
  t.region = p.region.get();
  out->watched_ns = internal::Watch({&t}, options.liveness_timeout_ns);
  out->attached = t.attached;
  out->live = std::move(t.live);
  return Status::OK();
}

}  // namespace cxlkv
