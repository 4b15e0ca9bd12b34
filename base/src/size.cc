// Copyright cxlkv authors.
#include "cxlkv/base/size.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace cxlkv::base {
namespace {

// Length of the leading number: digits and points.
size_t NumberPrefix(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  return i;
}

}  // namespace

Status ParseSize(const std::string& text, uint64_t* bytes) {
  const size_t i = NumberPrefix(text);
  if (i == 0) return Status::InvalidArgument("size '" + text + "' does not start with a number");
  double num = 0;
  try {
    num = std::stod(text.substr(0, i));
  } catch (...) {
    return Status::InvalidArgument("size '" + text + "' is not a number");
  }
  std::string suf = text.substr(i);
  while (!suf.empty() && suf.front() == ' ') suf.erase(0, 1);
  double mul = 1;
  if (suf.empty() || suf == "B")
    mul = 1;
  else if (suf == "KiB" || suf == "K" || suf == "k")
    mul = 1024.0;
  else if (suf == "MiB" || suf == "M")
    mul = 1024.0 * 1024;
  else if (suf == "GiB" || suf == "G")
    mul = 1024.0 * 1024 * 1024;
  else if (suf == "TiB" || suf == "T")
    mul = 1024.0 * 1024 * 1024 * 1024;
  else if (suf == "KB" || suf == "kB")
    mul = 1e3;
  else if (suf == "MB")
    mul = 1e6;
  else if (suf == "GB")
    mul = 1e9;
  else if (suf == "TB")
    mul = 1e12;
  else
    return Status::InvalidArgument("size '" + text + "': unknown suffix '" + suf +
                                   "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  double v = num * mul;
  if (!(v >= 0) || v > 9.2e18) return Status::InvalidArgument("size '" + text + "' out of range");
  *bytes = static_cast<uint64_t>(std::llround(v));
  return Status::OK();
}

Status ParseQuantity(const std::string& q, int64_t* bytes) {
  const size_t i = NumberPrefix(q);
  if (i == 0) return Status::InvalidArgument("quantity \"" + q + "\": no number");
  const double num = std::strtod(q.substr(0, i).c_str(), nullptr);
  static const std::map<std::string, double> kSuffix = {
      {"", 1},           {"k", 1e3},           {"M", 1e6},
      {"G", 1e9},        {"T", 1e12},          {"Ki", 1024.0},
      {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
  auto it = kSuffix.find(q.substr(i));
  if (it == kSuffix.end()) return Status::InvalidArgument("quantity \"" + q + "\": unknown suffix");
  const double v = num * it->second;
  if (v != std::floor(v) || v < 0 || v > 9.2e18) {
    return Status::InvalidArgument("quantity \"" + q + "\" is not a whole number of bytes");
  }
  *bytes = static_cast<int64_t>(v);
  return Status::OK();
}

std::string FormatBytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 5 && std::fmod(v, 1.0) == 0 && v / 1024 >= 1) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (std::fmod(v, 1.0) == 0)
    std::snprintf(buf, sizeof buf, "%.0f %s", v, units[u]);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace cxlkv::base
