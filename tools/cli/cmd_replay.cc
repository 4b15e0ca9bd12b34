// Copyright cxlkv authors.
//
// `cxlkv replay`: the main job. Replays a production prefix-reuse trace in
// trace order across N replica processes attached to one region (or, with
// --baseline private, each to a private region of 1/N the size: the
// node-local tier). A replica looks up each request's block chain, loads
// and verifies the leading hits, "prefills" the misses by writing bytes
// derived from the block id, and stores them.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "commands.h"
#include "common.h"
#include "cxlkv/base/size.h"
#include "cxlkv/lifecycle.h"
#include "region_internal.h"
#include "replay_plan.h"

namespace cxlkv::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kMaxReplicas = 64;

struct Flags {
  RegionFlags region;
  std::string trace = "data/traces/mooncake-conversation-trace.jsonl";
  uint32_t replicas = 2;
  std::string routing = "round-robin";
  uint64_t block_tokens = 512;
  uint64_t kv_bytes_per_token = 57344;
  uint64_t limit = 0;
  std::string baseline = "shared";
  double inject_corruption = 0;
  uint64_t seed = 1;
  bool json = false;
  bool no_verify = false;
  bool quiet = false;
  int replica_index = -1;
  uint32_t replica_count = 0;
  std::string control;
  bool replace = false;
  TimingFlags timing;
};

struct WorkerResult {
  std::atomic<uint64_t> requests, blocks_requested, blocks_hit, bytes_loaded, bytes_stored, load_ns,
      verify_failures, corrupted_injected, corrupted_read, corrupted_read_events,
      unexpected_verify_failures, wrong_data, store_failures, stores, duplicates, evictions,
      cross_hits, errors, lost_races, done;
  // The worker's registry record in the shared region, once attached: its
  // index + 1 (0: not attached yet) and its incarnation, so the others
  // waiting for its requests can tell it stopped (WorkerStopped).
  std::atomic<uint64_t> participant, incarnation;
};

// "CXLKVCTL": a replay control file. Its header names the plan it belongs
// to, so a worker never adopts (or resizes) a file of another plan, a
// region, or anything else.
constexpr uint64_t kControlMagic = 0x4C5443564B4C5843ull;
// 2: WorkerResult gained lost_races. 3: participant and incarnation.
constexpr uint32_t kControlVersion = 3;

// Shared between the replica processes: completion flags, progress, the
// set of blocks corrupted behind the engine's back, and results.
struct Control {
  std::atomic<uint64_t> magic;  // kControlMagic, written last when the file is made
  uint32_t version;
  uint32_t replicas;
  uint64_t plan_hash;                           // PlanHash() of the plan the workers share
  uint64_t bytes;                               // ControlBytes() of that plan
  std::atomic<uint32_t> claimed[kMaxReplicas];  // a worker ran (or runs) as this index
  std::atomic<uint64_t> progress;
  std::atomic<uint32_t> aborted;
  WorkerResult results[kMaxReplicas];
  // followed by: std::atomic<uint8_t> done[requests]; std::atomic<uint8_t> corrupted[blocks]
};

// Everything the plan depends on: the chains (trace and --limit), their
// routing, and the flags that shape a run.
uint64_t PlanHash(const Flags& f, const ReplayPlan& p, uint32_t replicas, uint64_t block_bytes) {
  uint64_t h = 0x6A09E667F3BCC909ull;
  auto mix = [&h](uint64_t v) { h = internal::Mix64(h ^ (v + 0x9E3779B97F4A7C15ull)); };
  mix(kControlVersion);
  mix(replicas);
  mix(block_bytes);
  mix(f.seed);
  for (char c : f.routing + "/" + f.baseline) mix(static_cast<uint8_t>(c));
  mix(p.chains.size());
  for (size_t j = 0; j < p.chains.size(); ++j) {
    mix(p.replica[j]);
    mix(p.chains[j].size());
    for (uint64_t id : p.chains[j]) mix(id);
  }
  return h;
}

size_t ControlBytes(const ReplayPlan& p) {
  return sizeof(Control) + p.chains.size() + p.distinct_blocks + 64;
}
std::atomic<uint8_t>* DoneFlags(Control* c) {
  return reinterpret_cast<std::atomic<uint8_t>*>(c + 1);
}
std::atomic<uint8_t>* CorruptFlags(Control* c, const ReplayPlan& p) {
  return DoneFlags(c) + p.chains.size();
}

// Deterministic "KV bytes" of block `id`, as a prefill would produce.
void FillBlock(uint64_t id, uint8_t* dst, size_t n) {
  uint64_t x = internal::Mix64(id + 0x2545F4914F6CDD1Dull) | 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(dst + i, &x, 8);
  }
  for (; i < n; ++i) dst[i] = static_cast<uint8_t>(i);
}

std::string RegionPathFor(const Flags& f, uint32_t replica) {
  if (f.baseline == "private") return f.region.region + ".r" + std::to_string(replica);
  return f.region.region;
}

// A worker started on its own (--replica-index) on a host that was given a
// write partition ($CXL_SOFTWARE_PARTITION, with $CXL_SOFTWARE_PARTITIONS
// the partition count: the DRA driver's CDI environment, docs/dra.md)
// holds that partition; its replica index then only picks its share of the
// trace. Two workers given one partition are one writer too many
// (docs/coherence.md "Surfaces").
bool EnvPartitionGiven(const Flags& f) { return f.replica_index >= 0 && f.region.partition >= 0; }

// The write partition replica `replica` holds in coherence=software: its
// host's (EnvPartitionGiven), else partition `replica` of the replica count
// (one partition per replica); each private region has its one partition 0.
int32_t SoftwarePartition(const Flags& f, uint32_t replica) {
  if (f.baseline == "private") return 0;
  return EnvPartitionGiven(f) ? f.region.partition : static_cast<int32_t>(replica);
}

Status OpenReplicaRegion(const Flags& f, uint64_t block_bytes, uint32_t replica, uint32_t count,
                         bool create, std::unique_ptr<Region>* out) {
  RegionOptions o;
  CXLKV_RETURN_IF_ERROR(f.region.ToOptions(&o));
  if (f.baseline == "private") o.size /= count;
  o.config.slot_size = block_bytes;
  if (o.config.hash_algorithm.empty()) o.config.hash_algorithm = "mooncake-trace-id";
  o.config.metadata_json = json{{"job", "replay"}, {"trace", f.trace}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
  o.create_if_missing = create;
  // A replay always starts from a fresh region, so its mode is the one asked
  // for, never an old region's. coherence=software: SoftwarePartition.
  if (f.region.coherence != "software") {
    o.config.coherence = CoherenceMode::kHardware;
    o.config.software_partitions = 0;
    o.software_partition = -1;
  } else {
    o.config.software_partitions = count;
    if (f.baseline == "private") {
      o.config.software_partitions = 1;
    } else if (EnvPartitionGiven(f) && f.region.partitions != 0) {
      o.config.software_partitions = f.region.partitions;
    }
    o.software_partition = SoftwarePartition(f, replica);
  }
  o.prefault = Prefault::kAtAttach;  // first-touch faults stay out of the replay
  o.heartbeat_interval_ns = 50'000'000;
  o.liveness_timeout_ns = 2'000'000'000;
  f.timing.Apply(&o);
  return Region::Open(RegionPathFor(f, replica), o, out);
}

// This replica's heartbeat interval and liveness timeout (OpenReplicaRegion's).
RegionOptions ReplicaTiming(const Flags& f) {
  RegionOptions o;
  o.heartbeat_interval_ns = 50'000'000;
  o.liveness_timeout_ns = 2'000'000'000;
  f.timing.Apply(&o);
  return o;
}

// How long a key may keep answering "lost race" before the replay gives up
// on it. Another participant is writing it: alive, it commits within one
// copy (milliseconds); dead, any live participant (this replica's heartbeat
// thread included) reclaims its slot once it has been silent for the judge's
// liveness timeout or 4 of the writer's declared heartbeat intervals,
// whichever is longer (registry.cc), noticed within a heartbeat interval.
// The writer is not known, so the slowest declared interval of the others
// attached counts. Three such judgements and a second cover both with room
// for a loaded machine; longer means the key is stuck, which the old
// unbounded loop turned into an hour per key.
// The liveness judgement of a participant that declared heartbeats every
// `declared_ns`, as the registry's judge makes it: our timeout or 4 of its
// intervals, whichever is longer, the interval capped (it is region bytes).
uint64_t LivenessJudgeNs(const RegionOptions& o, uint64_t declared_ns) {
  return std::max(o.liveness_timeout_ns, 4 * std::min(declared_ns, kMaxHeartbeatIntervalNs));
}

std::chrono::nanoseconds StuckKeyBound(const Flags& f, const Region& r) {
  const RegionOptions o = ReplicaTiming(f);
  uint64_t judge = o.liveness_timeout_ns;
  for (const ParticipantInfo& p : r.Participants()) {
    if (!p.self) judge = std::max(judge, LivenessJudgeNs(o, p.heartbeat_interval_ns));
  }
  return std::chrono::nanoseconds(3 * judge + 4 * o.heartbeat_interval_ns + 1'000'000'000);
}

// Whether the worker of replica `owner`, whose requests this one waits
// for, stopped without finishing them (killed: its exit never sets
// `aborted`). Separately started workers wait for each other's requests
// through the control file; a dead one would hold the rest for ever. Its
// registry record tells, in the shared region: gone (a clean close, or
// reclaimed: hardware mode) or its heartbeat not advanced, watched on our
// clock from `watch` (kept per owner by the caller), for as long as the
// stuck-key bound allows a dead writer: three liveness judgements (our
// timeout or 4 of its declared intervals, whichever is longer) and a
// second, so a live worker starved on a loaded machine is not taken for a
// dead one. False while it has not attached.
struct OwnerWatch {
  uint64_t heartbeat = 0;
  Clock::time_point since{};
  bool seen = false;
};
bool WorkerStopped(const Flags& f, const Region& r, const Control* ctl, uint32_t owner,
                   OwnerWatch* watch, std::string* why) {
  const uint64_t p = ctl->results[owner].participant.load(std::memory_order_acquire);
  if (p == 0) return false;
  const uint64_t inc = ctl->results[owner].incarnation.load(std::memory_order_acquire);
  const auto now = Clock::now();
  for (const ParticipantInfo& info : r.Participants()) {
    if (info.index + 1 != p || info.incarnation != inc) continue;
    if (!watch->seen || info.heartbeat != watch->heartbeat) {
      watch->seen = true;
      watch->heartbeat = info.heartbeat;
      watch->since = now;
      return false;
    }
    const uint64_t judge = LivenessJudgeNs(ReplicaTiming(f), info.heartbeat_interval_ns);
    const auto still = std::chrono::nanoseconds(3 * judge + 1'000'000'000);
    if (now - watch->since < still) return false;
    *why = "its heartbeat (pid " + std::to_string(info.pid) + " on " + info.host +
           ") has not advanced for " +
           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(still).count()) +
           " ms";
    return true;
  }
  *why = "its heartbeat is gone from the region (its registry record was released)";
  return true;
}

int RunWorker(const Flags& f, const ReplayPlan& plan, Control* ctl, uint32_t index,
              uint32_t count) {
  const uint64_t block_bytes = f.block_tokens * f.kv_bytes_per_token;
  WorkerResult& res = ctl->results[index];
  std::unique_ptr<Region> r;
  // A worker on its host's partition (a pod of a non-coherent claim) holds
  // the node's partition lock first: a second one on the node is refused
  // here instead of fencing the first.
  Status s =
      f.region.coherence == "software" && EnvPartitionGiven(f) ? HoldPartitionLock() : Status::OK();
  if (s.ok()) s = OpenReplicaRegion(f, block_bytes, index, count, true, &r);
  if (!s.ok()) {
    std::fprintf(stderr, "cxlkv replay: replica %u: %s\n", index, s.ToString().c_str());
    ctl->aborted = 1;
    return kExitFailed;
  }
  NamespaceId ns;
  s = r->RegisterNamespace({"Qwen/Qwen2.5-7B-Instruct", "bfloat16", "mooncake-trace", 0, 0}, &ns);
  if (!s.ok()) {
    std::fprintf(stderr, "cxlkv replay: replica %u: %s\n", index, s.ToString().c_str());
    ctl->aborted = 1;
    return kExitFailed;
  }
  const bool soft = r->info().config.coherence == CoherenceMode::kSoftware;
  // Who we are in the shared region, for the workers that wait for our
  // requests (WorkerStopped). A private baseline's regions are apart.
  const bool shared = f.baseline != "private";
  if (shared && r->info().participant >= 0) {
    for (const ParticipantInfo& p : r->Participants()) {
      if (!p.self) continue;
      res.incarnation.store(p.incarnation, std::memory_order_relaxed);
      res.participant.store(p.index + 1, std::memory_order_release);
    }
  }
  std::vector<OwnerWatch> watches(count);
  std::vector<uint8_t> buf(block_bytes), want(block_bytes);
  std::vector<BlockKey> keys;
  std::mt19937_64 rng(f.seed * 1000003 + index);
  std::uniform_real_distribution<double> coin(0, 1);
  std::atomic<uint8_t>* done = DoneFlags(ctl);
  std::atomic<uint8_t>* corrupted = CorruptFlags(ctl, plan);
  LoadOptions lo;
  lo.verify_crc = !f.no_verify;
  for (size_t j = 0; j < plan.chains.size(); ++j) {
    if (plan.replica[j] != index) continue;
    if (const int64_t d = plan.dep[j]; d >= 0) {
      // Wait for the request that first stored our leading prefix.
      for (int spin = 0; !done[d].load(std::memory_order_acquire); ++spin) {
        if (ctl->aborted.load()) {
          std::fprintf(stderr, "cxlkv replay: replica %u: another replica failed; stopping\n",
                       index);
          return kExitFailed;
        }
        if (spin > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
        // Every 50 ms or so of waiting: is the worker we wait for still there?
        const uint32_t owner = plan.replica[static_cast<size_t>(d)];
        std::string why;
        if (shared && owner != index && spin % 1000 == 999 &&
            WorkerStopped(f, *r, ctl, owner, &watches[owner], &why)) {
          ctl->aborted = 1;
          std::fprintf(stderr,
                       "cxlkv replay: replica %u: replica %u stopped without finishing its "
                       "requests (%s: killed?); stopping. Remove the control file and the region "
                       "before a new run\n",
                       index, owner, why.c_str());
          return kExitFailed;
        }
      }
    }
    const auto& chain = plan.chains[j];
    const uint32_t* dense = plan.dense.data() + plan.chain_start[j];
    keys.clear();
    for (uint64_t id : chain) keys.push_back(BlockKey::FromId(id));
    res.requests++;
    res.blocks_requested += chain.size();
    // Scheduler side: pin the leading hits. Worker side: load them.
    // coherence=software has no pins (a pin is a store into another host's
    // line): the leading hits are looked up, and a block evicted between
    // lookup and load ends the prefix as a miss (docs/coherence.md).
    PinSet pins;
    size_t found = 0;
    if (soft) {
      while (found < keys.size() && r->Lookup(ns, keys[found]).ok()) ++found;
    } else {
      s = r->PinPrefix(ns, keys.data(), keys.size(), &pins);
      if (!s.ok()) res.errors++;
      found = pins.size();
    }
    size_t hits = 0;
    for (; hits < found; ++hits) {
      const auto t0 = Clock::now();
      s = r->Load(ns, keys[hits], buf.data(), buf.size(), lo);
      res.load_ns +=
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
      if (soft && s.IsNotFound()) break;
      if (s.IsCorruption()) {
        // Expected exactly for the blocks we corrupted ourselves. Flag 1:
        // corrupted, 2: corrupted and already read once (a replica reading
        // it at the same moment also fails: counted as a read, not a slot).
        const uint8_t was = corrupted[dense[hits]].exchange(2);
        if (was == 1) res.corrupted_read++;
        if (was == 0)
          res.unexpected_verify_failures++;
        else
          res.corrupted_read_events++;
        break;
      }
      if (!s.ok()) {
        res.errors++;
        break;
      }
      FillBlock(chain[hits], want.data(), want.size());
      if (std::memcmp(buf.data(), want.data(), block_bytes) != 0) {
        res.wrong_data++;
        break;
      }
      res.bytes_loaded += block_bytes;
    }
    pins.Release();
    res.blocks_hit += hits;
    // Prefill the misses and store them. Store() checksums our buffer, not
    // the slot, so a zombie writing into a reused slot is caught on load.
    for (size_t i = hits; i < chain.size(); ++i) {
      FillBlock(chain[i], want.data(), want.size());
      const auto first_try = Clock::now();
      // Set at the first lost race (Participants() reads every record).
      std::chrono::nanoseconds bound{0};
      for (int attempt = 0;; ++attempt) {
        StoreOutcome out = StoreOutcome::kStored;
        // Depth i: the chunk's place in its prefix chain (eviction's hint).
        s = r->Store(ns, keys[i], want.data(), block_bytes, &out, static_cast<uint32_t>(i));
        if (s.ok() && out == StoreOutcome::kDuplicate) {
          res.duplicates++;
          break;
        }
        if (!s.ok() && out == StoreOutcome::kLostRace) {
          if (bound.count() == 0) bound = StuckKeyBound(f, *r);
          const auto give_up = first_try + bound;
          if (Clock::now() > give_up) {
            std::fprintf(stderr,
                         "cxlkv replay: replica %u: block %s (trace id %llu) is still being "
                         "written by another participant after %.1f s and %d attempts; giving "
                         "up on it (a stuck key)\n",
                         index, keys[i].ToHex().c_str(), (unsigned long long)chain[i],
                         std::chrono::duration<double>(bound).count(), attempt + 1);
            res.store_failures++;
            res.errors++;
            break;
          }
          // Another replica is storing this block right now. Wait for it,
          // so a request that depends on ours finds the block READY; try the
          // store again every heartbeat interval, which is how often a dead
          // writer's slot may be reclaimed (and then nobody else stores it).
          const auto retry = std::min(
              give_up,
              Clock::now() + std::chrono::nanoseconds(ReplicaTiming(f).heartbeat_interval_ns));
          while (Clock::now() < retry && !r->Lookup(ns, keys[i]).ok()) {
            std::this_thread::sleep_for(std::chrono::microseconds(100));
          }
          continue;
        }
        if (soft && !s.ok() && out == StoreOutcome::kFenced) {
          // coherence=software: the write partition was given to a newer
          // process (only an attach to it fences here), which has freed
          // this worker's blocks; every later store would be refused too.
          // Two workers given one partition end here (two pods of a
          // non-coherent claim on one node: docs/dra.md). In hardware mode
          // a fence is a pause past the liveness timeout (a starved
          // worker): its failed stores are counted and the run goes on.
          std::fprintf(stderr,
                       "cxlkv replay: replica %u: %s (two writers given one write partition? "
                       "docs/coherence.md)\n",
                       index, s.ToString().c_str());
          res.store_failures++;
          res.errors++;
          ctl->aborted = 1;
          return kExitFailed;
        }
        if (!s.ok()) {
          res.store_failures++;
          if (Status m = CheckMapping(*r); !m.ok()) {
            std::fprintf(stderr, "cxlkv replay: replica %u: %s\n", index, m.ToString().c_str());
            res.errors++;
            ctl->aborted = 1;
            return kExitFailed;
          }
          break;
        }
        res.stores++;
        res.bytes_stored += block_bytes;
        corrupted[dense[i]].store(0);  // a fresh copy replaces any corrupted one
        if (f.inject_corruption > 0 && coin(rng) < f.inject_corruption) {
          // Flip one byte behind the engine's back.
          const int64_t slot = RegionInternal::FindReadySlot(r.get(), ns, keys[i]);
          if (slot >= 0) {
            corrupted[dense[i]].store(1);
            RegionInternal::SlotData(r.get(), slot)[rng() % block_bytes] ^= 0x5A;
            res.corrupted_injected++;
          }
        }
        break;
      }
    }
    done[j].store(1, std::memory_order_release);
    ctl->progress.fetch_add(1, std::memory_order_relaxed);
  }
  const Counters c = r->ProcessCounters();
  res.verify_failures = c[Counter::kCrcFailures];
  res.evictions = c[Counter::kEvictions];
  res.cross_hits = c[Counter::kCrossHits];
  // Stores that found another participant writing the key: a race two
  // replicas ran, and each retry while a slow or dead writer held a key.
  res.lost_races = c[Counter::kStoreLostRace];
  res.done = 1;
  return kExitOk;
}

// memcpy ceiling measured in this run: block-sized copies from a working set
// larger than the caches into one destination buffer, like a load.
double MeasureMemcpy(uint64_t block_bytes) {
  const uint64_t ws = std::max<uint64_t>(256ull << 20, block_bytes * 4);
  std::vector<uint8_t> src(ws, 1), dst(block_bytes);
  const uint64_t blocks = ws / block_bytes;
  uint64_t bytes = 0, i = 0;
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < std::chrono::milliseconds(400)) {
    std::memcpy(dst.data(), src.data() + (i++ % blocks) * block_bytes, block_bytes);
    bytes += block_bytes;
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  volatile uint8_t sink = dst[block_bytes / 2];
  (void)sink;
  return bytes / s / 1e9;
}

// Makes `path` ready for a fresh run: absent, empty or blank is fine (the
// replicas format it; formatting refuses non-blank metadata); an existing
// cxlkv region is destroyed only with --replace, and only while nobody is
// attached; anything else is refused.
Status PrepareFresh(const Flags& f, const std::string& path) {
  LifecycleOptions lo;
  CXLKV_RETURN_IF_ERROR(f.region.ToLifecycle(f.timing, &lo));
  lo.size = 0;  // whatever the existing region records
  if (f.baseline == "private") lo.offset = 0;
  ProbeReport probe;
  CXLKV_RETURN_IF_ERROR(ProbeRegion(path, lo, &probe));
  switch (probe.kind) {
    case RegionKind::kAbsent:
    case RegionKind::kEmpty:
    case RegionKind::kBlank:
      return Status::OK();
    case RegionKind::kForeign:
      return Status::InvalidArgument(path + " is not a cxlkv region (" + probe.detail +
                                     "); refusing to replay over it");
    case RegionKind::kRegion:
    case RegionKind::kDamaged:
      break;
  }
  if (!f.replace) {
    return Status::InvalidArgument(
        "region " + path + " already exists (" + RegionKindName(probe.kind) +
        "); replay starts from a fresh region: pass --replace to destroy it first (refused "
        "while anyone is attached), or use another --region");
  }
  return DestroyRegion(path, lo).WithContext("replay --replace");
}

// Opens (or makes) the control file that separately started workers share.
// A new or empty file is sized and stamped with the plan; an existing one
// must carry this plan's stamp, is never truncated, and each replica index
// runs against it once.
Status OpenControl(const Flags& f, uint64_t plan_hash, size_t bytes, uint32_t replicas,
                   uint32_t index, Control** out) {
  const std::string& path = f.control;
  auto refuse = [&path](const std::string& why) {
    return Status::InvalidArgument("control file " + path + ": " + why + "; it was not modified");
  };
  if (path == f.region.region) return refuse("it is the region itself");
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0660);
  if (fd < 0) return Status::IOError("open control file " + path + ": " + std::strerror(errno));
  struct stat st {};
  auto close_with = [fd](Status s) {
    ::close(fd);
    return s;
  };
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return close_with(refuse("not a regular file"));
  // Before taking any lock: a file that starts with another stamp (a live
  // region holds a shared flock we would wait on) is refused at once. A zero
  // stamp may be a worker making the file right now: decided under the lock.
  uint64_t magic = 0;
  if (st.st_size > 0 && ::pread(fd, &magic, sizeof magic, 0) == sizeof magic && magic != 0 &&
      magic != kControlMagic) {
    return close_with(refuse("not a replay control file (no CXLKVCTL stamp)"));
  }
  // Workers starting together: one makes the file, the others wait for it.
  bool locked = false;
  for (int i = 0; i < 1000 && !locked; ++i) {
    locked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (!locked) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!locked) return close_with(refuse("locked by another process for 10 s"));
  if (::fstat(fd, &st) != 0) return close_with(Status::IOError("stat " + path));
  const bool make = st.st_size == 0;
  if (make && ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return close_with(Status::IOError("size control file " + path + ": " + std::strerror(errno)));
  }
  if (!make && static_cast<uint64_t>(st.st_size) < sizeof(Control)) {
    return close_with(refuse("too short to be a control file"));
  }
  const size_t map_bytes = make ? bytes : static_cast<size_t>(st.st_size);
  void* mem = ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mem == MAP_FAILED) return close_with(Status::IOError("map control file " + path));
  auto* ctl = static_cast<Control*>(mem);
  Status s;
  if (make) {
    ctl->version = kControlVersion;
    ctl->replicas = replicas;
    ctl->plan_hash = plan_hash;
    ctl->bytes = bytes;
    ctl->magic.store(kControlMagic, std::memory_order_release);
  } else if (ctl->magic.load(std::memory_order_acquire) != kControlMagic ||
             ctl->version != kControlVersion) {
    s = refuse("not a replay control file of this build (no CXLKVCTL stamp of version " +
               std::to_string(kControlVersion) +
               ": another build's, or not one at all); remove it, and the region, before a new "
               "run");
  } else if (ctl->plan_hash != plan_hash || ctl->bytes != bytes || ctl->replicas != replicas) {
    s = refuse(
        "it belongs to another plan (a different trace, --limit, --replica-count, --routing, "
        "--seed, --baseline or block size); remove it to start a new run");
  } else if (map_bytes < bytes) {
    s = refuse("shorter than its plan needs");
  }
  if (s.ok()) {
    uint32_t expected = 0;
    if (!ctl->claimed[index].compare_exchange_strong(expected, 1)) {
      s = refuse("replica " + std::to_string(index) +
                 " already ran (or runs) with it; remove it, and the region, before a new run");
    }
  }
  // Unlock explicitly: the mapping keeps the open file (and a flock on it)
  // alive after close.
  ::flock(fd, LOCK_UN);
  ::close(fd);
  if (!s.ok()) {
    ::munmap(mem, map_bytes);
    return s;
  }
  *out = ctl;
  return Status::OK();
}

int Replay(Flags& f) {
  uint64_t block_bytes = 0;
  if (__builtin_mul_overflow(f.block_tokens, f.kv_bytes_per_token, &block_bytes) ||
      block_bytes == 0 || block_bytes > (1ull << 30)) {
    return Fail("replay", Status::InvalidArgument(
                              "block size --block-tokens x --kv-bytes-per-token must be in "
                              "[1 B, 1 GiB]"));
  }
  if (f.baseline != "shared" && f.baseline != "private") {
    return Fail("replay", Status::InvalidArgument("--baseline must be shared or private"));
  }
  if (f.region.region.empty()) f.region.region = "/dev/shm/cxlkv/replay";
  if (f.region.size_text.empty()) f.region.size_text = "1GiB";
  Routing routing;
  Status s = ParseRouting(f.routing, &routing);
  if (!s.ok()) return Fail("replay", s);
  const bool worker_mode = f.replica_index >= 0;
  const uint32_t n = worker_mode ? f.replica_count : f.replicas;
  if (n == 0 || n > kMaxReplicas) {
    return Fail("replay", Status::InvalidArgument("replica count must be in [1, 64]"));
  }
  if (worker_mode && static_cast<uint32_t>(f.replica_index) >= n) {
    return Fail("replay", Status::InvalidArgument("--replica-index must be < --replica-count"));
  }
  std::vector<std::vector<uint64_t>> chains;
  s = ReadTrace(f.trace, f.limit, &chains);
  if (!s.ok()) return Fail("replay", s);
  ReplayPlan plan;
  BuildPlan(std::move(chains), n, routing, f.seed, &plan);

  // The control area: anonymous shared memory inherited by forked replicas,
  // or a file that separately started workers share.
  const size_t ctl_bytes = ControlBytes(plan);
  Control* ctl = nullptr;
  if (worker_mode) {
    if (f.control.empty()) f.control = f.region.region + ".ctl";
    s = OpenControl(f, PlanHash(f, plan, n, block_bytes), ctl_bytes, n,
                    static_cast<uint32_t>(f.replica_index), &ctl);
    if (!s.ok()) return Fail("replay", s);
  } else {
    void* mem =
        ::mmap(nullptr, ctl_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return Fail("replay", Status::IOError("map control area"));
    ctl = static_cast<Control*>(mem);
  }

  const double memcpy_gbps = MeasureMemcpy(block_bytes);
  const auto t0 = Clock::now();
  std::vector<uint32_t> mine;
  if (worker_mode) {
    mine.push_back(static_cast<uint32_t>(f.replica_index));
    int rc = RunWorker(f, plan, ctl, mine[0], n);
    if (rc != kExitOk) return rc;
  } else {
    // A fresh region per run: blank what a previous run left, never
    // anything that is in use or is not a cxlkv region.
    for (uint32_t i = 0; i < n; ++i) {
      s = PrepareFresh(f, RegionPathFor(f, i));
      if (!s.ok()) return Fail("replay", s);
    }
    std::vector<pid_t> kids;
    for (uint32_t i = 0; i < n; ++i) {
      mine.push_back(i);
      std::fflush(nullptr);
      pid_t pid = ::fork();
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the parent
        if (::getppid() == 1) ::_exit(kExitFailed);
        ::_exit(RunWorker(f, plan, ctl, i, n));
      }
      if (pid < 0) return Fail("replay", Status::IOError("fork replica"));
      kids.push_back(pid);
    }
    const bool tty = ::isatty(2);
    auto last = Clock::now();
    size_t alive = kids.size();
    int failures = 0;
    while (alive > 0) {
      int st = 0;
      pid_t p = ::waitpid(-1, &st, WNOHANG);
      if (p > 0) {
        --alive;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
          ++failures;
          ctl->aborted = 1;
        }
        continue;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const auto now = Clock::now();
      if (!f.quiet && now - last > std::chrono::milliseconds(tty ? 250 : 5000)) {
        last = now;
        const uint64_t done = ctl->progress.load();
        std::fprintf(stderr, "%s[replay %s/%s x%u] %llu/%zu requests (%.0f%%) %.1fs%s",
                     tty ? "\r" : "", f.baseline.c_str(), f.routing.c_str(), n,
                     (unsigned long long)done, plan.chains.size(),
                     100.0 * done / plan.chains.size(),
                     std::chrono::duration<double>(now - t0).count(), tty ? "" : "\n");
      }
    }
    if (!f.quiet && tty) std::fprintf(stderr, "\n");
    if (failures) {
      return Fail("replay",
                  Status::IOError(std::to_string(failures) + " replica process(es) failed"));
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();

  // Aggregate over the replicas this process ran (all of them, or one).
  uint64_t tot[19] = {};
  for (uint32_t i : mine) {
    WorkerResult& w = ctl->results[i];
    std::atomic<uint64_t>* fields[] = {&w.requests,        &w.blocks_requested,
                                       &w.blocks_hit,      &w.bytes_loaded,
                                       &w.bytes_stored,    &w.load_ns,
                                       &w.verify_failures, &w.corrupted_injected,
                                       &w.corrupted_read,  &w.unexpected_verify_failures,
                                       &w.wrong_data,      &w.store_failures,
                                       &w.stores,          &w.duplicates,
                                       &w.evictions,       &w.cross_hits,
                                       &w.errors,          &w.corrupted_read_events,
                                       &w.lost_races};
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; ++k) tot[k] += fields[k]->load();
  }
  const double hit_rate = tot[1] ? double(tot[2]) / tot[1] : 0;
  const double bound = plan.blocks_requested ? double(plan.bound_hits) / plan.blocks_requested : 0;
  const double load_gbps = tot[5] ? tot[3] / (tot[5] / 1e9) / 1e9 : 0;
  json out = {
      {"requests", tot[0]},
      {"blocks_requested", tot[1]},
      {"blocks_hit", tot[2]},
      {"hit_rate", hit_rate},
      {"hit_rate_bound", bound},
      {"cross_replica_hits", tot[15]},
      {"bytes_loaded", tot[3]},
      {"bytes_stored", tot[4]},
      {"load_gbps", load_gbps},
      {"memcpy_gbps", memcpy_gbps},
      {"load_vs_memcpy", memcpy_gbps > 0 ? load_gbps / memcpy_gbps : 0},
      {"verify_failures", tot[6]},
      {"corrupted_slots", tot[7]},
      {"corrupted_slots_read", tot[8]},
      {"corrupted_read_events", tot[17]},
      {"unexpected_verify_failures", tot[9]},
      {"wrong_data", tot[10]},
      {"store_failures", tot[11]},
      {"stores", tot[12]},
      {"duplicate_stores", tot[13]},
      {"lost_races", tot[18]},
      {"evictions", tot[14]},
      {"errors", tot[16]},
      {"wall_s", wall},
      {"replicas", n},
      {"replica_index", worker_mode ? json(f.replica_index) : json(nullptr)},
      {"coherence", f.region.coherence == "software" ? "software" : "hardware"},
      // A worker's write partition (coherence=software), else null.
      {"software_partition",
       worker_mode && f.region.coherence == "software"
           ? json(SoftwarePartition(f, static_cast<uint32_t>(f.replica_index)))
           : json(nullptr)},
      {"baseline", f.baseline},
      {"routing", f.routing},
      {"block_bytes", block_bytes},
      {"region", f.region.region},
      {"region_size", f.region.size_text},
      {"distinct_blocks", plan.distinct_blocks},
      {"verify", !f.no_verify},
  };
  if (f.json) {
    std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    std::printf("replay %s/%s, %u replicas, %llu requests, %s blocks, region %s\n",
                f.baseline.c_str(), f.routing.c_str(), n, (unsigned long long)tot[0],
                Human(block_bytes).c_str(), f.region.size_text.c_str());
    std::printf("  hit rate %.4f (bound %.4f), %llu of %llu blocks, %llu cross-replica\n", hit_rate,
                bound, (unsigned long long)tot[2], (unsigned long long)tot[1],
                (unsigned long long)tot[15]);
    std::printf("  loaded %s at %.2f GB/s (memcpy %.2f GB/s, ratio %.2f), stored %s\n",
                Human(tot[3]).c_str(), load_gbps, memcpy_gbps,
                memcpy_gbps > 0 ? load_gbps / memcpy_gbps : 0, Human(tot[4]).c_str());
    std::printf(
        "  evictions %llu, store failures %llu, lost races %llu, verify failures %llu (corrupted "
        "%llu, read %llu), wrong data %llu, wall %.1fs\n",
        (unsigned long long)tot[14], (unsigned long long)tot[11], (unsigned long long)tot[18],
        (unsigned long long)tot[6], (unsigned long long)tot[7], (unsigned long long)tot[8],
        (unsigned long long)tot[10], wall);
  }
  const bool clean = tot[10] == 0 && tot[9] == 0 && tot[16] == 0;
  if (!clean)
    std::fprintf(stderr,
                 "cxlkv replay: integrity check failed (wrong data, unexpected "
                 "verify failures or errors)\n");
  return clean ? kExitOk : kExitFailed;
}

}  // namespace

void AddReplayCommand(CLI::App& app, int* rc) {
  auto* f = new Flags();
  auto* cmd = app.add_subcommand("replay", "replay a prefix-reuse trace across replica processes");
  // No --partition: replica i holds partition i, or a worker its host's
  // $CXL_SOFTWARE_PARTITION (SoftwarePartition).
  f->region.Add(cmd, false, /*identity=*/false);
  cmd->add_option("--trace", f->trace, "Mooncake-format JSONL trace");
  cmd->add_option("--replicas", f->replicas, "replica processes (default 2)");
  cmd->add_option("--routing", f->routing, "round-robin | random | prefix");
  cmd->add_option("--block-tokens", f->block_tokens, "tokens per block (default 512)");
  cmd->add_option("--kv-bytes-per-token", f->kv_bytes_per_token,
                  "KV bytes per token (default 57344: Qwen2.5-7B bf16)");
  cmd->add_option("--limit", f->limit, "replay only the first N requests (0 = all)");
  cmd->add_option("--baseline", f->baseline,
                  "shared (one region) | private (each replica its own region of 1/N the size)");
  cmd->add_option("--inject-corruption", f->inject_corruption,
                  "fraction of stored slots to corrupt behind the engine's back");
  cmd->add_option("--seed", f->seed, "seed for random routing and corruption");
  cmd->add_option("--replica-index", f->replica_index, "run as one worker of --replica-count");
  cmd->add_option("--replica-count", f->replica_count, "workers started separately");
  cmd->add_option("--control", f->control,
                  "control file shared by separately started workers (default REGION.ctl); "
                  "stamped with the plan: a file of another plan, or not a control file, is "
                  "refused and never modified; remove it, and the region, before a new run");
  cmd->add_flag("--replace", f->replace,
                "destroy an existing cxlkv region at --region first (refused while anyone is "
                "attached); without it an existing region is refused, never deleted");
  f->timing.Add(cmd, true, 50, 2000);
  cmd->add_flag("--no-verify", f->no_verify, "load without CRC32C verification");
  cmd->add_flag("--quiet", f->quiet, "no progress on stderr");
  cmd->add_flag("--json", f->json, "machine-readable output");
  cmd->callback([=] { *rc = Replay(*f); });
}

}  // namespace cxlkv::cli
