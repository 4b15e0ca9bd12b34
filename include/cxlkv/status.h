// Copyright cxlkv authors.
//
// Status: the result of every fallible libcxlkv call. Cheap on success (no
// allocation), carries a code and a human-readable message otherwise. No
// exception ever crosses the library boundary; expected outcomes (a miss, a
// full region, a lost race) are codes, not exceptions.
//
// Thread-safety: a Status is a value; distinct objects may be used from
// different threads without synchronisation.
#ifndef CXLKV_STATUS_H_
#define CXLKV_STATUS_H_

#include <string>
#include <string_view>

#include "cxlkv/base/status_core.h"

namespace cxlkv {

// Status::Code (declared here so that base::StatusCore can hold it).
// Each code means exactly one thing.
enum class StatusCode : unsigned char {
  kOk = 0,
  kNotFound = 1,         // key absent, or changed while being read (a miss)
  kBusy = 2,             // contention: another participant holds what we need (or, for
                         // writes, holds what we held: we were judged dead, "fenced")
  kNoSpace = 3,          // region full / nothing evictable / table exhausted
  kCorruption = 4,       // region bytes failed validation (header, CRC, ...)
  kInvalidArgument = 5,  // caller passed something that can never succeed
  kIOError = 6,          // the operating system refused (open, mmap, ...)
  kUnsupported = 7,      // valid request this build/layout cannot serve
};

// ok(), code() and message() ("" when ok()) come from base::StatusCore
// (base/include/cxlkv/base/status_core.h), shared with kube::Status.
class [[nodiscard]] Status : public base::StatusCore<StatusCode> {
 public:
  using Code = StatusCode;

  Status() noexcept = default;

  static Status OK() { return Status(); }
  static Status NotFound(std::string_view msg) { return Status(Code::kNotFound, msg); }
  static Status Busy(std::string_view msg) { return Status(Code::kBusy, msg); }
  static Status NoSpace(std::string_view msg) { return Status(Code::kNoSpace, msg); }
  static Status Corruption(std::string_view msg) { return Status(Code::kCorruption, msg); }
  static Status InvalidArgument(std::string_view msg) {
    return Status(Code::kInvalidArgument, msg);
  }
  static Status IOError(std::string_view msg) { return Status(Code::kIOError, msg); }
  static Status Unsupported(std::string_view msg) { return Status(Code::kUnsupported, msg); }

  bool IsNotFound() const { return code() == Code::kNotFound; }
  bool IsBusy() const { return code() == Code::kBusy; }
  bool IsNoSpace() const { return code() == Code::kNoSpace; }
  bool IsCorruption() const { return code() == Code::kCorruption; }
  bool IsInvalidArgument() const { return code() == Code::kInvalidArgument; }
  bool IsIOError() const { return code() == Code::kIOError; }
  bool IsUnsupported() const { return code() == Code::kUnsupported; }

  // "<Code name>: <message>", or "OK".
  std::string ToString() const;
  // Returns a copy whose message is "<context>: <message>". OK stays OK.
  Status WithContext(std::string_view context) const;

  // "OK", "NotFound", ... (the enumerator without its k).
  static const char* CodeName(Code c);

 private:
  Status(Code c, std::string_view msg) : StatusCore(c, msg) {}
};

}  // namespace cxlkv

// Returns early from the enclosing function when `expr` is not OK.
#define CXLKV_RETURN_IF_ERROR(expr)      \
  do {                                   \
    ::cxlkv::Status _cxlkv_s = (expr);   \
    if (!_cxlkv_s.ok()) return _cxlkv_s; \
  } while (0)

#endif  // CXLKV_STATUS_H_
