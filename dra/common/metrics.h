// Copyright cxlkv authors.
//
// Metrics: a small registry of counters, gauges and histograms rendered in
// the Prometheus text exposition format 0.0.4 ("# HELP", "# TYPE", one line
// per series; histograms as cumulative `_bucket{le=...}`, `_sum`, `_count`),
// as https://prometheus.io/docs/instrumenting/exposition_formats/ specifies.
// Debian packages no Prometheus client for C++, and the DRA binaries need
// only these three kinds, so they are kept here (about 150 lines).
//
// Names and label names must match [a-zA-Z_:][a-zA-Z0-9_:]*; label values
// are escaped (backslash, quote, newline). A series is (name, labels); the
// labels' order as given is the order rendered, so callers pass them in one
// fixed order per metric.
//
// Thread-safety: every method may be called concurrently.
#ifndef CXLKV_DRA_COMMON_METRICS_H_
#define CXLKV_DRA_COMMON_METRICS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace cxlkv::dra {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Metrics {
 public:
  enum class Kind : uint8_t { kCounter, kGauge, kHistogram };

  // Declares a metric. Histograms take their upper bounds in seconds (or the
  // metric's unit), ascending; +Inf is implicit. Declaring a name twice
  // keeps the first declaration. REQUIRES: declared before first use.
  void Declare(const std::string& name, Kind kind, const std::string& help,
               std::vector<double> buckets = {});

  // Counter: adds delta (>= 0). Gauge: Add adds (may be negative), Set sets.
  void Add(const std::string& name, const Labels& labels, double delta = 1);
  void Set(const std::string& name, const Labels& labels, double value);
  // Histogram: one observation.
  void Observe(const std::string& name, const Labels& labels, double value);

  // A series' current value (counter/gauge) or observation count
  // (histogram); 0 when absent. For tests and logs.
  double Value(const std::string& name, const Labels& labels);

  // The whole registry in text format 0.0.4, metrics in name order.
  std::string Render();

  // Default buckets for operation latencies in seconds: 1 ms .. ~65 s.
  static std::vector<double> LatencyBuckets();

 private:
  struct Series {
    double value = 0;               // counter / gauge
    std::vector<uint64_t> buckets;  // histogram: per bound, not cumulative
    uint64_t count = 0;
    double sum = 0;
  };
  struct Family {
    Kind kind = Kind::kCounter;
    std::string help;
    std::vector<double> bounds;
    std::map<std::string, Series> series;  // key: rendered label set
  };
  Family* FindLocked(const std::string& name);

  std::mutex mu_;
  std::map<std::string, Family> families_;  // guarded by mu_
};

// Renders {a="x",b="y"} (empty for no labels), escaping values.
std::string RenderLabels(const Labels& labels);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_COMMON_METRICS_H_
