// Copyright cxlkv authors.
//
// A replay plan: the trace's requests, which replica serves each (routing),
// which earlier request each must wait for, and the hit-rate bound.
//
// Trace format (Mooncake, FAST'25): one JSON object per line with
// `hash_ids`, one id per 512-token block; requests sharing leading ids share
// that prefix.
#ifndef CXLKV_TOOLS_CLI_REPLAY_PLAN_H_
#define CXLKV_TOOLS_CLI_REPLAY_PLAN_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "cxlkv/status.h"

namespace cxlkv::cli {

enum class Routing { kRoundRobin, kRandom, kPrefix };

struct ReplayPlan {
  std::vector<std::vector<uint64_t>> chains;  // hash ids per request, trace order
  std::vector<uint32_t> replica;              // serving replica per request
  // Request that must have finished before this one starts (-1: none): the
  // latest first-appearance among the blocks of its leading seen prefix.
  // Waiting for it makes every block the bound counts as a hit present
  // when the request looks, without serialising unrelated requests.
  std::vector<int64_t> dep;
  std::vector<uint32_t> dense;        // per request block: dense block index
  std::vector<uint64_t> chain_start;  // offset of request j's blocks in `dense`
  uint64_t blocks_requested = 0;
  uint64_t bound_hits = 0;  // leading-prefix hits of an unbounded shared cache
  uint64_t distinct_blocks = 0;
};

// Reads up to `limit` requests (0 = all). kIOError if unreadable,
// kInvalidArgument naming the line for malformed JSON or a missing/invalid
// `hash_ids`.
Status ReadTrace(const std::string& path, uint64_t limit,
                 std::vector<std::vector<uint64_t>>* chains);

Status ParseRouting(const std::string& s, Routing* r);

// Routes and orders the requests for `replicas` replicas. Deterministic in
// (chains, replicas, routing, seed), so separately started workers agree.
void BuildPlan(std::vector<std::vector<uint64_t>> chains, uint32_t replicas, Routing routing,
               uint64_t seed, ReplayPlan* plan);

}  // namespace cxlkv::cli

#endif  // CXLKV_TOOLS_CLI_REPLAY_PLAN_H_
