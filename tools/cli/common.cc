// Copyright cxlkv authors.
#include "common.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "cxlkv/base/cxl_dax_env.h"
#include "geometry.h"
#include "layout.h"
#include "mapping.h"

namespace cxlkv::cli {

void RegionFlags::Add(CLI::App* cmd, bool geometry) {
  if (const char* e = std::getenv(base::kCxlDaxDeviceEnv); e && *e) region = e;
  if (const char* e = std::getenv(base::kCxlDaxSizeEnv); e && *e) size_text = e;
  if (const char* e = std::getenv(base::kCxlDaxOffsetEnv); e && *e) offset_text = e;
  cmd->add_option("--region", region,
                  "region path: a file (e.g. /dev/shm/cxlkv/r0) or a devdax "
                  "device (default: $CXL_DAX_DEVICE)");
  cmd->add_option("--region-size", size_text,
                  "region size, bytes or IEC suffix (512MiB, 2GiB); default: $CXL_DAX_SIZE, "
                  "else the whole file/device");
  cmd->add_option("--offset", offset_text,
                  "byte offset of the region in the file/device (default: $CXL_DAX_OFFSET or 0)");
  if (geometry) {
    cmd->add_option("--slot-size", slot_size_text, "payload bytes per slot (one KV block)");
    cmd->add_option("--hash-algorithm", hash_algorithm,
                    "block-hash algorithm name recorded in the region");
    cmd->add_option("--hash-seed", hash_seed_fingerprint,
                    "hash-seed fingerprint recorded in the region");
    cmd->add_option("--max-participants", max_participants, "participant entries (multiple of 64)");
  }
}

Status RegionFlags::ToOptions(RegionOptions* o) const {
  if (region.empty()) {
    return Status::InvalidArgument("no region: pass --region PATH or set CXL_DAX_DEVICE");
  }
  if (!size_text.empty()) CXLKV_RETURN_IF_ERROR(internal::ParseSize(size_text, &o->size));
  if (!offset_text.empty()) CXLKV_RETURN_IF_ERROR(internal::ParseSize(offset_text, &o->offset));
  if (!slot_size_text.empty()) {
    CXLKV_RETURN_IF_ERROR(internal::ParseSize(slot_size_text, &o->config.slot_size));
  }
  o->config.hash_algorithm = hash_algorithm;
  o->config.hash_seed_fingerprint = hash_seed_fingerprint;
  o->config.max_participants = max_participants;
  o->prefault = Prefault::kNone;  // tools touch little of the region
  return Status::OK();
}

Status OpenObserver(const RegionFlags& f, std::unique_ptr<Region>* out) {
  RegionOptions o;
  CXLKV_RETURN_IF_ERROR(f.ToOptions(&o));
  o.create_if_missing = false;
  o.register_participant = false;
  o.format_stall_ns = 500'000'000;
  return Region::Open(f.region, o, out);
}

Status OpenParticipant(const RegionFlags& f, std::unique_ptr<Region>* out) {
  RegionOptions o;
  CXLKV_RETURN_IF_ERROR(f.ToOptions(&o));
  o.create_if_missing = false;
  return Region::Open(f.region, o, out);
}

int Fail(const std::string& cmd, const Status& s) {
  std::fprintf(stderr, "cxlkv %s: %s\n", cmd.c_str(), s.ToString().c_str());
  return kExitFailed;
}

nlohmann::json CountersJson(const Counters& c) {
  nlohmann::json j = nlohmann::json::object();
  for (uint32_t k = 0; k < static_cast<uint32_t>(Counter::kCount); ++k) {
    j[CounterName(static_cast<Counter>(k))] = c.v[k];
  }
  j["store_failures"] = c.store_failures();
  return j;
}

nlohmann::json InfoJson(const RegionInfo& i) {
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(i.config.metadata_json);
  } catch (...) {
    meta = i.config.metadata_json;
  }
  return {
      {"path", i.path},
      {"backend", i.backend},
      {"offset", i.offset},
      {"size", i.size},
      {"layout_version", i.layout_version},
      {"slot_size", i.slot_size},
      {"slot_stride", i.slot_stride},
      {"num_slots", i.num_slots},
      {"num_sets", i.num_sets},
      {"ways", i.ways},
      {"data_offset", i.data_offset},
      {"hash_algorithm", i.config.hash_algorithm},
      {"hash_seed_fingerprint", i.config.hash_seed_fingerprint},
      {"coherence", CoherenceModeName(i.config.coherence)},
      {"max_participants", i.config.max_participants},
      {"format_epoch", i.format_epoch},
      {"metadata", meta},
  };
}

std::string Human(uint64_t bytes) { return internal::FormatBytes(bytes); }

// Participants whose heartbeat advances within a short watch window.
// Liveness is judged on our own clock, like the engine does (BRIEF §3).
std::vector<ParticipantInfo> LiveParticipants(Region* r) {
  auto before = r->Participants();
  uint64_t longest = 100'000'000;
  for (auto& p : before)
    longest = std::max(longest, std::min<uint64_t>(p.heartbeat_interval_ns, 2'000'000'000));
  std::this_thread::sleep_for(std::chrono::nanoseconds(3 * longest));
  auto after = r->Participants();
  std::vector<ParticipantInfo> live;
  for (auto& a : after) {
    for (auto& b : before) {
      if (a.index == b.index && a.incarnation == b.incarnation && a.heartbeat != b.heartbeat &&
          !a.self) {
        live.push_back(a);
      }
    }
  }
  return live;
}

// Blanks the region's 4 KiB header so the next open formats it afresh,
// refusing while anyone uses the region: live participants (judged by their
// heartbeats, whatever the region's configuration) and, for files, any
// process on this host holding the region's flock.
Status Unformat(const RegionFlags& f, const RegionOptions& o) {
  RegionFlags any;  // accept whatever geometry the region records
  any.region = f.region;
  any.offset_text = f.offset_text;
  std::unique_ptr<Region> obs;
  if (OpenObserver(any, &obs).ok()) {
    auto live = LiveParticipants(obs.get());
    if (!live.empty()) {
      return Status::Busy("region " + f.region + " has " + std::to_string(live.size()) +
                          " live participant(s) (pid " + std::to_string(live[0].pid) +
                          "); stop them first");
    }
  }
  obs.reset();
  struct stat st {};
  if (::stat(f.region.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) {
    std::unique_ptr<internal::Mapping> m;
    CXLKV_RETURN_IF_ERROR(
        internal::Mapping::Open(f.region, o.offset, o.size, false, o.sysfs_root, &m));
    std::memset(m->base(), 0, std::min<uint64_t>(m->size(), internal::kSuperblockBytes));
    return Status::OK();
  }
  int fd = ::open(f.region.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? Status::OK()
                           : Status::IOError("open " + f.region + ": " + std::strerror(errno));
  Status result = Status::OK();
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    result = Status::Busy("region " + f.region + " is open by another process on this host");
  } else {
    static const std::vector<uint8_t> zero(internal::kSuperblockBytes, 0);
    if (::pwrite(fd, zero.data(), zero.size(), static_cast<off_t>(o.offset)) !=
        static_cast<ssize_t>(zero.size())) {
      result = Status::IOError("write " + f.region + ": " + std::strerror(errno));
    }
  }
  ::close(fd);
  return result;
}

}  // namespace cxlkv::cli
