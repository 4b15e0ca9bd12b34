// Copyright cxlkv authors.
#include "cxlkv/hostd/agent.h"

#include <dirent.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "cxlkv/base/file.h"
#include "cxlkv/base/json.h"

namespace cxlkv::hostd {

using nlohmann::json;

// hostd-state.json: {"version": 1, "hostId", "devices"}.
constexpr int kStateVersion = 1;

namespace {

json DeviceToJson(const Device& d) {
  return {{"allocationId", d.allocation_id},
          {"kind", d.kind},
          {"path", d.path},
          {"sizeBytes", d.size_bytes},
          {"offsetBytes", d.offset_bytes},
          {"major", d.major},
          {"minor", d.minor},
          {"padDevices", d.pad_devices},
          {"assignEpoch", d.assign_epoch}};
}

Status DeviceFromJson(const json& j, Device* d) {
  try {
    d->allocation_id = j.at("allocationId").get<std::string>();
    d->kind = j.at("kind").get<std::string>();
    d->path = j.at("path").get<std::string>();
    d->size_bytes = j.at("sizeBytes").get<uint64_t>();
    d->offset_bytes = j.at("offsetBytes").get<uint64_t>();
    d->major = j.value("major", -1);
    d->minor = j.value("minor", -1);
    d->pad_devices = j.value("padDevices", std::vector<std::string>{});
    d->assign_epoch = j.value("assignEpoch", uint64_t{0});  // additive: absent before epochs
  } catch (const json::exception& e) {
    return Status::Corruption(std::string("device entry: ") + e.what());
  }
  return Status::OK();
}

}  // namespace

Status HostAgent::Open(const AgentOptions& opt, std::unique_ptr<Materializer> materializer,
                       std::unique_ptr<HostAgent>* out) {
  if (opt.host_id.empty()) return Status::InvalidArgument("host id is required");
  AgentOptions resolved = opt;
  CXLKV_RETURN_IF_ERROR(ResolveCoherence(opt.host_id, &resolved.cdi));
  std::unique_ptr<HostAgent> a(new HostAgent(resolved, std::move(materializer)));
  CXLKV_RETURN_IF_ERROR(base::MakeDirs(opt.state_dir));
  CXLKV_RETURN_IF_ERROR(base::MakeDirs(opt.cdi.cdi_dir));
  a->state_path_ = opt.state_dir + "/hostd-state.json";
  // Nobody else sees a yet; the lock is for the analysis (and costs nothing).
  base::MutexLock l(&a->mu_);
  std::string text;
  Status s = base::ReadFile(a->state_path_, &text);
  if (s.ok()) {
    json j;
    Status ps = base::ParseState(text, kStateVersion, &j);
    if (!ps.ok() || !j.contains("devices") || !j["devices"].is_array()) {
      return Status::Corruption("load state " + a->state_path_ + ": not a hostd state file");
    }
    for (const auto& dj : j["devices"]) {
      Device d;
      CXLKV_RETURN_IF_ERROR(DeviceFromJson(dj, &d).WithContext("load state " + a->state_path_));
      a->devices_[d.allocation_id] = d;
    }
  } else if (!s.IsNotFound()) {
    return s;
  }
  // Orphan specs: ours (by kind) but not in the state.
  if (DIR* d = ::opendir(opt.cdi.cdi_dir.c_str())) {
    std::vector<std::string> orphans;
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.size() < 6 || name.substr(name.size() - 5) != ".json") continue;
      std::string spec;
      json sj;
      if (!base::ReadFile(opt.cdi.cdi_dir + "/" + name, &spec).ok() ||
          !base::ParseJson(spec, &sj).ok() || !sj.is_object() || sj.value("kind", "") != kCdiKind) {
        continue;
      }
      std::string id = name.substr(0, name.size() - 5);
      if (!a->devices_.count(id)) orphans.push_back(id);
    }
    ::closedir(d);
    for (const auto& id : orphans) {
      spdlog::warn("removing orphan CDI spec {}/{}.json", opt.cdi.cdi_dir, id);
      Status rs = RemoveCdiSpec(id, opt.cdi);
      if (!rs.ok()) spdlog::error("{}", rs.ToString());
    }
  }
  *out = std::move(a);
  return Status::OK();
}

Status HostAgent::Save() {
  json devs = json::array();
  for (const auto& [id, d] : devices_) devs.push_back(DeviceToJson(d));
  return base::SaveStateFile(state_path_, kStateVersion,
                             {{"hostId", opt_.host_id}, {"devices", devs}})
      .WithContext("write state");
}

Status HostAgent::Materialize(const RegionRequest& req, Device* dev) {
  base::MutexLock l(&mu_);
  changed_[req.allocation_id] = ++seq_;
  return MaterializeLocked(req, dev);
}

Status HostAgent::MaterializeLocked(const RegionRequest& req, Device* dev) {
  CXLKV_RETURN_IF_ERROR(ValidateAllocationId(req.allocation_id));
  auto it = devices_.find(req.allocation_id);
  if (it != devices_.end()) {
    if (it->second.size_bytes == req.size_bytes && it->second.offset_bytes == req.offset_bytes) {
      // Rewrite the spec: it may have been lost with a tmpfs /var/run.
      std::string spec_path;
      CXLKV_RETURN_IF_ERROR(WriteCdiSpec(it->second, opt_.cdi, &spec_path));
      if (req.assign_epoch > it->second.assign_epoch) {
        // Assigned here again (a release's removal was refused or skipped):
        // the device now belongs to the newer assignment.
        const uint64_t before = it->second.assign_epoch;
        it->second.assign_epoch = req.assign_epoch;
        Status s = Save();
        if (!s.ok()) {
          it->second.assign_epoch = before;
          return s;
        }
      }
      *dev = it->second;
      return Status::OK();
    }
    return Status::InvalidArgument("region " + req.allocation_id +
                                   " is already materialized with another size");
  }
  Device d;
  CXLKV_RETURN_IF_ERROR(materializer_->Materialize(req, &d));
  d.assign_epoch = req.assign_epoch;
  std::string spec_path;
  Status s = WriteCdiSpec(d, opt_.cdi, &spec_path);
  if (s.ok()) {
    devices_[d.allocation_id] = d;
    s = Save();
    if (!s.ok()) devices_.erase(d.allocation_id);
  }
  if (!s.ok()) {
    (void)RemoveCdiSpec(d.allocation_id, opt_.cdi);
    Status rs = materializer_->Remove(d);
    if (!rs.ok()) spdlog::error("undo materialize {}: {}", d.allocation_id, rs.ToString());
    return s;
  }
  spdlog::info("materialized region {} at {} ({} bytes, assignment epoch {}), CDI {}",
               d.allocation_id, d.path, d.size_bytes, d.assign_epoch, spec_path);
  *dev = d;
  return Status::OK();
}

Status HostAgent::RewriteSpec(const std::string& allocation_id, Device* dev) {
  base::MutexLock l(&mu_);
  auto it = devices_.find(allocation_id);
  if (it == devices_.end()) {
    return Status::NotFound("region " + allocation_id + " is not materialized on this host");
  }
  std::string spec_path;
  CXLKV_RETURN_IF_ERROR(WriteCdiSpec(it->second, opt_.cdi, &spec_path));
  *dev = it->second;
  return Status::OK();
}

Status HostAgent::Remove(const std::string& allocation_id) {
  base::MutexLock l(&mu_);
  changed_[allocation_id] = ++seq_;
  return RemoveLocked(allocation_id);
}

Status HostAgent::RemoveLocked(const std::string& allocation_id) {
  auto it = devices_.find(allocation_id);
  if (it == devices_.end()) {
    return Status::NotFound("region " + allocation_id + " is not materialized on this host");
  }
  Device d = it->second;
  // The spec goes first: no new container may get a device that is going away.
  CXLKV_RETURN_IF_ERROR(RemoveCdiSpec(allocation_id, opt_.cdi));
  CXLKV_RETURN_IF_ERROR(materializer_->Remove(d));
  devices_.erase(allocation_id);
  CXLKV_RETURN_IF_ERROR(Save());
  spdlog::info("removed region {} ({})", allocation_id, d.path);
  return Status::OK();
}

std::vector<Device> HostAgent::List() {
  base::MutexLock l(&mu_);
  std::vector<Device> out;
  for (const auto& [id, d] : devices_) out.push_back(d);
  return out;
}

Status HostAgent::Release(const std::string& allocation_id, uint64_t assign_epoch,
                          ReleaseResult* result) {
  *result = ReleaseResult();
  CXLKV_RETURN_IF_ERROR(ValidateAllocationId(allocation_id));
  const std::string verb = "release region " + allocation_id;
  if (opt_.fabric.base_url.empty()) {
    return Status::Unsupported(verb + ": no fabric manager; the composer owns this host's view");
  }
  std::unique_ptr<fabric::FabricClient> client;
  CXLKV_RETURN_IF_ERROR(fabric::FabricClient::Open(opt_.fabric, &client));
  // The manager's view of this host: which port maps the region here.
  std::vector<fabric::MemoryRegion> regions;
  CXLKV_RETURN_IF_ERROR(client->HostRegions(opt_.host_id, &regions).WithContext(verb));
  // What may be removed here: the device of the assignment undone or an
  // older one, never one a newer assignment made.
  uint64_t undo = assign_epoch;
  for (const auto& r : regions) {
    if (r.id != allocation_id) continue;
    for (const auto& m : r.mappings) {
      if (m.host_id != opt_.host_id) continue;
      // An older caller names no epoch: the one listed now, so that this
      // request, if it is delayed past a re-assign, is refused all the same.
      // A manager without epochs lists 0 and gets a CFM unassign.
      const uint64_t epoch = assign_epoch != 0 ? assign_epoch : m.assign_epoch;
      if (assign_epoch == 0) undo = std::max(undo, m.assign_epoch);
      result->assign_epoch = epoch;
      fabric::MemoryRegion after;
      // Unlocked: the manager calls this agent back to remove the device.
      Status s = epoch != 0 ? client->Unassign(r.appliance_id, r.blade_id, r.id, m.appliance_port,
                                               epoch, &after)
                            : client->Assign(r.appliance_id, r.blade_id, r.id, m.appliance_port,
                                             /*assign=*/false, &after);
      if (s.IsNotFound()) continue;  // freed or unassigned meanwhile
      if (s.IsBusy()) {
        spdlog::info("release region {} on host {}: superseded (a newer assignment): {}",
                     allocation_id, opt_.host_id, s.message());
        return Status::Busy(verb + ": superseded: " + s.message());
      }
      CXLKV_RETURN_IF_ERROR(s.WithContext(verb));
      result->unassigned = true;
    }
  }
  base::MutexLock l(&mu_);
  // A resync that listed the manager before the unassign must not bring it back.
  changed_[allocation_id] = ++seq_;
  if (auto it = devices_.find(allocation_id);
      it != devices_.end() && (assign_epoch != 0 || undo != 0) && it->second.assign_epoch > undo) {
    // Materialized again for a newer assignment while this release was on
    // its way (the manager re-assigned after the unassign undone here).
    spdlog::info(
        "release region {} on host {}: the device belongs to assignment epoch {} (newer "
        "than {}): kept",
        allocation_id, opt_.host_id, it->second.assign_epoch, undo);
    return Status::Busy(verb + ": superseded: the device here was materialized for assignment " +
                        "epoch " + std::to_string(it->second.assign_epoch) + ", newer than " +
                        std::to_string(undo));
  }
  Status s = RemoveLocked(allocation_id);
  if (s.ok()) {
    result->removed = true;
  } else if (!s.IsNotFound()) {
    return s.WithContext(verb);
  } else if (result->unassigned) {
    result->removed = true;  // the manager's callback removed it already
  }
  spdlog::info(
      "released region {} on host {} (port unassigned: {}, device removed: {}, assignment epoch "
      "{})",
      allocation_id, opt_.host_id, result->unassigned, result->removed, result->assign_epoch);
  return Status::OK();
}

Status HostAgent::Resync(ResyncResult* result) {
  *result = ResyncResult();
  if (opt_.fabric.base_url.empty()) return Status::Unsupported("resync: no fabric manager URL");
  uint64_t start;
  {
    base::MutexLock l(&mu_);
    start = ++seq_;
  }
  std::unique_ptr<fabric::FabricClient> client;
  CXLKV_RETURN_IF_ERROR(fabric::FabricClient::Open(opt_.fabric, &client));
  std::vector<fabric::MemoryRegion> regions;
  CXLKV_RETURN_IF_ERROR(client->HostRegions(opt_.host_id, &regions).WithContext("resync"));

  struct Report {
    std::string id;
    fabric::Materialization state;
    std::string error, device;
    uint64_t assign_epoch;  // the listed mapping's: a report for that assignment only
  };
  std::vector<Report> reports;
  {
    base::MutexLock l(&mu_);
    // Called only in this block, under mu_ (the analysis does not follow lambdas).
    auto changed_since = [&](const std::string& id) CXLKV_NO_THREAD_SAFETY_ANALYSIS {
      auto it = changed_.find(id);
      return it != changed_.end() && it->second > start;
    };
    std::set<std::string> wanted;
    for (const auto& r : regions) {
      wanted.insert(r.id);
      uint64_t epoch = 0;  // this host's mapping's assignment epoch
      for (const auto& m : r.mappings) {
        if (m.host_id == opt_.host_id) epoch = std::max(epoch, m.assign_epoch);
      }
      if (auto it = devices_.find(r.id); it != devices_.end()) {
        // Present here but not known to the manager (its call timed out,
        // or a resync repaired it earlier and the report was lost).
        for (const auto& m : r.mappings) {
          if (m.host_id == opt_.host_id &&
              m.materialization != fabric::Materialization::kMaterialized) {
            reports.push_back(
                {r.id, fabric::Materialization::kMaterialized, "", it->second.path, epoch});
          }
        }
        if (epoch > it->second.assign_epoch && !changed_since(r.id)) {
          // The manager assigned this host again and its materialize call
          // was lost: the device serves the newer assignment.
          it->second.assign_epoch = epoch;
          Status s = Save();
          if (!s.ok()) spdlog::warn("resync: region {}: {}", r.id, s.ToString());
        }
        continue;
      }
      if (changed_since(r.id)) continue;
      RegionRequest req;
      req.allocation_id = r.id;
      req.size_bytes = static_cast<uint64_t>(r.size_mib) << 20;
      req.backing_path = r.backing_path;
      req.assign_epoch = epoch;
      Device d;
      Status s = MaterializeLocked(req, &d);
      if (s.ok()) {
        ++result->materialized;
        reports.push_back({r.id, fabric::Materialization::kMaterialized, "", d.path, epoch});
      } else {
        ++result->failed;
        spdlog::warn("resync: materialize region {}: {}", r.id, s.ToString());
        reports.push_back({r.id, fabric::Materialization::kFailed,
                           "materialize on host " + opt_.host_id + ": " + s.message(), "", epoch});
      }
    }
    std::vector<std::string> stale;
    for (const auto& [id, d] : devices_) {
      if (!wanted.count(id) && !changed_since(id)) stale.push_back(id);
    }
    for (const auto& id : stale) {
      Status s = RemoveLocked(id);
      if (s.ok()) {
        ++result->removed;
      } else {
        spdlog::warn("resync: remove region {}: {}", id, s.ToString());
      }
    }
    if (result->materialized || result->removed) {
      spdlog::info("resync: {} materialized, {} removed, {} failed", result->materialized,
                   result->removed, result->failed);
    }
  }
  // Reported unlocked: the manager may be calling this agent right now.
  for (const auto& r : reports) {
    Status s = client->ReportMaterialization(opt_.host_id, r.id, r.state, r.error, r.device,
                                             r.assign_epoch);
    // A region freed meanwhile is not an error; the next resync removes it.
    // Busy: the host was unassigned and assigned again since the listing
    // (the manager refused the stale report; the newer materialize answered).
    if (!s.ok() && !s.IsNotFound()) spdlog::warn("resync: {}", s.ToString());
  }
  return Status::OK();
}

}  // namespace cxlkv::hostd
