// Copyright cxlkv authors.
//
// `cxlkv bench`: engine speed against ceilings measured in the same run.
// Copies are reported as GB/s and as a ratio to memcpy over the same memory
// in the same direction (region slots <-> a private buffer): the ratio of
// the medians shown, and in JSON also the median of per-round ratios;
// lookups as ns per operation.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "commands.h"
#include "common.h"
#include "cxlkv/base/size.h"
#include "cxlkv/lifecycle.h"
#include "region_internal.h"
#include "visibility/visibility.h"

namespace cxlkv::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string dir = "/dev/shm/cxlkv";
  std::string region_size = "2GiB";
  double seconds = 1.0;
  bool json = false;
  bool coherence = true;  // the software-vs-hardware section
};

const NamespaceDesc kNs{"bench", "bfloat16", "NHD", 0, 0};
// Copy measurements alternate ceiling and engine this many times.
constexpr int kRounds = 5;

// Scratch regions are named after this process, so a bench never opens, let
// alone removes, a region someone else uses in the same directory; each is
// destroyed through the lifecycle API (refused if anyone attached to it).
std::string ScratchPath(const Flags& f, const char* what) {
  return f.dir + "/bench-" + std::to_string(::getpid()) + "-" + what;
}

// Destroys the scratch region on scope exit: declare it before the Region,
// so the Region is closed first.
struct Scratch {
  std::string path;
  ~Scratch() {
    if (Status s = DestroyRegion(path, LifecycleOptions{}); !s.ok()) {
      std::fprintf(stderr, "cxlkv bench: %s\n", s.ToString().c_str());
    }
  }
};

RegionOptions BenchOptions(uint64_t size, uint64_t slot, Prefault prefault) {
  RegionOptions o;
  o.size = size;
  o.config.slot_size = slot;
  o.config.hash_algorithm = "bench";
  o.config.hash_seed_fingerprint = 1;
  o.prefault = prefault;
  return o;
}

// Runs `op(i)` repeatedly for `seconds`; returns bytes/s in GB/s.
template <typename F>
double Rate(double seconds, uint64_t bytes_per_op, F op) {
  uint64_t ops = 0;
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) op(ops++);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return ops * bytes_per_op / s / 1e9;
}

struct Percentiles {
  double p50 = 0, p99 = 0;
};

// Per-operation latency (ns) minus the cost of reading the clock.
template <typename F>
Percentiles Latency(size_t samples, F op) {
  std::vector<double> ns(samples), empty(samples);
  for (size_t i = 0; i < samples; ++i) {
    const auto a = Clock::now();
    const auto b = Clock::now();
    empty[i] = std::chrono::duration<double, std::nano>(b - a).count();
  }
  std::sort(empty.begin(), empty.end());
  const double overhead = empty[samples / 2];
  for (size_t i = 0; i < samples; ++i) {
    const auto a = Clock::now();
    op(i);
    const auto b = Clock::now();
    ns[i] = std::max(0.0, std::chrono::duration<double, std::nano>(b - a).count() - overhead);
  }
  std::sort(ns.begin(), ns.end());
  return {ns[samples / 2], ns[samples * 99 / 100]};
}

json CopyBench(const Flags& f, uint64_t region_size, uint64_t slot) {
  const std::string path = ScratchPath(f, "copy");
  Scratch scratch{path};
  std::unique_ptr<Region> r;
  Status s = Region::Open(path, BenchOptions(region_size, slot, Prefault::kAtAttach), &r);
  if (!s.ok()) return {{"error", s.ToString()}};
  NamespaceId ns;
  (void)r->RegisterNamespace(kNs, &ns);
  const uint64_t n = r->info().num_slots;
  std::vector<uint8_t> src(slot), dst(slot);
  for (size_t i = 0; i < slot; ++i) src[i] = static_cast<uint8_t>(i * 131);
  std::memset(dst.data(), 0, slot);
  // Fill every slot so loads read distinct memory (working set >> caches).
  for (uint64_t i = 0; i < n; ++i) (void)r->Store(ns, BlockKey::FromId(i), src.data(), slot);
  // With few sets a full fill evicts some keys: use the slots that hold one.
  std::vector<int64_t> slots;
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t sl = RegionInternal::FindReadySlot(r.get(), ns, BlockKey::FromId(i));
    if (sl >= 0) slots.push_back(sl);
  }
  if (slots.empty()) return {{"error", "no slot could be filled"}};
  const uint64_t filled = slots.size();
  // Restore slot contents (the memcpy rounds below bypass the CRC) and fill
  // keys for the loads; load only keys that stayed.
  auto memcpy_load_op = [&](uint64_t i) {
    std::memcpy(dst.data(), RegionInternal::SlotData(r.get(), slots[i % filled]), slot);
  };
  auto memcpy_store_op = [&](uint64_t i) {
    std::memcpy(RegionInternal::SlotData(r.get(), slots[i % filled]), src.data(), slot);
  };
  // Stores (CRC of the source + copy; every store past the first fill
  // evicts), interleaved with the memcpy ceiling in the same direction.
  const int rounds = kRounds;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> ms, st, rs;
  uint64_t next_key = 0;
  for (int k = 0; k < rounds; ++k) {
    const double m = Rate(f.seconds / rounds, slot, memcpy_store_op);
    Region::WipeReport wiped;
    if (k == 0) (void)r->Wipe(&wiped);  // the memcpy above bypassed the CRCs
    const double a = Rate(f.seconds / rounds, slot, [&](uint64_t) {
      (void)r->Store(ns, BlockKey::FromId(next_key++), src.data(), slot);
    });
    ms.push_back(m);
    st.push_back(a);
    rs.push_back(a / m);
  }
  const double memcpy_store = median(ms), store = median(st);
  std::vector<BlockKey> present;
  for (uint64_t i = 0; i < n; ++i)
    (void)r->Store(ns, BlockKey::FromId(1'000'000'000 + i), src.data(), slot);
  for (uint64_t i = 0; i < n; ++i) {
    if (r->Lookup(ns, BlockKey::FromId(1'000'000'000 + i)).ok())
      present.push_back(BlockKey::FromId(1'000'000'000 + i));
  }
  const uint64_t np = present.size();
  LoadOptions verify, noverify;
  noverify.verify_crc = false;
  uint64_t misses = 0;
  // Interleave ceiling and engine in short rounds and take medians, so a
  // noisy neighbour hurts both sides of each ratio alike.
  std::vector<double> mc, ln, lv, rn, rv;
  for (int k = 0; k < rounds; ++k) {
    const double m = Rate(f.seconds / rounds, slot, memcpy_load_op);
    const double a = Rate(f.seconds / rounds, slot, [&](uint64_t i) {
      if (!r->Load(ns, present[i % np], dst.data(), slot, noverify).ok()) ++misses;
    });
    const double b = Rate(f.seconds / rounds, slot, [&](uint64_t i) {
      if (!r->Load(ns, present[i % np], dst.data(), slot, verify).ok()) ++misses;
    });
    mc.push_back(m);
    ln.push_back(a);
    lv.push_back(b);
    rn.push_back(a / m);
    rv.push_back(b / m);
  }
  const double memcpy_load = median(mc), load_noverify = median(ln), load_verify = median(lv);
  r.reset();
  // Two estimates of each ratio: "_vs_memcpy" is the ratio of the medians
  // reported beside it (what the table prints, so its columns agree), and
  // "_vs_memcpy_per_round" the median of the per-round ratios, the steadier
  // one when a neighbour's load comes and goes between rounds.
  return {{"slot_bytes", slot},
          {"slots", n},
          {"slots_filled", filled},
          {"rounds", rounds},
          {"memcpy_load_gbps", memcpy_load},
          {"memcpy_store_gbps", memcpy_store},
          {"store_gbps", store},
          {"store_vs_memcpy", store / memcpy_store},
          {"store_vs_memcpy_per_round", median(rs)},
          {"load_noverify_gbps", load_noverify},
          {"load_noverify_vs_memcpy", load_noverify / memcpy_load},
          {"load_noverify_vs_memcpy_per_round", median(rn)},
          {"load_verify_gbps", load_verify},
          {"load_verify_vs_memcpy", load_verify / memcpy_load},
          {"load_verify_vs_memcpy_per_round", median(rv)},
          {"load_misses", misses}};
}

json LookupBench(const Flags& f) {
  const std::string path = ScratchPath(f, "lookup");
  Scratch scratch{path};
  std::unique_ptr<Region> r;
  Status s = Region::Open(path, BenchOptions(256ull << 20, 4096, Prefault::kAtAttach), &r);
  if (!s.ok()) return {{"error", s.ToString()}};
  NamespaceId ns;
  (void)r->RegisterNamespace(kNs, &ns);
  const uint64_t n = r->info().num_slots / 2;  // half full
  std::vector<uint8_t> d(64, 1);
  for (uint64_t i = 0; i < n; ++i) (void)r->Store(ns, BlockKey::FromId(i), d.data(), d.size());
  std::mt19937_64 rng(3);
  const size_t samples = 200000;
  std::vector<BlockKey> hit_keys(samples), miss_keys(samples);
  for (size_t i = 0; i < samples; ++i) {
    hit_keys[i] = BlockKey::FromId(rng() % n);
    miss_keys[i] = BlockKey::FromId(n + 1 + rng() % (1ull << 40));
  }
  uint64_t wrong = 0;
  const Percentiles hit =
      Latency(samples, [&](size_t i) { wrong += !r->Lookup(ns, hit_keys[i]).ok(); });
  const Percentiles miss =
      Latency(samples, [&](size_t i) { wrong += r->Lookup(ns, miss_keys[i]).ok(); });
  // Batched prefix lookup: chains of 64 present keys.
  const size_t chain = 64, chains = 4000;
  std::vector<BlockKey> keys(chain * chains);
  for (auto& k : keys) k = BlockKey::FromId(rng() % n);
  const auto t0 = Clock::now();
  uint64_t found = 0;
  for (size_t c = 0; c < chains; ++c) found += r->LookupPrefix(ns, keys.data() + c * chain, chain);
  const double per_block =
      std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / (chain * chains);
  r.reset();
  return {{"entries", n},
          {"hit_p50_ns", hit.p50},
          {"hit_p99_ns", hit.p99},
          {"miss_p50_ns", miss.p50},
          {"miss_p99_ns", miss.p99},
          {"prefix_ns_per_block", per_block},
          {"wrong_answers", wrong + (chain * chains - found)}};
}

// First load of a 14 MiB block in a process that has just attached, with
// and without pre-faulting ([Fan26] §4.8 measured ~420 ms).
json FirstLoadBench(const Flags& f) {
  const uint64_t slot = 14ull << 20;
  const std::string path = ScratchPath(f, "first");
  Scratch scratch{path};
  uint64_t size = 0;
  (void)base::ParseSize(f.region_size, &size);
  {
    std::unique_ptr<Region> r;
    Status s = Region::Open(path, BenchOptions(size, slot, Prefault::kNone), &r);
    if (!s.ok()) return {{"error", s.ToString()}};
    NamespaceId ns;
    (void)r->RegisterNamespace(kNs, &ns);
    std::vector<uint8_t> d(slot, 7);
    (void)r->Store(ns, BlockKey::FromId(1), d.data(), d.size());
  }
  json out;
  for (Prefault p : {Prefault::kNone, Prefault::kAtAttach}) {
    int fds[2];
    if (::pipe(fds) != 0) return {{"error", "pipe"}};
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      std::vector<uint8_t> dst(slot, 1);  // destination already faulted in
      RegionOptions o = BenchOptions(0, slot, p);
      o.create_if_missing = false;
      const auto t0 = Clock::now();
      std::unique_ptr<Region> r;
      if (!Region::Open(path, o, &r).ok()) ::_exit(1);
      const auto t1 = Clock::now();
      NamespaceId ns;
      (void)r->RegisterNamespace(kNs, &ns);
      const bool ok = r->Load(ns, BlockKey::FromId(1), dst.data(), slot).ok();
      const auto t2 = Clock::now();
      (void)r->Load(ns, BlockKey::FromId(1), dst.data(), slot);
      const auto t3 = Clock::now();
      double v[4] = {std::chrono::duration<double, std::milli>(t1 - t0).count(),
                     std::chrono::duration<double, std::milli>(t2 - t1).count(),
                     std::chrono::duration<double, std::milli>(t3 - t2).count(), ok ? 1.0 : 0.0};
      if (::write(fds[1], v, sizeof v) != sizeof v) ::_exit(1);
      ::_exit(0);
    }
    ::close(fds[1]);
    double v[4] = {};
    const bool got = ::read(fds[0], v, sizeof v) == sizeof v;
    ::close(fds[0]);
    int st;
    ::waitpid(pid, &st, 0);
    const char* name = p == Prefault::kNone ? "no_prefault" : "prefault_at_attach";
    out[name] = got ? json{{"attach_ms", v[0]},
                           {"first_load_ms", v[1]},
                           {"second_load_ms", v[2]},
                           {"hit", v[3] == 1.0}}
                    : json{{"error", "child failed"}};
  }
  out["region_bytes"] = size;
  return out;
}

// coherence=software against coherence=hardware on this machine, same slot
// size and region size, interleaved in short rounds (docs/coherence.md,
// "What it costs"). Software mode: two write partitions in one process, so
// "cross" loads are of the other partition's blocks and pay the
// invalidates; "own" loads are of one's own. Both modes verify the CRC (it
// is mandatory in software mode). Ratios: software / hardware.
json CoherenceBench(const Flags& f, uint64_t region_size, uint64_t slot) {
  const std::string hw_path = ScratchPath(f, "coh-hw"), sw_path = ScratchPath(f, "coh-sw");
  Scratch hw_scratch{hw_path}, sw_scratch{sw_path};
  std::unique_ptr<Region> hw, sw0, sw1;
  Status s = Region::Open(hw_path, BenchOptions(region_size, slot, Prefault::kAtAttach), &hw);
  if (!s.ok()) return {{"error", s.ToString()}};
  RegionOptions so = BenchOptions(region_size, slot, Prefault::kAtAttach);
  so.config.coherence = CoherenceMode::kSoftware;
  so.config.software_partitions = 2;
  so.software_partition = 0;
  s = Region::Open(sw_path, so, &sw0);
  if (!s.ok()) return {{"error", s.ToString()}};
  so.software_partition = 1;
  s = Region::Open(sw_path, so, &sw1);
  if (!s.ok()) return {{"error", s.ToString()}};
  NamespaceId hns, sns;
  (void)hw->RegisterNamespace(kNs, &hns);
  (void)sw0->RegisterNamespace(kNs, &sns);
  (void)sw1->RegisterNamespace(kNs, &sns);
  std::vector<uint8_t> src(slot), dst(slot);
  for (size_t i = 0; i < slot; ++i) src[i] = static_cast<uint8_t>(i * 131);
  // Blocks to load: as many as software partition 0 holds, in both.
  const uint64_t n = sw0->info().num_slots / 2;
  std::vector<BlockKey> hw_keys, sw_keys;
  for (uint64_t i = 0; i < n; ++i) {
    const BlockKey k = BlockKey::FromId(2'000'000'000 + i);
    (void)hw->Store(hns, k, src.data(), slot);
    (void)sw0->Store(sns, k, src.data(), slot);
  }
  for (uint64_t i = 0; i < n; ++i) {
    const BlockKey k = BlockKey::FromId(2'000'000'000 + i);
    if (hw->Lookup(hns, k).ok()) hw_keys.push_back(k);
    if (sw0->Lookup(sns, k).ok()) sw_keys.push_back(k);
  }
  if (hw_keys.empty() || sw_keys.empty()) return {{"error", "no block could be stored"}};
  const std::vector<int64_t> slots = [&] {
    std::vector<int64_t> v;
    for (const BlockKey& k : hw_keys) v.push_back(RegionInternal::FindReadySlot(hw.get(), hns, k));
    return v;
  }();
  uint64_t misses = 0, next_key = 0;
  const double t = f.seconds / 5;
  auto load = [&](Region* r, NamespaceId ns, const std::vector<BlockKey>& keys) {
    return Rate(t, slot, [&](uint64_t i) {
      if (!r->Load(ns, keys[i % keys.size()], dst.data(), slot).ok()) ++misses;
    });
  };
  auto store = [&](Region* r, NamespaceId ns) {
    return Rate(t, slot, [&](uint64_t) {
      (void)r->Store(ns, BlockKey::FromId(next_key++), src.data(), slot);
    });
  };
  std::vector<double> mc, hs, ss, hl, sl_own, sl_cross, r_store, r_own, r_cross;
  const int rounds = 3;
  for (int k = 0; k < rounds; ++k) {
    mc.push_back(Rate(t, slot, [&](uint64_t i) {
      std::memcpy(dst.data(), RegionInternal::SlotData(hw.get(), slots[i % slots.size()]), slot);
    }));
    hl.push_back(load(hw.get(), hns, hw_keys));
    sl_own.push_back(load(sw0.get(), sns, sw_keys));
    sl_cross.push_back(load(sw1.get(), sns, sw_keys));
    r_own.push_back(sl_own.back() / hl.back());
    r_cross.push_back(sl_cross.back() / hl.back());
  }
  // Lookup of a present key: hardware vs software from another partition
  // (probes both partitions, invalidating the other's tag and meta lines).
  const size_t samples = 20000;
  const BlockKey probe_hw = hw_keys[0], probe_sw = sw_keys[0];
  uint64_t wrong = 0;
  const Percentiles lh =
      Latency(samples, [&](size_t) { wrong += !hw->Lookup(hns, probe_hw).ok(); });
  const Percentiles ls =
      Latency(samples, [&](size_t) { wrong += !sw1->Lookup(sns, probe_sw).ok(); });
  // Stores last: they evict the blocks loaded above.
  for (int k = 0; k < rounds; ++k) {
    hs.push_back(store(hw.get(), hns));
    ss.push_back(store(sw0.get(), sns));
    r_store.push_back(ss.back() / hs.back());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double hw_load = median(hl);
  return {{"slot_bytes", slot},
          {"visibility", RegionInternal::GetVisibility(sw0.get()) != nullptr
                             ? RegionInternal::GetVisibility(sw0.get())->Name()
                             : "none"},
          {"memcpy_load_gbps", median(mc)},
          {"hardware_load_gbps", hw_load},
          {"hardware_load_vs_memcpy", hw_load / median(mc)},
          {"software_own_load_gbps", median(sl_own)},
          {"software_cross_load_gbps", median(sl_cross)},
          {"software_own_load_vs_hardware", median(r_own)},
          {"software_cross_load_vs_hardware", median(r_cross)},
          {"hardware_store_gbps", median(hs)},
          {"software_store_gbps", median(ss)},
          {"software_store_vs_hardware", median(r_store)},
          {"hardware_lookup_hit_p50_ns", lh.p50},
          {"software_cross_lookup_hit_p50_ns", ls.p50},
          {"software_lookup_vs_hardware", ls.p50 > 0 && lh.p50 > 0 ? lh.p50 / ls.p50 : 0.0},
          {"load_misses", misses},
          {"wrong_answers", wrong}};
}

int Bench(const Flags& f) {
  ::mkdir(f.dir.c_str(), 0770);
  uint64_t size = 0;
  Status s = base::ParseSize(f.region_size, &size);
  if (!s.ok()) return Fail("bench", s);
  json out;
  out["crc32c"] = "isa-l or sse4.2 (see docs/benchmarks.md)";
  out["copy"] = json::array();
  for (uint64_t slot : {896ull << 10, 14ull << 20}) out["copy"].push_back(CopyBench(f, size, slot));
  out["lookup"] = LookupBench(f);
  out["first_load"] = FirstLoadBench(f);
  if (f.coherence) {
    out["coherence"] = json::array();
    for (uint64_t slot : {896ull << 10, 14ull << 20})
      out["coherence"].push_back(CoherenceBench(f, std::min<uint64_t>(size, 1ull << 30), slot));
  }
  out["targets"] = {
      {"load_noverify_vs_memcpy", 0.9}, {"load_verify_vs_memcpy", 0.6}, {"lookup_hit_p50_ns", 150}};
  if (f.json) {
    std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  // Each ratio is the engine's GB/s over the memcpy GB/s of the same
  // direction printed in the same row (into slots for stores, out of them
  // for loads).
  std::printf("%-10s %10s %9s %7s %10s %9s %7s %9s %7s\n", "slot", "memcpy-in", "store", "(x)",
              "memcpy-out", "load", "(x)", "load+crc", "(x)");
  for (auto& c : out["copy"]) {
    if (c.contains("error")) {
      std::printf("error: %s\n", c["error"].get<std::string>().c_str());
      continue;
    }
    std::printf("%-10s %10.2f %9.2f %7.2f %10.2f %9.2f %7.2f %9.2f %7.2f   GB/s\n",
                Human(c["slot_bytes"]).c_str(), c["memcpy_store_gbps"].get<double>(),
                c["store_gbps"].get<double>(), c["store_vs_memcpy"].get<double>(),
                c["memcpy_load_gbps"].get<double>(), c["load_noverify_gbps"].get<double>(),
                c["load_noverify_vs_memcpy"].get<double>(), c["load_verify_gbps"].get<double>(),
                c["load_verify_vs_memcpy"].get<double>());
  }
  std::printf(
      "(x): GB/s over memcpy's in the same row; each GB/s the median of %d interleaved rounds "
      "(--json also gives the median of the per-round ratios, *_per_round)\n",
      kRounds);
  auto& l = out["lookup"];
  if (!l.contains("error")) {
    std::printf("lookup hit  p50 %6.0f ns  p99 %6.0f ns\n", l["hit_p50_ns"].get<double>(),
                l["hit_p99_ns"].get<double>());
    std::printf("lookup miss p50 %6.0f ns  p99 %6.0f ns\n", l["miss_p50_ns"].get<double>(),
                l["miss_p99_ns"].get<double>());
    std::printf("prefix lookup   %6.1f ns per block (chains of 64)\n",
                l["prefix_ns_per_block"].get<double>());
  }
  for (const char* k : {"no_prefault", "prefault_at_attach"}) {
    auto& x = out["first_load"][k];
    if (x.contains("error")) continue;
    std::printf(
        "first 14 MiB load after attach (%s): attach %.1f ms, first load %.1f ms, next %.1f ms\n",
        k, x["attach_ms"].get<double>(), x["first_load_ms"].get<double>(),
        x["second_load_ms"].get<double>());
  }
  if (f.coherence) {
    std::printf(
        "coherence=software vs hardware (ratios software/hardware; CRC verified in both)\n");
    std::printf("%-10s %9s %9s %9s %9s %9s %9s %9s\n", "slot", "hw load", "own", "(ratio)", "cross",
                "(ratio)", "store", "(ratio)");
    for (auto& c : out["coherence"]) {
      if (c.contains("error")) {
        std::printf("error: %s\n", c["error"].get<std::string>().c_str());
        continue;
      }
      std::printf("%-10s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f   GB/s\n",
                  Human(c["slot_bytes"]).c_str(), c["hardware_load_gbps"].get<double>(),
                  c["software_own_load_gbps"].get<double>(),
                  c["software_own_load_vs_hardware"].get<double>(),
                  c["software_cross_load_gbps"].get<double>(),
                  c["software_cross_load_vs_hardware"].get<double>(),
                  c["software_store_gbps"].get<double>(),
                  c["software_store_vs_hardware"].get<double>());
      std::printf("%-10s lookup hit p50: hardware %.0f ns, software (other partition) %.0f ns\n",
                  "", c["hardware_lookup_hit_p50_ns"].get<double>(),
                  c["software_cross_lookup_hit_p50_ns"].get<double>());
    }
  }
  std::printf("targets: load >= 0.9x memcpy, load+crc >= 0.6x memcpy, lookup p50 <= 150 ns\n");
  return kExitOk;
}

}  // namespace

void AddBenchCommand(CLI::App& app, int* rc) {
  auto* f = new Flags();
  auto* cmd = app.add_subcommand("bench", "engine speed vs memcpy measured in the same run");
  cmd->add_option("--dir", f->dir, "directory for scratch regions (default /dev/shm/cxlkv)");
  cmd->add_option("--region-size", f->region_size,
                  "size of the copy-benchmark regions (default 2GiB)");
  cmd->add_option("--seconds", f->seconds, "seconds per copy measurement (default 1)");
  cmd->add_flag("--json", f->json, "machine-readable output");
  cmd->add_flag("!--no-coherence", f->coherence,
                "skip the coherence=software vs hardware section (docs/coherence.md)");
  cmd->callback([=] { *rc = Bench(*f); });
}

}  // namespace cxlkv::cli
