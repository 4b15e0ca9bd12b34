// Copyright cxlkv authors.
//
// Byte sizes as people write them: "4096", "512MiB", "1.5GiB", "10GB". One
// parser for every command line that takes a size (the `cxlkv` CLI's
// --region-size, --offset and --slot-size, and the CXL_DAX_SIZE /
// CXL_DAX_OFFSET defaults it reads).
//
// Thread-safety: pure functions.
#ifndef CXLKV_BASE_SIZE_H_
#define CXLKV_BASE_SIZE_H_

#include <cstdint>
#include <string>

#include "cxlkv/status.h"

namespace cxlkv::base {

// Parses a decimal number (digits and points) and an optional suffix,
// with optional spaces between: none or B (bytes); KiB/K/k, MiB/M, GiB/G,
// TiB/T (powers of 1024); KB/kB, MB, GB, TB (powers of 1000). A fraction is
// rounded to the nearest byte. kInvalidArgument, naming the text, for no
// leading number, an unknown suffix, or a value above 9.2e18 bytes; *bytes
// is untouched then.
Status ParseSize(const std::string& text, uint64_t* bytes);

// "4 KiB", "896 KiB", "1.50 GiB": the largest power-of-1024 unit (B to PiB)
// the value divides into evenly, or two decimals when it does not.
std::string FormatBytes(uint64_t bytes);

}  // namespace cxlkv::base

#endif  // CXLKV_BASE_SIZE_H_
