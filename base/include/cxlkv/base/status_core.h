// Copyright cxlkv authors.
//
// StatusCore: the plumbing under the tree's two result types,
// cxlkv::Status (include/cxlkv/status.h: the engine's seven codes, used by
// every room but kube/) and cxlkv::kube::Status (kube/include/cxlkv/kube/
// status.h: the Kubernetes API's distinctions and the apiserver's HTTP
// answer). Each of those keeps its own codes, code names, factories and
// predicates, and derives from StatusCore<Code, Detail> for the rest:
//
//   - no allocation on success: the state pointer is null (the pattern of
//     LevelDB's include/leveldb/status.h); a failure owns a code, a message
//     and a Detail, deep-copied with the value;
//   - ok(), code(), message();
//   - PrependContext (what both WithContext methods do) and CodeNameIn (a
//     code's name from a table indexed by its value).
//
// Code: an enum class whose value 0 is kOk. Detail: what a failure carries
// besides code and message (kube's HTTP status and reason), copyable and
// default-constructible; NoDetail for nothing.
//
// Thread-safety: a value type; distinct objects may be used from different
// threads without synchronisation.
#ifndef CXLKV_BASE_STATUS_CORE_H_
#define CXLKV_BASE_STATUS_CORE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace cxlkv::base {

struct NoDetail {};

template <typename CodeT, typename Detail = NoDetail>
class [[nodiscard]] StatusCore {
 public:
  using Code = CodeT;

  StatusCore() noexcept = default;
  StatusCore(const StatusCore& o)
      : state_(o.state_ ? std::make_unique<State>(*o.state_) : nullptr) {}
  StatusCore& operator=(const StatusCore& o) {
    if (this != &o) state_ = o.state_ ? std::make_unique<State>(*o.state_) : nullptr;
    return *this;
  }
  StatusCore(StatusCore&&) noexcept = default;
  StatusCore& operator=(StatusCore&&) noexcept = default;

  bool ok() const { return state_ == nullptr; }
  Code code() const { return state_ ? state_->code : Code{}; }
  // The message alone, with any context prefixes ("" when ok()).
  const std::string& message() const { return state_ ? state_->msg : Empty(); }

 protected:
  // A failure. REQUIRES: c is not kOk (an OK status is the null state).
  StatusCore(Code c, std::string_view msg, Detail detail = {})
      : state_(std::make_unique<State>(State{c, std::string(msg), std::move(detail)})) {}
  ~StatusCore() = default;

  // The failure's detail. REQUIRES: !ok().
  const Detail& detail() const { return state_->detail; }
  // The message becomes "<context>: <message>"; an OK status stays OK.
  void PrependContext(std::string_view context) {
    if (state_ == nullptr) return;
    std::string m(context);
    m += ": ";
    m += state_->msg;
    state_->msg = std::move(m);
  }
  static const std::string& Empty() {
    static const std::string kEmpty;
    return kEmpty;
  }

 private:
  struct State {
    Code code;
    std::string msg;
    [[no_unique_address]] Detail detail;
  };
  std::unique_ptr<State> state_;  // null means OK
};

// The name of `c` in `names`, a table indexed by the code's value, or
// "Unknown" for a value past its end (no enumerator has it).
template <typename Code, std::size_t N>
const char* CodeNameIn(const char* const (&names)[N], Code c) {
  const auto i = static_cast<std::size_t>(c);
  return i < N ? names[i] : "Unknown";
}

}  // namespace cxlkv::base

#endif  // CXLKV_BASE_STATUS_CORE_H_
