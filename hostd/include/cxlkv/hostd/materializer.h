// Copyright cxlkv authors.
//
// Materializer: turns a composed region into something a process on this
// host can map, and removes it again. Two kinds:
//  - FileMaterializer (emulation, the default here): the region's bytes are a
//    file that every "host" reaches; the host device is a per-host link to it,
//    and the CDI spec bind-mounts it (runtimes refuse a regular file as a
//    device node).
//  - DevdaxMaterializer (real CXL hosts): a devdax sub-device carved from a
//    dax region through libdaxctl (or sysfs), preceded by a pad device when
//    the region's offset needs aligning ([Fan26] §2.5); the CDI spec carries a
//    `c` device node.
//
// Thread-safety: not thread-safe; HostAgent serializes calls.
#ifndef CXLKV_HOSTD_MATERIALIZER_H_
#define CXLKV_HOSTD_MATERIALIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cxlkv/status.h"

namespace cxlkv::hostd {

// What the fabric manager asks this host to materialize.
struct RegionRequest {
  std::string allocation_id;  // region id; the CDI device name
  uint64_t size_bytes = 0;
  // Byte offset of the region within this host's view of the appliance
  // memory (devdax: within the dax region). 0 when the region is its own.
  uint64_t offset_bytes = 0;
  std::string backing_path;  // emulation: the file holding the region's bytes
  // The fabric manager's assignment epoch of this host's mapping (0: none
  // named). Not used to materialize; HostAgent keeps it with the device.
  uint64_t assign_epoch = 0;
};

// What was created; enough to remove it and to write the CDI spec.
struct Device {
  std::string allocation_id;
  std::string kind;  // "file" or "devdax"
  std::string path;  // host path processes map (/dev/daxX.Y or the link)
  uint64_t size_bytes = 0;
  uint64_t offset_bytes = 0;             // CXL_DAX_OFFSET: where the region starts in `path`
  int major = -1, minor = -1;            // devdax character device numbers
  std::vector<std::string> pad_devices;  // devdax pad devices created for alignment
  // The assignment epoch the device was materialized (or last confirmed)
  // for: HostAgent sets it; a release naming an older epoch leaves the device.
  uint64_t assign_epoch = 0;
};

class Materializer {
 public:
  virtual ~Materializer() = default;
  // Creates the host-side device. InvalidArgument: bad request (size 0, bad
  // id); NotFound: backing file / dax region absent; NoSpace: region full;
  // IOError: the kernel or file system refused.
  virtual Status Materialize(const RegionRequest& req, Device* dev) = 0;
  // Removes what Materialize created. Removing something already gone is OK.
  virtual Status Remove(const Device& dev) = 0;
};

// For regions whose bytes this host already reaches: a regular backing file
// gets <dev_dir>/<allocation_id>, a symbolic link to it (kind "file"); a
// backing path that is a character device (a local devdax pool's sub-device)
// is passed through as is (kind "devdax"), and Remove leaves it to its pool.
// REQUIRES: dev_dir exists or can be created.
// Only backing paths that resolve (symlinks followed) inside one of
// `allowed_dirs` are accepted, so a caller cannot hand a container an
// arbitrary host file or device.
class FileMaterializer : public Materializer {
 public:
  FileMaterializer(std::string dev_dir, std::vector<std::string> allowed_dirs)
      : dev_dir_(std::move(dev_dir)), allowed_dirs_(std::move(allowed_dirs)) {}
  Status Materialize(const RegionRequest& req, Device* dev) override;
  Status Remove(const Device& dev) override;

 private:
  const std::string dev_dir_;
  const std::vector<std::string> allowed_dirs_;
};

// Validates a CDI device name / allocation id: 1..128 of [A-Za-z0-9_.:-],
// starting with an alphanumeric.
Status ValidateAllocationId(const std::string& id);

}  // namespace cxlkv::hostd

#endif  // CXLKV_HOSTD_MATERIALIZER_H_
