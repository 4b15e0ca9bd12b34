// Copyright cxlkv authors.
#include "kubeletplugin/state.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
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

// The claim as log lines name it: key=value pairs a log pipeline can index.
std::string LogClaim(const ClaimRef& c) {
  return "claim=" + c.name + " namespace=" + c.ns + " uid=" + c.uid;
}

// CXLKV_FAILPOINT lists failpoints by name (comma separated, an optional
// ":kill" suffix); this library only knows kill.
bool FailpointSet(const char* name) {
  static const std::string env = [] {
    const char* v = std::getenv("CXLKV_FAILPOINT");
    return std::string(v ? v : "");
  }();
  size_t n = std::strlen(name);
  for (size_t pos = 0; pos < env.size();) {
    size_t end = env.find(',', pos);
    if (end == std::string::npos) end = env.size();
    std::string item = env.substr(pos, end - pos);
    if (item.compare(0, n, name) == 0 && (item.size() == n || item.substr(n) == ":kill")) {
      return true;
    }
    pos = end + 1;
  }
  return false;
}

// An exclusive flock(2) on <checkpoint>.lock for one scope: serializes the
// plugin instances of a rolling update on one node.
class ProcessLock {
 public:
  Status Acquire(const std::string& checkpoint_path) {
    const std::string path = checkpoint_path + ".lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) return Status::IOError("open " + path + ": " + std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) return Status::IOError("flock " + path + ": " + std::strerror(errno));
    }
    return Status::OK();
  }
  ~ProcessLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }

 private:
  int fd_ = -1;
};

constexpr const char* kOps = "cxlkv_dra_plugin_operations_total";
constexpr const char* kDuration = "cxlkv_dra_plugin_operation_duration_seconds";
constexpr const char* kInFlight = "cxlkv_dra_plugin_operations_in_flight";
constexpr const char* kPrepared = "cxlkv_dra_plugin_prepared_claims";

// Counts an operation in flight for its lifetime.
class InFlight {
 public:
  InFlight(Metrics* m, const char* op) : m_(m), op_(op) {
    if (m_) m_->Add(kInFlight, {{"operation", op_}}, 1);
  }
  ~InFlight() {
    if (m_) m_->Add(kInFlight, {{"operation", op_}}, -1);
  }

 private:
  Metrics* const m_;
  const char* const op_;
};

int64_t NowUnix() { return static_cast<int64_t>(std::time(nullptr)); }

}  // namespace

void DeclarePluginMetrics(Metrics* m) {
  m->Declare(kOps, Metrics::Kind::kCounter,
             "Claims the kubelet plugin handled, by operation (prepare, unprepare, cleanup, "
             "release: this node's view of a region no claim here uses) and result (success, "
             "not_ready, error; release also superseded: the host was assigned the region again "
             "since, so the manager refused the unassign).");
  m->Declare(kDuration, Metrics::Kind::kHistogram,
             "Seconds one claim's operation took, lock wait included.", Metrics::LatencyBuckets());
  m->Declare(kInFlight, Metrics::Kind::kGauge, "Claim operations running or waiting now.");
  m->Declare(kPrepared, Metrics::Kind::kGauge,
             "Claims in the checkpoint (prepared or being prepared on this node).");
}

const char* DeviceState::ResultOf(const std::string& error) {
  if (error.empty()) return "success";
  if (error.rfind("not ready yet", 0) == 0) return "not_ready";
  return "error";
}

void DeviceState::Record(const char* op, const char* result,
                         std::chrono::steady_clock::time_point start) {
  if (opt_.metrics == nullptr) return;
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  opt_.metrics->Add(kOps, {{"operation", op}, {"result", result}});
  opt_.metrics->Observe(kDuration, {{"operation", op}, {"result", result}}, secs);
}

Status DeviceState::Open(const StateOptions& opt, kube::Client* kube, const hostd::Client* hostd,
                         std::unique_ptr<DeviceState>* out) {
  if (opt.node_name.empty()) return Status::InvalidArgument("device state: node name is required");
  if (opt.checkpoint_path.empty()) {
    return Status::InvalidArgument("device state: checkpoint path is required");
  }
  std::unique_ptr<DeviceState> st(new DeviceState(opt, kube, hostd));
  ProcessLock plock;
  CXLKV_RETURN_IF_ERROR(plock.Acquire(opt.checkpoint_path));
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

Status DeviceState::SaveLocked() {
  Status s = SaveCheckpoint(opt_.checkpoint_path, cp_);
  if (s.ok() && opt_.metrics != nullptr) {
    opt_.metrics->Set(kPrepared, {}, static_cast<double>(cp_.claims.size()));
  }
  return s;
}

Status DeviceState::ReloadLocked() {
  Checkpoint cp;
  Status s = LoadCheckpoint(opt_.checkpoint_path, &cp);
  if (s.IsNotFound()) {
    cp_.claims.clear();
    cp_.pending_releases.clear();
    cp_.release_epochs.clear();
    return Status::OK();
  }
  CXLKV_RETURN_IF_ERROR(s);
  cp_.claims = std::move(cp.claims);
  cp_.pending_releases = std::move(cp.pending_releases);
  cp_.release_epochs = std::move(cp.release_epochs);
  return Status::OK();
}

bool DeviceState::InUseLocked(const std::string& memory_id) const {
  for (const auto& [uid, e] : cp_.claims) {
    if (e.memory_id == memory_id) return true;
  }
  return false;
}

bool DeviceState::CompletedLocked(const std::string& memory_id) const {
  for (const auto& [uid, e] : cp_.claims) {
    if (e.memory_id == memory_id && e.state == PrepareState::kPrepareCompleted) return true;
  }
  return false;
}

void DeviceState::AddReleaseLocked(const std::string& memory_id, uint64_t assign_epoch) {
  cp_.pending_releases.insert(memory_id);
  if (assign_epoch > 0) {
    cp_.release_epochs[memory_id] = assign_epoch;
  } else {
    cp_.release_epochs.erase(memory_id);
  }
}

void DeviceState::DropReleaseLocked(const std::string& memory_id) {
  cp_.pending_releases.erase(memory_id);
  cp_.release_epochs.erase(memory_id);
}

bool DeviceState::ReleaseLocked(const std::string& memory_id) {
  auto start = std::chrono::steady_clock::now();
  auto e = cp_.release_epochs.find(memory_id);
  const uint64_t epoch = e == cp_.release_epochs.end() ? 0 : e->second;
  Status s = hostd_->Release(memory_id, epoch);
  if (s.IsBusy()) {
    // The manager assigned this host the region again after the assignment
    // this release undoes (and refused the unassign): the newer assignment
    // is a later consumer's, and its own last unprepare releases it.
    spdlog::info("release region={} node={} epoch={} result=superseded: {}", memory_id,
                 opt_.node_name, epoch, s.message());
    Record("release", "superseded", start);
    DropReleaseLocked(memory_id);
    Status ss = SaveLocked();
    if (!ss.ok()) spdlog::warn("release region={}: {}", memory_id, ss.ToString());
    return true;
  }
  if (s.IsUnsupported()) {
    // A local composer's node: the controller frees the region with the claim.
    spdlog::info("release region={} node={}: not through hostd ({})", memory_id, opt_.node_name,
                 s.message());
  } else if (!s.ok()) {
    spdlog::warn("release region={} node={} result=error (retried): {}", memory_id, opt_.node_name,
                 s.ToString());
    Record("release", "error", start);
    return false;
  } else {
    spdlog::info(
        "release region={} node={} epoch={} result=success: port unassigned, device removed",
        memory_id, opt_.node_name, epoch);
  }
  Record("release", "success", start);
  DropReleaseLocked(memory_id);
  Status ss = SaveLocked();
  if (!ss.ok()) spdlog::warn("release region={}: {}", memory_id, ss.ToString());
  return true;
}

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
  auto start = std::chrono::steady_clock::now();
  InFlight inflight(opt_.metrics, "prepare");
  std::lock_guard<std::mutex> l(mu_);
  PrepareResult r;
  ProcessLock plock;
  Status ls = plock.Acquire(opt_.checkpoint_path);
  if (ls.ok()) ls = ReloadLocked();
  r.error =
      ls.ok() ? PrepareLocked(claim, &r.devices) : "claim " + Key(claim) + ": " + ls.message();
  const char* result = ResultOf(r.error);
  if (!r.error.empty()) {
    r.devices.clear();
    if (std::strcmp(result, "not_ready") == 0) {
      spdlog::info("prepare {} result=not_ready: {}", LogClaim(claim), r.error);
    } else {
      spdlog::warn("prepare {} result=error: {}", LogClaim(claim), r.error);
    }
  }
  Record("prepare", result, start);
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
  // A consumer is back before the last one's release went through. The
  // release is finished first, never dropped: an earlier attempt may have
  // timed out with its unassign still on its way to the fabric manager,
  // which would unmap this host under the new consumer had it prepared on
  // the device still here. Once it is through, the host is unmapped and
  // the consumer waits ("not ready yet" below) until the controller adds
  // the host back at a newer assignment epoch, which no release of the old
  // one can undo. Superseded (already assigned again) is through as well.
  if (cp_.pending_releases.count(memory_id)) {
    if (!ReleaseLocked(memory_id)) {
      return "not ready yet: region " + memory_id + " is still being released on node " +
             opt_.node_name + " (the last consumer here left; retried)";
    }
    spdlog::info("prepare {}: region {} was being released here; released first", LogClaim(ref),
                 memory_id);
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
    if (FailpointSet("dra.prepare.after_started")) {
      spdlog::warn("failpoint dra.prepare.after_started: SIGKILL ({})", LogClaim(ref));
      spdlog::default_logger()->flush();
      std::raise(SIGKILL);
    }
  }
  hostd::HostRegion region;
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
      entry.devices[0].cdi_device_ids != devices[0].cdi_device_ids ||
      entry.assign_epoch != region.assign_epoch) {
    entry.state = PrepareState::kPrepareCompleted;
    entry.devices = devices;
    // The assignment this node's view is now: what the last unprepare here
    // releases, and nothing newer.
    entry.assign_epoch = region.assign_epoch;
    entry.updated_unix = NowUnix();
    s = SaveLocked();
    if (!s.ok()) return s.message();
    spdlog::info("prepare {} result=success region={} cdi={} epoch={}", LogClaim(ref), memory_id,
                 region.cdi_device, region.assign_epoch);
  }
  *out = std::move(devices);
  return "";
}

std::string DeviceState::Unprepare(const ClaimRef& claim) {
  auto start = std::chrono::steady_clock::now();
  InFlight inflight(opt_.metrics, "unprepare");
  std::lock_guard<std::mutex> l(mu_);
  ProcessLock plock;
  Status ls = plock.Acquire(opt_.checkpoint_path);
  if (ls.ok()) ls = ReloadLocked();
  if (!ls.ok()) {
    std::string err = "unprepare claim " + Key(claim) + ": " + ls.message();
    spdlog::warn("unprepare {} result=error: {}", LogClaim(claim), err);
    Record("unprepare", "error", start);
    return err;
  }
  auto it = cp_.claims.find(claim.uid);
  if (it == cp_.claims.end()) {
    Record("unprepare", "success", start);
    return "";
  }
  ClaimEntry gone = it->second;
  cp_.claims.erase(it);
  // The node's last claim on this region: release the materialization here
  // (recorded first, so a crash or a failed release is retried).
  const bool release = !gone.memory_id.empty() && !InUseLocked(gone.memory_id);
  if (release) AddReleaseLocked(gone.memory_id, gone.assign_epoch);
  Status s = SaveLocked();
  if (!s.ok()) {
    cp_.claims[claim.uid] = gone;
    if (release) DropReleaseLocked(gone.memory_id);
    std::string err = "unprepare claim " + Key(claim) + ": " + s.message();
    spdlog::warn("unprepare {} result=error: {}", LogClaim(claim), err);
    Record("unprepare", "error", start);
    return err;
  }
  // The unprepare itself has succeeded: a release that fails (hostd or the
  // fabric manager down) must not hold up the pod's teardown; it is retried.
  const char* released = release ? (ReleaseLocked(gone.memory_id) ? "yes" : "pending") : "no";
  spdlog::info("unprepare {} result=success region={} released={}", LogClaim(claim), gone.memory_id,
               released);
  Record("unprepare", "success", start);
  return "";
}

int DeviceState::RetryReleases() {
  std::lock_guard<std::mutex> l(mu_);
  ProcessLock plock;
  Status s = plock.Acquire(opt_.checkpoint_path);
  if (s.ok()) s = ReloadLocked();
  if (!s.ok()) {
    spdlog::warn("retry releases: {}", s.ToString());
    return static_cast<int>(cp_.pending_releases.size());
  }
  // Each retry's in-use check and its hostd call run under the checkpoint
  // lock (mu_ and the flock, held for the whole loop): no prepare of this
  // or another plugin instance can slip between them. A claim that
  // prepared the region since the release was recorded does not cancel it
  // (Prepare finishes a pending release before it records its entry, so an
  // entry beside a pending release is one that has not completed: its
  // consumer waits for the host to be added back). Only a completed
  // preparation, which a checkpoint written before releases were finished
  // first may hold, keeps the node's view as it is.
  std::vector<std::string> ids(cp_.pending_releases.begin(), cp_.pending_releases.end());
  for (const auto& id : ids) {
    if (CompletedLocked(id)) {
      DropReleaseLocked(id);
      continue;
    }
    (void)ReleaseLocked(id);
  }
  if (ids.size() != cp_.pending_releases.size()) {
    Status ss = SaveLocked();
    if (!ss.ok()) spdlog::warn("retry releases: {}", ss.ToString());
  }
  return static_cast<int>(cp_.pending_releases.size());
}

Status DeviceState::Cleanup(int* dropped) {
  *dropped = 0;
  std::vector<ClaimRef> refs;
  {
    std::lock_guard<std::mutex> l(mu_);
    ProcessLock plock;
    CXLKV_RETURN_IF_ERROR(plock.Acquire(opt_.checkpoint_path));
    CXLKV_RETURN_IF_ERROR(ReloadLocked());
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
    ProcessLock plock;
    CXLKV_RETURN_IF_ERROR(plock.Acquire(opt_.checkpoint_path));
    CXLKV_RETURN_IF_ERROR(ReloadLocked());
    auto it = cp_.claims.find(ref.uid);
    if (it == cp_.claims.end()) continue;
    ClaimEntry e = it->second;
    cp_.claims.erase(it);
    const bool release = !e.memory_id.empty() && !InUseLocked(e.memory_id);
    if (release) AddReleaseLocked(e.memory_id, e.assign_epoch);
    Status s = SaveLocked();
    if (!s.ok()) {
      cp_.claims[ref.uid] = e;
      if (release) DropReleaseLocked(e.memory_id);
      return s;
    }
    if (release) (void)ReleaseLocked(e.memory_id);
    ++*dropped;
    spdlog::info("cleanup {} result=success: dropped the checkpoint entry of a deleted claim",
                 LogClaim(ref));
    if (opt_.metrics) opt_.metrics->Add(kOps, {{"operation", "cleanup"}, {"result", "success"}});
  }
  return first;
}

std::vector<ClaimEntry> DeviceState::Prepared() {
  std::lock_guard<std::mutex> l(mu_);
  // Renames make every read see a whole file; no flock needed to read. A
  // failed read keeps the last known entries.
  Status s = ReloadLocked();
  if (!s.ok()) spdlog::warn("prepared claims: {}", s.ToString());
  std::vector<ClaimEntry> out;
  for (const auto& [uid, e] : cp_.claims) out.push_back(e);
  return out;
}

}  // namespace cxlkv::dra
