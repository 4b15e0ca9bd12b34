// Copyright cxlkv authors.
//
// FabricManager: compose, assign, free, power cycle, and the calls to host
// agents that materialize a region on each mapped host.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "cxlkv/base/file.h"
#include "cxlkv/base/json.h"
#include "cxlkv/fabric/json_codec.h"
#include "cxlkv/hostd/client.h"
#include "fabric_manager.h"

namespace cxlkv::fabric::internal {
namespace {

std::string NewUuid() {
  std::random_device rd;
  uint8_t b[16];
  for (auto& x : b) x = static_cast<uint8_t>(rd());
  b[6] = (b[6] & 0x0f) | 0x40;  // version 4
  b[8] = (b[8] & 0x3f) | 0x80;  // RFC 4122 variant
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += hex[b[i] >> 4];
    s += hex[b[i] & 15];
  }
  return s;
}

Status CreateBacking(const std::string& path, int64_t size_mib) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return Status::IOError("create backing file " + path + ": " + base::ErrnoText());
  // Sparse: bytes are allocated on first touch, like an appliance's DRAM
  // that is only "used" once written; contents start as zeros.
  if (::ftruncate(fd, size_mib << 20) != 0) {
    std::string err = base::ErrnoText();
    ::close(fd);
    ::unlink(path.c_str());
    return Status::IOError("size backing file " + path + ": " + err);
  }
  ::close(fd);
  return Status::OK();
}

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

void FabricManager::CrashPoint(const char* name) {
  if (faults_.crash_at == name) {
    spdlog::critical("fault injection: crashing at {}", name);
    ::kill(::getpid(), SIGKILL);  // as a real crash: no cleanup, no flush
  }
}

void FabricManager::Materialize(const MemoryRegion& r, Mapping* m) {
  m->error.clear();
  m->device.clear();
  const HostState* host = nullptr;
  for (const auto& h : state_.hosts) {
    if (h.id == m->host_id) host = &h;
  }
  if (host == nullptr) {
    m->materialization = Materialization::kNoAgent;
    return;
  }
  if (Contains(faults_.fail_materialize_hosts, host->id)) {
    m->materialization = Materialization::kFailed;
    m->error = "materialize on host " + host->id + ": injected fault";
    return;
  }
  if (host->agent.empty()) {
    m->materialization = Materialization::kNoAgent;
    return;
  }
  hostd::MaterializeRequest req;
  req.allocation_id = r.id;
  req.size_bytes = static_cast<uint64_t>(r.size_mib) << 20;
  req.backing_path = r.backing_path;
  req.appliance_id = r.appliance_id;
  req.blade_id = r.blade_id;
  req.appliance_port = m->appliance_port;
  req.host_port = m->host_port;
  req.assign_epoch = m->assign_epoch;
  hostd::HostRegion got;
  Status s = hostd::Client({host->agent, config_.agent_timeout_ms}).Materialize(req, &got);
  if (!s.ok()) {
    m->materialization = Materialization::kFailed;
    m->error = "materialize on host " + host->id + ": " + s.message();
  } else {
    m->materialization = Materialization::kMaterialized;
    m->device = got.device;
  }
  if (m->materialization == Materialization::kFailed) spdlog::warn("{}", m->error);
}

void FabricManager::Unmaterialize(const MemoryRegion& r, const Mapping& m) {
  const HostState* host = nullptr;
  for (const auto& h : state_.hosts) {
    if (h.id == m.host_id) host = &h;
  }
  if (host == nullptr || host->agent.empty()) return;
  Status s = hostd::Client({host->agent, config_.agent_timeout_ms}).Remove(r.id);
  // Not fatal: a host that missed this removes the region at its next resync.
  if (!s.ok() && !s.IsNotFound()) {
    spdlog::warn("remove region {} on host {}: {}", r.id, host->id, s.message());
  }
}

Status FabricManager::PickPorts(const BladeState& blade, const ComposeRequest& req,
                                std::vector<std::string>* ports) {
  auto add = [&](const std::string& p) {
    if (!Contains(*ports, p)) ports->push_back(p);
  };
  if (!req.port.empty()) {
    if (blade.FindPort(req.port) == nullptr) {
      return Status::InvalidArgument("port " + req.port + " does not exist on blade " + blade.id);
    }
    add(req.port);
  }
  if (req.share_count == 0) return Status::OK();
  for (const auto& p : req.candidate_ports) {
    if (blade.FindPort(p) == nullptr) {
      return Status::InvalidArgument("candidate port " + p + " does not exist on blade " +
                                     blade.id);
    }
    add(p);
  }
  for (const auto& hid : req.candidate_hosts) {
    std::string cfg_id;
    for (const auto& h : state_.hosts) {
      if (h.id == hid) cfg_id = h.config_id;
    }
    bool cabled = false;
    for (const auto& p : blade.ports) {
      if (!cfg_id.empty() && p.host == cfg_id) {
        cabled = true;
        if (!Contains(*ports, p.id)) {
          add(p.id);
          break;  // one port per host
        }
      }
    }
    if (!cabled) {
      return Status::InvalidArgument("candidate host " + hid + " is not cabled to blade " +
                                     blade.id);
    }
  }
  if (req.candidate_ports.empty() && req.candidate_hosts.empty()) {
    for (const auto& p : blade.ports) {
      if (!p.host.empty()) add(p.id);
    }
  }
  if (static_cast<int>(ports->size()) < req.share_count) {
    return Status::InvalidArgument("shareCount " + std::to_string(req.share_count) + " but only " +
                                   std::to_string(ports->size()) + " eligible ports on blade " +
                                   blade.id);
  }
  ports->resize(static_cast<size_t>(req.share_count));
  return Status::OK();
}

Status FabricManager::Compose(const std::string& aid, const std::string& bid,
                              const ComposeRequest& req, ComposeResult* result) {
  base::MutexLock l(&mu_);
  ApplianceState* app = state_.FindAppliance(aid);
  BladeState* blade = app ? app->FindBlade(bid) : nullptr;
  if (blade == nullptr) return Status::NotFound("blade " + aid + "/" + bid + " not found");
  std::vector<std::string> ports;
  CXLKV_RETURN_IF_ERROR(PickPorts(*blade, req, &ports));
  Allocation alloc;
  CXLKV_RETURN_IF_ERROR(AllocateByQoS(blade->geometry, blade->used, req.size_mib, req.qos, &alloc));
  return ComposeLocked(app, blade, alloc, ports, req, result);
}

Status FabricManager::ComposeByResource(const std::string& aid, const std::string& bid,
                                        const std::vector<std::string>& resource_ids,
                                        const std::string& port, ComposeResult* result) {
  base::MutexLock l(&mu_);
  ApplianceState* app = state_.FindAppliance(aid);
  BladeState* blade = app ? app->FindBlade(bid) : nullptr;
  if (blade == nullptr) return Status::NotFound("blade " + aid + "/" + bid + " not found");
  if (resource_ids.empty()) return Status::InvalidArgument("memoryResources must not be empty");
  Allocation alloc;
  for (const auto& rid : resource_ids) {
    int idx = -1;
    if (rid.rfind("resourceblock", 0) == 0 && rid.size() > 13 && rid.size() < 20 &&
        rid.find_first_not_of("0123456789", 13) == std::string::npos) {
      idx = std::stoi(rid.substr(13));
    }
    if (idx < 0 || static_cast<size_t>(idx) >= blade->used.size()) {
      return Status::InvalidArgument("resource block " + rid + " does not exist on blade " + bid);
    }
    if (blade->used[idx]) return Status::Busy("resource block " + rid + " is already composed");
    if (std::find(alloc.blocks.begin(), alloc.blocks.end(), idx) != alloc.blocks.end()) {
      return Status::InvalidArgument("resource block " + rid + " listed twice");
    }
    alloc.blocks.push_back(idx);
  }
  std::sort(alloc.blocks.begin(), alloc.blocks.end());
  alloc.size_mib = static_cast<int64_t>(alloc.blocks.size()) * blade->geometry.block_mib;
  std::set<int> channels;
  for (int b : alloc.blocks) channels.insert(b / blade->geometry.blocks_per_channel);
  alloc.qos = static_cast<int>(channels.size());
  ComposeRequest req;
  req.size_mib = alloc.size_mib;
  req.qos = alloc.qos;
  req.port = port;
  std::vector<std::string> ports;
  CXLKV_RETURN_IF_ERROR(PickPorts(*blade, req, &ports));
  return ComposeLocked(app, blade, alloc, ports, req, result);
}

Status FabricManager::ComposeLocked(ApplianceState* app, BladeState* blade, const Allocation& alloc,
                                    const std::vector<std::string>& ports,
                                    const ComposeRequest& req, ComposeResult* result) {
  MemoryRegion r;
  r.id = NewUuid();
  r.appliance_id = app->id;
  r.blade_id = blade->id;
  r.status = RegionStatus::kComposing;
  r.size_mib = alloc.size_mib;
  r.qos = alloc.qos;
  r.share_count = req.share_count > 0 ? req.share_count : static_cast<int>(ports.size());
  if (r.share_count == 0) r.share_count = 1;
  r.claim_uid = req.claim_uid;
  r.blocks = alloc.blocks;
  r.backing_path = BackingPath(r.id);

  // 1. Journal: the blocks are taken and the region is known before any
  // side effect, so a crash from here on is rolled back by Recover().
  FabricState next = state_;
  next.regions[r.id] = r;
  CXLKV_RETURN_IF_ERROR(next.RebuildUsage());
  CXLKV_RETURN_IF_ERROR(Save(next));
  state_ = next;
  CrashPoint("compose:allocated");

  // Called only below, under mu_ (the analysis does not follow lambdas).
  auto rollback = [&](Status why) CXLKV_NO_THREAD_SAFETY_ANALYSIS {
    for (const Mapping& m : r.mappings) Unmaterialize(r, m);
    Status rs = base::RemoveFile(r.backing_path);
    if (!rs.ok()) spdlog::error("{}", rs.ToString());
    FabricState back = state_;
    back.regions.erase(r.id);
    (void)back.RebuildUsage();
    Status ss = Save(back);
    if (ss.ok()) {
      state_ = std::move(back);
    } else {
      // The journal entry stays "Composing"; the next start rolls it back.
      spdlog::error("compose rollback: {}", ss.ToString());
    }
    return why;
  };

  // 2. The region's bytes.
  Status s = CreateBacking(r.backing_path, r.size_mib);
  if (!s.ok()) return rollback(s);

  // 3. Port assignment. A failed assignment leaves the region allocated and
  // answers 206, as cfm-service does.
  bool partial = false;
  for (const auto& pid : ports) {
    const PortConfig* pc = blade->FindPort(pid);
    if (!pc->link_up || Contains(faults_.fail_assign_ports, pid)) {
      spdlog::warn("compose {}: assign port {} failed ({})", r.id, pid,
                   pc->link_up ? "injected fault" : "link down");
      partial = true;
      continue;
    }
    Mapping m;
    m.appliance_port = pid;
    for (const auto& h : state_.hosts) {
      if (!pc->host.empty() && h.config_id == pc->host) m.host_id = h.id;
    }
    m.host_port = pc->host.empty() ? "" : pc->host_port;
    m.assign_epoch = ++r.assign_epoch;
    r.mappings.push_back(m);
  }
  // Journal the mappings too: a crash during materialization must let
  // Recover() tell each mapped host to drop the region.
  next = state_;
  next.regions[r.id] = r;
  s = Save(next);
  if (!s.ok()) return rollback(s);
  state_ = next;
  CrashPoint("compose:assigned");

  // 4. Materialization on each host: non-fatal per host ([Fan26] §2.6).
  for (Mapping& m : r.mappings) {
    if (m.host_id.empty()) {
      m.materialization = Materialization::kNoAgent;
      continue;
    }
    Materialize(r, &m);
  }
  CrashPoint("compose:materialized");

  // 5. Commit.
  r.status = RegionStatus::kComposed;
  next = state_;
  next.regions[r.id] = r;
  s = Save(next);
  if (!s.ok()) return rollback(s);
  state_ = std::move(next);
  result->region = r;
  result->partial = partial;
  spdlog::info("composed region {} ({} MiB, QoS {}) on {}/{} with {} of {} ports", r.id, r.size_mib,
               r.qos, r.appliance_id, r.blade_id, r.mappings.size(), ports.size());
  return Status::OK();
}

Status FabricManager::FindRegion(const std::string& aid, const std::string& bid,
                                 const std::string& mid, MemoryRegion** r) {
  ApplianceState* app = state_.FindAppliance(aid);
  BladeState* blade = app ? app->FindBlade(bid) : nullptr;
  if (blade == nullptr) return Status::NotFound("blade " + aid + "/" + bid + " not found");
  auto it = state_.regions.find(mid);
  if (it == state_.regions.end() || it->second.appliance_id != aid || it->second.blade_id != bid) {
    return Status::NotFound("memory region " + mid + " not found on blade " + bid);
  }
  *r = &it->second;
  return Status::OK();
}

Status FabricManager::Assign(const std::string& aid, const std::string& bid, const std::string& mid,
                             const std::string& port, bool assign, uint64_t unassign_epoch,
                             MemoryRegion* out) {
  base::MutexLock l(&mu_);
  MemoryRegion* cur = nullptr;
  CXLKV_RETURN_IF_ERROR(FindRegion(aid, bid, mid, &cur));
  const BladeState* blade = state_.FindAppliance(aid)->FindBlade(bid);
  const PortConfig* pc = blade->FindPort(port);
  if (pc == nullptr)
    return Status::InvalidArgument("port " + port + " does not exist on blade " + bid);
  MemoryRegion r = *cur;
  auto it = std::find_if(r.mappings.begin(), r.mappings.end(),
                         [&](const Mapping& m) { return m.appliance_port == port; });
  if (assign) {
    if (it != r.mappings.end()) {
      *out = r;  // already assigned: idempotent, and the epoch stays
      return Status::OK();
    }
    if (!pc->link_up || Contains(faults_.fail_assign_ports, port)) {
      return Status::IOError("assign region " + mid + " to port " + port + ": " +
                             (pc->link_up ? "injected fault" : "link down"));
    }
    Mapping m;
    m.appliance_port = port;
    for (const auto& h : state_.hosts) {
      if (!pc->host.empty() && h.config_id == pc->host) m.host_id = h.id;
    }
    m.host_port = pc->host.empty() ? "" : pc->host_port;
    // A new epoch for every new assignment, before the host is told: its
    // agent records it with the device, and an unassign still on its way
    // for an earlier assignment of this port then names a smaller one.
    m.assign_epoch = ++r.assign_epoch;
    if (m.host_id.empty())
      m.materialization = Materialization::kNoAgent;
    else
      Materialize(r, &m);
    r.mappings.push_back(m);
    spdlog::info("assigned region {} to port {} (host {}) at assignment epoch {}", mid, port,
                 m.host_id.empty() ? "none" : m.host_id, m.assign_epoch);
  } else {
    if (it == r.mappings.end()) {
      return Status::NotFound("memory region " + mid + " is not assigned to port " + port);
    }
    if (unassign_epoch == 0) {
      // A client without the extension (CFM's own PATCH): applied as CFM
      // applies it; such a client cannot say which assignment it meant.
      ++epoch_stats_.unassigns_without_epoch;
      spdlog::info("unassign region {} port {} names no assignment epoch: applied to epoch {}", mid,
                   port, it->assign_epoch);
    } else if (unassign_epoch < it->assign_epoch) {
      // The port was assigned again after the assignment this request
      // undoes (its caller gave up and the controller re-added the host):
      // applying it would unmap a host a new consumer uses.
      ++epoch_stats_.stale_unassigns_refused;
      spdlog::warn(
          "refused a stale unassign of region {} port {} (host {}): it names assignment epoch "
          "{}, the port was assigned again at epoch {}",
          mid, port, it->host_id, unassign_epoch, it->assign_epoch);
      return Status::Busy("unassign region " + mid + " port " + port + ": assignment epoch " +
                          std::to_string(unassign_epoch) +
                          " is stale: the port was assigned again at epoch " +
                          std::to_string(it->assign_epoch));
    } else if (unassign_epoch > it->assign_epoch) {
      return Status::InvalidArgument("unassign region " + mid + " port " + port +
                                     ": assignment epoch " + std::to_string(unassign_epoch) +
                                     " was never issued for it (current " +
                                     std::to_string(it->assign_epoch) + ")");
    }
    Mapping gone = *it;
    r.mappings.erase(it);
    Unmaterialize(r, gone);
    spdlog::info("unassigned region {} from port {} (host {}, assignment epoch {})", mid, port,
                 gone.host_id.empty() ? "none" : gone.host_id, gone.assign_epoch);
  }
  FabricState next = state_;
  next.regions[mid] = r;
  CXLKV_RETURN_IF_ERROR(Install(std::move(next)));
  *out = r;
  return Status::OK();
}

FabricManager::EpochStats FabricManager::GetEpochStats() {
  base::MutexLock l(&mu_);
  return epoch_stats_;
}

Status FabricManager::Free(const std::string& aid, const std::string& bid, const std::string& mid,
                           MemoryRegion* out) {
  base::MutexLock l(&mu_);
  MemoryRegion* cur = nullptr;
  CXLKV_RETURN_IF_ERROR(FindRegion(aid, bid, mid, &cur));
  MemoryRegion r = *cur;
  FabricState next = state_;
  next.regions.erase(mid);
  CXLKV_RETURN_IF_ERROR(next.RebuildUsage());
  // Persist first: a crash after this point leaves an orphan backing file,
  // which Recover() removes, and stale host devices, which host resync removes.
  CXLKV_RETURN_IF_ERROR(Install(std::move(next)));
  for (const Mapping& m : r.mappings) Unmaterialize(r, m);
  Status s = base::RemoveFile(r.backing_path);
  if (!s.ok()) spdlog::error("free region {}: {}", mid, s.ToString());
  spdlog::info("freed region {} ({} MiB) on {}/{}", mid, r.size_mib, aid, bid);
  *out = r;
  return Status::OK();
}

Status FabricManager::HostCompose(const std::string& hid, const ComposeRequest& req,
                                  ComposeResult* result) {
  std::string aid, bid, port;
  {
    base::MutexLock l(&mu_);
    HostState* h = state_.FindHost(hid);
    if (h == nullptr) return Status::NotFound("host " + hid + " not found");
    for (const auto& a : state_.appliances) {
      if (!a.managed) continue;
      for (const auto& b : a.blades) {
        if (!b.managed) continue;
        for (const auto& p : b.ports) {
          if (p.host == h->config_id && (req.port.empty() || p.host_port == req.port) &&
              aid.empty()) {
            aid = a.id;
            bid = b.id;
            port = p.id;
          }
        }
      }
    }
    if (aid.empty()) {
      return Status::InvalidArgument("host " + hid + " has no port " +
                                     (req.port.empty() ? std::string() : req.port + " ") +
                                     "cabled to a managed blade");
    }
  }
  ComposeRequest blade_req = req;
  blade_req.port = port;
  return Compose(aid, bid, blade_req, result);
}

Status FabricManager::HostFree(const std::string& hid, const std::string& mid, MemoryRegion* out) {
  std::string aid, bid;
  {
    base::MutexLock l(&mu_);
    if (state_.FindHost(hid) == nullptr) return Status::NotFound("host " + hid + " not found");
    auto it = state_.regions.find(mid);
    bool mapped = false;
    if (it != state_.regions.end()) {
      for (const auto& m : it->second.mappings) mapped |= (m.host_id == hid);
    }
    if (!mapped) return Status::NotFound("memory region " + mid + " is not mapped to host " + hid);
    aid = it->second.appliance_id;
    bid = it->second.blade_id;
  }
  return Free(aid, bid, mid, out);
}

Status FabricManager::PowerCycle(const std::string& aid, const std::string& bid, int* forgotten) {
  base::MutexLock l(&mu_);
  bool any = aid.empty() && bid.empty();
  for (auto& a : state_.appliances) {
    if (!a.managed || (!aid.empty() && a.id != aid)) continue;
    for (const auto& b : a.blades) any |= b.managed && (bid.empty() || b.id == bid);
  }
  if (!any) return Status::NotFound("no managed blade " + aid + "/" + bid);
  FabricState next = state_;
  std::vector<MemoryRegion> lost;
  for (auto it = next.regions.begin(); it != next.regions.end();) {
    const MemoryRegion& r = it->second;
    if ((aid.empty() || r.appliance_id == aid) && (bid.empty() || r.blade_id == bid)) {
      lost.push_back(r);
      it = next.regions.erase(it);
    } else {
      ++it;
    }
  }
  CXLKV_RETURN_IF_ERROR(next.RebuildUsage());
  CXLKV_RETURN_IF_ERROR(Install(std::move(next)));
  for (const MemoryRegion& r : lost) {
    Status s = base::RemoveFile(r.backing_path);  // DRAM contents do not survive power loss
    if (!s.ok()) spdlog::error("power cycle: {}", s.ToString());
  }
  spdlog::warn("power cycle: forgot {} composed regions", lost.size());
  *forgotten = static_cast<int>(lost.size());
  return Status::OK();
}

}  // namespace cxlkv::fabric::internal

namespace cxlkv::fabric::internal {

Status FabricManager::ReportMaterialization(const std::string& hid, const std::string& mid,
                                            Materialization state, const std::string& error,
                                            const std::string& device, uint64_t assign_epoch,
                                            MemoryRegion* out) {
  if (state != Materialization::kMaterialized && state != Materialization::kFailed) {
    return Status::InvalidArgument("materialization must be Materialized or Failed");
  }
  base::MutexLock l(&mu_);
  auto it = state_.regions.find(mid);
  if (it == state_.regions.end() || it->second.status != RegionStatus::kComposed) {
    return Status::NotFound("memory region " + mid + " not found");
  }
  MemoryRegion r = it->second;
  bool found = false;
  for (auto& m : r.mappings) {
    if (m.host_id != hid) continue;
    found = true;
    if (assign_epoch != 0 && assign_epoch != m.assign_epoch) {
      // About an earlier (or never issued) assignment of this host: the
      // current one's outcome is the agent's answer to its own materialize.
      ++epoch_stats_.stale_reports_refused;
      spdlog::warn(
          "refused a stale materialization report of region {} on host {}: epoch {}, "
          "the mapping's is {}",
          mid, hid, assign_epoch, m.assign_epoch);
      return Status::Busy("report materialization of " + mid + " on " + hid +
                          ": assignment epoch " + std::to_string(assign_epoch) +
                          " is not the mapping's (" + std::to_string(m.assign_epoch) + ")");
    }
    m.materialization = state;
    m.error = state == Materialization::kFailed ? error : "";
    m.device = state == Materialization::kMaterialized ? device : "";
  }
  if (!found) return Status::NotFound("memory region " + mid + " is not mapped to host " + hid);
  FabricState next = state_;
  next.regions[mid] = r;
  CXLKV_RETURN_IF_ERROR(Install(std::move(next)));
  *out = r;
  return Status::OK();
}

}  // namespace cxlkv::fabric::internal
