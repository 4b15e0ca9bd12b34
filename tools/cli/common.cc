// Copyright cxlkv authors.
#include "common.h"

#include <cstdio>
#include <cstdlib>

#include "cxlkv/base/cxl_dax_env.h"
#include "cxlkv/base/size.h"

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
  if (!size_text.empty()) CXLKV_RETURN_IF_ERROR(base::ParseSize(size_text, &o->size));
  if (!offset_text.empty()) CXLKV_RETURN_IF_ERROR(base::ParseSize(offset_text, &o->offset));
  if (!slot_size_text.empty()) {
    CXLKV_RETURN_IF_ERROR(base::ParseSize(slot_size_text, &o->config.slot_size));
  }
  o->config.hash_algorithm = hash_algorithm;
  o->config.hash_seed_fingerprint = hash_seed_fingerprint;
  o->config.max_participants = max_participants;
  o->prefault = Prefault::kNone;  // tools touch little of the region
  return Status::OK();
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

Status OpenObserver(const RegionFlags& f, std::unique_ptr<Region>* out) {
  RegionOptions o;
  CXLKV_RETURN_IF_ERROR(f.ToOptions(&o));
  o.create_if_missing = false;
  o.register_participant = false;
  o.format_stall_ns = 500'000'000;
  return Region::Open(f.region, o, out);
}

Status OpenParticipant(const RegionFlags& f, const TimingFlags& timing,
                       std::unique_ptr<Region>* out) {
  RegionOptions o;
  CXLKV_RETURN_IF_ERROR(f.ToOptions(&o));
  timing.Apply(&o);
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

std::string Human(uint64_t bytes) { return base::FormatBytes(bytes); }

}  // namespace cxlkv::cli
