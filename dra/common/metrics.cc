// Copyright cxlkv authors.
#include "common/metrics.h"

#include <cmath>
#include <cstdio>

namespace cxlkv::dra {

namespace {

std::string FormatValue(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[64];
  // Integers print without an exponent or a fraction, as clients expect.
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.9g", v);
  }
  return buf;
}

// Adds le="<bound>" to a rendered label set.
std::string WithLe(const std::string& labels, const std::string& le) {
  std::string item = "le=\"" + le + "\"";
  if (labels.empty()) return "{" + item + "}";
  return labels.substr(0, labels.size() - 1) + "," + item + "}";
}

}  // namespace

std::string RenderLabels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ",";
    out += labels[i].first + "=\"";
    for (char c : labels[i].second) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '"') {
        out += "\\\"";
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += "\"";
  }
  return out + "}";
}

std::vector<double> Metrics::LatencyBuckets() {
  std::vector<double> b;
  for (double v = 0.001; v < 70; v *= 2) b.push_back(v);
  return b;
}

void Metrics::Declare(const std::string& name, Kind kind, const std::string& help,
                      std::vector<double> buckets) {
  std::lock_guard<std::mutex> l(mu_);
  if (families_.count(name)) return;
  Family& f = families_[name];
  f.kind = kind;
  f.help = help;
  f.bounds = std::move(buckets);
}

Metrics::Family* Metrics::FindLocked(const std::string& name) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    // An undeclared name is a programming error; record it as an untyped
    // counter rather than dropping the data.
    Family& f = families_[name];
    f.help = "undeclared";
    return &f;
  }
  return &it->second;
}

void Metrics::Add(const std::string& name, const Labels& labels, double delta) {
  std::lock_guard<std::mutex> l(mu_);
  FindLocked(name)->series[RenderLabels(labels)].value += delta;
}

void Metrics::Set(const std::string& name, const Labels& labels, double value) {
  std::lock_guard<std::mutex> l(mu_);
  FindLocked(name)->series[RenderLabels(labels)].value = value;
}

void Metrics::Observe(const std::string& name, const Labels& labels, double value) {
  std::lock_guard<std::mutex> l(mu_);
  Family* f = FindLocked(name);
  Series& s = f->series[RenderLabels(labels)];
  if (s.buckets.size() != f->bounds.size()) s.buckets.assign(f->bounds.size(), 0);
  for (size_t i = 0; i < f->bounds.size(); ++i) {
    if (value <= f->bounds[i]) {
      ++s.buckets[i];
      break;
    }
  }
  ++s.count;
  s.sum += value;
}

double Metrics::Value(const std::string& name, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.series.find(RenderLabels(labels));
  if (s == it->second.series.end()) return 0;
  return it->second.kind == Kind::kHistogram ? static_cast<double>(s->second.count)
                                             : s->second.value;
}

std::string Metrics::Render() {
  std::lock_guard<std::mutex> l(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.kind == Kind::kCounter ? "counter"
                       : f.kind == Kind::kGauge ? "gauge"
                                                : "histogram";
    out += "# HELP " + name + " " + f.help + "\n";
    out += "# TYPE " + name + " " + type + "\n";
    for (const auto& [labels, s] : f.series) {
      if (f.kind != Kind::kHistogram) {
        out += name + labels + " " + FormatValue(s.value) + "\n";
        continue;
      }
      uint64_t cum = 0;
      for (size_t i = 0; i < f.bounds.size(); ++i) {
        cum += i < s.buckets.size() ? s.buckets[i] : 0;
        out += name + "_bucket" + WithLe(labels, FormatValue(f.bounds[i])) + " " +
               std::to_string(cum) + "\n";
      }
      out += name + "_bucket" + WithLe(labels, "+Inf") + " " + std::to_string(s.count) + "\n";
      out += name + "_sum" + labels + " " + FormatValue(s.sum) + "\n";
      out += name + "_count" + labels + " " + std::to_string(s.count) + "\n";
    }
  }
  return out;
}

}  // namespace cxlkv::dra
