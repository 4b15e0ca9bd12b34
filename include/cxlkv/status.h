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

#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace cxlkv {

class [[nodiscard]] Status {
 public:
  // Each code means exactly one thing.
  enum class Code : unsigned char {
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

  Status() noexcept = default;
  Status(const Status& o) : state_(o.state_ ? std::make_unique<State>(*o.state_) : nullptr) {}
  Status& operator=(const Status& o) {
    if (this != &o) state_ = o.state_ ? std::make_unique<State>(*o.state_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

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

  bool ok() const { return state_ == nullptr; }
  Code code() const { return state_ ? state_->code : Code::kOk; }
  bool IsNotFound() const { return code() == Code::kNotFound; }
  bool IsBusy() const { return code() == Code::kBusy; }
  bool IsNoSpace() const { return code() == Code::kNoSpace; }
  bool IsCorruption() const { return code() == Code::kCorruption; }
  bool IsInvalidArgument() const { return code() == Code::kInvalidArgument; }
  bool IsIOError() const { return code() == Code::kIOError; }
  bool IsUnsupported() const { return code() == Code::kUnsupported; }

  // The message alone ("" when ok()).
  const std::string& message() const;
  // "<Code name>: <message>", or "OK".
  std::string ToString() const;
  // Returns a copy whose message is "<context>: <message>". OK stays OK.
  Status WithContext(std::string_view context) const;

  static const char* CodeName(Code c);

 private:
  struct State {
    Code code;
    std::string msg;
  };
  Status(Code c, std::string_view msg)
      : state_(std::make_unique<State>(State{c, std::string(msg)})) {}
  std::unique_ptr<State> state_;  // null means OK
};

}  // namespace cxlkv

// Returns early from the enclosing function when `expr` is not OK.
#define CXLKV_RETURN_IF_ERROR(expr)      \
  do {                                   \
    ::cxlkv::Status _cxlkv_s = (expr);   \
    if (!_cxlkv_s.ok()) return _cxlkv_s; \
  } while (0)

#endif  // CXLKV_STATUS_H_
