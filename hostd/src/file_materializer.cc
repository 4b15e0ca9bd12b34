// Copyright cxlkv authors.
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cxlkv/hostd/materializer.h"

namespace cxlkv::hostd {

Status ValidateAllocationId(const std::string& id) {
  if (id.empty() || id.size() > 128) {
    return Status::InvalidArgument("allocation id must be 1..128 characters");
  }
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (!alnum(id[0])) return Status::InvalidArgument("allocation id must start with [A-Za-z0-9]");
  for (char c : id) {
    if (!alnum(c) && c != '_' && c != '.' && c != ':' && c != '-') {
      return Status::InvalidArgument("allocation id may only contain [A-Za-z0-9_.:-]");
    }
  }
  return Status::OK();
}

Status FileMaterializer::Materialize(const RegionRequest& req, Device* dev) {
  CXLKV_RETURN_IF_ERROR(ValidateAllocationId(req.allocation_id));
  if (req.size_bytes == 0) return Status::InvalidArgument("region size must be > 0");
  if (req.backing_path.empty() || req.backing_path[0] != '/') {
    return Status::InvalidArgument("backing path must be absolute");
  }
  char real[PATH_MAX];
  if (::realpath(req.backing_path.c_str(), real) == nullptr) {
    std::string err = std::strerror(errno);
    if (errno == ENOENT) return Status::NotFound("resolve " + req.backing_path + ": " + err);
    return Status::IOError("resolve " + req.backing_path + ": " + err);
  }
  bool allowed = false;
  for (const auto& dir : allowed_dirs_) {
    std::string d = dir;
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    std::string r = real;
    allowed |=
        r.size() > d.size() && r.compare(0, d.size(), d) == 0 && (d == "/" || r[d.size()] == '/');
  }
  if (!allowed) {
    return Status::InvalidArgument("backing path " + req.backing_path + " (" + real +
                                   ") is outside the allowed backing directories");
  }
  struct stat st;
  if (::stat(req.backing_path.c_str(), &st) != 0) {
    std::string err = std::strerror(errno);
    if (errno == ENOENT) return Status::NotFound("stat " + req.backing_path + ": " + err);
    return Status::IOError("stat " + req.backing_path + ": " + err);
  }
  if (S_ISCHR(st.st_mode)) {
    Device d;
    d.allocation_id = req.allocation_id;
    d.kind = "devdax";
    d.path = req.backing_path;
    d.size_bytes = req.size_bytes;
    d.offset_bytes = req.offset_bytes;
    d.major = static_cast<int>(major(st.st_rdev));
    d.minor = static_cast<int>(minor(st.st_rdev));
    *dev = std::move(d);
    return Status::OK();
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument("backing path " + req.backing_path + " is not a regular file");
  }
  // Compared without the sum: offset + size can wrap past 2^64 and pass.
  const uint64_t have = static_cast<uint64_t>(st.st_size);
  if (req.offset_bytes > have || req.size_bytes > have - req.offset_bytes) {
    return Status::InvalidArgument("backing file " + req.backing_path + " holds " +
                                   std::to_string(st.st_size) + " bytes, region needs " +
                                   std::to_string(req.size_bytes) + " at offset " +
                                   std::to_string(req.offset_bytes));
  }
  if (::mkdir(dev_dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::IOError("create directory " + dev_dir_ + ": " + std::strerror(errno));
  }
  const std::string link = dev_dir_ + "/" + req.allocation_id;
  // Replace a stale link (a restart after a crash mid-materialize).
  if (::unlink(link.c_str()) != 0 && errno != ENOENT) {
    return Status::IOError("remove " + link + ": " + std::strerror(errno));
  }
  if (::symlink(req.backing_path.c_str(), link.c_str()) != 0) {
    return Status::IOError("link " + link + " -> " + req.backing_path + ": " +
                           std::strerror(errno));
  }
  Device d;
  d.allocation_id = req.allocation_id;
  d.kind = "file";
  d.path = link;
  d.size_bytes = req.size_bytes;
  d.offset_bytes = req.offset_bytes;
  *dev = std::move(d);
  return Status::OK();
}

Status FileMaterializer::Remove(const Device& dev) {
  if (dev.kind == "devdax") return Status::OK();  // the pool owns the device
  if (::unlink(dev.path.c_str()) != 0 && errno != ENOENT) {
    return Status::IOError("remove " + dev.path + ": " + std::strerror(errno));
  }
  return Status::OK();
}

}  // namespace cxlkv::hostd
