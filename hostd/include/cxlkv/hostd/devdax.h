// Copyright cxlkv authors.
//
// devdax materialization: carve a sub-device of a dax region for a composed
// region, destroy it on removal. DaxBus is the kernel interface: LibDaxctlBus
// drives the real /sys through libdaxctl (create, align, size, enable devdax;
// disable, size 0, destroy), SysfsDaxBus writes the same sysfs attributes
// under a configurable root (tests use a fake tree plus a hook that plays
// the kernel's part).
//
// Placement: the kernel gives a new device the lowest free range of the
// region. To start a region at offset X, DevdaxMaterializer first creates a
// pad device covering [allocated, X) ([Fan26] §2.5). Assumes the region is
// allocated without holes below X; a hole makes Materialize fail with Busy
// rather than place the region elsewhere.
//
// Thread-safety: not thread-safe (HostAgent serializes).
#ifndef CXLKV_HOSTD_DEVDAX_H_
#define CXLKV_HOSTD_DEVDAX_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cxlkv/fabric/local_composer.h"
#include "cxlkv/hostd/materializer.h"

namespace cxlkv::hostd {

struct DaxRegionInfo {
  int id = -1;
  uint64_t size = 0;            // bytes
  uint64_t available_size = 0;  // bytes not yet given to a device
  uint64_t align = 0;           // region alignment, bytes
};

struct DaxDeviceInfo {
  std::string name;  // "daxR.N"
  uint64_t size = 0;
  int major = -1, minor = -1;
};

class DaxBus {
 public:
  virtual ~DaxBus() = default;
  // NotFound: no such region; IOError: unreadable attributes.
  virtual Status GetRegion(int region_id, DaxRegionInfo* info) = 0;
  // Creates, aligns, sizes and binds a devdax device. NoSpace: region full.
  virtual Status CreateDevice(int region_id, uint64_t size, uint64_t align, DaxDeviceInfo* dev) = 0;
  // Unbinds, sizes to 0 and deletes a device. Absent is OK.
  virtual Status DestroyDevice(int region_id, const std::string& name) = 0;
};

std::unique_ptr<DaxBus> NewLibDaxctlBus();
// A hook called after every attribute write with the attribute's path and
// the value written; a test's stand-in for the kernel.
using SysfsHook = std::function<void(const std::string& path, const std::string& value)>;
std::unique_ptr<DaxBus> NewSysfsDaxBus(std::string sysfs_root, SysfsHook hook);

struct DevdaxOptions {
  int region_id = 0;
  uint64_t align = 2ull << 20;    // sub-device alignment (2 MiB; 1 GiB for PUD mappings)
  std::string dev_root = "/dev";  // where daxR.N character devices appear
};

class DevdaxMaterializer : public Materializer {
 public:
  DevdaxMaterializer(std::unique_ptr<DaxBus> bus, DevdaxOptions opt)
      : bus_(std::move(bus)), opt_(std::move(opt)) {}
  // InvalidArgument: size/offset not multiples of the alignment; Busy: the
  // offset is below what is already allocated; NoSpace: region too small.
  Status Materialize(const RegionRequest& req, Device* dev) override;
  Status Remove(const Device& dev) override;

 private:
  std::unique_ptr<DaxBus> bus_;
  const DevdaxOptions opt_;
};

// A RegionCarver for LocalComposer's devdax pools: one sub-device (plus pad
// devices when needed) per region, through the same DevdaxMaterializer.
std::unique_ptr<fabric::RegionCarver> NewDevdaxCarver(std::unique_ptr<DaxBus> bus,
                                                      DevdaxOptions opt);

}  // namespace cxlkv::hostd

#endif  // CXLKV_HOSTD_DEVDAX_H_
