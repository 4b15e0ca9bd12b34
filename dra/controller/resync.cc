// Copyright cxlkv authors.
#include "controller/resync.h"

#include <spdlog/spdlog.h>

#include <set>

#include "controller/claim_json.h"
#include "controller/controller_internal.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::dra {

using kube::Json;

PoolAccounting AccountPools(const std::vector<fabric::Pool>& pools,
                            const std::map<std::string, std::vector<fabric::MemoryRegion>>& regions,
                            const std::vector<json>& claims, const std::string& driver,
                            bool fixed_devices) {
  std::map<std::string, std::string> live;   // claim UID -> allocationTimestamp
  std::map<std::string, std::string> named;  // memory id -> claim (annotation)
  // Live claims whose allocation consumes no capacity the scheduler counts
  // (allocated on a fixed device): under consumable capacity their regions
  // come off the slice here, or the scheduler would admit their bytes a
  // second time.
  std::set<std::string> unaccounted;
  for (const auto& c : claims) {
    const std::string uid = c["metadata"].value("uid", "");
    const json ours = OurResults(c, driver);
    if (!ours.empty()) {
      live[uid] = c["status"]["allocation"].value("allocationTimestamp", "");
      bool counted = false;
      for (const auto& r : ours) {
        counted = counted || (r.contains("consumedCapacity") && r["consumedCapacity"].is_object() &&
                              r["consumedCapacity"].contains("memory"));
      }
      if (!counted) unaccounted.insert(uid);
    }
    RegionRef ref = ParseRegionAnnotation(Annotation(c, kRegionAnnotation));
    if (ref.ok()) named[ref.memory_id] = kube::ObjectKey(c);
  }
  PoolAccounting a;
  for (const auto& p : pools) {
    const std::string pool = PoolName(p);
    int64_t& composed = a.live[pool];
    int64_t& unusable = a.unusable[pool];
    auto listed = regions.find(pool);
    if (listed == regions.end()) continue;
    for (const auto& r : listed->second) {
      const int64_t bytes = r.size_mib * kMiB;
      std::string uid, ts;
      const bool ours = ParseComposeTag(driver, r.claim_uid, &uid, &ts);
      auto it = live.find(uid);
      if (ours && it != live.end() && it->second == ts) {
        composed += bytes;  // backs a live allocation: the scheduler counts it
        if (!fixed_devices && unaccounted.count(uid)) unusable += bytes;  // ... unless it cannot
        continue;
      }
      if (ours && named.count(r.id) == 0) {
        // An orphan: its claim is gone, or reallocated and no annotation
        // names this region any more (its owner died, or gave up freeing).
        a.orphans.push_back({p, r});
        continue;
      }
      // Pending free, or not ours: it holds blade memory the scheduler does
      // not know about.
      unusable += bytes;
    }
  }
  return a;
}

Status Controller::Resync() { return rep_->ResyncPass(); }

Status Controller::Rep::ResyncPass() {
  ControllerMetrics::Op op(&metrics, "resync");
  // Pools and regions first, claims second: a region composed after this
  // listing is not looked at, and a region listed here belongs to a claim
  // that is already allocated when the claims are listed below.
  std::vector<fabric::Pool> pools;
  Status s = Timed("list", [&] { return composer->ListPools(&pools); });
  std::map<std::string, std::vector<fabric::MemoryRegion>> regions;  // by pool name
  for (size_t i = 0; s.ok() && i < pools.size(); ++i) {
    s = Timed("list", [&] {
      return composer->List(pools[i].appliance_id, pools[i].blade_id, &regions[PoolName(pools[i])]);
    });
  }
  if (!s.ok()) {
    const bool was_down = fabric_down;
    fabric_down = true;
    fabric_reachable = false;
    metrics.SetFabricReachable(false);
    if (!was_down) spdlog::error("fabric manager unreachable: {}", s.ToString());
    // Keep the last capacities (unknown now) but taint every device, so the
    // scheduler admits nothing the controller could not compose.
    Status ps = PublishSlices(last_pools, {}, {}, true);
    if (!ps.ok()) spdlog::warn("{}", ps.ToString());
    return op.Done(s.WithContext("resync"));
  }
  if (fabric_down) spdlog::info("fabric manager reachable again");
  fabric_down = false;
  fabric_reachable = true;
  metrics.SetFabricReachable(true);
  last_pools = pools;

  std::vector<Json> claims;
  std::string rv;
  kube::Status ks = kube::ResourceClaimClient(kube, "").ListAll({}, 500, &claims, &rv);
  if (!ks.ok()) return op.Done(Status::IOError("resync: list claims: " + ks.ToString()));
  PoolAccounting a = AccountPools(pools, regions, claims, opt.driver_name, fixed_devices);
  int leaked = 0, freed = 0;
  for (const auto& o : a.orphans) {
    const fabric::MemoryRegion& r = o.region;
    Status fs = FreeRegion(o.pool.appliance_id, o.pool.blade_id, r.id);
    if (fs.ok() || fs.IsNotFound()) {
      ++freed;
      spdlog::info("resync: freed orphaned region {} ({} MiB, tag {})", r.id, r.size_mib,
                   r.claim_uid);
      continue;
    }
    ++leaked;
    spdlog::warn("resync: region {} has no claim and could not be freed: {}", r.id, fs.ToString());
    a.unusable[PoolName(o.pool)] += r.size_mib * kMiB;  // leaked: held back like the rest
  }
  for (const auto& p : pools) {
    const std::string pool = PoolName(p);
    metrics.SetPoolBytes(pool, a.live[pool], a.unusable[pool]);
  }
  metrics.AddOrphansFreed(freed);
  metrics.SetLeakedRegions(leaked);
  CollectOwnerLeases();
  return op.Done(PublishSlices(pools, a.unusable, a.live, false));
}

}  // namespace cxlkv::dra
