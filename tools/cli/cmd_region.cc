// Copyright cxlkv authors.
//
// Region administration: format, inspect, stats, verify, wipe, gc.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "commands.h"
#include "common.h"
#include "layout.h"
#include "mapping.h"
#include "region_impl.h"

namespace cxlkv::cli {
namespace {

using nlohmann::json;

struct Occupancy {
  uint64_t free = 0, writing = 0, ready = 0, evicting = 0, invalid = 0, ready_bytes = 0;
};

Occupancy Scan(Region* r) {
  auto* impl = static_cast<internal::RegionImpl*>(r);
  Occupancy o;
  for (uint64_t s = 0; s < r->info().num_slots; ++s) {
    const uint64_t w = impl->Meta(s).state.load(std::memory_order_acquire);
    switch (internal::WordState(w)) {
      case 0:
        ++o.free;
        break;
      case 1:
        ++o.writing;
        break;
      case 2:
        ++o.ready;
        o.ready_bytes += impl->Meta(s).len.load(std::memory_order_relaxed);
        break;
      case 3:
        ++o.evicting;
        break;
      default:
        ++o.invalid;
    }
  }
  return o;
}

json ParticipantsJson(const std::vector<ParticipantInfo>& ps) {
  json arr = json::array();
  for (auto& p : ps) {
    arr.push_back({{"index", p.index},
                   {"incarnation", p.incarnation},
                   {"pid", p.pid},
                   {"host", p.host},
                   {"heartbeat", p.heartbeat},
                   {"heartbeat_interval_ns", p.heartbeat_interval_ns},
                   {"state", p.reclaiming ? "reclaiming" : "active"},
                   {"counters", CountersJson(p.counters)}});
  }
  return arr;
}

int Format(const RegionFlags& f, bool force, bool as_json) {
  RegionOptions o;
  Status s = f.ToOptions(&o);
  if (!s.ok()) return Fail("format", s);
  if (o.config.slot_size == 0)
    return Fail("format", Status::InvalidArgument("--slot-size is required"));
  if (force) {
    s = Unformat(f, o);
    if (!s.ok()) return Fail("format", s);
  }
  o.register_participant = false;
  std::unique_ptr<Region> r;
  s = Region::Open(f.region, o, &r);
  if (!s.ok()) return Fail("format", s);
  if (as_json) {
    std::printf("%s\n",
                InfoJson(r->info()).dump(2, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    const auto& i = r->info();
    std::printf("region %s: %llu slots of %s (%s), layout v%u\n", i.path.c_str(),
                (unsigned long long)i.num_slots, Human(i.slot_size).c_str(), Human(i.size).c_str(),
                i.layout_version);
  }
  return kExitOk;
}

int Inspect(const RegionFlags& f, bool as_json, bool with_stats) {
  std::unique_ptr<Region> r;
  Status s = OpenObserver(f, &r);
  if (!s.ok()) return Fail(with_stats ? "stats" : "inspect", s);
  const Occupancy occ = Scan(r.get());
  const auto parts = r->Participants();
  const Counters c = r->RegionCounters();
  if (as_json) {
    json j = {{"region", InfoJson(r->info())},
              {"slots",
               {{"free", occ.free},
                {"writing", occ.writing},
                {"ready", occ.ready},
                {"evicting", occ.evicting},
                {"invalid", occ.invalid},
                {"ready_bytes", occ.ready_bytes}}},
              {"participants", ParticipantsJson(parts)},
              {"counters", CountersJson(c)}};
    std::printf("%s\n", j.dump(2, ' ', false, json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  const auto& i = r->info();
  if (!with_stats) {
    std::printf("region        %s (%s, offset %llu)\n", i.path.c_str(), i.backend.c_str(),
                (unsigned long long)i.offset);
    std::printf("layout        v%u, %s, epoch %016llx\n", i.layout_version, Human(i.size).c_str(),
                (unsigned long long)i.format_epoch);
    std::printf("slots         %llu x %s (stride %s), %llu sets x %u ways, data at %s\n",
                (unsigned long long)i.num_slots, Human(i.slot_size).c_str(),
                Human(i.slot_stride).c_str(), (unsigned long long)i.num_sets, i.ways,
                Human(i.data_offset).c_str());
    std::printf("config        hash=%s seed=%llu coherence=%s max_participants=%u\n",
                i.config.hash_algorithm.c_str(), (unsigned long long)i.config.hash_seed_fingerprint,
                CoherenceModeName(i.config.coherence), i.config.max_participants);
    std::printf("metadata      %s\n", i.config.metadata_json.c_str());
    std::printf(
        "occupancy     %llu ready (%s), %llu writing, %llu free, %llu evicting, %llu invalid\n",
        (unsigned long long)occ.ready, Human(occ.ready_bytes).c_str(),
        (unsigned long long)occ.writing, (unsigned long long)occ.free,
        (unsigned long long)occ.evicting, (unsigned long long)occ.invalid);
  }
  std::printf("participants  %zu\n", parts.size());
  for (auto& p : parts) {
    std::printf("  #%-3u pid %-8u host %-20s heartbeat %-10llu %s\n", p.index, p.pid,
                p.host.c_str(), (unsigned long long)p.heartbeat,
                p.reclaiming ? "reclaiming" : "active");
  }
  std::printf("counters (region-wide)\n");
  for (uint32_t k = 0; k < static_cast<uint32_t>(Counter::kCount); ++k) {
    std::printf("  %-24s %llu\n", CounterName(static_cast<Counter>(k)), (unsigned long long)c.v[k]);
  }
  return kExitOk;
}

int Verify(const RegionFlags& f, bool drop, bool as_json) {
  std::unique_ptr<Region> r;
  Status s = drop ? OpenParticipant(f, &r) : OpenObserver(f, &r);
  if (!s.ok()) return Fail("verify", s);
  Region::ScrubReport rep;
  s = r->Verify(drop, &rep);
  if (!s.ok()) return Fail("verify", s);
  if (as_json) {
    std::printf("%s\n", json{{"ready", rep.ready},
                             {"verified", rep.verified},
                             {"crc_failures", rep.crc_failures},
                             {"dropped", rep.dropped},
                             {"skipped_changed", rep.skipped_changed}}
                            .dump(2, ' ', false, json::error_handler_t::replace)
                            .c_str());
  } else {
    std::printf(
        "verified %llu of %llu ready slots: %llu CRC failures, %llu dropped, %llu changed "
        "during the scrub\n",
        (unsigned long long)rep.verified, (unsigned long long)rep.ready,
        (unsigned long long)rep.crc_failures, (unsigned long long)rep.dropped,
        (unsigned long long)rep.skipped_changed);
  }
  return rep.crc_failures == 0 ? kExitOk : kExitFailed;
}

int Wipe(const RegionFlags& f, bool as_json) {
  std::unique_ptr<Region> r;
  Status s = OpenParticipant(f, &r);
  if (!s.ok()) return Fail("wipe", s);
  Region::WipeReport rep;
  s = r->Wipe(&rep);
  if (!s.ok()) return Fail("wipe", s);
  if (as_json) {
    std::printf("%s\n",
                json{{"dropped", rep.dropped}, {"pinned", rep.pinned}, {"writing", rep.writing}}
                    .dump(2, ' ', false, json::error_handler_t::replace)
                    .c_str());
  } else {
    std::printf(
        "dropped %llu blocks; left %llu pinned and %llu being written (owned by live "
        "participants)\n",
        (unsigned long long)rep.dropped, (unsigned long long)rep.pinned,
        (unsigned long long)rep.writing);
  }
  return kExitOk;
}

int Gc(const std::string& dir, bool dry_run, bool as_json) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return Fail("gc", Status::IOError("open directory " + dir + ": " + std::strerror(errno)));
  }
  json removed = json::array(), kept = json::array();
  while (dirent* e = ::readdir(d)) {
    const std::string path = dir + "/" + e->d_name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    // 1. Is it a cxlkv region at all, and does any participant heartbeat?
    RegionFlags f;
    f.region = path;
    std::unique_ptr<Region> r;
    if (Status s = OpenObserver(f, &r); !s.ok()) {
      // Never touched. A file that carries our magic but fails validation
      // is reported, so a damaged region does not go unnoticed.
      uint64_t magic = 0;
      int mfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (mfd >= 0) {
        if (::pread(mfd, &magic, sizeof magic, 0) != sizeof magic) magic = 0;
        ::close(mfd);
      }
      if (magic == internal::kMagic) {
        kept.push_back({{"path", path}, {"reason", s.ToString()}});
        if (!as_json) std::printf("kept %s: %s\n", path.c_str(), s.ToString().c_str());
      }
      continue;
    }
    std::string why;
    if (auto live = LiveParticipants(r.get()); !live.empty()) {
      why = std::to_string(live.size()) + " live participant(s) (another host?)";
    }
    r.reset();
    // 2. On this host attached processes hold a shared flock. Holding the
    // exclusive lock across the unlink means nobody can attach in between:
    // an opener waits for the lock, then sees the path is gone.
    int fd = why.empty() ? ::open(path.c_str(), O_RDONLY | O_CLOEXEC) : -1;
    if (why.empty() && (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0)) {
      why = "in use on this host (flock)";
    }
    if (why.empty() && !dry_run && ::unlink(path.c_str()) != 0) {
      why = std::string("unlink: ") + std::strerror(errno);
    }
    if (fd >= 0) ::close(fd);
    if (why.empty()) {
      removed.push_back(path);
      if (!as_json) std::printf("%s %s\n", dry_run ? "would remove" : "removed", path.c_str());
    } else {
      kept.push_back({{"path", path}, {"reason", why}});
      if (!as_json) std::printf("kept %s: %s\n", path.c_str(), why.c_str());
    }
  }
  ::closedir(d);
  if (as_json)
    std::printf("%s\n", json{{"removed", removed}, {"kept", kept}, {"dry_run", dry_run}}
                            .dump(2, ' ', false, json::error_handler_t::replace)
                            .c_str());
  return kExitOk;
}

}  // namespace

void AddRegionCommands(CLI::App& app, int* rc) {
  {
    auto* cmd = app.add_subcommand("format", "format a region (or check it is formatted alike)");
    auto* f = new RegionFlags();
    auto* force = new bool(false);
    auto* js = new bool(false);
    f->Add(cmd, true);
    cmd->add_flag("--force", *force,
                  "reformat even if formatted (refused while participants live)");
    cmd->add_flag("--json", *js, "machine-readable output");
    cmd->callback([=] { *rc = Format(*f, *force, *js); });
  }
  for (const char* name : {"inspect", "stats"}) {
    const bool stats = std::string(name) == "stats";
    auto* cmd = app.add_subcommand(name, stats ? "region-wide and per-participant counters"
                                               : "layout, occupancy, participants, counters");
    auto* f = new RegionFlags();
    auto* js = new bool(false);
    f->Add(cmd, false);
    cmd->add_flag("--json", *js, "machine-readable output");
    cmd->callback([=] { *rc = Inspect(*f, *js, stats); });
  }
  {
    auto* cmd = app.add_subcommand("verify", "scrub: check every READY slot's CRC32C");
    auto* f = new RegionFlags();
    auto* drop = new bool(false);
    auto* js = new bool(false);
    f->Add(cmd, false);
    cmd->add_flag("--drop", *drop, "drop corrupt slots (registers as a participant)");
    cmd->add_flag("--json", *js, "machine-readable output");
    cmd->callback([=] { *rc = Verify(*f, *drop, *js); });
  }
  {
    auto* cmd =
        app.add_subcommand("wipe",
                           "drop every unpinned block; safe while others are attached (pinned and "
                           "in-flight blocks are left alone and reported)");
    auto* f = new RegionFlags();
    auto* js = new bool(false);
    f->Add(cmd, false);
    cmd->add_flag("--json", *js, "machine-readable output");
    cmd->callback([=] { *rc = Wipe(*f, *js); });
  }
  {
    auto* cmd =
        app.add_subcommand("gc", "remove region files under DIR that no live participant uses");
    auto* dir = new std::string("/dev/shm/cxlkv");
    auto* dry = new bool(false);
    auto* js = new bool(false);
    cmd->add_option("dir", *dir, "directory to clean (default /dev/shm/cxlkv)");
    cmd->add_flag("--dry-run", *dry, "only say what would be removed");
    cmd->add_flag("--json", *js, "machine-readable output");
    cmd->callback([=] { *rc = Gc(*dir, *dry, *js); });
  }
}

}  // namespace cxlkv::cli
