// Copyright cxlkv authors.
#include "cxlkv/status.h"

#include <iterator>

namespace cxlkv {

const char* Status::CodeName(Code c) {
  static constexpr const char* kNames[] = {
      "OK",         "NotFound",        "Busy",    "NoSpace",
      "Corruption", "InvalidArgument", "IOError", "Unsupported",
  };
  static_assert(std::size(kNames) == static_cast<size_t>(Code::kUnsupported) + 1,
                "one name per Status::Code, in value order");
  return base::CodeNameIn(kNames, c);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code())) + ": " + message();
}

Status Status::WithContext(std::string_view context) const {
  Status s(*this);
  s.PrependContext(context);
  return s;
}

}  // namespace cxlkv
