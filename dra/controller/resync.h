// Copyright cxlkv authors.
//
// Resync (one replica: the holder of the Lease `lease_name`), at start and
// every `resync_period`: regions tagged by this driver whose (claim UID,
// allocationTimestamp) names no live allocation, and that no claim
// annotation still names, are freed (the orphan sweep); then the slices are
// published with each pool's capacity less what backs no live allocation
// (Controller::Rep::ResyncPass, resync.cc). The accounting is the pure
// AccountPools below.
//
// Thread-safety: pure functions.
#ifndef CXLKV_DRA_CONTROLLER_RESYNC_H_
#define CXLKV_DRA_CONTROLLER_RESYNC_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cxlkv/fabric/composer.h"

namespace cxlkv::dra {

struct PoolAccounting {
  // Per pool name (every listed pool has both): bytes of regions backing a
  // live allocation the scheduler counts, and bytes the slice must hold
  // back (regions of live allocations the scheduler does not count, i.e.
  // allocated on a fixed device while capacity is consumable; regions not
  // ours; ours whose claim annotation still names them: pending free or
  // leaked).
  std::map<std::string, int64_t> live, unusable;
  // Regions of ours that back no live allocation and that no claim names:
  // to free. One that cannot be freed counts as unusable (and leaked).
  struct Orphan {
    fabric::Pool pool;
    fabric::MemoryRegion region;
  };
  std::vector<Orphan> orphans;
};

// Accounts the pools' regions (by pool name, PoolName) against the claims
// (all of them, every namespace) of `driver`. fixed_devices: the current
// capacity mode (under fixed devices the scheduler counts nothing, and the
// slice subtracts live bytes itself: SliceCapacity).
PoolAccounting AccountPools(const std::vector<fabric::Pool>& pools,
                            const std::map<std::string, std::vector<fabric::MemoryRegion>>& regions,
                            const std::vector<nlohmann::json>& claims, const std::string& driver,
                            bool fixed_devices);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_RESYNC_H_
