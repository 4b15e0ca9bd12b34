// Copyright cxlkv authors.
//
// DaxBus over libdaxctl, for real hosts: the same sequences as daxctl
// create-device (create_dev, get_dev_seed, set_align, set_size,
// enable_devdax) and destroy-device (disable, set_size 0, destroy_dev).
#include <daxctl/libdaxctl.h>

#include <cstring>

#include "cxlkv/hostd/devdax.h"

namespace cxlkv::hostd {
namespace {

class LibDaxctlBus : public DaxBus {
 public:
  ~LibDaxctlBus() override {
    if (ctx_) daxctl_unref(ctx_);
  }

  Status GetRegion(int region_id, DaxRegionInfo* info) override {
    struct daxctl_region* r = nullptr;
    CXLKV_RETURN_IF_ERROR(FindRegion(region_id, &r));
    info->id = region_id;
    info->size = daxctl_region_get_size(r);
    info->available_size = daxctl_region_get_available_size(r);
    info->align = daxctl_region_get_align(r);
    return Status::OK();
  }

  Status CreateDevice(int region_id, uint64_t size, uint64_t align, DaxDeviceInfo* dev) override {
    struct daxctl_region* r = nullptr;
    CXLKV_RETURN_IF_ERROR(FindRegion(region_id, &r));
    const std::string where = "dax region " + std::to_string(region_id);
    int rc = daxctl_region_create_dev(r);
    if (rc < 0) return Status::IOError("create device in " + where + ": " + std::strerror(-rc));
    struct daxctl_dev* d = daxctl_region_get_dev_seed(r);
    if (d == nullptr) return Status::NoSpace(where + ": no seed device");
    const std::string name = daxctl_dev_get_devname(d);
    rc = daxctl_dev_set_align(d, align);
    if (rc == 0) rc = daxctl_dev_set_size(d, size);
    if (rc < 0) {
      daxctl_region_destroy_dev(r, d);
      if (rc == -ENOSPC) return Status::NoSpace("size " + name + ": " + std::strerror(-rc));
      return Status::IOError("size " + name + ": " + std::strerror(-rc));
    }
    rc = daxctl_dev_enable_devdax(d);
    if (rc < 0) {
      daxctl_dev_set_size(d, 0);
      daxctl_region_destroy_dev(r, d);
      return Status::IOError("enable " + name + ": " + std::strerror(-rc));
    }
    dev->name = name;
    dev->size = daxctl_dev_get_size(d);
    dev->major = daxctl_dev_get_major(d);
    dev->minor = daxctl_dev_get_minor(d);
    return Status::OK();
  }

  Status DestroyDevice(int region_id, const std::string& name) override {
    struct daxctl_region* r = nullptr;
    CXLKV_RETURN_IF_ERROR(FindRegion(region_id, &r));
    struct daxctl_dev* d = nullptr;
    daxctl_dev_foreach(r, d) {
      if (name == daxctl_dev_get_devname(d)) break;
    }
    if (d == nullptr) return Status::OK();
    int rc = 0;
    if (daxctl_dev_is_enabled(d)) rc = daxctl_dev_disable(d);
    if (rc == 0) rc = daxctl_dev_set_size(d, 0);
    if (rc == 0) rc = daxctl_region_destroy_dev(r, d);
    if (rc < 0) return Status::IOError("destroy " + name + ": " + std::strerror(-rc));
    return Status::OK();
  }

 private:
  Status FindRegion(int region_id, struct daxctl_region** out) {
    if (ctx_ == nullptr) {
      int rc = daxctl_new(&ctx_);
      if (rc < 0) return Status::IOError(std::string("open libdaxctl: ") + std::strerror(-rc));
    }
    struct daxctl_region* r = nullptr;
    daxctl_region_foreach(ctx_, r) {
      if (daxctl_region_get_id(r) == region_id) {
        *out = r;
        return Status::OK();
      }
    }
    return Status::NotFound("dax region " + std::to_string(region_id) + " not found");
  }

  struct daxctl_ctx* ctx_ = nullptr;
};

}  // namespace

std::unique_ptr<DaxBus> NewLibDaxctlBus() { return std::make_unique<LibDaxctlBus>(); }

}  // namespace cxlkv::hostd
