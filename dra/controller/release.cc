// Copyright cxlkv authors.
#include "controller/release.h"

#include <spdlog/spdlog.h>

#include "common/claim_status.h"
#include "controller/claim_json.h"
#include "controller/controller_internal.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::dra {

json DevicesWithoutOurs(const json& claim, const std::string& driver, bool* had_ours) {
  json keep = json::array();
  *had_ours = false;
  const json cur_status = claim.contains("status") ? claim["status"] : json::object();
  for (const auto& d : cur_status.value("devices", json::array())) {
    if (d.value("driver", "") == driver) {
      *had_ours = true;
    } else {
      keep.push_back(d);
    }
  }
  return keep;
}

json LetGoOps(const json& claim) {
  json ops = json::array();
  json ann = claim["metadata"].value("annotations", json::object());
  for (const char* a : {kRegionAnnotation, kOwnerAnnotation}) {
    if (ann.contains(a)) {
      ops.push_back({{"op", "remove"}, {"path", "/metadata/annotations/" + EscapePointer(a)}});
    }
  }
  json fins = claim["metadata"].value("finalizers", json::array());
  for (size_t i = fins.size(); i-- > 0;) {
    if (fins[i] == kFinalizer) {
      ops.push_back({{"op", "remove"}, {"path", "/metadata/finalizers/" + std::to_string(i)}});
    }
  }
  return ops;
}

Status Controller::Rep::FreeRegion(const std::string& aid, const std::string& bid,
                                   const std::string& mid) {
  ControllerMetrics::Op op(&metrics, "free");
  if (!opt.local_hostd_url.empty()) {
    Status s = LocalHostd().Remove(mid);
    if (!s.ok() && !s.IsNotFound()) return op.Done(s.WithContext("remove region " + mid));
  }
  return op.Done(composer->Free(aid, bid, mid));
}

Status Controller::Rep::Release(json& claim) {
  const std::string key = kube::ObjectKey(claim);
  const std::string uid = claim["metadata"].value("uid", "");
  RegionRef ref = ParseRegionAnnotation(Annotation(claim, kRegionAnnotation));
  bool leaked = false;
  if (ref.ok()) {
    Status s = FreeRegion(ref.appliance_id, ref.blade_id, ref.memory_id);
    if (!s.ok() && !s.IsNotFound()) {
      int n;
      {
        std::lock_guard<std::mutex> l(mu);
        n = ++free_failures[uid];
      }
      if (n < opt.max_free_attempts) {
        metrics.AddFreeRetry();
        Event(claim, true, "FreeRetrying",
              "free region " + ref.memory_id + " failed (attempt " + std::to_string(n) +
                  "): " + s.ToString());
        return s.WithContext("free region " + ref.memory_id);
      }
      leaked = true;
      Event(claim, true, "FreeFailed",
            "free region " + ref.memory_id + " failed " + std::to_string(n) +
                " times; dropping the finalizer, the region is leaked: " + s.ToString());
    } else {
      spdlog::info("claim {}: freed region {}", key, ref.memory_id);
    }
  }
  // Our status.devices entries describe a region that is gone; a stale
  // compose-failed or composed condition must not meet the next allocation.
  bool had_ours = false;
  const json keep = DevicesWithoutOurs(claim, opt.driver_name, &had_ours);
  if (had_ours && !claim["metadata"].contains("deletionTimestamp")) {
    json fresh;
    CXLKV_RETURN_IF_ERROR(Timed("status_patch", [&] {
      return PatchClaim(
          claim, json::array({{{"op", "add"}, {"path", "/status/devices"}, {"value", keep}}}),
          &fresh, "status");
    }));
    claim = fresh;
  }
  const json ops = LetGoOps(claim);
  if (ops.empty()) return Status::OK();
  json out;
  CXLKV_RETURN_IF_ERROR(PatchClaim(claim, ops, &out));
  {
    std::lock_guard<std::mutex> l(mu);
    free_failures.erase(uid);
  }
  if (!leaked && ref.ok()) Event(claim, false, "Freed", "region " + ref.memory_id + " freed");
  return Status::OK();
}

}  // namespace cxlkv::dra
