// Copyright cxlkv authors.
#include "controller/claim_json.h"

#include <ctime>

#include "common/claim_status.h"
#include "controller/controller_internal.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::dra {

std::string EscapePointer(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Now3339() {
  char buf[32];
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t,
           &tm);  // gmtime's static buffer is not ours to share between workers
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Annotation(const json& obj, const std::string& key) {
  if (!obj.contains("metadata")) return "";
  const json& md = obj["metadata"];
  if (!md.contains("annotations") || !md["annotations"].is_object()) return "";
  return md["annotations"].value(key, "");
}

Status PositiveAnnotation(const json& claim, const std::string& key, int64_t max, int64_t* out) {
  *out = 0;
  const std::string v = Annotation(claim, key);
  if (v.empty()) return Status::OK();
  int64_t n = 0;
  bool ok = v.size() <= 18;
  for (char c : v) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) n = n * 10 + (c - '0');
  }
  if (!ok || n < 1 || n > max) {
    return Status::InvalidArgument("claim " + kube::ObjectKey(claim) + ": " + key + " \"" + v +
                                   "\" is not an integer from 1 to " + std::to_string(max));
  }
  *out = n;
  return Status::OK();
}

bool HasFinalizer(const json& obj) {
  for (const auto& f : obj["metadata"].value("finalizers", json::array())) {
    if (f == kFinalizer) return true;
  }
  return false;
}

std::string PoolName(const fabric::Pool& p) { return p.appliance_id + "/" + p.blade_id; }

std::string ComposeTag(const std::string& driver, const std::string& uid, const std::string& ts) {
  return driver + "/" + uid + "@" + ts;
}

bool ParseComposeTag(const std::string& driver, const std::string& tag, std::string* uid,
                     std::string* ts) {
  const std::string prefix = driver + "/";
  if (tag.rfind(prefix, 0) != 0) return false;
  auto at = tag.find('@', prefix.size());
  if (at == std::string::npos) return false;
  *uid = tag.substr(prefix.size(), at - prefix.size());
  *ts = tag.substr(at + 1);
  return !uid->empty();
}

json OurResults(const json& claim, const std::string& driver) {
  json ours = json::array();
  if (!claim.contains("status")) return ours;
  const json& st = claim["status"];
  if (!st.contains("allocation") || !st["allocation"].is_object()) return ours;
  if (!st["allocation"].contains("devices")) return ours;
  for (const auto& r : st["allocation"]["devices"].value("results", json::array())) {
    if (r.value("driver", "") == driver) ours.push_back(r);
  }
  return ours;
}

json DeviceEntry(const json& result, const std::string& driver) {
  json e = {{"driver", driver}, {"pool", result["pool"]}, {"device", result["device"]}};
  if (result.contains("shareID")) e["shareID"] = result["shareID"];
  return e;
}

Status Controller::Rep::PatchClaim(const json& claim, const json& ops, json* out,
                                   const std::string& sub) {
  // Every write is a compare-and-set on the resourceVersion read: a claim
  // another replica changed meanwhile gives 409 and is re-read.
  json patch = json::array();
  patch.push_back({{"op", "test"},
                   {"path", "/metadata/resourceVersion"},
                   {"value", claim["metadata"]["resourceVersion"]}});
  for (const auto& op : ops) patch.push_back(op);
  const std::string ns = claim["metadata"].value("namespace", "");
  kube::Status ks = kube::ResourceClaimClient(kube, ns).Patch(
      claim["metadata"].value("name", ""), kube::PatchType::kJson, patch, out, {}, sub);
  if (ks.IsConflict() || ks.IsInvalid()) {
    // A failed `test` is 422 Invalid on JSON Patch; both mean "re-read".
    return Status::Busy("claim " + kube::ObjectKey(claim) + " changed: " + ks.message());
  }
  if (!ks.ok()) {
    return Status::IOError("patch claim " + kube::ObjectKey(claim) + ": " + ks.ToString());
  }
  return Status::OK();
}

}  // namespace cxlkv::dra
