// Copyright cxlkv authors.
//
// `cxlkv status`: a person's view of the DRA driver, one line per object,
// read from the apiserver (and, with --fabric, the fabric manager):
//
//   claim   <ns>/<name>        <state> <size> <region> <hosts> <detail>
//   budget  <ns>               <in use>/<budget> (label cxlkv.dev/memory-budget)
//   pool    <appliance>/<blade> <capacity> <nodes> [tainted]
//   region  <pool>/<memory id> <status> <size> <claim | orphan | foreign> <hosts>
//
// Claim states, in the order the controller moves a claim through them
// (docs/dra-design.md, "The claim state machine"):
//   Pending       not allocated yet (the scheduler has not placed it)
//   Allocated     allocated on our driver, no controller owns it yet
//   Composing     owned; no region yet, or a host not yet Materialized
//   Ready         cxlkv.dev/composed True: every target host Materialized
//   Refused       cxlkv.dev/compose-failed True (detail: reason and message,
//                 e.g. NamespaceBudgetExceeded, NoSpace, InvalidRequest)
//   Releasing     deleted, the finalizer cxlkv.dev/free-memory still on it
// A claim is ours when it is allocated on the driver, carries a cxlkv.dev/
// annotation, or requests a DeviceClass whose CEL selector names the driver.
// The detail column adds the owner replica, `fabric-unreachable` and the
// claim's last Warning Event (reason: note), which is what one reads first
// when a pod does not start (docs/dra.md, "Troubleshooting").
//
// Exit status: 0 when everything was read; 1 when the apiserver (or the
// fabric manager) could not be read; 2 on bad usage.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "common/claim_status.h"
#include "cxlkv/base/size.h"
#include "cxlkv/fabric/client.h"
#include "cxlkv/kube/config.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::cli {
namespace {

using nlohmann::json;
constexpr int64_t kMiB = 1 << 20;

struct Flags {
  std::string kubeconfig;
  std::string ns;  // "" = every namespace
  std::string driver = dra::kDefaultDriverName;
  std::string fabric;  // fabric manager URL; "" = apiserver only
  std::string fabric_user, fabric_password, fabric_ca;
  bool json = false;
};

std::string Ann(const json& obj, const std::string& key) {
  const json& md = obj["metadata"];
  if (!md.contains("annotations") || !md["annotations"].is_object()) return "";
  return md["annotations"].value(key, "");
}

std::string Size(int64_t bytes) {
  return bytes > 0 ? base::FormatBytes(static_cast<uint64_t>(bytes)) : "-";
}

// The condition of `type` on any of our status.devices entries; null if none.
json Condition(const json& claim, const std::string& driver, const std::string& type) {
  if (!claim.contains("status")) return nullptr;
  for (const auto& d : claim["status"].value("devices", json::array())) {
    if (d.value("driver", "") != driver) continue;
    for (const auto& c : d.value("conditions", json::array())) {
      if (c.value("type", "") == type) return c;
    }
  }
  return nullptr;
}

json OurData(const json& claim, const std::string& driver) {
  if (!claim.contains("status")) return json::object();
  for (const auto& d : claim["status"].value("devices", json::array())) {
    if (d.value("driver", "") == driver && d.contains("data") && d["data"].is_object())
      return d["data"];
  }
  return json::object();
}

bool AllocatedOnDriver(const json& claim, const std::string& driver, int64_t* bytes) {
  *bytes = 0;
  if (!claim.contains("status") || !claim["status"].contains("allocation")) return false;
  const json& alloc = claim["status"]["allocation"];
  if (!alloc.is_object() || !alloc.contains("devices")) return false;
  bool ours = false;
  for (const auto& r : alloc["devices"].value("results", json::array())) {
    if (r.value("driver", "") != driver) continue;
    ours = true;
    if (r.contains("consumedCapacity") && r["consumedCapacity"].contains("memory") &&
        r["consumedCapacity"]["memory"].is_string()) {
      int64_t b = 0;
      if (base::ParseQuantity(r["consumedCapacity"]["memory"].get<std::string>(), &b).ok())
        *bytes += b;
    }
  }
  return ours;
}

// What the claim asks for before allocation: capacity.requests.memory of its
// exact requests on `classes`, or the cxlkv.dev/capacity-mib annotation.
int64_t RequestedBytes(const json& claim, const std::set<std::string>& classes) {
  int64_t total = 0;
  const json& spec = claim.value("spec", json::object());
  const json& devices = spec.value("devices", json::object());
  for (const auto& r : devices.value("requests", json::array())) {
    if (!r.contains("exactly")) continue;
    const json& e = r["exactly"];
    if (!classes.count(e.value("deviceClassName", ""))) continue;
    if (e.contains("capacity") && e["capacity"].contains("requests") &&
        e["capacity"]["requests"].contains("memory")) {
      int64_t b = 0;
      if (base::ParseQuantity(e["capacity"]["requests"]["memory"].get<std::string>(), &b).ok())
        total += b * e.value("count", 1);
    }
  }
  if (total == 0) {
    const std::string mib = Ann(claim, "cxlkv.dev/capacity-mib");
    if (!mib.empty()) total = std::strtoll(mib.c_str(), nullptr, 10) * kMiB;
  }
  return total;
}

bool RequestsClass(const json& claim, const std::set<std::string>& classes) {
  const json& devices = claim.value("spec", json::object()).value("devices", json::object());
  for (const auto& r : devices.value("requests", json::array())) {
    if (r.contains("exactly") && classes.count(r["exactly"].value("deviceClassName", "")))
      return true;
    for (const auto& s : r.value("firstAvailable", json::array())) {
      if (classes.count(s.value("deviceClassName", ""))) return true;
    }
  }
  return false;
}

bool HasOurAnnotation(const json& claim) {
  const json& md = claim["metadata"];
  if (!md.contains("annotations") || !md["annotations"].is_object()) return false;
  for (const auto& [k, v] : md["annotations"].items()) {
    if (k.rfind("cxlkv.dev/", 0) == 0) return true;
  }
  return false;
}

std::string Join(const std::vector<std::string>& v, const char* sep = ",") {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out.empty() ? "-" : out;
}

int RunStatus(const Flags& f) {
  kube::Config cfg;
  kube::Status kls =
      f.kubeconfig.empty() ? kube::LoadDefault(&cfg) : kube::LoadKubeconfig(f.kubeconfig, &cfg);
  // message(), not ToString(): Fail names the code once.
  if (!kls.ok()) return Fail("status", ::cxlkv::Status::InvalidArgument(kls.message()));
  ::cxlkv::Status s;
  std::unique_ptr<kube::Client> kc;
  kube::ClientOptions copt;
  copt.user_agent = "cxlkv-status";
  kube::Status ks = kube::Client::New(cfg, copt, &kc);
  if (!ks.ok()) return Fail("status", ::cxlkv::Status::InvalidArgument(ks.message()));
  auto io = [](const std::string& what, const kube::Status& k) {
    return Fail("status", ::cxlkv::Status::IOError(what + ": " + k.ToString()));
  };

  // DeviceClasses whose selectors name the driver: their claims are ours
  // even before the scheduler allocates them.
  std::set<std::string> classes;
  std::vector<json> items;
  std::string rv;
  ks = kube::DeviceClassClient(kc.get()).ListAll({}, 500, &items, &rv);
  if (!ks.ok()) return io("list deviceclasses", ks);
  const std::string needle = "\"" + f.driver + "\"";
  for (const auto& dc : items) {
    for (const auto& sel : dc.value("spec", json::object()).value("selectors", json::array())) {
      if (sel.contains("cel") &&
          sel["cel"].value("expression", "").find(needle) != std::string::npos)
        classes.insert(dc["metadata"].value("name", ""));
    }
  }
  std::vector<json> claims;
  ks = kube::ResourceClaimClient(kc.get(), f.ns).ListAll({}, 500, &claims, &rv);
  if (!ks.ok()) return io("list resourceclaims", ks);
  // The last Warning Event per claim (events.k8s.io: regarding, note).
  std::map<std::string, json> last_warning;
  std::vector<json> events;
  ks = kube::EventClient(kc.get(), f.ns).ListAll({}, 500, &events, &rv);
  if (!ks.ok()) return io("list events", ks);
  for (const auto& e : events) {
    const json& reg = e.value("regarding", json::object());
    if (e.value("type", "") != "Warning" || reg.value("kind", "") != "ResourceClaim") continue;
    const std::string key =
        reg.value("namespace", "") + "/" + reg.value("name", "") + "@" + reg.value("uid", "");
    const std::string t = e.value("eventTime", json()).is_string()
                              ? e["eventTime"].get<std::string>()
                              : e["metadata"].value("creationTimestamp", "");
    if (!last_warning.count(key) || last_warning[key].value("t", "") <= t) {
      last_warning[key] = {
          {"t", t}, {"reason", e.value("reason", "")}, {"note", e.value("note", "")}};
    }
  }

  json out = {{"claims", json::array()},
              {"budgets", json::array()},
              {"pools", json::array()},
              {"regions", json::array()}};
  std::map<std::string, std::string> claim_by_uid;  // uid -> ns/name
  std::map<std::string, int64_t> composed_by_ns;
  for (const auto& c : claims) {
    const std::string ns = c["metadata"].value("namespace", "");
    const std::string name = c["metadata"].value("name", "");
    const std::string uid = c["metadata"].value("uid", "");
    int64_t bytes = 0;
    const bool allocated = AllocatedOnDriver(c, f.driver, &bytes);
    if (!allocated && !HasOurAnnotation(c) && !RequestsClass(c, classes)) continue;
    claim_by_uid[uid] = ns + "/" + name;
    if (bytes == 0) bytes = RequestedBytes(c, classes);
    const json data = OurData(c, f.driver);
    const json composed = Condition(c, f.driver, dra::kConditionComposed);
    const json failed = Condition(c, f.driver, dra::kConditionComposeFailed);
    const json reach = Condition(c, f.driver, dra::kConditionFabricReachable);
    const std::string owner = Ann(c, dra::kOwnerAnnotation);
    std::string state, detail;
    if (c["metadata"].contains("deletionTimestamp")) {
      state = "Releasing";
    } else if (!allocated) {
      state = "Pending";
    } else if (failed.is_object() && failed.value("status", "") == "True") {
      state = "Refused";
      detail = failed.value("reason", "") + ": " + failed.value("message", "");
    } else if (composed.is_object() && composed.value("status", "") == "True") {
      state = "Ready";
    } else if (owner.empty()) {
      state = "Allocated";
    } else {
      state = "Composing";
      if (composed.is_object() && !composed.value("reason", "").empty())
        detail = composed.value("reason", "");
    }
    std::string region = data.value("memoryId", "");
    json ann = json::parse(Ann(c, "cxlkv.dev/region"), nullptr, false);
    if (region.empty() && ann.is_object()) region = ann.value("memoryId", "");
    std::vector<std::string> hosts, host_errors;
    json hosts_json = json::object();
    const json host_states = data.value("hosts", json::object());  // outlives the loop
    for (const auto& [h, v] : host_states.items()) {
      hosts.push_back(h + "=" + v.value("state", "?"));
      hosts_json[h] = v.value("state", "");
      if (!v.value("error", "").empty()) host_errors.push_back(h + ": " + v.value("error", ""));
    }
    std::vector<std::string> extra;
    if (!owner.empty()) extra.push_back("owner " + owner);
    if (reach.is_object() && reach.value("status", "") == "False")
      extra.push_back("fabric-unreachable");
    for (const auto& e : host_errors) extra.push_back("host " + e);
    auto w = last_warning.find(ns + "/" + name + "@" + uid);
    json warning = nullptr;
    if (w != last_warning.end() && state != "Ready") {
      warning = {{"reason", w->second["reason"]}, {"note", w->second["note"]}};
      if (detail.empty())
        extra.push_back("last warning " + w->second.value("reason", "") + ": " +
                        w->second.value("note", ""));
    }
    for (const auto& x : extra) detail += (detail.empty() ? "" : "; ") + x;
    if (allocated && ann.is_object() && ann.value("sizeMiB", json()).is_number_integer())
      composed_by_ns[ns] += ann["sizeMiB"].get<int64_t>() * kMiB;
    out["claims"].push_back({{"namespace", ns},
                             {"name", name},
                             {"state", state},
                             {"sizeBytes", bytes},
                             {"memoryId", region},
                             {"hosts", hosts_json},
                             {"owner", owner},
                             {"detail", detail},
                             {"lastWarning", warning}});
    if (!f.json) {
      std::printf("claim   %-32s %-10s %-8s %-38s %s %s\n", (ns + "/" + name).c_str(),
                  state.c_str(), Size(bytes).c_str(), region.empty() ? "-" : region.c_str(),
                  Join(hosts).c_str(), detail.c_str());
    }
  }

  // Namespaces with a byte budget (dra/controller/quota.h).
  std::vector<json> nss;
  kube::ListOptions lo;
  lo.label_selector = "cxlkv.dev/memory-budget";
  ks = kube::ResourceClient(kc.get(), kube::Namespaces(), "").ListAll(lo, 500, &nss, &rv);
  if (!ks.ok()) return io("list namespaces", ks);
  for (const auto& n : nss) {
    const std::string name = n["metadata"].value("name", "");
    if (!f.ns.empty() && name != f.ns) continue;
    const std::string text = n["metadata"]["labels"].value("cxlkv.dev/memory-budget", "");
    int64_t budget = -1;
    const bool valid = base::ParseQuantity(text, &budget).ok();
    out["budgets"].push_back({{"namespace", name},
                              {"budget", text},
                              {"budgetBytes", valid ? budget : -1},
                              {"composedBytes", composed_by_ns[name]}});
    if (!f.json) {
      std::printf("budget  %-32s %s composed of %s%s\n", name.c_str(),
                  Size(composed_by_ns[name]).c_str(), valid ? Size(budget).c_str() : text.c_str(),
                  valid ? "" : " (not a quantity: every compose there is refused)");
    }
  }

  // The driver's ResourceSlices: what the scheduler can allocate.
  std::vector<json> slices;
  ks = kube::ResourceSliceClient(kc.get()).ListAll({}, 500, &slices, &rv);
  if (!ks.ok()) return io("list resourceslices", ks);
  for (const auto& sl : slices) {
    const json& spec = sl.value("spec", json::object());
    if (spec.value("driver", "") != f.driver) continue;
    const std::string pool = spec.value("pool", json::object()).value("name", "");
    std::vector<std::string> nodes;
    if (spec.contains("nodeName")) nodes.push_back(spec["nodeName"].get<std::string>());
    if (spec.contains("nodeSelector")) {
      for (const auto& t : spec["nodeSelector"].value("nodeSelectorTerms", json::array())) {
        for (const auto& m : t.value("matchExpressions", json::array())) {
          for (const auto& v : m.value("values", json::array())) nodes.push_back(v);
        }
      }
    }
    for (const auto& d : spec.value("devices", json::array())) {
      int64_t cap = 0;
      if (d.contains("capacity") && d["capacity"].contains("memory"))
        if (!base::ParseQuantity(d["capacity"]["memory"].value("value", "0"), &cap).ok()) cap = 0;
      std::vector<std::string> taints;
      for (const auto& t : d.value("taints", json::array()))
        taints.push_back(t.value("key", "") + ":" + t.value("effect", ""));
      out["pools"].push_back({{"pool", pool},
                              {"device", d.value("name", "")},
                              {"capacityBytes", cap},
                              {"nodes", nodes},
                              {"taints", taints}});
      if (!f.json) {
        std::printf("pool    %-32s %-10s %-8s %s %s\n", (pool + "/" + d.value("name", "")).c_str(),
                    taints.empty() ? "Published" : "Tainted", Size(cap).c_str(),
                    Join(nodes).c_str(), taints.empty() ? "" : Join(taints).c_str());
      }
    }
  }

  if (!f.fabric.empty()) {
    fabric::ClientOptions fo;
    fo.base_url = f.fabric;
    fo.username = f.fabric_user;
    fo.password = f.fabric_password;
    fo.ca_file = f.fabric_ca;
    fo.timeout_ms = 10000;
    std::unique_ptr<fabric::FabricClient> fc;
    s = fabric::FabricClient::Open(fo, &fc);
    if (!s.ok()) return Fail("status", s);
    std::vector<fabric::Pool> pools;
    s = fc->ListPools(&pools);
    if (!s.ok()) return Fail("status", s.WithContext("fabric manager " + f.fabric));
    const std::string prefix = f.driver + "/";
    for (const auto& p : pools) {
      std::vector<fabric::MemoryRegion> regions;
      s = fc->List(p.appliance_id, p.blade_id, &regions);
      if (!s.ok()) return Fail("status", s.WithContext("list regions"));
      for (const auto& r : regions) {
        std::string owner = "foreign";  // not tagged by this driver: never swept
        if (r.claim_uid.rfind(prefix, 0) == 0) {
          const std::string uid =
              r.claim_uid.substr(prefix.size(), r.claim_uid.find('@') - prefix.size());
          auto it = claim_by_uid.find(uid);
          owner = it != claim_by_uid.end() ? it->second : "orphan";
        }
        std::vector<std::string> hosts;
        json hj = json::object();
        for (const auto& m : r.mappings) {
          if (m.host_id.empty()) continue;
          hosts.push_back(m.host_id + "=" + fabric::ToString(m.materialization));
          hj[m.host_id] = fabric::ToString(m.materialization);
        }
        const std::string st = fabric::ToString(r.status);
        out["regions"].push_back({{"pool", p.appliance_id + "/" + p.blade_id},
                                  {"memoryId", r.id},
                                  {"status", st},
                                  {"sizeBytes", r.size_mib * kMiB},
                                  {"claim", owner},
                                  {"hosts", hj}});
        if (!f.json) {
          std::printf("region  %-32s %-10s %-8s %-38s %s\n",
                      (p.appliance_id + "/" + p.blade_id + "/" + r.id).c_str(),
                      st.empty() ? "-" : st.c_str(), Size(r.size_mib * kMiB).c_str(), owner.c_str(),
                      Join(hosts).c_str());
        }
      }
    }
  }
  if (f.json) std::printf("%s\n", out.dump().c_str());
  return kExitOk;
}

}  // namespace

void AddStatusCommand(CLI::App& app, int* rc) {
  auto* f = new Flags();
  auto* cmd = app.add_subcommand(
      "status", "the DRA driver's claims, budgets, pools and regions, one per line");
  cmd->add_option("--kubeconfig", f->kubeconfig, "kubeconfig (default: in-cluster, then ~/.kube)")
      ->envname("KUBECONFIG");
  cmd->add_option("-n,--namespace", f->ns, "one namespace (default: all)");
  cmd->add_option("--driver-name", f->driver, "DRA driver name")->envname("CXLKV_DRA_DRIVER_NAME");
  cmd->add_option("--fabric", f->fabric, "fabric manager URL: also list its regions")
      ->envname("CXLKV_FABRIC_URL");
  cmd->add_option("--fabric-user", f->fabric_user)->envname("CXLKV_FABRIC_USER");
  cmd->add_option("--fabric-password", f->fabric_password)->envname("CXLKV_FABRIC_PASSWORD");
  cmd->add_option("--fabric-ca", f->fabric_ca)->envname("CXLKV_FABRIC_CA");
  cmd->add_flag("--json", f->json, "one JSON object instead of lines");
  cmd->callback([=] { *rc = RunStatus(*f); });
}

}  // namespace cxlkv::cli
