// Copyright cxlkv authors.
#include "controller/quota.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <random>
#include <thread>

#include "cxlkv/base/size.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::dra {

using kube::Json;

namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr const char* kRegionAnnotation = "cxlkv.dev/region";
// Every refusal's message starts so; IsBudgetExceeded looks for it.
constexpr const char* kRefusal = "namespace memory budget exceeded: ";

// core/v1 ConfigMaps: not among kube/'s descriptors (nothing else in cxlkv
// reads them), so named here.
const kube::ResourceType& ConfigMaps() {
  static const kube::ResourceType t{"", "v1", "configmaps", "ConfigMap", true};
  return t;
}

std::string Annotation(const Json& obj, const char* key) {
  const Json& md = obj["metadata"];
  if (!md.contains("annotations") || !md["annotations"].is_object()) return "";
  return md["annotations"].value(key, "");
}

// The allocationTimestamp of the claim's allocation when it has results on
// `driver`; "" otherwise.
std::string OurAllocation(const Json& claim, const std::string& driver) {
  if (!claim.contains("status") || !claim["status"].contains("allocation")) return "";
  const Json& alloc = claim["status"]["allocation"];
  if (!alloc.is_object() || !alloc.contains("devices")) return "";
  for (const auto& r : alloc["devices"].value("results", Json::array())) {
    if (r.value("driver", "") == driver) return alloc.value("allocationTimestamp", "");
  }
  return "";
}

std::string Fmt(int64_t bytes) { return base::FormatBytes(static_cast<uint64_t>(bytes)); }

}  // namespace

std::string BudgetKey(const Json& claim) {
  std::string ts;
  if (claim.contains("status") && claim["status"].contains("allocation") &&
      claim["status"]["allocation"].is_object()) {
    ts = claim["status"]["allocation"].value("allocationTimestamp", "");
  }
  return claim["metadata"].value("uid", "") + "@" + ts;
}

bool IsBudgetExceeded(const Status& s) {
  return s.IsNoSpace() && s.message().find(kRefusal) != std::string::npos;
}

int64_t BudgetUsage(const Json& reservations, const std::vector<Json>& claims,
                    const std::string& driver, const std::string& self_uid, Json* kept) {
  *kept = Json::object();
  int64_t used = 0;
  for (const auto& c : claims) {
    const std::string ts = OurAllocation(c, driver);
    if (ts.empty()) continue;  // not allocated on our driver: holds nothing
    const std::string uid = c["metadata"].value("uid", "");
    const std::string key = uid + "@" + ts;
    int64_t bytes = -1;
    if (reservations.is_object() && reservations.contains(key) && reservations[key].is_object() &&
        reservations[key].contains("bytes") && reservations[key]["bytes"].is_number_integer()) {
      bytes = reservations[key]["bytes"].get<int64_t>();
      if (bytes >= 0) (*kept)[key] = reservations[key];
    }
    if (bytes < 0) {
      // Composed without a reservation (before the budget was set, or by a
      // controller without budgets): its annotation says how much.
      Json ann = Json::parse(Annotation(c, kRegionAnnotation), nullptr, false);
      if (ann.is_object() && ann.value("allocationTimestamp", "") == ts &&
          ann.contains("sizeMiB") && ann["sizeMiB"].is_number_integer()) {
        bytes = ann["sizeMiB"].get<int64_t>() * kMiB;
      }
    }
    if (uid != self_uid && bytes > 0) used += bytes;
  }
  return used;
}

NamespaceBudget::NamespaceBudget(kube::Client* kube, std::string driver,
                                 std::string ledger_namespace)
    : kube_(kube), driver_(std::move(driver)), ledger_ns_(std::move(ledger_namespace)) {}

Status NamespaceBudget::Admit(const Json& claim, int64_t bytes, BudgetDecision* out) {
  BudgetDecision scratch;
  BudgetDecision& d = out ? *out : scratch;
  d = BudgetDecision();
  d.request_bytes = bytes;
  const std::string ns = claim["metadata"].value("namespace", "");
  const std::string name = claim["metadata"].value("name", "");
  const std::string self = claim["metadata"].value("uid", "");
  Json nsobj;
  kube::Status ks = kube::ResourceClient(kube_, kube::Namespaces(), "").Get(ns, &nsobj);
  if (!ks.ok()) return Status::IOError("get namespace " + ns + ": " + ks.ToString());
  const Json& labels = nsobj["metadata"].value("labels", Json::object());
  if (!labels.is_object() || !labels.contains(kNamespaceBudgetLabel)) return Status::OK();
  d.limited = true;
  const std::string text = labels[kNamespaceBudgetLabel].is_string()
                               ? labels[kNamespaceBudgetLabel].get<std::string>()
                               : labels[kNamespaceBudgetLabel].dump();
  Status ps = base::ParseQuantity(text, &d.budget_bytes);
  if (!ps.ok()) {
    return Status::InvalidArgument("namespace " + ns + " label " + kNamespaceBudgetLabel + " \"" +
                                   text + "\" is not a quantity of bytes (e.g. 8Gi)");
  }
  const std::string key = BudgetKey(claim);
  const std::string ledger = std::string(kBudgetLedgerPrefix) + ns;
  kube::ResourceClient cms(kube_, ConfigMaps(), ledger_ns_);
  kube::ResourceClient claims(kube_, kube::ResourceClaims(), ns);
  std::mt19937 rng(std::hash<std::string>()(key));
  for (int attempt = 0; attempt < 8; attempt++) {
    if (attempt > 0) {
      // Lost the ledger to another writer: re-read after a short jitter so
      // two replicas do not collide again in lockstep.
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % (20 << attempt)));
    }
    // The ledger first, then the claims (see quota.h for why this order).
    Json cm;
    bool exists = true;
    ks = cms.Get(ledger, &cm);
    if (ks.IsNotFound()) {
      exists = false;
      cm = {{"metadata", {{"name", ledger}, {"namespace", ledger_ns_}}},
            {"data", {{kBudgetLedgerKey, "{}"}}}};
    } else if (!ks.ok()) {
      return Status::IOError("get ledger " + ledger_ns_ + "/" + ledger + ": " + ks.ToString());
    }
    std::string raw = "{}";
    if (cm.contains("data") && cm["data"].is_object())
      raw = cm["data"].value(kBudgetLedgerKey, "{}");
    Json reservations = Json::parse(raw, nullptr, false);
    if (!reservations.is_object()) {
      // A damaged ledger: rebuilt from the claims' annotations below (what
      // is composed still counts); only in-flight reservations are lost.
      spdlog::warn("ledger {}/{}: {} is not a JSON object; rebuilding it", ledger_ns_, ledger,
                   kBudgetLedgerKey);
      reservations = Json::object();
    }
    if (reservations.contains(key)) return Status::OK();  // admitted before (a retry)
    std::vector<Json> items;
    std::string rv;
    ks = claims.ListAll({}, 500, &items, &rv);
    if (!ks.ok()) return Status::IOError("list claims of " + ns + ": " + ks.ToString());
    Json kept;
    d.used_bytes = BudgetUsage(reservations, items, driver_, self, &kept);
    if (d.used_bytes + bytes > d.budget_bytes) {
      d.admitted = false;
      d.message = std::string(kRefusal) + "claim " + ns + "/" + name + " asks for " + Fmt(bytes) +
                  "; namespace " + ns + " has " + Fmt(d.used_bytes) + " of its " +
                  Fmt(d.budget_bytes) + " budget (label " + kNamespaceBudgetLabel +
                  ") in use by other claims";
      return Status::NoSpace(d.message);
    }
    kept[key] = {{"claim", name}, {"bytes", bytes}};
    cm["data"][kBudgetLedgerKey] = kept.dump();
    Json stored;
    ks = exists ? cms.Update(cm, &stored) : cms.Create(cm, &stored);
    if (ks.ok()) {
      spdlog::info("claim {}/{}: {} admitted against namespace budget {} ({} in use before)", ns,
                   name, Fmt(bytes), Fmt(d.budget_bytes), Fmt(d.used_bytes));
      return Status::OK();
    }
    if (!ks.IsConflict() && !ks.IsAlreadyExists()) {
      return Status::IOError("write ledger " + ledger_ns_ + "/" + ledger + ": " + ks.ToString());
    }
  }
  return Status::Busy("ledger " + ledger_ns_ + "/" + ledger + ": 8 concurrent writes in a row");
}

}  // namespace cxlkv::dra
