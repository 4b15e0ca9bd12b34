// Copyright cxlkv authors.
//
// DevdaxMaterializer and the sysfs implementation of DaxBus.
#include "cxlkv/hostd/devdax.h"

#include <limits.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>

#include "cxlkv/base/file.h"

namespace cxlkv::hostd {

Status DevdaxMaterializer::Materialize(const RegionRequest& req, Device* dev) {
  CXLKV_RETURN_IF_ERROR(ValidateAllocationId(req.allocation_id));
  if (req.size_bytes == 0 || req.size_bytes % opt_.align != 0) {
    return Status::InvalidArgument("region size " + std::to_string(req.size_bytes) +
                                   " is not a positive multiple of the alignment " +
                                   std::to_string(opt_.align));
  }
  if (req.offset_bytes % opt_.align != 0) {
    return Status::InvalidArgument("region offset " + std::to_string(req.offset_bytes) +
                                   " is not aligned to " + std::to_string(opt_.align));
  }
  DaxRegionInfo region;
  CXLKV_RETURN_IF_ERROR(bus_->GetRegion(opt_.region_id, &region));
  uint64_t allocated = region.size - region.available_size;
  if (req.offset_bytes < allocated) {
    return Status::Busy("dax region " + std::to_string(region.id) + ": offset " +
                        std::to_string(req.offset_bytes) + " is below the allocated " +
                        std::to_string(allocated) + " bytes");
  }
  uint64_t pad = req.offset_bytes - allocated;
  if (pad + req.size_bytes > region.available_size) {
    return Status::NoSpace("dax region " + std::to_string(region.id) + " has " +
                           std::to_string(region.available_size) + " bytes free, need " +
                           std::to_string(pad + req.size_bytes));
  }
  Device d;
  d.allocation_id = req.allocation_id;
  d.kind = "devdax";
  d.size_bytes = req.size_bytes;
  d.offset_bytes = 0;  // the sub-device is exactly the region
  if (pad > 0) {
    DaxDeviceInfo p;
    CXLKV_RETURN_IF_ERROR(
        bus_->CreateDevice(opt_.region_id, pad, opt_.align, &p).WithContext("create pad device"));
    d.pad_devices.push_back(p.name);
  }
  DaxDeviceInfo sub;
  Status s = bus_->CreateDevice(opt_.region_id, req.size_bytes, opt_.align, &sub);
  if (!s.ok()) {
    for (const auto& p : d.pad_devices) (void)bus_->DestroyDevice(opt_.region_id, p);
    return s.WithContext("create sub-device");
  }
  d.path = opt_.dev_root + "/" + sub.name;
  d.major = sub.major;
  d.minor = sub.minor;
  *dev = std::move(d);
  return Status::OK();
}

Status DevdaxMaterializer::Remove(const Device& dev) {
  auto slash = dev.path.rfind('/');
  std::string name = slash == std::string::npos ? dev.path : dev.path.substr(slash + 1);
  CXLKV_RETURN_IF_ERROR(bus_->DestroyDevice(opt_.region_id, name));
  for (const auto& p : dev.pad_devices) {
    CXLKV_RETURN_IF_ERROR(bus_->DestroyDevice(opt_.region_id, p).WithContext("destroy pad device"));
  }
  return Status::OK();
}

namespace {

class SysfsDaxBus : public DaxBus {
 public:
  SysfsDaxBus(std::string root, SysfsHook hook) : root_(std::move(root)), hook_(std::move(hook)) {}

  Status GetRegion(int region_id, DaxRegionInfo* info) override {
    std::string dir;
    CXLKV_RETURN_IF_ERROR(RegionDir(region_id, &dir));
    DaxRegionInfo r;
    r.id = region_id;
    CXLKV_RETURN_IF_ERROR(ReadU64(dir + "/size", &r.size));
    CXLKV_RETURN_IF_ERROR(ReadU64(dir + "/available_size", &r.available_size));
    CXLKV_RETURN_IF_ERROR(ReadU64(dir + "/align", &r.align));
    *info = r;
    return Status::OK();
  }

  // The daxctl create-device sequence: create, seed, align, size, bind.
  Status CreateDevice(int region_id, uint64_t size, uint64_t align, DaxDeviceInfo* dev) override {
    std::string dir;
    CXLKV_RETURN_IF_ERROR(RegionDir(region_id, &dir));
    CXLKV_RETURN_IF_ERROR(Write(dir + "/create", "1"));
    std::string seed;
    CXLKV_RETURN_IF_ERROR(ReadText(dir + "/seed", &seed));
    if (seed.empty())
      return Status::NoSpace("dax region " + std::to_string(region_id) + ": no seed device");
    const std::string ddir = dir + "/../" + seed;
    CXLKV_RETURN_IF_ERROR(Write(ddir + "/align", std::to_string(align)));
    Status s = Write(ddir + "/size", std::to_string(size));
    if (!s.ok()) {
      (void)Write(dir + "/delete", seed);
      return errno == ENOSPC ? Status::NoSpace(s.message()) : s;
    }
    s = Write(root_ + "/bus/dax/drivers/device_dax/bind", seed);
    if (!s.ok()) {
      (void)Write(ddir + "/size", "0");
      (void)Write(dir + "/delete", seed);
      return s;
    }
    DaxDeviceInfo d;
    d.name = seed;
    d.size = size;
    std::string devnum;
    if (ReadText(ddir + "/dev", &devnum).ok()) {
      if (std::sscanf(devnum.c_str(), "%d:%d", &d.major, &d.minor) != 2) d.major = d.minor = -1;
    }
    *dev = d;
    return Status::OK();
  }

  // The daxctl destroy-device sequence: unbind, size 0, delete.
  Status DestroyDevice(int region_id, const std::string& name) override {
    std::string dir;
    CXLKV_RETURN_IF_ERROR(RegionDir(region_id, &dir));
    const std::string ddir = dir + "/../" + name;
    if (::access(ddir.c_str(), F_OK) != 0) return Status::OK();
    // An unbound device refuses unbind; that is fine.
    (void)Write(root_ + "/bus/dax/drivers/device_dax/unbind", name);
    CXLKV_RETURN_IF_ERROR(Write(ddir + "/size", "0"));
    return Write(dir + "/delete", name);
  }

 private:
  Status RegionDir(int region_id, std::string* dir) {
    std::string link = root_ + "/bus/dax/devices/dax" + std::to_string(region_id) + ".0";
    char buf[PATH_MAX];
    if (::realpath(link.c_str(), buf) == nullptr) {
      return Status::NotFound("dax region " + std::to_string(region_id) + ": " + link + ": " +
                              std::strerror(errno));
    }
    *dir = std::string(buf) + "/../dax_region";
    return Status::OK();
  }
  Status ReadText(const std::string& path, std::string* out) {
    CXLKV_RETURN_IF_ERROR(base::ReadFile(path, out));
    while (!out->empty() && (out->back() == '\n' || out->back() == ' ')) out->pop_back();
    return Status::OK();
  }
  Status ReadU64(const std::string& path, uint64_t* v) {
    std::string t;
    CXLKV_RETURN_IF_ERROR(ReadText(path, &t));
    char* end = nullptr;
    errno = 0;
    *v = std::strtoull(t.c_str(), &end, 0);
    if (errno != 0 || end == t.c_str())
      return Status::IOError("read " + path + ": not a number: " + t);
    return Status::OK();
  }
  Status Write(const std::string& path, const std::string& value) {
    // sysfs attributes take one write(2); no temp file, no rename.
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) return Status::IOError("write " + path + ": " + std::strerror(errno));
    bool ok = std::fputs(value.c_str(), f) >= 0;
    int e = errno;
    if (std::fclose(f) != 0 && ok) {
      ok = false;
      e = errno;
    }
    if (!ok) {
      errno = e;
      return Status::IOError("write " + path + ": " + std::strerror(e));
    }
    if (hook_) hook_(path, value);
    return Status::OK();
  }

  const std::string root_;
  const SysfsHook hook_;
};

class DevdaxCarver : public fabric::RegionCarver {
 public:
  DevdaxCarver(std::unique_ptr<DaxBus> bus, DevdaxOptions opt)
      : m_(std::move(bus), std::move(opt)) {}
  Status Carve(const std::string& id, uint64_t size_bytes, std::string* device,
               std::string* handle) override {
    Device d;
    CXLKV_RETURN_IF_ERROR(m_.Materialize({id, size_bytes, 0, ""}, &d));
    *device = d.path;
    handle->clear();
    for (const auto& p : d.pad_devices) *handle += (handle->empty() ? "" : ",") + p;
    return Status::OK();
  }
  Status Release(const std::string& device, const std::string& handle) override {
    Device d;
    d.path = device;
    size_t pos = 0;
    while (pos < handle.size()) {
      size_t comma = handle.find(',', pos);
      if (comma == std::string::npos) comma = handle.size();
      d.pad_devices.push_back(handle.substr(pos, comma - pos));
      pos = comma + 1;
    }
    return m_.Remove(d);
  }

 private:
  DevdaxMaterializer m_;
};

}  // namespace

std::unique_ptr<fabric::RegionCarver> NewDevdaxCarver(std::unique_ptr<DaxBus> bus,
                                                      DevdaxOptions opt) {
  return std::make_unique<DevdaxCarver>(std::move(bus), std::move(opt));
}

std::unique_ptr<DaxBus> NewSysfsDaxBus(std::string sysfs_root, SysfsHook hook) {
  return std::make_unique<SysfsDaxBus>(std::move(sysfs_root), std::move(hook));
}

}  // namespace cxlkv::hostd
