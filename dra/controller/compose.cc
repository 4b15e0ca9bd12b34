// Copyright cxlkv authors.
#include "controller/compose.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "common/node_selector.h"
#include "controller/claim_json.h"
#include "controller/controller_internal.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::dra {

namespace {
bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}
}  // namespace

Status BuildComposeRequest(const json& claim, const json& ours, const ControllerOptions& opt,
                           bool fixed_devices, const std::vector<std::string>& nodes,
                           bool all_known, fabric::ComposeRequest* req, std::string* appliance,
                           std::string* blade) {
  const std::string key = kube::ObjectKey(claim);
  const json& alloc = claim["status"]["allocation"];
  const std::string pool = ours[0].value("pool", "");
  auto slash = pool.find('/');
  if (slash == std::string::npos) return Status::InvalidArgument("claim " + key + ": pool " + pool);
  *appliance = pool.substr(0, slash);
  *blade = pool.substr(slash + 1);
  int64_t bytes = 0;
  for (const auto& r : ours) {
    int64_t b = 0;
    if (r.contains("consumedCapacity") && r["consumedCapacity"].contains("memory")) {
      CXLKV_RETURN_IF_ERROR(
          ParseQuantityBytes(r["consumedCapacity"]["memory"].get<std::string>(), &b));
    }
    bytes += b;
  }
  // Paper §2.2: size and QoS from the claim's annotations, which fixed
  // devices need (the apiserver drops capacity.requests there).
  int64_t cap_mib = 0, qos = opt.qos;
  CXLKV_RETURN_IF_ERROR(
      PositiveAnnotation(claim, "cxlkv.dev/capacity-mib", int64_t{1} << 40, &cap_mib));
  if (bytes == 0) bytes = cap_mib * kMiB;
  if (bytes <= 0) {
    return Status::InvalidArgument("claim " + key +
                                   (fixed_devices
                                        ? ": no size: in annotation mode (this apiserver keeps "
                                          "no consumable "
                                          "capacity) a claim gives its size in the annotation "
                                          "cxlkv.dev/capacity-mib"
                                        : ": no memory capacity requested "
                                          "(capacity.requests.memory or the "
                                          "annotation cxlkv.dev/capacity-mib)"));
  }
  if (fixed_devices) {
    // Only here: under consumable capacity the device's request policy
    // steps in opt.qos blocks, so another QoS would not round the same.
    CXLKV_RETURN_IF_ERROR(PositiveAnnotation(claim, "cxlkv.dev/qos", 8, &qos));
    if (qos == 0) qos = opt.qos;
    if (qos != 1 && qos != 2 && qos != 4 && qos != 8) {
      return Status::InvalidArgument("claim " + key + ": cxlkv.dev/qos \"" +
                                     Annotation(claim, "cxlkv.dev/qos") + "\": want 1, 2, 4 or 8");
    }
  }
  req->size_mib = (bytes + kMiB - 1) / kMiB;
  req->qos = static_cast<int>(qos);
  req->claim_uid = ComposeTag(opt.driver_name, claim["metadata"].value("uid", ""),
                              alloc.value("allocationTimestamp", ""));
  std::vector<std::string> selector;
  if (alloc.contains("nodeSelector")) selector = SelectorHostnames(alloc["nodeSelector"]);
  // Target hosts: the reserving pods' nodes when all are known (the
  // scheduler wrote nominatedNodeName before PreBind), else every host the
  // allocation allows. A later consumer elsewhere is added then
  // (AddConsumerHosts).
  bool in_selector = true;
  for (const auto& n : nodes) {
    if (!selector.empty() && !Contains(selector, n)) in_selector = false;
  }
  req->candidate_hosts = all_known && in_selector && !nodes.empty() ? nodes : selector;
  int share = static_cast<int>(req->candidate_hosts.size());
  const std::string share_ann = Annotation(claim, "cxlkv.dev/share-count");
  if (!share_ann.empty()) {
    // Paper §2.2: the share count from the claim's annotation; the other
    // allowed hosts follow the known ones as candidates.
    share = std::atoi(share_ann.c_str());
    if (share < 1) {
      return Status::InvalidArgument("claim " + key + ": cxlkv.dev/share-count \"" + share_ann +
                                     "\" is not a positive integer");
    }
    for (const auto& h : selector) {
      if (!Contains(req->candidate_hosts, h)) req->candidate_hosts.push_back(h);
    }
  }
  req->share_count = std::max(1, share);
  return Status::OK();
}

std::string PodNode(const json& pod) {
  // The scheduler writes status.nominatedNodeName before PreBind
  // (NominatedNodeNameForExpectation, on in 1.37); spec.nodeName once bound.
  std::string node = pod.contains("spec") ? pod["spec"].value("nodeName", "") : "";
  if (node.empty() && pod.contains("status")) node = pod["status"].value("nominatedNodeName", "");
  return node;
}

bool PodLeaving(const json& pod) {
  const std::string phase = pod.contains("status") ? pod["status"].value("phase", "") : "";
  return pod["metadata"].contains("deletionTimestamp") || phase == "Succeeded" || phase == "Failed";
}

std::vector<std::string> HostsToAdd(const fabric::MemoryRegion& region,
                                    const std::vector<std::string>& nodes,
                                    const std::set<std::string>& starting,
                                    const std::vector<std::string>& selector, bool* watch) {
  *watch = false;
  std::vector<std::string> add;
  for (const auto& n : nodes) {
    bool mapped = false;
    for (const auto& m : region.mappings) mapped = mapped || m.host_id == n;
    if (mapped) {
      // Mapped now, but this consumer has not prepared yet: the node's
      // plugin may be releasing the region (the last consumer there left
      // just before; the release is a fabric call no claim change follows).
      // Once the consumer runs its preparation holds the node's view.
      if (starting.count(n)) *watch = true;
      continue;
    }
    if (!selector.empty() && !Contains(selector, n)) {
      continue;  // not cabled: the plugin refuses prepare there (k/k#140087)
    }
    add.push_back(n);
  }
  return add;
}

std::vector<std::string> Controller::Rep::ConsumerNodes(const json& claim, bool* all_known,
                                                        bool skip_leaving,
                                                        std::set<std::string>* starting,
                                                        Status* read_error) {
  std::vector<std::string> nodes;
  *all_known = true;
  const std::string ns = claim["metadata"].value("namespace", "");
  const json reserved = claim["status"].value("reservedFor", json::array());
  if (reserved.empty()) *all_known = false;
  for (const auto& c : reserved) {
    if (c.value("resource", "") != "pods" || c.value("apiGroup", "") != "") {
      *all_known = false;  // a PodGroup or another consumer kind
      continue;
    }
    json pod;
    kube::Status ks = kube::PodClient(kube, ns).Get(c.value("name", ""), &pod);
    if (!ks.ok() && !ks.IsNotFound() && read_error != nullptr && read_error->ok()) {
      *read_error = Status::IOError("read reserving pod " + ns + "/" + c.value("name", "") +
                                    " of claim " + kube::ObjectKey(claim) + ": " + ks.ToString());
    }
    if (!ks.ok() || pod["metadata"].value("uid", "") != c.value("uid", "")) {
      *all_known = false;
      continue;
    }
    const std::string node = PodNode(pod);
    if (node.empty()) {
      *all_known = false;
      continue;
    }
    if (skip_leaving && PodLeaving(pod)) continue;
    const std::string phase = pod.contains("status") ? pod["status"].value("phase", "") : "";
    if (starting != nullptr && phase != "Running") starting->insert(node);
    if (!Contains(nodes, node)) nodes.push_back(node);
  }
  return nodes;
}

Status Controller::Rep::AddConsumerHosts(const json& claim, const RegionRef& ref,
                                         fabric::MemoryRegion* region, bool* watch,
                                         Status* pod_error) {
  bool all_known = false;
  // A leaving pod's node is not added back: its plugin has released (or is
  // releasing) that host's view on the last unprepare there.
  std::set<std::string> starting;
  *pod_error = Status::OK();
  std::vector<std::string> nodes =
      ConsumerNodes(claim, &all_known, /*skip_leaving=*/true, &starting, pod_error);
  std::vector<std::string> selector;
  const json& alloc = claim["status"]["allocation"];
  if (alloc.contains("nodeSelector")) selector = SelectorHostnames(alloc["nodeSelector"]);
  for (const auto& n : HostsToAdd(*region, nodes, starting, selector, watch)) {
    Status s = Timed("add_host", [&] {
      return composer->AddHost(ref.appliance_id, ref.blade_id, ref.memory_id, n, region);
    });
    if (!s.ok()) {
      Event(claim, true, "AddHostFailed",
            "add host " + n + " to region " + ref.memory_id + ": " + s.ToString());
      return s.WithContext("add host " + n + " to region " + ref.memory_id);
    }
    // The host's new assignment epoch: a release of its earlier assignment
    // (the node's last consumer left) that lands after this is refused by
    // the manager, so it cannot unmap the host under this consumer.
    uint64_t epoch = 0;
    for (const auto& m : region->mappings) {
      if (m.host_id == n) epoch = m.assign_epoch;
    }
    Event(claim, false, "HostAdded",
          "region " + ref.memory_id + " added to host " + n + " for a later consumer" +
              (epoch > 0 ? " (assignment epoch " + std::to_string(epoch) + ")" : ""));
    spdlog::info("claim {}: added host {} to region {} (assignment epoch {})",
                 kube::ObjectKey(claim), n, ref.memory_id, epoch);
  }
  return Status::OK();
}

Status Controller::Rep::Compose(json& claim, const json& ours, RegionRef* ref) {
  const std::string key = kube::ObjectKey(claim);
  bool all_known = false;
  std::vector<std::string> nodes = ConsumerNodes(claim, &all_known);
  fabric::ComposeRequest req;
  std::string appliance, blade;
  CXLKV_RETURN_IF_ERROR(BuildComposeRequest(claim, ours, opt, fixed_devices, nodes, all_known, &req,
                                            &appliance, &blade));
  const std::string pool = appliance + "/" + blade;
  // The namespace's byte budget (controller/quota.h): admitted through its
  // ledger before anything is composed; a retry of an admitted allocation
  // passes without a new reservation.
  CXLKV_RETURN_IF_ERROR(budget->Admit(claim, req.size_mib * kMiB, nullptr));
  fabric::ComposeResult res;
  // A region already tagged for this allocation is adopted: a controller
  // killed between compose and recording the annotation composed it.
  std::vector<fabric::MemoryRegion> existing;
  Status s = Timed("list", [&] { return composer->List(appliance, blade, &existing); });
  if (!s.ok()) return s.WithContext("list regions for claim " + key);
  bool adopted = false;
  for (const auto& r : existing) {
    if (r.claim_uid == req.claim_uid) {
      res.region = r;
      adopted = true;
      spdlog::info(
          "claim {}: adopted region {} composed for this allocation "
          "before a restart",
          key, r.id);
      break;
    }
  }
  if (!adopted) {
    s = Timed("compose", [&] { return composer->Compose(appliance, blade, req, &res); });
    if (!s.ok()) return s.WithContext("compose for claim " + key);
    if (opt.failpoint == "after-compose") {
      spdlog::warn("failpoint after-compose: SIGKILL after composing region {}", res.region.id);
      spdlog::default_logger()->flush();
      ::kill(::getpid(), SIGKILL);
    }
  }
  ref->appliance_id = appliance;
  ref->blade_id = blade;
  ref->memory_id = res.region.id;
  ref->allocation_timestamp = claim["status"]["allocation"].value("allocationTimestamp", "");
  ref->size_mib = res.region.size_mib;
  json out;
  s = PatchClaim(
      claim,
      json::array({{{"op", "add"},
                    {"path", "/metadata/annotations/" + EscapePointer(kRegionAnnotation)},
                    {"value", EncodeRegionAnnotation(*ref)}}}),
      &out);
  if (!s.ok()) {
    // The teardown parameters could not be recorded: do not leave the
    // region behind.
    Status fs = FreeRegion(appliance, blade, res.region.id);
    if (!fs.ok()) {
      spdlog::error("claim {}: free unrecorded region {}: {}", key, res.region.id, fs.ToString());
    }
    return s;
  }
  if (adopted) return Status::OK();
  std::string hosts;
  for (const auto& h : req.candidate_hosts) hosts += (hosts.empty() ? "" : ",") + h;
  Event(claim, false, "Composed",
        "region " + res.region.id + " (" + std::to_string(res.region.size_mib) + " MiB) on " +
            pool + " for " + std::to_string(req.share_count) + " host(s) of " + hosts);
  spdlog::info("claim {}: composed region {} ({} MiB) on {} for hosts {}", key, res.region.id,
               res.region.size_mib, pool, hosts);
  return Status::OK();
}

hostd::Client Controller::Rep::LocalHostd() const {
  // 3 s to connect plus 10 s to answer, as this call always allowed.
  return hostd::Client({opt.local_hostd_url, 13000});
}

void Controller::Rep::LocalMaterialize(fabric::MemoryRegion* region) {
  if (opt.local_hostd_url.empty()) return;
  for (auto& m : region->mappings) {
    if (m.materialization == fabric::Materialization::kMaterialized && !m.device.empty()) continue;
    // The request the fabric manager sends a host agent (fabricd's
    // Materialize), so hostd serves both alike; a local pool issues no
    // assignment epochs (0).
    hostd::MaterializeRequest req;
    req.allocation_id = region->id;
    req.size_bytes = static_cast<uint64_t>(region->size_mib * kMiB);
    req.backing_path = region->backing_path;
    req.appliance_id = region->appliance_id;
    req.blade_id = region->blade_id;
    req.appliance_port = m.appliance_port;
    req.host_port = m.host_port;
    req.assign_epoch = m.assign_epoch;
    ControllerMetrics::Op op(&metrics, "materialize");
    hostd::HostRegion got;
    Status s = LocalHostd().Materialize(req, &got);
    if (!s.ok()) {
      m.materialization = fabric::Materialization::kFailed;
      m.error = s.message();
      (void)op.Done(s);
      continue;
    }
    m.materialization = fabric::Materialization::kMaterialized;
    m.error.clear();
    m.device = got.device;
    (void)op.Done(Status::OK());
  }
}

}  // namespace cxlkv::dra
