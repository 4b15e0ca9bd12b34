// Copyright cxlkv authors.
#include "kubeletplugin/state.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <ctime>

#include "common/claim_status.h"
#include "common/node_selector.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::dra {

using nlohmann::json;

namespace {

// A region id from the claim's status is untrusted input that becomes a URL
// path segment and a file name: allow only what the fabric manager issues.
bool SafeId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

std::string Key(const ClaimRef& c) { return c.ns + "/" + c.name; }

int64_t NowUnix() { return static_cast<int64_t>(std::time(nullptr)); }

}  // namespace

Status DeviceState::Open(const StateOptions& opt, kube::Client* kube, const HostdClient* hostd,
                         std::unique_ptr<DeviceState>* out) {
  if (opt.node_name.empty()) return Status::InvalidArgument("device state: node name is required");
  if (opt.checkpoint_path.empty()) {
    return Status::InvalidArgument("device state: checkpoint path is required");
  }
  std::unique_ptr<DeviceState> st(new DeviceState(opt, kube, hostd));
  std::string boot_id;
  CXLKV_RETURN_IF_ERROR(ReadBootId(&boot_id, opt.boot_id_path));
  Status s = LoadCheckpoint(opt.checkpoint_path, &st->cp_);
  if (s.IsNotFound()) {
    st->cp_ = Checkpoint();
  } else if (!s.ok()) {
    return s;
  } else if (st->cp_.boot_id != boot_id) {
    st->rebooted_ = true;
    spdlog::info("checkpoint {} is from boot {}, this is boot {}: {} claim(s) will be redone",
                 opt.checkpoint_path, st->cp_.boot_id, boot_id, st->cp_.claims.size());
  }
  if (!st->cp_.node_name.empty() && st->cp_.node_name != opt.node_name) {
    return Status::InvalidArgument("read checkpoint " + opt.checkpoint_path +
                                   ": written for node " + st->cp_.node_name + ", this is node " +
                                   opt.node_name);
  }
  st->cp_.boot_id = boot_id;
  st->cp_.node_name = opt.node_name;
  {
    std::lock_guard<std::mutex> l(st->mu_);
    CXLKV_RETURN_IF_ERROR(st->SaveLocked());
  }
  *out = std::move(st);
  return Status::OK();
}

Status DeviceState::SaveLocked() { return SaveCheckpoint(opt_.checkpoint_path, cp_); }

Status DeviceState::NodeLocked(json* node) {
  // The node's labels rarely change; re-read them at most every 10 s so a
  // burst of prepares costs one GET.
  auto now = std::chrono::steady_clock::now();
  if (node_.is_null() || now - node_read_ > std::chrono::seconds(10)) {
    json n;
    kube::Status ks = kube::NodeClient(kube_).Get(opt_.node_name, &n);
    if (!ks.ok()) return Status::IOError("get node " + opt_.node_name + ": " + ks.ToString());
    node_ = std::move(n);
    node_read_ = now;
  }
  *node = node_;
  return Status::OK();
}

PrepareResult DeviceState::Prepare(const ClaimRef& claim) {
  std::lock_guard<std::mutex> l(mu_);
  PrepareResult r;
  r.error = PrepareLocked(claim, &r.devices);
  if (!r.error.empty()) {
    r.devices.clear();
    spdlog::info("prepare claim {} ({}): {}", Key(claim), claim.uid, r.error);
  }
  return r;
}

std::string DeviceState::PrepareLocked(const ClaimRef& ref, std::vector<PreparedDevice>* out) {
  const std::string key = Key(ref);
  json claim;
  kube::Status ks = kube::ResourceClaimClient(kube_, ref.ns).Get(ref.name, &claim);
  if (ks.IsNotFound()) return "claim " + key + " not found";
  if (!ks.ok()) return "get claim " + key + ": " + ks.ToString();
  const std::string uid = claim["metadata"].value("uid", "");
  if (uid != ref.uid) {
    return "claim " + key + " has UID " + uid + ", the kubelet asked for " + ref.uid +
           " (the claim was deleted and re-created)";
  }
  const json& status = claim.contains("status") ? claim["status"] : json::object();
  if (!status.contains("allocation") || !status["allocation"].is_object()) {
    return "claim " + key + " is not allocated";
  }
  const json& alloc = status["allocation"];
  if (alloc.contains("nodeSelector") && !alloc["nodeSelector"].is_null()) {
    json node;
    Status s = NodeLocked(&node);
    if (!s.ok()) return s.message();
    bool match = false;
    s = NodeSelectorMatches(alloc["nodeSelector"], node, &match);
    if (!s.ok()) return "claim " + key + ": allocation node selector: " + s.message();
    if (!match) {
      return "claim " + key + ": node " + opt_.node_name +
             " is not in the allocation's node selector";
    }
  }
  // Our results.
  std::vector<PreparedDevice> devices;
  json results = json::array();
  if (alloc.contains("devices")) results = alloc["devices"].value("results", json::array());
  for (const auto& res : results) {
    if (res.value("driver", "") != opt_.driver_name) continue;
    PreparedDevice d;
    std::string req = res.value("request", "");
    d.request_names.push_back(req.substr(0, req.find('/')));
    d.pool_name = res.value("pool", "");
    d.device_name = res.value("device", "");
    d.share_id = res.value("shareID", "");
    devices.push_back(std::move(d));
  }
  if (devices.empty()) {
    // Nothing of ours in this claim: nothing to prepare.
    *out = {};
    return "";
  }
  // The region, from the controller's device status.
  std::string memory_id;
  json host_state;
  for (const auto& ds : status.value("devices", json::array())) {
    if (ds.value("driver", "") != opt_.driver_name || !ds.contains("data")) continue;
    const json& data = ds["data"];
    if (!data.is_object() || !data.contains("memoryId") || !data["memoryId"].is_string()) continue;
    memory_id = data["memoryId"].get<std::string>();
    if (data.contains("hosts") && data["hosts"].is_object() &&
        data["hosts"].contains(opt_.node_name)) {
      host_state = data["hosts"][opt_.node_name];
    }
    break;
  }
  if (memory_id.empty()) {
    return "not ready yet: claim " + key + " has no composed region in its status";
  }
  if (!SafeId(memory_id)) return "claim " + key + ": invalid region id \"" + memory_id + "\"";
  if (host_state.is_object() && host_state.value("state", "") == "Failed") {
    return "not ready yet: region " + memory_id + " failed to materialize on node " +
           opt_.node_name + ": " + host_state.value("error", "");
  }
  // The driver is the last line of defence for exclusivity.
  for (const auto& [other_uid, e] : cp_.claims) {
    if (other_uid != ref.uid && e.memory_id == memory_id) {
      return "region " + memory_id + " is still prepared on node " + opt_.node_name +
             " for claim " + e.ns + "/" + e.name + " (" + other_uid + ")";
    }
  }
  ClaimEntry& entry = cp_.claims[ref.uid];
  bool was_completed =
      entry.state == PrepareState::kPrepareCompleted && entry.memory_id == memory_id;
  entry.uid = ref.uid;
  entry.ns = ref.ns;
  entry.name = ref.name;
  entry.memory_id = memory_id;
  if (!was_completed) {
    entry.state = PrepareState::kPrepareStarted;
    entry.devices = devices;
    entry.updated_unix = NowUnix();
    Status s = SaveLocked();
    if (!s.ok()) return s.message();
  }
  HostRegion region;
  Status s = hostd_->RewriteSpec(memory_id, &region);
  if (s.IsNotFound()) {
    return "not ready yet: region " + memory_id + " is not materialized on node " + opt_.node_name;
  }
  if (!s.ok()) return "claim " + key + ": " + s.message();
  if (!opt_.cdi_dir.empty()) {
    struct stat st;
    std::string spec = opt_.cdi_dir + "/" + memory_id + ".json";
    if (::stat(spec.c_str(), &st) != 0) {
      return "claim " + key + ": hostd reported region " + memory_id + " but " + spec +
             " does not exist";
    }
  }
  for (auto& d : devices) d.cdi_device_ids = {region.cdi_device};
  if (!was_completed || entry.devices.size() != devices.size() || entry.devices.empty() ||
      entry.devices[0].cdi_device_ids != devices[0].cdi_device_ids) {
    entry.state = PrepareState::kPrepareCompleted;
    entry.devices = devices;
    entry.updated_unix = NowUnix();
    s = SaveLocked();
    if (!s.ok()) return s.message();
    spdlog::info("prepared claim {} ({}): region {} as {}", key, ref.uid, memory_id,
                 region.cdi_device);
  }
  *out = std::move(devices);
  return "";
}

std::string DeviceState::Unprepare(const ClaimRef& claim) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = cp_.claims.find(claim.uid);
  if (it == cp_.claims.end()) return "";
  ClaimEntry gone = it->second;
  cp_.claims.erase(it);
  Status s = SaveLocked();
  if (!s.ok()) {
    cp_.claims[claim.uid] = gone;
    return "unprepare claim " + Key(claim) + ": " + s.message();
  }
  spdlog::info("unprepared claim {} ({}), region {}", Key(claim), claim.uid, gone.memory_id);
  return "";
}

Status DeviceState::Cleanup(int* dropped) {
  *dropped = 0;
  std::vector<ClaimRef> refs;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [uid, e] : cp_.claims) refs.push_back({e.ns, uid, e.name});
  }
  Status first;
  for (const auto& ref : refs) {
    json claim;
    kube::Status ks = kube::ResourceClaimClient(kube_, ref.ns).Get(ref.name, &claim);
    bool gone = ks.IsNotFound() || (ks.ok() && claim["metadata"].value("uid", "") != ref.uid);
    if (!ks.ok() && !ks.IsNotFound()) {
      if (first.ok()) first = Status::IOError("get claim " + Key(ref) + ": " + ks.ToString());
      continue;
    }
    if (!gone) continue;
    std::lock_guard<std::mutex> l(mu_);
    auto it = cp_.claims.find(ref.uid);
    if (it == cp_.claims.end()) continue;
    ClaimEntry e = it->second;
    cp_.claims.erase(it);
    Status s = SaveLocked();
    if (!s.ok()) {
      cp_.claims[ref.uid] = e;
      return s;
    }
    ++*dropped;
    spdlog::info("dropped checkpoint entry of deleted claim {} ({})", Key(ref), ref.uid);
  }
  return first;
}

std::vector<ClaimEntry> DeviceState::Prepared() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<ClaimEntry> out;
  for (const auto& [uid, e] : cp_.claims) out.push_back(e);
  return out;
}

}  // namespace cxlkv::dra
