// Copyright cxlkv authors.
//
// What controller_test.cc and controller_rep_test.cc share: a claim
// allocated on one blade, a pool, regions and mappings.
#ifndef CXLKV_DRA_CONTROLLER_CONTROLLER_TEST_UTIL_H_
#define CXLKV_DRA_CONTROLLER_CONTROLLER_TEST_UTIL_H_

#include <nlohmann/json.hpp>
#include <string>

#include "cxlkv/fabric/composer.h"

namespace cxlkv::dra::ctltest {

using nlohmann::json;

inline constexpr const char* kDriver = "cxlkv.dev";

// A claim allocated on blade cma-0/blade-0, with `extra` merged in.
inline json Claim(const json& extra = json::object()) {
  json c = {{"metadata",
             {{"name", "c1"}, {"namespace", "ns"}, {"uid", "uid-1"}, {"resourceVersion", "7"}}},
            {"status",
             {{"allocation",
               {{"allocationTimestamp", "2026-01-01T00:00:00Z"},
                {"devices",
                 {{"results",
                   {{{"driver", kDriver},
                     {"pool", "cma-0/blade-0"},
                     {"device", "blade-0"},
                     {"consumedCapacity", {{"memory", "2Gi"}}}},
                    {{"driver", "other.dev"}, {"pool", "p"}, {"device", "d"}}}}}}}}}}};
  c.merge_patch(extra);
  return c;
}

inline fabric::Pool Pool(int64_t total_mib = 8192) {
  fabric::Pool p;
  p.appliance_id = "cma-0";
  p.blade_id = "blade-0";
  p.block_mib = 256;
  p.total_mib = total_mib;
  p.hosts = {"node-a", "node-b"};
  return p;
}

inline fabric::MemoryRegion Region(const std::string& id, const std::string& tag, int64_t mib) {
  fabric::MemoryRegion r;
  r.id = id;
  r.appliance_id = "cma-0";
  r.blade_id = "blade-0";
  r.claim_uid = tag;
  r.size_mib = mib;
  return r;
}

inline fabric::Mapping Mapped(const std::string& host, fabric::Materialization m) {
  fabric::Mapping x;
  x.appliance_port = "P-" + host;
  x.host_id = host;
  x.materialization = m;
  return x;
}

}  // namespace cxlkv::dra::ctltest

#endif  // CXLKV_DRA_CONTROLLER_CONTROLLER_TEST_UTIL_H_
