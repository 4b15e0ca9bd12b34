// Copyright cxlkv authors.
#include "cxlkv/hostd/cdi.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "cxlkv/base/cxl_dax_env.h"
#include "cxlkv/base/file.h"

namespace cxlkv::hostd {

using nlohmann::json;

std::string CdiDeviceName(const std::string& allocation_id) {
  return std::string(kCdiKind) + "=" + allocation_id;
}

Status ResolveCoherence(const std::string& host_id, CdiOptions* opt) {
  opt->software_partition = -1;
  if (opt->coherence == "hardware") {
    if (!opt->software_hosts.empty()) {
      return Status::InvalidArgument(
          "software hosts are for coherence=software only (this host is coherence=hardware)");
    }
    return Status::OK();
  }
  if (opt->coherence != "software") {
    return Status::InvalidArgument("coherence '" + opt->coherence + "': hardware or software");
  }
  // One write partition per host, at most 16 (docs/coherence.md).
  if (opt->software_hosts.empty() || opt->software_hosts.size() > 16) {
    return Status::InvalidArgument(
        "coherence=software needs the blade's hosts in write-partition order (1 to 16), got " +
        std::to_string(opt->software_hosts.size()));
  }
  for (size_t i = 0; i < opt->software_hosts.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (opt->software_hosts[i] == opt->software_hosts[j]) {
        return Status::InvalidArgument("software host " + opt->software_hosts[i] +
                                       " is listed twice: each host holds one write partition");
      }
    }
    if (opt->software_hosts[i] == host_id) opt->software_partition = static_cast<int32_t>(i);
  }
  if (opt->software_partition < 0) {
    return Status::InvalidArgument("host " + host_id +
                                   " is not among the software hosts; it would have no write "
                                   "partition of this blade's regions");
  }
  return Status::OK();
}

std::string PartitionLockPath(const std::string& allocation_id, const CdiOptions& opt) {
  return opt.cdi_dir + "/" + allocation_id + ".lock";
}

std::string CdiSpecJson(const Device& dev, const CdiOptions& opt) {
  std::string ctr_path = dev.path;
  if (dev.kind == "file" && !opt.container_dir.empty()) {
    ctr_path = opt.container_dir + "/" + dev.allocation_id;
  }
  // coherence=software: one lock file per region and node, bind-mounted
  // into every container that gets the region here (one inode, so flock in
  // one container sees the others').
  const bool soft = opt.coherence == "software";
  const std::string host_lock = PartitionLockPath(dev.allocation_id, opt);
  const std::string ctr_lock =
      opt.container_dir.empty() ? host_lock : opt.container_dir + "/" + dev.allocation_id + ".lock";
  json edits = {{"env",
                 {std::string(base::kCxlDaxDeviceEnv) + "=" + ctr_path,
                  std::string(base::kCxlDaxSizeEnv) + "=" + std::to_string(dev.size_bytes),
                  std::string(base::kCxlDaxOffsetEnv) + "=" + std::to_string(dev.offset_bytes)}}};
  if (soft) {
    edits["env"].push_back(std::string(base::kCxlCoherenceEnv) + "=software");
    edits["env"].push_back(std::string(base::kCxlSoftwarePartitionsEnv) + "=" +
                           std::to_string(opt.software_hosts.size()));
    edits["env"].push_back(std::string(base::kCxlSoftwarePartitionEnv) + "=" +
                           std::to_string(opt.software_partition));
    edits["env"].push_back(std::string(base::kCxlPartitionLockEnv) + "=" + ctr_lock);
  }
  if (dev.kind == "devdax") {
    json node = {{"path", dev.path}, {"hostPath", dev.path}, {"type", "c"}, {"permissions", "rw"}};
    // Numbers from sysfs let a runtime create the node without stat-ing it.
    if (dev.major >= 0 && dev.minor >= 0) {
      node["major"] = dev.major;
      node["minor"] = dev.minor;
    }
    edits["deviceNodes"] = json::array({node});
  } else {
    edits["mounts"].push_back(
        {{"hostPath", dev.path}, {"containerPath", ctr_path}, {"options", {"bind", "rw"}}});
  }
  if (soft) {
    edits["mounts"].push_back(
        {{"hostPath", host_lock}, {"containerPath", ctr_lock}, {"options", {"bind", "rw"}}});
  }
  // 0.5.0 is the lowest version with device-node hostPath; mounts and env
  // are older.
  json spec = {
      {"cdiVersion", "0.5.0"},
      {"kind", kCdiKind},
      {"devices", json::array({{{"name", dev.allocation_id}, {"containerEdits", edits}}})}};
  return spec.dump(2) + "\n";
}

Status WriteCdiSpec(const Device& dev, const CdiOptions& opt, std::string* path) {
  CXLKV_RETURN_IF_ERROR(base::MakeDirs(opt.cdi_dir));
  if (opt.coherence == "software") {
    // The spec mounts it: it must exist first. Kept if it does (a container
    // may hold it while the spec is rewritten).
    const std::string lock = PartitionLockPath(dev.allocation_id, opt);
    const int fd = ::open(lock.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0)
      return Status::IOError("create partition lock " + lock + ": " + std::strerror(errno));
    ::close(fd);
  }
  std::string p = opt.cdi_dir + "/" + dev.allocation_id + ".json";
  CXLKV_RETURN_IF_ERROR(
      base::WriteFileAtomic(p, CdiSpecJson(dev, opt)).WithContext("write CDI spec"));
  *path = p;
  return Status::OK();
}

Status RemoveCdiSpec(const std::string& allocation_id, const CdiOptions& opt) {
  CXLKV_RETURN_IF_ERROR(base::RemoveFile(PartitionLockPath(allocation_id, opt)));
  return base::RemoveFile(opt.cdi_dir + "/" + allocation_id + ".json");
}

}  // namespace cxlkv::hostd
