// Copyright cxlkv authors.
//
// Mapping: the bytes of a region, from a file or a devdax character device,
// mapped MAP_SHARED. Owns the mapping and the descriptor; unmaps on
// destruction. Knows nothing of the layout.
#ifndef CXLKV_SRC_REGION_MAPPING_H_
#define CXLKV_SRC_REGION_MAPPING_H_

#include <cstdint>
#include <memory>
#include <string>

#include "cxlkv/options.h"
#include "cxlkv/status.h"

namespace cxlkv::internal {

struct DevdaxFacts {
  uint64_t size = 0;   // bytes, from sysfs
  uint64_t align = 0;  // bytes, from sysfs (default 2 MiB when absent)
};

// Reads size and alignment of the devdax device with the given major:minor
// from `sysfs_root`/dev/char/MAJ:MIN/{size,align} (the kernel's device-dax
// sysfs attributes). kIOError if unreadable, kCorruption if unparsable.
Status ReadDevdaxFacts(const std::string& sysfs_root, unsigned major, unsigned minor,
                       DevdaxFacts* out);

class Mapping {
 public:
  // Opens `path` and maps [offset, offset+size). For a file: created when
  // missing and `create`; extended to offset+size when shorter and `create`
  // (a region is only ever grown while unformatted); size 0 = rest of file.
  // For a devdax device: offset and size must be multiples of its alignment;
  // size 0 = rest of device. Takes a shared flock on files so `cxlkv gc` can
  // tell a region in use from an abandoned one on this host.
  static Status Open(const std::string& path, uint64_t offset, uint64_t size, bool create,
                     const std::string& sysfs_root, std::unique_ptr<Mapping>* out);
  ~Mapping();

  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  uint64_t offset() const { return offset_; }
  bool is_devdax() const { return devdax_; }
  const std::string& path() const { return path_; }

  // Removes the file again if this Open created it and no other process
  // holds it (a region that failed to format leaves nothing behind).
  void RemoveIfCreatedAndUnused();

  // Populates page tables for [0, size) without changing any byte
  // (MADV_POPULATE_WRITE, else one atomic no-op add per page).
  void Prefault(uint64_t begin, uint64_t end) const;

 private:
  Mapping() = default;
  std::string path_;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t offset_ = 0;
  bool devdax_ = false;
  bool created_ = false;
};

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_REGION_MAPPING_H_
