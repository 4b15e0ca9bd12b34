// Copyright cxlkv authors.
//
// Region administration: format, inspect, stats, verify, wipe, gc.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "cxlkv/lifecycle.h"

namespace cxlkv::cli {
namespace {

using nlohmann::json;

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

// A region's header alone takes this many bytes (layout.h): a file with less
// after its offset holds no region, so no blocks of value.
constexpr uint64_t kRegionHeaderBytes = 4096;

int Format(const RegionFlags& f, const TimingFlags& timing, bool force, bool as_json) {
  RegionOptions o;
  Status s = f.ToOptions(&o);
  if (!s.ok()) return Fail("format", s);
  if (o.config.slot_size == 0)
    return Fail("format", Status::InvalidArgument("--slot-size is required"));
  // What the file holds now. A file shorter than --region-size is read at
  // its present length (size 0): a probe at that size refuses it, and the
  // format's own open would grow it, so a truncated region read back as
  // formatted alike, with zeros past the cut that its directory may name
  // as blocks. Otherwise at the size given, which also bounds what --force
  // zeroes (another region may follow it in the file or device).
  LifecycleOptions lo;
  s = f.ToLifecycle(timing, &lo);
  if (!s.ok()) return Fail("format", s);
  const uint64_t want_size = lo.size;
  struct stat st {};
  const bool regular = ::stat(f.region.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  const uint64_t file_size = regular ? static_cast<uint64_t>(st.st_size) : 0;
  if (regular && file_size < lo.offset + want_size) lo.size = 0;
  ProbeReport probe;
  const Status probed = ProbeRegion(f.region, lo, &probe);
  const bool too_small = probed.ok() && probe.kind == RegionKind::kForeign && regular &&
                         file_size > lo.offset && file_size - lo.offset < kRegionHeaderBytes;
  const std::string small_text =
      too_small ? "region " + f.region + " is " + std::to_string(file_size - lo.offset) +
                      " bytes from its offset and not blank: too small to be a region (its "
                      "header alone is " +
                      std::to_string(kRegionHeaderBytes) + " bytes), so it holds no blocks"
                : "";
  if (force) {
    // --force overrides what a cxlkv region's header says (damage, another
    // geometry or layout version, an abandoned format, a truncated file); it
    // never formats over a region in use or bytes that are not a cxlkv
    // region, except a file too small to hold one.
    s = probed;
    if (s.ok() && (probe.kind == RegionKind::kRegion || probe.kind == RegionKind::kDamaged)) {
      s = UnformatRegion(f.region, lo);
    } else if (too_small && want_size == 0) {
      s = Status::InvalidArgument(small_text +
                                  "; give --region-size N to format it as a region of N bytes");
    } else if (too_small) {
      // Emptied to its offset; the open below grows and formats it.
      if (::truncate(f.region.c_str(), static_cast<off_t>(lo.offset)) != 0) {
        s = Status::IOError("truncate " + f.region + ": " + std::strerror(errno));
      }
    } else if (s.ok() && probe.kind == RegionKind::kForeign) {
      s = Status::InvalidArgument("region " + f.region + " is not a cxlkv region (" + probe.detail +
                                  "); --force never formats over foreign bytes: remove or "
                                  "zero the file yourself if it is not needed");
    }
    if (!s.ok()) return Fail("format", s);
  } else if (too_small) {
    return Fail("format",
                Status::InvalidArgument(
                    small_text + "; `cxlkv format --force` formats it (give --region-size)"));
  } else if (probed.ok() && probe.kind == RegionKind::kForeign) {
    // The open refuses most such bytes itself, but reads a non-zero word
    // where a format's lock goes, over an otherwise blank header area, as an
    // abandoned format of ours and takes it over: never for foreign bytes.
    return Fail("format", Status::InvalidArgument(
                              "region " + f.region + " is not a cxlkv region (" + probe.detail +
                              "); format never formats over foreign bytes (nor does --force): "
                              "remove or zero the file yourself if it is not needed"));
  } else if (probed.ok() && regular && want_size != 0 && file_size < lo.offset + want_size &&
             (probe.kind == RegionKind::kRegion || probe.kind == RegionKind::kDamaged)) {
    // The probe's detail is its open's error ("<Code>: region P: why").
    std::string why = probe.detail;
    const std::string named = "region " + f.region + ": ";
    if (size_t at = why.find(named); at != std::string::npos) why = why.substr(at + named.size());
    // A formatted region in a file shorter than the size asked: truncated
    // (its header records more than the file holds), or formatted smaller.
    // Either way the open would grow the file first; never take it as intact.
    const std::string what =
        probe.kind == RegionKind::kRegion
            ? "region " + f.region + " is already formatted as a region of " +
                  std::to_string(probe.info.size) + " bytes, smaller than --region-size " +
                  std::to_string(want_size) + ": give --region-size " +
                  std::to_string(probe.info.size) +
                  " (or none) to check it, or reformat it at the new size with `cxlkv format "
                  "--force` (its blocks are lost; it is a cache)"
            : named + why +
                  (why.find("format --force") != std::string::npos
                       ? ""
                       : " (format never grows a formatted file: `cxlkv format --force` "
                         "reformats it; its blocks are lost, it is a cache)");
    return Fail("format", Status::InvalidArgument(what));
  }
  o.register_participant = false;
  if (o.config.coherence == CoherenceMode::kSoftware) {
    if (o.config.software_partitions == 0) {
      return Fail("format", Status::InvalidArgument(
                                "--coherence software needs --partitions N (1..16, the hosts "
                                "that may write; $CXL_SOFTWARE_PARTITIONS)"));
    }
    if (o.software_partition > 0) {
      return Fail("format",
                  Status::InvalidArgument("only the holder of write partition 0 formats a "
                                          "coherence=software region (this is --partition " +
                                          std::to_string(o.software_partition) +
                                          "); the others attach once it has"));
    }
    // Software mode formats only as partition 0's participant (no format
    // lock CAS across hosts). Attaching as partition 0 to a region already
    // formatted would take that partition from whoever holds it, so an
    // existing region is only checked, as an observer.
    LifecycleOptions lo;
    s = f.ToLifecycle(timing, &lo);
    ProbeReport probe;
    if (s.ok()) s = ProbeRegion(f.region, lo, &probe);
    if (!s.ok()) return Fail("format", s);
    if (probe.kind != RegionKind::kRegion) {
      RegionOptions fo = o;
      fo.register_participant = true;
      fo.software_partition = 0;
      std::unique_ptr<Region> formatter;
      s = Region::Open(f.region, fo, &formatter);
      if (!s.ok()) return Fail("format", s);
      formatter.reset();  // gives partition 0 back
    }
    o.software_partition = -1;
  }
  std::unique_ptr<Region> r;
  s = Region::Open(f.region, o, &r);
  if (s.IsInvalidArgument() &&
      s.message().find(" mismatch: the region has ") != std::string::npos) {
    // format over a region formatted otherwise only checks it; say both ways on.
    s = Status::InvalidArgument(s.message() +
                                " (the region is already formatted: give its values, or reformat "
                                "it with --force, which drops its blocks)");
  }
  if (!s.ok()) return Fail("format", s);
  if (as_json) {
    std::printf("%s\n",
                InfoJson(r->info()).dump(2, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    const auto& i = r->info();
    std::printf("region %s: %llu slots of %s (%s), layout v%u, %s\n", i.path.c_str(),
                (unsigned long long)i.num_slots, Human(i.slot_size).c_str(), Human(i.size).c_str(),
                i.layout_version, CoherenceText(i).c_str());
  }
  return kExitOk;
}

// Layout 5 (coherence=hardware): data slots apart from the index, one
// word each naming the lease that holds it.
bool DecoupledData(const RegionInfo& i) {
  return i.config.coherence == CoherenceMode::kHardware && i.num_entries > i.num_slots;
}

// What the data slot census found that the orphan sweep, a read or an
// eviction still has to repair, and how to go on (stderr: the counts
// themselves are on stdout).
void PrintDataSlotDamage(const Occupancy& occ) {
  std::fflush(stdout);  // after the counts it explains
  if (occ.data_unsettled > 0) {
    std::fprintf(stderr,
                 "cxlkv inspect: %llu data slot(s) held by a lease that is over or by a damaged "
                 "word; attached participants free them within a few liveness timeouts (if none "
                 "is attached, the next one to attach does); one that stays is lost until "
                 "`cxlkv wipe` or `cxlkv format --force`\n",
                 (unsigned long long)occ.data_unsettled);
  }
  if (occ.ready_off_data > 0) {
    std::fprintf(stderr,
                 "cxlkv inspect: %llu READY block(s) name a data slot their lease does not hold "
                 "(damaged index or data word): attached participants drop them within a few "
                 "liveness timeouts (so do a read that fails the CRC and eviction); `cxlkv wipe` "
                 "drops them now\n",
                 (unsigned long long)occ.ready_off_data);
  }
}

int Inspect(const RegionFlags& f, bool as_json, bool with_stats) {
  std::unique_ptr<Region> r;
  Status s = OpenObserver(f, &r);
  if (!s.ok()) return Fail(with_stats ? "stats" : "inspect", s);
  const Occupancy occ = ScanOccupancy(*r);
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
    if (DecoupledData(r->info())) {
      j["data_slots"] = {{"held", occ.data_held},
                         {"moving", occ.data_moving},
                         {"free", occ.data_free},
                         {"unsettled", occ.data_unsettled},
                         {"ready_off_data", occ.ready_off_data}};
    }
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
    std::printf("config        hash=%s seed=%llu %s max_participants=%u\n",
                i.config.hash_algorithm.c_str(), (unsigned long long)i.config.hash_seed_fingerprint,
                CoherenceText(i).c_str(), i.config.max_participants);
    std::printf("metadata      %s\n", i.config.metadata_json.c_str());
    std::printf(
        "occupancy     %llu ready (%s), %llu writing, %llu free, %llu evicting, %llu invalid\n",
        (unsigned long long)occ.ready, Human(occ.ready_bytes).c_str(),
        (unsigned long long)occ.writing, (unsigned long long)occ.free,
        (unsigned long long)occ.evicting, (unsigned long long)occ.invalid);
    if (DecoupledData(i)) {
      std::printf("data slots    %llu held, %llu moving, %llu free\n",
                  (unsigned long long)occ.data_held, (unsigned long long)occ.data_moving,
                  (unsigned long long)occ.data_free);
      PrintDataSlotDamage(occ);
    }
  }
  if (with_stats) std::printf("region        %s (%s)\n", i.path.c_str(), CoherenceText(i).c_str());
  std::printf("participants  %zu%s\n", parts.size(),
              i.config.coherence == CoherenceMode::kSoftware ? " (# = write partition)" : "");
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

int Verify(const RegionFlags& f, const TimingFlags& timing, bool drop, bool as_json) {
  std::unique_ptr<Region> r;
  Status s = OpenObserver(f, &r);
  if (!s.ok()) return Fail("verify", s);
  if (drop && r->info().config.coherence == CoherenceMode::kSoftware) {
    // Only a write partition's holder drops its blocks, and this command
    // would attach as a new one, which starts the partition empty.
    RegionOptions o;
    (void)f.ToOptions(&o);
    const std::string p = o.software_partition >= 0 ? std::to_string(o.software_partition) : "P";
    return Fail(
        "verify",
        Status::InvalidArgument(
            "region " + f.region +
            " is coherence=software: --drop would attach as write partition " + p +
            "'s new holder, and a new holder starts its partition empty, so every block of "
            "partition " +
            p +
            ", intact ones too, would go (and a process holding it now would be fenced). A "
            "block that fails its CRC is refused by every load and passed over by that "
            "process from then on; its partition's holder drops it when it reads it. `cxlkv "
            "verify` (without --drop) lists them; to drop all of partition " +
            p + ": cxlkv wipe --region " + f.region + " --partition " + p));
  }
  if (drop) {
    r.reset();
    s = OpenParticipant(f, timing, &r);
    if (!s.ok()) return Fail("verify", s);
  }
  Region::ScrubReport rep;
  s = r->Verify(drop, &rep);
  if (!s.ok()) return Fail("verify", s);
  const bool decoupled = DecoupledData(r->info());
  if (as_json) {
    json j = {{"ready", rep.ready},
              {"verified", rep.verified},
              {"crc_failures", rep.crc_failures},
              {"dropped", rep.dropped},
              {"skipped_changed", rep.skipped_changed}};
    if (decoupled) {
      j["data_slots"] = {{"ready_off_data", rep.ready_off_data},
                         {"unsettled", rep.data_unsettled},
                         {"settled", rep.data_settled}};
    }
    std::printf("%s\n", j.dump(2, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    std::printf(
        "verified %llu of %llu ready slots: %llu CRC failures, %llu dropped, %llu changed "
        "during the scrub\n",
        (unsigned long long)rep.verified, (unsigned long long)rep.ready,
        (unsigned long long)rep.crc_failures, (unsigned long long)rep.dropped,
        (unsigned long long)rep.skipped_changed);
    if (decoupled) {
      std::printf(
          "data slots: %llu READY block(s) on a data slot they do not hold (counted as CRC "
          "failures), %llu word(s) to settle, %llu settled\n",
          (unsigned long long)rep.ready_off_data, (unsigned long long)rep.data_unsettled,
          (unsigned long long)rep.data_settled);
    }
  }
  if (rep.crc_failures > rep.dropped) {
    // The damaged slots stay until a load or this scrub drops them: a load
    // that verifies refuses their bytes, one that does not would serve them.
    if (r->info().config.coherence == CoherenceMode::kSoftware) {
      std::fprintf(stderr,
                   "cxlkv verify: %llu slot(s) failed their CRC check and are still in the "
                   "region (every load refuses them; each write partition's holder drops its "
                   "own when it reads them); to drop a whole partition: cxlkv wipe --region %s "
                   "--partition P\n",
                   (unsigned long long)(rep.crc_failures - rep.dropped), f.region.c_str());
    } else {
      std::fprintf(stderr,
                   "cxlkv verify: %llu slot(s) failed their CRC check and are still in the "
                   "region (loads that verify refuse them); drop them with: cxlkv verify "
                   "--region %s --drop\n",
                   (unsigned long long)(rep.crc_failures - rep.dropped), f.region.c_str());
    }
  }
  if (rep.data_unsettled > rep.data_settled) {
    std::fprintf(stderr,
                 "cxlkv verify: %llu data slot(s) held by a lease that is over or by a damaged "
                 "word (attached participants' orphan sweep frees them within a few liveness "
                 "timeouts); settle them now with: cxlkv verify --region %s --drop\n",
                 (unsigned long long)(rep.data_unsettled - rep.data_settled), f.region.c_str());
  }
  return rep.crc_failures == 0 && rep.data_unsettled == 0 ? kExitOk : kExitFailed;
}

int Wipe(const RegionFlags& f, const TimingFlags& timing, bool as_json) {
  std::unique_ptr<Region> r;
  Status s = OpenParticipant(f, timing, &r);
  if (!s.ok()) return Fail("wipe", s);
  Region::WipeReport rep;
  s = r->Wipe(&rep);
  if (!s.ok()) return Fail("wipe", s);
  // coherence=software: attaching as the partition's new holder already
  // dropped its blocks (a new holder starts its partition empty): counted.
  if (r->info().config.coherence == CoherenceMode::kSoftware)
    rep.dropped += r->ProcessCounters()[Counter::kReclaimedSlots];
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

// Each path: a directory is swept (GcDirectory: by default this user's
// files only), anything else is a file named for collection (GcFiles).
int Gc(const std::vector<std::string>& paths, const TimingFlags& timing, bool dry_run,
       bool any_owner, bool as_json) {
  LifecycleOptions o;
  if (timing.liveness_timeout_ms != 0)
    o.liveness_timeout_ns = timing.liveness_timeout_ms * 1'000'000;
  o.dry_run = dry_run;
  o.gc_owners = any_owner ? GcOwners::kAny : GcOwners::kMine;
  // A path that does not exist is a mistyped argument: refused before
  // anything is removed.
  std::vector<bool> is_dir;
  for (const std::string& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0)
      return Fail("gc", Status::InvalidArgument(p + ": " + std::strerror(errno)));
    is_dir.push_back(S_ISDIR(st.st_mode));
  }
  GcReport rep;
  std::vector<std::string> files;
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string& p = paths[i];
    if (is_dir[i]) {
      GcReport one;
      Status s = GcDirectory(p, o, &one);
      if (!s.ok()) return Fail("gc", s);
      rep.removed.insert(rep.removed.end(), one.removed.begin(), one.removed.end());
      rep.kept.insert(rep.kept.end(), one.kept.begin(), one.kept.end());
    } else {
      files.push_back(p);
    }
  }
  if (!files.empty()) {
    GcReport named;
    Status s = GcFiles(files, o, &named);
    if (!s.ok()) return Fail("gc", s);
    rep.removed.insert(rep.removed.end(), named.removed.begin(), named.removed.end());
    rep.kept.insert(rep.kept.end(), named.kept.begin(), named.kept.end());
  }
  json removed = json::array(), kept = json::array();
  for (const GcEntry& e : rep.removed) {
    removed.push_back(e.path);
    if (!as_json)
      std::printf("%s %s (%s)\n", dry_run ? "would remove" : "removed", e.path.c_str(),
                  e.reason.c_str());
  }
  for (const GcEntry& e : rep.kept) {
    kept.push_back({{"path", e.path}, {"reason", e.reason}});
    if (!as_json) std::printf("kept %s: %s\n", e.path.c_str(), e.reason.c_str());
  }
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
    auto* t = new TimingFlags();
    auto* force = new bool(false);
    auto* js = new bool(false);
    f->Add(cmd, true);
    t->Add(cmd, false);
    cmd->add_flag("--force", *force,
                  "reformat a cxlkv region whatever its header says (damaged, another geometry "
                  "or layout version, an abandoned format); refused while anyone is attached; "
                  "never formats over a file that is not a cxlkv region");
    cmd->add_flag("--json", *js, "machine-readable output");
    cmd->callback([=] { *rc = Format(*f, *t, *force, *js); });
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
    auto* cmd = app.add_subcommand(
        "verify",
        "scrub: check every READY slot's CRC32C (and layout 5's data slot words, as the orphan "
        "sweep does)");
    auto* f = new RegionFlags();
    auto* t = new TimingFlags();
    auto* drop = new bool(false);
    auto* js = new bool(false);
    f->Add(cmd, false);
    t->Add(cmd, true);
    cmd->add_flag("--drop", *drop,
                  "drop corrupt slots and settle layout 5's data words (registers as a "
                  "participant; refused on a coherence=software region)");
    cmd->add_flag("--json", *js, "machine-readable output");
    cmd->callback([=] { *rc = Verify(*f, *t, *drop, *js); });
  }
  {
    auto* cmd =
        app.add_subcommand("wipe",
                           "drop every unpinned block; safe while others are attached (pinned and "
                           "in-flight blocks are left alone and reported)");
    auto* f = new RegionFlags();
    auto* t = new TimingFlags();
    auto* js = new bool(false);
    f->Add(cmd, false);
    t->Add(cmd, true);
    cmd->add_flag("--json", *js, "machine-readable output");
    cmd->callback([=] { *rc = Wipe(*f, *t, *js); });
  }
  {
    auto* cmd = app.add_subcommand(
        "gc",
        "remove abandoned regions: region files nobody is attached to (no process here holds "
        "them open, no participant heartbeats), and empty files of failed creates. A DIR is "
        "swept for this user's files only (another owner's are kept and reported; "
        "--any-owner takes them too); a FILE named is collected whoever owns it. Damaged "
        "regions are kept and reported, other files never touched");
    auto* paths = new std::vector<std::string>{"/dev/shm/cxlkv"};
    auto* t = new TimingFlags();
    auto* dry = new bool(false);
    auto* any = new bool(false);
    auto* js = new bool(false);
    cmd->add_option("paths", *paths,
                    "directories to sweep and region files to collect (default /dev/shm/cxlkv)");
    t->Add(cmd, false);
    cmd->add_flag("--dry-run", *dry, "only say what would be removed");
    cmd->add_flag("--any-owner", *any,
                  "in a directory, collect every owner's abandoned regions, not only this "
                  "user's");
    cmd->add_flag("--json", *js, "machine-readable output");
    cmd->callback([=] { *rc = Gc(*paths, *t, *dry, *any, *js); });
  }
}

}  // namespace cxlkv::cli
