// Copyright cxlkv authors.
//
// FabricManager: opening, recovery, persistence, faults and management
// (add/remove/rename). Composition lives in compose.cc.
#include "fabric_manager.h"

#include <dirent.h>
#include <spdlog/spdlog.h>

#include <set>

#include "cxlkv/base/file.h"

namespace cxlkv::fabric::internal {

Status ValidateId(const std::string& id) {
  if (id.empty() || id.size() > 64) return Status::InvalidArgument("id must be 1..64 characters");
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return Status::InvalidArgument("id may only contain [A-Za-z0-9._-]");
  }
  return Status::OK();
}

Status FabricManager::Open(const FabricConfig& config, std::unique_ptr<FabricManager>* out) {
  std::unique_ptr<FabricManager> m(new FabricManager(config));
  CXLKV_RETURN_IF_ERROR(base::MakeDirs(config.state_dir));
  CXLKV_RETURN_IF_ERROR(base::MakeDirs(config.backing_dir));
  m->state_path_ = config.state_dir + "/fabric-state.json";
  std::string persisted;
  Status rs = base::ReadFile(m->state_path_, &persisted);
  if (!rs.ok() && !rs.IsNotFound()) return rs;
  {
    base::MutexLock l(&m->mu_);
    CXLKV_RETURN_IF_ERROR(
        BuildState(config, persisted, &m->state_).WithContext("load state " + m->state_path_));
    m->faults_ = config.faults;
    CXLKV_RETURN_IF_ERROR(m->Recover());
  }
  *out = std::move(m);
  return Status::OK();
}

// Rolls back compositions a crash interrupted, then removes backing files
// that no region owns (a crash between persisting a free and unlinking).
Status FabricManager::Recover() {
  FabricState next = state_;
  std::vector<MemoryRegion> rolled_back;
  for (auto it = next.regions.begin(); it != next.regions.end();) {
    if (it->second.status == RegionStatus::kComposing) {
      spdlog::warn("recover: rolling back interrupted compose of region {}", it->first);
      rolled_back.push_back(it->second);
      it = next.regions.erase(it);
    } else {
      ++it;
    }
  }
  CXLKV_RETURN_IF_ERROR(next.RebuildUsage());
  CXLKV_RETURN_IF_ERROR(Install(std::move(next)));
  for (const MemoryRegion& r : rolled_back) {
    for (const Mapping& m : r.mappings) Unmaterialize(r, m);
  }
  std::set<std::string> owned;
  for (const auto& [id, r] : state_.regions) owned.insert(r.backing_path);
  if (DIR* d = ::opendir(config_.backing_dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.size() < 7 || name.substr(name.size() - 7) != ".region") continue;
      std::string path = config_.backing_dir + "/" + name;
      if (!owned.count(path)) {
        spdlog::warn("recover: removing orphan backing file {}", path);
        Status s = base::RemoveFile(path);
        if (!s.ok()) spdlog::error("{}", s.ToString());
      }
    }
    ::closedir(d);
  }
  return Status::OK();
}

Status FabricManager::Save(const FabricState& s) {
  return base::WriteFileAtomic(state_path_, SerializeState(s)).WithContext("write state");
}

Status FabricManager::Install(FabricState next) {
  CXLKV_RETURN_IF_ERROR(Save(next));
  state_ = std::move(next);
  return Status::OK();
}

std::string FabricManager::BackingPath(const std::string& mid) const {
  return config_.backing_dir + "/" + mid + ".region";
}

Faults FabricManager::GetFaults() {
  base::MutexLock l(&mu_);
  return faults_;
}

void FabricManager::SetFaults(const Faults& f) {
  base::MutexLock l(&mu_);
  faults_ = f;
}

bool FabricManager::MatchFault(const std::string& method, const std::string& path,
                               FaultRule* rule) {
  base::MutexLock l(&mu_);
  for (auto& r : faults_.rules) {
    if (r.count == 0) continue;
    if (!r.method.empty() && r.method != method) continue;
    if (path.compare(0, r.path_prefix.size(), r.path_prefix) != 0) continue;
    if (r.count > 0) --r.count;
    *rule = r;
    return true;
  }
  return false;
}

// ---- management ---------------------------------------------------------

namespace {

// Marks the first unmanaged configured entry (appliance or host) matching
// `custom_id` (any entry when empty) as managed, renamed to `custom_id`.
// kBusy if an entry by that id is already managed, kNotFound if none fits.
template <typename Entry>
Status ClaimConfigured(std::vector<Entry>& entries, const char* kind, const std::string& custom_id,
                       Entry** picked) {
  Entry* pick = nullptr;
  for (auto& e : entries) {
    if (!custom_id.empty() && e.id == custom_id && e.managed) {
      return Status::Busy(std::string(kind) + " " + custom_id + " is already managed");
    }
    if (!e.managed && (custom_id.empty() || e.id == custom_id || e.config_id == custom_id)) {
      if (pick == nullptr) pick = &e;
    }
  }
  if (pick == nullptr) {
    return Status::NotFound(std::string("add ") + kind + ": the emulator config has no unmanaged " +
                            kind + (custom_id.empty() ? std::string() : " " + custom_id));
  }
  pick->managed = true;
  if (!custom_id.empty()) pick->id = custom_id;
  *picked = pick;
  return Status::OK();
}

}  // namespace

Status FabricManager::AddAppliance(const std::string& custom_id, std::string* id) {
  base::MutexLock l(&mu_);
  FabricState next = state_;
  ApplianceState* pick = nullptr;
  CXLKV_RETURN_IF_ERROR(ClaimConfigured(next.appliances, "appliance", custom_id, &pick));
  std::string picked = pick->id;
  CXLKV_RETURN_IF_ERROR(Install(std::move(next)));
  *id = picked;
  return Status::OK();
}

Status FabricManager::DeleteAppliance(const std::string& aid) {
  base::MutexLock l(&mu_);
  FabricState next = state_;
  ApplianceState* a = next.FindAppliance(aid);
  if (a == nullptr) return Status::NotFound("appliance " + aid + " not found");
  for (const auto& [id, r] : next.regions) {
    if (r.appliance_id == aid) {
      return Status::Busy("appliance " + aid + " has composed region " + id + "; free it first");
    }
  }
  a->managed = false;
  CXLKV_RETURN_IF_ERROR(Install(std::move(next)));
  return Status::OK();
}

Status FabricManager::RenameAppliance(const std::string& aid, const std::string& new_id) {
  base::MutexLock l(&mu_);
  FabricState next = state_;
  ApplianceState* a = next.FindAppliance(aid);
  if (a == nullptr) return Status::NotFound("appliance " + aid + " not found");
  CXLKV_RETURN_IF_ERROR(ValidateId(new_id));
  if (new_id == aid) return Status::OK();
  for (const auto& o : next.appliances) {
    if (o.id == new_id) return Status::Busy("appliance id " + new_id + " is taken");
  }
  a->id = new_id;
  for (auto& [id, r] : next.regions) {
    if (r.appliance_id == aid) r.appliance_id = new_id;
  }
  CXLKV_RETURN_IF_ERROR(Install(std::move(next)));
  return Status::OK();
}

Status FabricManager::AddBlade(const std::string& aid, const std::string& custom_id,
                               std::string* id) {
  base::MutexLock l(&mu_);
  FabricState next = state_;
  ApplianceState* a = next.FindAppliance(aid);
  if (a == nullptr) return Status::NotFound("appliance " + aid + " not found");
  BladeState* pick = nullptr;
  for (auto& b : a->blades) {
    if (!custom_id.empty() && b.id == custom_id && b.managed) {
      return Status::Busy("blade " + custom_id + " is already managed");
    }
    if (!b.managed && (custom_id.empty() || b.id == custom_id || b.config_id == custom_id)) {
      if (pick == nullptr) pick = &b;
    }
  }
  if (pick == nullptr) {
    return Status::NotFound("add blade: the emulator config has no unmanaged blade" +
                            (custom_id.empty() ? std::string() : " " + custom_id) +
                            " in appliance " + aid);
  }
  pick->managed = true;
  if (!custom_id.empty()) pick->id = custom_id;
  std::string picked = pick->id;
  CXLKV_RETURN_IF_ERROR(Install(std::move(next)));
  *id = picked;
  return Status::OK();
}

Status FabricManager::DeleteBlade(const std::string& aid, const std::string& bid) {
  base::MutexLock l(&mu_);
  FabricState next = state_;
  ApplianceState* a = next.FindAppliance(aid);
  BladeState* b = a ? a->FindBlade(bid) : nullptr;
  if (b == nullptr) return Status::NotFound("blade " + aid + "/" + bid + " not found");
  for (const auto& [id, r] : next.regions) {
    if (r.appliance_id == aid && r.blade_id == bid) {
      return Status::Busy("blade " + bid + " has composed region " + id + "; free it first");
    }
  }
  b->managed = false;
  CXLKV_RETURN_IF_ERROR(Install(std::move(next)));
  return Status::OK();
}

Status FabricManager::RenameBlade(const std::string& aid, const std::string& bid,
                                  const std::string& new_id) {
  base::MutexLock l(&mu_);
  FabricState next = state_;
  ApplianceState* a = next.FindAppliance(aid);
  BladeState* b = a ? a->FindBlade(bid) : nullptr;
  if (b == nullptr) return Status::NotFound("blade " + aid + "/" + bid + " not found");
  CXLKV_RETURN_IF_ERROR(ValidateId(new_id));
  if (new_id == bid) return Status::OK();
  for (const auto& o : a->blades) {
    if (o.id == new_id) return Status::Busy("blade id " + new_id + " is taken");
  }
  b->id = new_id;
  for (auto& [id, r] : next.regions) {
    if (r.appliance_id == aid && r.blade_id == bid) r.blade_id = new_id;
  }
  CXLKV_RETURN_IF_ERROR(Install(std::move(next)));
  return Status::OK();
}

Status FabricManager::AddHost(const std::string& custom_id, std::string* id) {
  base::MutexLock l(&mu_);
  FabricState next = state_;
  HostState* pick = nullptr;
  CXLKV_RETURN_IF_ERROR(ClaimConfigured(next.hosts, "host", custom_id, &pick));
  std::string picked = pick->id;
  CXLKV_RETURN_IF_ERROR(Install(std::move(next)));
  *id = picked;
  return Status::OK();
}

Status FabricManager::DeleteHost(const std::string& hid) {
  base::MutexLock l(&mu_);
  FabricState next = state_;
  HostState* h = next.FindHost(hid);
  if (h == nullptr) return Status::NotFound("host " + hid + " not found");
  for (const auto& [id, r] : next.regions) {
    for (const auto& m : r.mappings) {
      if (m.host_id == hid) return Status::Busy("host " + hid + " maps region " + id);
    }
  }
  h->managed = false;
  CXLKV_RETURN_IF_ERROR(Install(std::move(next)));
  return Status::OK();
}

Status FabricManager::RenameHost(const std::string& hid, const std::string& new_id) {
  base::MutexLock l(&mu_);
  FabricState next = state_;
  HostState* h = next.FindHost(hid);
  if (h == nullptr) return Status::NotFound("host " + hid + " not found");
  CXLKV_RETURN_IF_ERROR(ValidateId(new_id));
  if (new_id == hid) return Status::OK();
  for (const auto& o : next.hosts) {
    if (o.id == new_id) return Status::Busy("host id " + new_id + " is taken");
  }
  // Mappings name the host by id; refuse while any region maps it.
  for (const auto& [id, r] : next.regions) {
    for (const auto& m : r.mappings) {
      if (m.host_id == hid) return Status::Busy("host " + hid + " maps region " + id);
    }
  }
  h->id = new_id;
  CXLKV_RETURN_IF_ERROR(Install(std::move(next)));
  return Status::OK();
}

}  // namespace cxlkv::fabric::internal
