// Copyright cxlkv authors.
#include "replay_plan.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "region_internal.h"  // Mix64

namespace cxlkv::cli {

Status ReadTrace(const std::string& path, uint64_t limit,
                 std::vector<std::vector<uint64_t>>* chains) {
  std::ifstream in(path);
  if (!in) return Status::IOError("read trace " + path + ": cannot open");
  std::string line;
  uint64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      return Status::InvalidArgument("trace " + path + " line " + std::to_string(lineno) +
                                     ": not JSON (" + e.what() + ")");
    }
    if (!j.is_object() || !j.contains("hash_ids") || !j["hash_ids"].is_array()) {
      return Status::InvalidArgument("trace " + path + " line " + std::to_string(lineno) +
                                     ": no hash_ids array");
    }
    std::vector<uint64_t> ids;
    ids.reserve(j["hash_ids"].size());
    for (const auto& v : j["hash_ids"]) {
      // Ids are unsigned 64-bit (nlohmann keeps non-negative integers as
      // unsigned, so ids of 2^63 and above arrive intact).
      if (!v.is_number_unsigned()) {
        return Status::InvalidArgument("trace " + path + " line " + std::to_string(lineno) +
                                       ": hash_ids must be integers in [0, 2^64)");
      }
      ids.push_back(v.get<uint64_t>());
    }
    chains->push_back(std::move(ids));
    if (limit != 0 && chains->size() >= limit) break;
  }
  if (chains->empty()) return Status::InvalidArgument("trace " + path + " has no requests");
  return Status::OK();
}

Status ParseRouting(const std::string& s, Routing* r) {
  if (s == "round-robin")
    *r = Routing::kRoundRobin;
  else if (s == "random")
    *r = Routing::kRandom;
  else if (s == "prefix")
    *r = Routing::kPrefix;
  else
    return Status::InvalidArgument("--routing must be round-robin, random or prefix, not '" + s +
                                   "'");
  return Status::OK();
}

void BuildPlan(std::vector<std::vector<uint64_t>> chains, uint32_t replicas, Routing routing,
               uint64_t seed, ReplayPlan* p) {
  p->chains = std::move(chains);
  const size_t n = p->chains.size();
  p->replica.assign(n, 0);
  p->dep.assign(n, -1);
  p->chain_start.assign(n + 1, 0);
  std::unordered_map<uint64_t, uint32_t> dense;  // hash id -> dense index
  std::vector<int64_t> first;                    // dense -> first request
  std::vector<uint32_t> last_replica;            // dense -> last replica that served it
  std::vector<uint64_t> load(replicas, 0);
  for (size_t j = 0; j < n; ++j) {
    const auto& c = p->chains[j];
    p->chain_start[j] = p->dense.size();
    // Leading prefix already seen by an unbounded shared cache.
    size_t k = 0;
    int64_t dep = -1;
    while (k < c.size()) {
      auto it = dense.find(c[k]);
      if (it == dense.end()) break;
      dep = std::max(dep, first[it->second]);
      ++k;
    }
    p->bound_hits += k;
    p->blocks_requested += c.size();
    p->dep[j] = dep;
    uint32_t r = 0;
    switch (routing) {
      case Routing::kRoundRobin:
        r = static_cast<uint32_t>(j % replicas);
        break;
      case Routing::kRandom:
        r = static_cast<uint32_t>(internal::Mix64(seed ^ (j * 0x9E3779B97F4A7C15ull)) % replicas);
        break;
      case Routing::kPrefix:
        // The replica that served the longest known prefix (the last block
        // of the leading seen prefix); new prefixes go to the least loaded.
        if (k > 0) {
          r = last_replica[dense[c[k - 1]]];
        } else {
          r = static_cast<uint32_t>(std::min_element(load.begin(), load.end()) - load.begin());
        }
        break;
    }
    p->replica[j] = r;
    ++load[r];
    for (uint64_t id : c) {
      auto [it, inserted] = dense.emplace(id, static_cast<uint32_t>(first.size()));
      if (inserted) {
        first.push_back(static_cast<int64_t>(j));
        last_replica.push_back(r);
      } else {
        last_replica[it->second] = r;
      }
      p->dense.push_back(it->second);
    }
  }
  p->chain_start[n] = p->dense.size();
  p->distinct_blocks = first.size();
}

}  // namespace cxlkv::cli
