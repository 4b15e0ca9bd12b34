// Copyright cxlkv authors.
#include "controller/metrics.h"

#include <cctype>
#include <cstdio>

namespace cxlkv::dra {

namespace {

// Seconds; the fabric calls range from a millisecond (get) to tens of
// seconds (a compose waiting on host agents).
constexpr double kBounds[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
constexpr size_t kNumBounds = sizeof(kBounds) / sizeof(kBounds[0]);

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

// Label values are ours (operation names, status code names, pool names
// "<appliance>/<blade>"), but escape what the format requires anyway.
std::string Esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

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

void ControllerMetrics::BeginOp(const std::string& op) {
  std::lock_guard<std::mutex> l(mu_);
  ++in_flight_[op];
}

void ControllerMetrics::EndOp(const std::string& op, const Status& result,
                              std::chrono::nanoseconds took) {
  const std::string r = ResultLabel(result);
  const double sec = std::chrono::duration<double>(took).count();
  std::lock_guard<std::mutex> l(mu_);
  --in_flight_[op];
  ++ops_[{op, r}];
  Hist& h = hist_[{op, r}];
  if (h.buckets.empty()) h.buckets.assign(kNumBounds, 0);
  for (size_t i = 0; i < kNumBounds; ++i) {
    if (sec <= kBounds[i]) ++h.buckets[i];
  }
  h.sum += sec;
  ++h.count;
}

void ControllerMetrics::SetPoolBytes(const std::string& pool, int64_t composed, int64_t unusable) {
  std::lock_guard<std::mutex> l(mu_);
  pool_bytes_[pool] = {composed, unusable};
}

void ControllerMetrics::AddFreeRetry() {
  std::lock_guard<std::mutex> l(mu_);
  ++free_retries_;
}

void ControllerMetrics::AddOrphansFreed(int n) {
  std::lock_guard<std::mutex> l(mu_);
  orphans_freed_ += n;
}

void ControllerMetrics::SetLeakedRegions(int n) {
  std::lock_guard<std::mutex> l(mu_);
  leaked_ = n;
}

void ControllerMetrics::SetFabricReachable(bool up) {
  std::lock_guard<std::mutex> l(mu_);
  fabric_up_ = up;
}

void ControllerMetrics::SetLeader(bool leader) {
  std::lock_guard<std::mutex> l(mu_);
  leader_ = leader;
}

void ControllerMetrics::SetAnnotationMode(bool on) {
  std::lock_guard<std::mutex> l(mu_);
  annotation_mode_ = on;
}

std::string ControllerMetrics::Render() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string o;
  o += "# HELP cxlkv_dra_operations_total Controller operations by result.\n";
  o += "# TYPE cxlkv_dra_operations_total counter\n";
  for (const auto& [k, v] : ops_) {
    o += "cxlkv_dra_operations_total{operation=\"" + Esc(k.first) + "\",result=\"" + Esc(k.second) +
         "\"} " + std::to_string(v) + "\n";
  }
  o += "# HELP cxlkv_dra_operation_duration_seconds Controller operation latency.\n";
  o += "# TYPE cxlkv_dra_operation_duration_seconds histogram\n";
  for (const auto& [k, h] : hist_) {
    const std::string lab = "operation=\"" + Esc(k.first) + "\",result=\"" + Esc(k.second) + "\"";
    for (size_t i = 0; i < kNumBounds; ++i) {
      o += "cxlkv_dra_operation_duration_seconds_bucket{" + lab + ",le=\"" + Num(kBounds[i]) +
           "\"} " + std::to_string(h.buckets[i]) + "\n";
    }
    o += "cxlkv_dra_operation_duration_seconds_bucket{" + lab + ",le=\"+Inf\"} " +
         std::to_string(h.count) + "\n";
    o += "cxlkv_dra_operation_duration_seconds_sum{" + lab + "} " + Num(h.sum) + "\n";
    o +=
        "cxlkv_dra_operation_duration_seconds_count{" + lab + "} " + std::to_string(h.count) + "\n";
  }
  o += "# HELP cxlkv_dra_operations_in_flight Controller operations running now.\n";
  o += "# TYPE cxlkv_dra_operations_in_flight gauge\n";
  for (const auto& [k, v] : in_flight_) {
    o += "cxlkv_dra_operations_in_flight{operation=\"" + Esc(k) + "\"} " + std::to_string(v) + "\n";
  }
  o += "# HELP cxlkv_dra_composed_bytes Bytes of regions backing a live allocation.\n";
  o += "# TYPE cxlkv_dra_composed_bytes gauge\n";
  for (const auto& [k, v] : pool_bytes_) {
    o += "cxlkv_dra_composed_bytes{pool=\"" + Esc(k) + "\"} " + std::to_string(v.first) + "\n";
  }
  o += "# HELP cxlkv_dra_unusable_bytes Orphaned and pending-free bytes kept out of the slice.\n";
  o += "# TYPE cxlkv_dra_unusable_bytes gauge\n";
  for (const auto& [k, v] : pool_bytes_) {
    o += "cxlkv_dra_unusable_bytes{pool=\"" + Esc(k) + "\"} " + std::to_string(v.second) + "\n";
  }
  o += "# HELP cxlkv_dra_free_retries_total Failed region frees that will be retried.\n";
  o += "# TYPE cxlkv_dra_free_retries_total counter\n";
  o += "cxlkv_dra_free_retries_total " + std::to_string(free_retries_) + "\n";
  o += "# HELP cxlkv_dra_orphans_freed_total Regions with no claim freed by resync.\n";
  o += "# TYPE cxlkv_dra_orphans_freed_total counter\n";
  o += "cxlkv_dra_orphans_freed_total " + std::to_string(orphans_freed_) + "\n";
  o += "# HELP cxlkv_dra_leaked_regions Regions no claim owns that could not be freed.\n";
  o += "# TYPE cxlkv_dra_leaked_regions gauge\n";
  o += "cxlkv_dra_leaked_regions " + std::to_string(leaked_) + "\n";
  o += "# HELP cxlkv_dra_fabric_reachable 1 when the fabric manager answered last.\n";
  o += "# TYPE cxlkv_dra_fabric_reachable gauge\n";
  o += "cxlkv_dra_fabric_reachable " + std::string(fabric_up_ ? "1" : "0") + "\n";
  o += "# HELP cxlkv_dra_leader 1 while this replica holds the singleton-jobs Lease.\n";
  o += "# TYPE cxlkv_dra_leader gauge\n";
  o += "cxlkv_dra_leader " + std::string(leader_ ? "1" : "0") + "\n";
  o += "# HELP cxlkv_dra_annotation_mode 1 when slices fall back to annotation mode.\n";
  o += "# TYPE cxlkv_dra_annotation_mode gauge\n";
  o += "cxlkv_dra_annotation_mode " + std::string(annotation_mode_ ? "1" : "0") + "\n";
  return o;
}

}  // namespace cxlkv::dra
