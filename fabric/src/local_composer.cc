// Copyright cxlkv authors.
#include "cxlkv/fabric/local_composer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "cxlkv/base/file.h"
#include "cxlkv/base/json.h"
#include "cxlkv/fabric/json_codec.h"

namespace cxlkv::fabric {

using nlohmann::json;

// local-composer-state.json: {"version": 1, "pool", "regions": [memoryRegion + carverHandle]}.
constexpr int kStateVersion = 1;

namespace {

std::string NewId() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string s = "local-";
  for (int i = 0; i < 16; ++i) s += hex[rd() & 15];
  return s;
}

}  // namespace

Status LocalComposer::Open(const LocalPoolOptions& opt, std::unique_ptr<LocalComposer>* out,
                           std::unique_ptr<RegionCarver> carver) {
  if (opt.node_id.empty()) return Status::InvalidArgument("local pool: node id is required");
  if (opt.name.empty()) return Status::InvalidArgument("local pool: name is required");
  std::unique_ptr<LocalComposer> c(new LocalComposer(opt));
  c->carver_ = std::move(carver);
  CXLKV_RETURN_IF_ERROR(base::MakeDirs(opt.state_dir));
  if (c->carver_) {
    if (opt.capacity_mib <= 0 || opt.block_mib <= 0) {
      return Status::InvalidArgument("devdax pool " + opt.name +
                                     ": capacity and block size are required");
    }
  } else {
    CXLKV_RETURN_IF_ERROR(base::MakeDirs(opt.dir));
    struct statfs fs;
    if (::statfs(opt.dir.c_str(), &fs) != 0) {
      return Status::IOError("statfs " + opt.dir + ": " + std::strerror(errno));
    }
    if (c->opt_.block_mib <= 0) {
      int64_t bs = static_cast<int64_t>(fs.f_bsize);
      c->opt_.block_mib = std::max<int64_t>(1, (bs + (1 << 20) - 1) >> 20);
    }
    if (c->opt_.capacity_mib <= 0) {
      c->opt_.capacity_mib =
          static_cast<int64_t>((static_cast<unsigned __int128>(fs.f_blocks) * fs.f_bsize) >> 20);
    }
  }
  c->state_path_ = opt.state_dir + "/local-composer-state.json";
  // Nobody else sees c yet; the lock is for the analysis (and costs nothing).
  base::MutexLock l(&c->mu_);
  std::string text;
  Status s = base::ReadFile(c->state_path_, &text);
  if (s.ok()) {
    json j;
    if (!base::ParseState(text, kStateVersion, &j).ok() || !j.contains("regions") ||
        !j["regions"].is_array()) {
      return Status::Corruption("load state " + c->state_path_ +
                                ": not a local composer state file");
    }
    for (const auto& rj : j["regions"]) {
      MemoryRegion r;
      CXLKV_RETURN_IF_ERROR(RegionFromJson(rj, &r).WithContext("load state " + c->state_path_));
      c->allocated_mib_ += r.size_mib;
      c->regions_[r.id] = r;
      if (rj.contains("carverHandle") && rj["carverHandle"].is_string()) {
        c->handles_[r.id] = rj["carverHandle"].get<std::string>();
      }
    }
  } else if (!s.IsNotFound()) {
    return s;
  }
  // Region files a crash left behind (created, never recorded; or recorded
  // as freed, never unlinked).
  std::set<std::string> owned;
  for (const auto& [id, r] : c->regions_) owned.insert(r.backing_path);
  DIR* d = c->carver_ ? nullptr : ::opendir(opt.dir.c_str());
  if (d != nullptr) {
    std::vector<std::string> orphans;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 7 && n.substr(n.size() - 7) == ".region" && !owned.count(opt.dir + "/" + n)) {
        orphans.push_back(opt.dir + "/" + n);
      }
    }
    ::closedir(d);
    for (const auto& p : orphans) CXLKV_RETURN_IF_ERROR(base::RemoveFile(p));
  }
  *out = std::move(c);
  return Status::OK();
}

Status LocalComposer::Save(const std::map<std::string, MemoryRegion>& regions,
                           const std::map<std::string, std::string>& handles) {
  json arr = json::array();
  for (const auto& [id, r] : regions) {
    json rj = RegionToJson(r);
    if (auto it = handles.find(id); it != handles.end()) rj["carverHandle"] = it->second;
    arr.push_back(std::move(rj));
  }
  return base::SaveStateFile(state_path_, kStateVersion, {{"pool", opt_.name}, {"regions", arr}})
      .WithContext("write state");
}

Status LocalComposer::CheckPool(const std::string& aid, const std::string& bid) {
  if (aid != kApplianceId || bid != opt_.name) {
    return Status::NotFound("pool " + aid + "/" + bid + " not found (this node has " +
                            kApplianceId + "/" + opt_.name + ")");
  }
  return Status::OK();
}

Status LocalComposer::ListPools(std::vector<Pool>* pools) {
  base::MutexLock l(&mu_);
  Pool p;
  p.appliance_id = kApplianceId;
  p.blade_id = opt_.name;
  p.block_mib = opt_.block_mib;
  p.total_mib = opt_.capacity_mib;
  p.allocated_mib = allocated_mib_;
  p.hosts = {opt_.node_id};
  *pools = {p};
  return Status::OK();
}

Status LocalComposer::Compose(const std::string& aid, const std::string& bid,
                              const ComposeRequest& req, ComposeResult* result) {
  CXLKV_RETURN_IF_ERROR(CheckPool(aid, bid));
  if (req.size_mib < 1) return Status::InvalidArgument("memorySizeMiB must be >= 1");
  if (req.qos != 1 && req.qos != 2 && req.qos != 4 && req.qos != 8) {
    return Status::InvalidArgument("QoS must be 1, 2, 4 or 8");
  }
  if (req.share_count > 1) {
    return Status::InvalidArgument("a local pool serves one node; shareCount " +
                                   std::to_string(req.share_count) + " needs a fabric manager");
  }
  for (const auto& h : req.candidate_hosts) {
    if (h != opt_.node_id) {
      return Status::InvalidArgument("host " + h + " cannot map local pool of node " +
                                     opt_.node_id);
    }
  }
  base::MutexLock l(&mu_);
  int64_t size = (req.size_mib + opt_.block_mib - 1) / opt_.block_mib * opt_.block_mib;
  if (allocated_mib_ + size > opt_.capacity_mib) {
    return Status::NoSpace("local pool " + opt_.name + ": " + std::to_string(size) +
                           " MiB requested, " + std::to_string(opt_.capacity_mib - allocated_mib_) +
                           " MiB free");
  }
  MemoryRegion r;
  r.id = NewId();
  r.appliance_id = kApplianceId;
  r.blade_id = opt_.name;
  r.status = RegionStatus::kComposed;
  r.size_mib = size;
  r.qos = req.qos;
  r.share_count = 1;
  r.claim_uid = req.claim_uid;
  Mapping m;
  m.appliance_port = "local";
  m.host_id = opt_.node_id;
  m.materialization = Materialization::kPending;  // the host agent materializes it
  r.mappings.push_back(m);

  std::string handle;
  if (carver_) {
    CXLKV_RETURN_IF_ERROR(
        carver_->Carve(r.id, static_cast<uint64_t>(size) << 20, &r.backing_path, &handle));
  } else {
    r.backing_path = opt_.dir + "/" + r.id + ".region";
    int fd = ::open(r.backing_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0660);
    if (fd < 0) return Status::IOError("create " + r.backing_path + ": " + std::strerror(errno));
    // Reserve the memory now (tmpfs pages, huge pages): a pool that cannot
    // back the region fails here, not later with SIGBUS in a consumer.
    int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size) << 20);
    if (rc == EOPNOTSUPP || rc == EINVAL) {
      rc = ::ftruncate(fd, static_cast<off_t>(size) << 20) ? errno : 0;
    }
    ::close(fd);
    if (rc != 0) {
      ::unlink(r.backing_path.c_str());
      return rc == ENOSPC ? Status::NoSpace("size " + r.backing_path + ": " + std::strerror(rc))
                          : Status::IOError("size " + r.backing_path + ": " + std::strerror(rc));
    }
  }
  auto undo = [&] {
    if (carver_) {
      Status rs = carver_->Release(r.backing_path, handle);
      (void)rs;
    } else {
      ::unlink(r.backing_path.c_str());
    }
  };
  auto next = regions_;
  next[r.id] = r;
  auto next_handles = handles_;
  if (carver_) next_handles[r.id] = handle;
  Status s = Save(next, next_handles);
  if (!s.ok()) {
    undo();
    return s;
  }
  regions_ = std::move(next);
  handles_ = std::move(next_handles);
  allocated_mib_ += size;
  result->region = r;
  result->partial = false;
  return Status::OK();
}

Status LocalComposer::Free(const std::string& aid, const std::string& bid, const std::string& mid) {
  CXLKV_RETURN_IF_ERROR(CheckPool(aid, bid));
  base::MutexLock l(&mu_);
  auto it = regions_.find(mid);
  if (it == regions_.end()) return Status::NotFound("memory region " + mid + " not found");
  MemoryRegion r = it->second;
  std::string handle = handles_.count(mid) ? handles_[mid] : "";
  if (carver_) {
    // Device first: a device that cannot be removed keeps its region listed.
    CXLKV_RETURN_IF_ERROR(carver_->Release(r.backing_path, handle));
  }
  auto next = regions_;
  next.erase(mid);
  auto next_handles = handles_;
  next_handles.erase(mid);
  // For files, state first: a crash leaves an orphan file Open() removes.
  CXLKV_RETURN_IF_ERROR(Save(next, next_handles));
  regions_ = std::move(next);
  handles_ = std::move(next_handles);
  allocated_mib_ -= r.size_mib;
  return carver_ ? Status::OK() : base::RemoveFile(r.backing_path);
}

Status LocalComposer::Get(const std::string& aid, const std::string& bid, const std::string& mid,
                          MemoryRegion* region) {
  CXLKV_RETURN_IF_ERROR(CheckPool(aid, bid));
  base::MutexLock l(&mu_);
  auto it = regions_.find(mid);
  if (it == regions_.end()) return Status::NotFound("memory region " + mid + " not found");
  *region = it->second;
  return Status::OK();
}

Status LocalComposer::List(const std::string& aid, const std::string& bid,
                           std::vector<MemoryRegion>* regions) {
  CXLKV_RETURN_IF_ERROR(CheckPool(aid, bid));
  base::MutexLock l(&mu_);
  regions->clear();
  for (const auto& [id, r] : regions_) regions->push_back(r);
  return Status::OK();
}

Status LocalComposer::AddHost(const std::string& aid, const std::string& bid,
                              const std::string& mid, const std::string& host_id,
                              MemoryRegion* region) {
  if (host_id != opt_.node_id) {
    return Status::InvalidArgument("local pool " + bid + " reaches only node " + opt_.node_id +
                                   ", not " + host_id);
  }
  return Get(aid, bid, mid, region);
}

}  // namespace cxlkv::fabric
