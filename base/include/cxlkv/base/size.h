// Copyright cxlkv authors.
//
// Byte sizes in the two spellings the tree reads, from one scanner: as
// people write them on a command line ("4096", "512MiB", "1.5GiB", "10GB":
// the `cxlkv` CLI's --region-size, --offset and --slot-size, and the
// CXL_DAX_SIZE / CXL_DAX_OFFSET defaults it reads), and as Kubernetes writes
// a resource.Quantity ("2Gi", "1536Mi", "2G": the DRA driver's
// consumedCapacity). fabric/ and hostd/ carry sizes as integral MiB (the CFM
// API's fields) and parse none.
//
// Thread-safety: pure functions.
#ifndef CXLKV_BASE_SIZE_H_
#define CXLKV_BASE_SIZE_H_

#include <cstdint>
#include <string>

#include "cxlkv/status.h"

namespace cxlkv::base {

// A number here is decimal digits with at most one point ("4096", "1.5",
// "1.", ".5"): no sign, exponent, hex or second point ("1.2.3GiB" is an
// error, not 1.2 GiB). Integers are exact; the largest size is 2^63 - 1
// bytes (off_t's range).

// Parses a number and an optional suffix, with optional spaces between:
// none or B (bytes); KiB/K/k, MiB/M, GiB/G, TiB/T (powers of 1024); KB/kB,
// MB, GB, TB (powers of 1000). A fraction is rounded to the nearest byte.
// Nothing may come before the number or after the suffix ("4096 " and
// "4 KiB " are refused: spaces only separate the two).
// kInvalidArgument, naming the text and what is wrong, for no leading number,
// a malformed one, trailing whitespace, an unknown suffix, or a value above
// 2^63 - 1 bytes; *bytes is untouched then.
Status ParseSize(const std::string& text, uint64_t* bytes);

// Parses a Kubernetes quantity of bytes: a number and one of the suffixes
// "", k, M, G, T (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024), no space
// between. kInvalidArgument, naming the text, for no number or a malformed
// one, another suffix (milli "m", exponents "e3", signs), or a value that is
// not a whole number of bytes in [0, 2^63 - 1]; *bytes is untouched then.
Status ParseQuantity(const std::string& q, int64_t* bytes);

// "4 KiB", "896 KiB", "1.50 GiB": the largest power-of-1024 unit (B to PiB)
// the value divides into evenly, or two decimals when it does not.
std::string FormatBytes(uint64_t bytes);

}  // namespace cxlkv::base

#endif  // CXLKV_BASE_SIZE_H_
