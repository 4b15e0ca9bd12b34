// Copyright cxlkv authors.
//
// Shared plumbing of the `cxlkv` subcommands: region flags (with the CDI
// environment as defaults), opening, output, exit codes.
#ifndef CXLKV_TOOLS_CLI_COMMON_H_
#define CXLKV_TOOLS_CLI_COMMON_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cxlkv/lifecycle.h"
#include "cxlkv/region.h"

namespace cxlkv::cli {

// Exit codes: 0 success, 1 the operation failed (region error, failed
// check), 2 bad usage (flags, unparsable input).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// --heartbeat-ms / --liveness-timeout-ms: this process's heartbeat interval
// and liveness timeout as a participant, and the shortest heartbeat watch of
// lifecycle checks (gc, format --force, replay --replace). 0 = the default
// (the engine's, or the command's own).
struct TimingFlags {
  uint64_t heartbeat_ms = 0;
  uint64_t liveness_timeout_ms = 0;

  // `participant`: the command registers (both flags); else only
  // --liveness-timeout-ms (the watch). The defaults are for the help text.
  void Add(CLI::App* cmd, bool participant, uint64_t default_heartbeat_ms = 100,
           uint64_t default_liveness_ms = 5000);
  // Overrides o's heartbeat interval and liveness timeout where given.
  void Apply(RegionOptions* o) const;
};

// --region / --region-size / --offset / --coherence / --partition /
// geometry flags. Defaults come from CXL_DAX_DEVICE, CXL_DAX_SIZE,
// CXL_DAX_OFFSET, CXL_COHERENCE, CXL_SOFTWARE_PARTITIONS and
// CXL_SOFTWARE_PARTITION (the CDI-injected environment,
// cxlkv/base/cxl_dax_env.h) when set.
struct RegionFlags {
  std::string region;
  std::string size_text;    // "" = whole file/device
  std::string offset_text;  // "" = 0
  std::string slot_size_text;
  std::string hash_algorithm;
  uint64_t hash_seed_fingerprint = 0;
  uint32_t max_participants = 64;
  // "hardware", "software" or "" (attach: the region's own mode, read from
  // its header; format: hardware). docs/coherence.md.
  std::string coherence;
  // coherence=software: write partitions to format with (1..16; 0 = accept
  // the region's on attach) and the partition this process holds (-1: none,
  // an observer). docs/coherence.md, "Identity by external lease".
  uint32_t partitions = 0;
  int32_t partition = -1;

  // Adds --region, --region-size, --offset, --coherence, --partition (and,
  // with `geometry`, the format-time flags --slot-size, --hash-algorithm,
  // --hash-seed, --max-participants, --partitions) to `cmd`; without
  // `identity`, no --partition (commands that assign partitions themselves).
  void Add(CLI::App* cmd, bool geometry, bool identity = true);
  // Fills RegionOptions, coherence included: an explicit --coherence as
  // given (a region of the other mode is then refused by Region::Open with
  // "coherence mismatch"), else the mode of the region's header when it
  // holds one (hardware for a blank or absent region). kInvalidArgument for
  // unparsable sizes, an unknown mode, or --partitions/--partition with
  // coherence=hardware.
  Status ToOptions(RegionOptions* o) const;
  // The same region for the lifecycle API (lifecycle.h), with `timing`'s
  // liveness timeout as the shortest heartbeat watch. kInvalidArgument as above.
  Status ToLifecycle(const TimingFlags& timing, LifecycleOptions* o) const;
};

// "coherence=software, partition 1 of 2" / "coherence=hardware": what a
// command reports of the region it opened.
std::string CoherenceText(const RegionInfo& info);

// Opens the region as an observer (no registration, no format).
Status OpenObserver(const RegionFlags& f, std::unique_ptr<Region>* out);
// Opens as a participant that may not format, with `timing` applied. A
// software-mode region needs --partition (kInvalidArgument naming it).
Status OpenParticipant(const RegionFlags& f, const TimingFlags& timing,
                       std::unique_ptr<Region>* out);

// coherence=software in a pod of a non-coherent claim: takes flock(LOCK_EX |
// LOCK_NB) on $CXL_PARTITION_LOCK (the node's lock file of this region,
// which hostd's CDI spec bind-mounts into every container that gets it:
// base/include/cxlkv/base/cxl_dax_env.h) and holds it until the process
// exits, so that a second writer of this host's partition on the node is
// refused before it attaches (an attach would take the partition over and
// fence the first: docs/coherence.md). OK without the variable, or when
// this process holds it already; kBusy naming the file when another
// process holds it; kIOError if it cannot be opened. Not thread-safe.
Status HoldPartitionLock();

// Prints `s` to stderr as "cxlkv <cmd>: <message>" and returns kExitFailed.
int Fail(const std::string& cmd, const Status& s);

nlohmann::json CountersJson(const Counters& c);
nlohmann::json InfoJson(const RegionInfo& info);
std::string Human(uint64_t bytes);

}  // namespace cxlkv::cli

#endif  // CXLKV_TOOLS_CLI_COMMON_H_
