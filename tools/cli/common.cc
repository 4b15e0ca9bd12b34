// Copyright cxlkv authors.
#include "common.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cxlkv/base/cxl_dax_env.h"
#include "cxlkv/base/size.h"

namespace cxlkv::cli {
namespace {

// A non-negative decimal from the environment; false if unparsable.
bool EnvNumber(const char* name, long long max, long long* out) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == 0) return false;
  char* end = nullptr;
  const long long v = std::strtoll(e, &end, 10);
  if (*end != 0 || v < 0 || v > max) {
    std::fprintf(stderr, "cxlkv: ignoring %s=%s (not a number in [0, %lld])\n", name, e, max);
    return false;
  }
  *out = v;
  return true;
}

}  // namespace

void RegionFlags::Add(CLI::App* cmd, bool geometry, bool identity) {
  if (const char* e = std::getenv(base::kCxlDaxDeviceEnv); e && *e) region = e;
  if (const char* e = std::getenv(base::kCxlDaxSizeEnv); e && *e) size_text = e;
  if (const char* e = std::getenv(base::kCxlDaxOffsetEnv); e && *e) offset_text = e;
  if (const char* e = std::getenv(base::kCxlCoherenceEnv); e && *e) coherence = e;
  long long v = 0;
  if (EnvNumber(base::kCxlSoftwarePartitionsEnv, 16, &v)) partitions = static_cast<uint32_t>(v);
  if (EnvNumber(base::kCxlSoftwarePartitionEnv, 15, &v)) partition = static_cast<int32_t>(v);
  cmd->add_option("--region", region,
                  "region path: a file (e.g. /dev/shm/cxlkv/r0) or a devdax "
                  "device (default: $CXL_DAX_DEVICE)");
  cmd->add_option("--region-size", size_text,
                  "region size, bytes or IEC suffix (512MiB, 2GiB); default: $CXL_DAX_SIZE, "
                  "else the whole file/device");
  cmd->add_option("--offset", offset_text,
                  "byte offset of the region in the file/device (default: $CXL_DAX_OFFSET or 0)");
  cmd->add_option("--coherence", coherence,
                  geometry ? "hardware (one host, or hardware-coherent hosts) or software (hosts "
                             "without hardware coherence: write partitions, docs/coherence.md); "
                             "default: $CXL_COHERENCE, else hardware"
                           : "hardware or software: refuse a region of the other mode (default: "
                             "$CXL_COHERENCE, else the region's own mode)")
      ->check(CLI::IsMember({"hardware", "software"}));
  if (identity)
    cmd->add_option("--partition", partition,
                    "coherence=software: the write partition this host holds (0..partitions-1, "
                    "handed out to one process at a time; partition 0 formats); default: "
                    "$CXL_SOFTWARE_PARTITION, else none (read only)")
        ->check(CLI::Range(0, 15));
  if (geometry) {
    cmd->add_option("--partitions", partitions,
                    "coherence=software: write partitions (hosts that may write), 1..16; "
                    "default: $CXL_SOFTWARE_PARTITIONS")
        ->check(CLI::Range(1, 16));
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
  if (!size_text.empty()) CXLKV_RETURN_IF_ERROR(base::ParseSize(size_text, &o->size));
  if (!offset_text.empty()) CXLKV_RETURN_IF_ERROR(base::ParseSize(offset_text, &o->offset));
  if (!slot_size_text.empty()) {
    CXLKV_RETURN_IF_ERROR(base::ParseSize(slot_size_text, &o->config.slot_size));
  }
  o->config.hash_algorithm = hash_algorithm;
  o->config.hash_seed_fingerprint = hash_seed_fingerprint;
  o->config.max_participants = max_participants;
  o->prefault = Prefault::kNone;  // tools touch little of the region
  if (coherence == "software") {
    o->config.coherence = CoherenceMode::kSoftware;
  } else if (coherence == "hardware") {
    o->config.coherence = CoherenceMode::kHardware;
  } else if (!coherence.empty()) {
    return Status::InvalidArgument("coherence '" + coherence + "': hardware or software");
  } else {
    // No mode asked for: the region's own, so that inspecting a region
    // needs no knowledge of how it was formatted.
    LifecycleOptions lo;
    lo.offset = o->offset;
    lo.size = o->size;
    ProbeReport probe;
    if (ProbeRegion(region, lo, &probe).ok() && probe.kind == RegionKind::kRegion)
      o->config.coherence = probe.info.config.coherence;
  }
  if (o->config.coherence == CoherenceMode::kHardware) {
    if (!coherence.empty() && (partitions != 0 || partition >= 0)) {
      return Status::InvalidArgument(
          "--partitions and --partition are for coherence=software only (this is "
          "coherence=hardware)");
    }
    return Status::OK();  // a hardware region ignores a stray $CXL_SOFTWARE_PARTITION
  }
  o->config.software_partitions = partitions;
  o->software_partition = partition;
  return Status::OK();
}

std::string CoherenceText(const RegionInfo& i) {
  std::string t = std::string("coherence=") + CoherenceModeName(i.config.coherence);
  if (i.config.coherence != CoherenceMode::kSoftware) return t;
  t += ", " + std::to_string(i.config.software_partitions) + " write partitions";
  return t;
}

Status RegionFlags::ToLifecycle(const TimingFlags& timing, LifecycleOptions* o) const {
  if (region.empty()) {
    return Status::InvalidArgument("no region: pass --region PATH or set CXL_DAX_DEVICE");
  }
  if (!size_text.empty()) CXLKV_RETURN_IF_ERROR(base::ParseSize(size_text, &o->size));
  if (!offset_text.empty()) CXLKV_RETURN_IF_ERROR(base::ParseSize(offset_text, &o->offset));
  if (timing.liveness_timeout_ms != 0)
    o->liveness_timeout_ns = timing.liveness_timeout_ms * 1'000'000;
  return Status::OK();
}

void TimingFlags::Add(CLI::App* cmd, bool participant, uint64_t default_heartbeat_ms,
                      uint64_t default_liveness_ms) {
  const std::string hb = std::to_string(default_heartbeat_ms);
  const std::string live = std::to_string(default_liveness_ms);
  if (participant) {
    cmd->add_option(
        "--heartbeat-ms", heartbeat_ms,
        "heartbeat interval of this participant in ms (default " + hb + "; at most 60000)");
  }
  cmd->add_option("--liveness-timeout-ms", liveness_timeout_ms,
                  participant
                      ? "judge a participant dead after this many ms without a heartbeat "
                        "(default " +
                            live + "; at least 4 x --heartbeat-ms)"
                      : "watch heartbeats at least this many ms before deciding nobody is "
                        "attached (default 5000; participants that beat slower are watched for "
                        "4 of their intervals)");
}

void TimingFlags::Apply(RegionOptions* o) const {
  if (heartbeat_ms != 0) o->heartbeat_interval_ns = heartbeat_ms * 1'000'000;
  if (liveness_timeout_ms != 0) o->liveness_timeout_ns = liveness_timeout_ms * 1'000'000;
}

namespace {

// A region that is missing or was never formatted: the engine's NotFound says
// which; the command adds how to go on, since none of these commands creates
// a region.
Status WithHowToCreate(const RegionFlags& f, Status s) {
  if (!s.IsNotFound()) return s;
  return Status::NotFound(s.message() +
                          " (check --region and $CXL_DAX_DEVICE; to create one: cxlkv format "
                          "--region " +
                          f.region + " --region-size SIZE --slot-size SIZE)");
}

}  // namespace

Status OpenObserver(const RegionFlags& f, std::unique_ptr<Region>* out) {
  RegionOptions o;
  CXLKV_RETURN_IF_ERROR(f.ToOptions(&o));
  o.create_if_missing = false;
  o.register_participant = false;
  o.format_stall_ns = 500'000'000;
  return WithHowToCreate(f, Region::Open(f.region, o, out));
}

Status OpenParticipant(const RegionFlags& f, const TimingFlags& timing,
                       std::unique_ptr<Region>* out) {
  RegionOptions o;
  CXLKV_RETURN_IF_ERROR(f.ToOptions(&o));
  timing.Apply(&o);
  o.create_if_missing = false;
  if (o.config.coherence == CoherenceMode::kSoftware && o.software_partition < 0) {
    return Status::InvalidArgument(
        "region " + f.region +
        " is coherence=software: this command writes to the region, so it needs the write "
        "partition this host holds (--partition N or $CXL_SOFTWARE_PARTITION; "
        "docs/coherence.md)");
  }
  if (o.config.coherence == CoherenceMode::kSoftware) CXLKV_RETURN_IF_ERROR(HoldPartitionLock());
  return WithHowToCreate(f, Region::Open(f.region, o, out));
}

Status HoldPartitionLock() {
  static int held = -1;  // open until exit: the lock lives as long as the process
  const char* path = std::getenv(base::kCxlPartitionLockEnv);
  if (path == nullptr || *path == 0 || held >= 0) return Status::OK();
  const int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return Status::IOError(std::string("partition lock ") + path + " ($" +
                           base::kCxlPartitionLockEnv + "): " + std::strerror(errno));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(fd);
    if (e == EWOULDBLOCK) {
      return Status::Busy(
          std::string("another process on this node already writes as its write partition (") +
          path +
          " is locked): two pods of one non-coherent claim on one node share one partition, "
          "and only one of them may write (docs/dra.md, \"Non-coherent regions\")");
    }
    return Status::IOError(std::string("flock ") + path + ": " + std::strerror(e));
  }
  held = fd;
  return Status::OK();
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
      {"software_partitions", i.config.software_partitions},
      {"participant", i.participant},
      {"max_participants", i.config.max_participants},
      {"format_epoch", i.format_epoch},
      {"metadata", meta},
  };
}

std::string Human(uint64_t bytes) { return base::FormatBytes(bytes); }

}  // namespace cxlkv::cli
