// Copyright cxlkv authors.
#include "cxlkv/fabric/types.h"

namespace cxlkv::fabric {

const char* ToString(Materialization m) {
  switch (m) {
    case Materialization::kPending:
      return "Pending";
    case Materialization::kMaterialized:
      return "Materialized";
    case Materialization::kFailed:
      return "Failed";
    case Materialization::kNoAgent:
      return "NoAgent";
  }
  return "Pending";
}

bool ParseMaterialization(std::string_view text, Materialization* out) {
  for (Materialization m : {Materialization::kPending, Materialization::kMaterialized,
                            Materialization::kFailed, Materialization::kNoAgent}) {
    if (text == ToString(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

const char* ToString(RegionStatus s) {
  switch (s) {
    case RegionStatus::kComposing:
      return "Composing";
    case RegionStatus::kComposed:
      return "Composed";
    case RegionStatus::kUnknown:
      break;
  }
  return "";
}

bool ParseRegionStatus(std::string_view text, RegionStatus* out) {
  for (RegionStatus s : {RegionStatus::kComposing, RegionStatus::kComposed}) {
    if (text == ToString(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

}  // namespace cxlkv::fabric
