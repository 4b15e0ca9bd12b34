// Copyright cxlkv authors.
#include "cxlkv/base/size.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <system_error>

namespace cxlkv::base {
namespace {

// Sizes become off_t offsets and lengths: the largest is 2^63 - 1.
constexpr uint64_t kMaxBytes = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

struct Number {
  size_t len = 0;         // characters of the text it spans
  bool fraction = false;  // it has a decimal point
  uint64_t whole = 0;     // its value when !fraction (exact)
  double real = 0;        // its value when fraction
};

// The leading decimal number of `text` as both spellings write it: digits
// with at most one point and at least one digit ("4096", "1.5", "1.", ".5";
// no sign, exponent or hex). Returns "" and fills *n, or why not, for the
// caller's message: a second point ("1.2.3GiB") is an error, not the end of
// the number, so that nothing after it is silently dropped.
std::string ScanNumber(const std::string& text, Number* n) {
  size_t i = 0, digits = 0, points = 0;
  for (; i < text.size(); ++i) {
    if (text[i] >= '0' && text[i] <= '9')
      ++digits;
    else if (text[i] == '.')
      ++points;
    else
      break;
  }
  if (digits == 0) return "does not start with a number";
  if (points > 1) return "has more than one decimal point";
  const char* first = text.data();
  const char* last = first + i;
  n->len = i;
  n->fraction = points == 1;
  // from_chars: exact for integers, and independent of the C locale.
  const std::from_chars_result r =
      n->fraction ? std::from_chars(first, last, n->real, std::chars_format::fixed)
                  : std::from_chars(first, last, n->whole);
  if (r.ec == std::errc::result_out_of_range) return "is out of range";
  if (r.ec != std::errc() || r.ptr != last) return "is not a number";
  return "";
}

// n * mul bytes, a fraction rounded to the nearest byte (*exact false when
// it had to be). False when above kMaxBytes.
bool Scale(const Number& n, uint64_t mul, uint64_t* bytes, bool* exact) {
  if (!n.fraction) {
    if (n.whole > kMaxBytes / mul) return false;
    *bytes = n.whole * mul;
    *exact = true;
    return true;
  }
  const double v = n.real * static_cast<double>(mul);
  if (!(v < 9223372036854775808.0)) return false;  // 2^63, exact in a double
  *bytes = static_cast<uint64_t>(std::llround(v));
  *exact = v == std::floor(v);
  return true;
}

struct Suffix {
  const char* name;
  uint64_t mul;
};

constexpr uint64_t kKi = 1024, kMi = kKi << 10, kGi = kMi << 10, kTi = kGi << 10;
constexpr uint64_t kK = 1000, kM = kK * kK, kG = kM * kK, kT = kG * kK;
constexpr Suffix kSizeSuffixes[] = {
    {"", 1},    {"B", 1},     {"KiB", kKi}, {"K", kKi},   {"k", kKi}, {"MiB", kMi},
    {"M", kMi}, {"GiB", kGi}, {"G", kGi},   {"TiB", kTi}, {"T", kTi}, {"KB", kK},
    {"kB", kK}, {"MB", kM},   {"GB", kG},   {"TB", kT},
};
constexpr Suffix kQuantitySuffixes[] = {
    {"", 1},     {"k", kK},   {"M", kM},   {"G", kG},   {"T", kT},
    {"Ki", kKi}, {"Mi", kMi}, {"Gi", kGi}, {"Ti", kTi},
};

template <size_t N>
const Suffix* FindSuffix(const Suffix (&table)[N], const std::string& name) {
  for (const Suffix& s : table)
    if (name == s.name) return &s;
  return nullptr;
}

}  // namespace

Status ParseSize(const std::string& text, uint64_t* bytes) {
  Number n;
  const std::string why = ScanNumber(text, &n);
  if (!why.empty()) return Status::InvalidArgument("size '" + text + "' " + why);
  std::string suf = text.substr(n.len);
  // Spaces may separate the number from a suffix, never end the text: "4096 "
  // is most often a quoting slip that cut something off ("4096 KiB" split by
  // a shell, a YAML value with a stray tail), so it is refused, not read as
  // 4096 bytes.
  if (!suf.empty() && std::isspace(static_cast<unsigned char>(suf.back())))
    return Status::InvalidArgument("size '" + text +
                                   "' ends in whitespace (write the number and suffix alone)");
  while (!suf.empty() && suf.front() == ' ') suf.erase(0, 1);
  const Suffix* s = FindSuffix(kSizeSuffixes, suf);
  if (s == nullptr)
    return Status::InvalidArgument("size '" + text + "': unknown suffix '" + suf +
                                   "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  uint64_t v = 0;
  bool exact = false;
  if (!Scale(n, s->mul, &v, &exact))
    return Status::InvalidArgument("size '" + text + "' is out of range (above 2^63-1 bytes)");
  *bytes = v;
  return Status::OK();
}

Status ParseQuantity(const std::string& q, int64_t* bytes) {
  Number n;
  const std::string why = ScanNumber(q, &n);
  if (!why.empty()) return Status::InvalidArgument("quantity \"" + q + "\" " + why);
  const Suffix* s = FindSuffix(kQuantitySuffixes, q.substr(n.len));
  if (s == nullptr) return Status::InvalidArgument("quantity \"" + q + "\": unknown suffix");
  uint64_t v = 0;
  bool exact = false;
  if (!Scale(n, s->mul, &v, &exact) || !exact) {
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
