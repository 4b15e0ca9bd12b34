// Copyright cxlkv authors.
#include "controller/metrics.h"

#include <cctype>

namespace cxlkv::dra {

namespace {

constexpr const char* kOps = "cxlkv_dra_operations_total";
constexpr const char* kDuration = "cxlkv_dra_operation_duration_seconds";
constexpr const char* kInFlight = "cxlkv_dra_operations_in_flight";
constexpr const char* kComposed = "cxlkv_dra_composed_bytes";
constexpr const char* kUnusable = "cxlkv_dra_unusable_bytes";
constexpr const char* kFreeRetries = "cxlkv_dra_free_retries_total";
constexpr const char* kOrphansFreed = "cxlkv_dra_orphans_freed_total";
constexpr const char* kTakeovers = "cxlkv_dra_owner_takeovers_total";
constexpr const char* kLeasesCollected = "cxlkv_dra_owner_leases_collected_total";
constexpr const char* kLeaked = "cxlkv_dra_leaked_regions";
constexpr const char* kFabricReachable = "cxlkv_dra_fabric_reachable";
constexpr const char* kLeader = "cxlkv_dra_leader";
constexpr const char* kAnnotationMode = "cxlkv_dra_annotation_mode";

}  // namespace

ControllerMetrics::ControllerMetrics() {
  using K = Metrics::Kind;
  reg_.Declare(kOps, K::kCounter, "Controller operations by result.");
  // Seconds; the fabric calls range from a millisecond (get) to tens of
  // seconds (a compose waiting on host agents).
  reg_.Declare(kDuration, K::kHistogram, "Controller operation latency.",
               {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30});
  reg_.Declare(kInFlight, K::kGauge, "Controller operations running now.");
  reg_.Declare(kComposed, K::kGauge, "Bytes of regions backing a live allocation.");
  reg_.Declare(kUnusable, K::kGauge,
               "Orphaned, pending-free, leaked and foreign bytes kept out of the slice.");
  reg_.Declare(kFreeRetries, K::kCounter, "Failed region frees that will be retried.");
  reg_.Declare(kOrphansFreed, K::kCounter, "Regions with no claim freed by resync.");
  reg_.Declare(kTakeovers, K::kCounter,
               "Claims taken over from a replica whose owner Lease expired.");
  reg_.Declare(kLeasesCollected, K::kCounter,
               "Heartbeat Leases of departed replicas deleted by the resync.");
  reg_.Declare(kLeaked, K::kGauge, "Regions no claim owns that could not be freed.");
  reg_.Declare(kFabricReachable, K::kGauge, "1 when the fabric manager answered last.");
  reg_.Declare(kLeader, K::kGauge, "1 while this replica holds the singleton-jobs Lease.");
  reg_.Declare(kAnnotationMode, K::kGauge,
               "1 when the apiserver drops consumable-capacity fields and the slices fall back "
               "to annotation mode.");
  for (const char* n : {kFreeRetries, kOrphansFreed, kTakeovers, kLeasesCollected, kLeaked, kLeader,
                        kAnnotationMode}) {
    reg_.Set(n, {}, 0);
  }
  reg_.Set(kFabricReachable, {}, 1);
}

std::string ControllerMetrics::ResultLabel(const Status& s) {
  if (s.ok()) return "ok";
  // "IOError" -> "io_error", "NotFound" -> "not_found".
  const std::string name = Status::CodeName(s.code());
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    const bool prev_lower = i > 0 && std::islower(static_cast<unsigned char>(name[i - 1]));
    const bool next_lower =
        i + 1 < name.size() && std::islower(static_cast<unsigned char>(name[i + 1]));
    if (i > 0 && std::isupper(c) && (prev_lower || next_lower)) out += '_';
    out += static_cast<char>(std::tolower(c));
  }
  return out;
}

void ControllerMetrics::BeginOp(const std::string& op) { reg_.Add(kInFlight, {{"operation", op}}); }

void ControllerMetrics::EndOp(const std::string& op, const Status& result,
                              std::chrono::nanoseconds took) {
  const Labels labels = {{"operation", op}, {"result", ResultLabel(result)}};
  reg_.Add(kInFlight, {{"operation", op}}, -1);
  reg_.Add(kOps, labels);
  reg_.Observe(kDuration, labels, std::chrono::duration<double>(took).count());
}

void ControllerMetrics::SetPoolBytes(const std::string& pool, int64_t composed, int64_t unusable) {
  reg_.Set(kComposed, {{"pool", pool}}, static_cast<double>(composed));
  reg_.Set(kUnusable, {{"pool", pool}}, static_cast<double>(unusable));
}

void ControllerMetrics::AddFreeRetry() { reg_.Add(kFreeRetries, {}); }
void ControllerMetrics::AddOrphansFreed(int n) { reg_.Add(kOrphansFreed, {}, n); }
void ControllerMetrics::AddTakeover() { reg_.Add(kTakeovers, {}); }
void ControllerMetrics::AddOwnerLeaseCollected() { reg_.Add(kLeasesCollected, {}); }
void ControllerMetrics::SetLeakedRegions(int n) { reg_.Set(kLeaked, {}, n); }
void ControllerMetrics::SetFabricReachable(bool up) { reg_.Set(kFabricReachable, {}, up ? 1 : 0); }
void ControllerMetrics::SetLeader(bool leader) { reg_.Set(kLeader, {}, leader ? 1 : 0); }
void ControllerMetrics::SetAnnotationMode(bool on) { reg_.Set(kAnnotationMode, {}, on ? 1 : 0); }

}  // namespace cxlkv::dra
