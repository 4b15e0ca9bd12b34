// Copyright cxlkv authors.
//
// Mapping: the bytes of a region, from a file or a devdax character device,
// mapped MAP_SHARED. Owns the mapping and the descriptor; unmaps on
// destruction. Knows nothing of the layout.
//
// Every mapping is registered with a process-wide SIGBUS guard: a fault
// inside it (the file was truncated under us, or its memory failed) does
// not kill the process. The guard replaces the whole mapping with
// anonymous zero pages, so the faulting access and every later one read
// zeros (an unformatted region: every block a miss, our registration gone)
// and marks the mapping lost(); callers report that as kIOError.
#ifndef CXLKV_SRC_REGION_MAPPING_H_
#define CXLKV_SRC_REGION_MAPPING_H_

#include <cstdint>
#include <functional>
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

struct MappingOptions {
  uint64_t offset = 0;  // bytes into the file/device
  uint64_t size = 0;    // bytes to map; 0 = the rest of the file/device
  // Create a missing file (O_EXCL, so exactly one opener "created" it) and
  // extend a short one to offset+size when it holds nothing after the
  // offset (no bytes, or zeros: a creator's file not grown yet, a failed
  // create). A short file that holds bytes is refused, never grown: a
  // region truncated under its size would read back zeros past the cut
  // where its directory names blocks.
  bool create = false;
  // Words the refusal of a short file with what it holds (called with the
  // descriptor, the offset, the file's size and the size asked; "" keeps
  // the plain message): the caller knows the layout, Mapping does not.
  std::function<std::string(int fd, uint64_t offset, uint64_t file_size, uint64_t size)>
      describe_short;
  // Reserve the file's blocks over [offset, offset+size) when any of them
  // is unallocated (fallocate), so a full filesystem is an error here and
  // never SIGBUS on a later store. Off only for inspection that must not
  // allocate (lifecycle probes); such a mapping relies on the SIGBUS guard.
  bool reserve = true;
  // Take the shared flock that marks a file in use on this host. Off only
  // for lifecycle code that holds or takes the exclusive lock itself.
  bool shared_lock = true;
  std::string sysfs_root = "/sys";
};

class Mapping {
 public:
  // Opens `path` and maps [offset, offset+size). For a file: created when
  // missing and `create`; extended to offset+size when shorter, `create`
  // and blank after the offset (a file holding bytes is never grown);
  // reserved (see
  // MappingOptions::reserve). For a devdax device: offset and size must be
  // multiples of its alignment. Takes a shared flock on files so lifecycle
  // tools can tell a region in use from an abandoned one on this host.
  // kIOError (names path and errno; ENOSPC included: a file this call
  // created is removed again), kInvalidArgument (bad offset/size/kind),
  // kNotFound (missing and !create), kUnsupported (a sparse file on a
  // filesystem that cannot reserve space), kBusy (exclusively locked).
  static Status Open(const std::string& path, const MappingOptions& options,
                     std::unique_ptr<Mapping>* out);
  static Status Open(const std::string& path, uint64_t offset, uint64_t size, bool create,
                     const std::string& sysfs_root, std::unique_ptr<Mapping>* out);
  ~Mapping();

  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  uint64_t offset() const { return offset_; }
  bool is_devdax() const { return devdax_; }
  bool created() const { return created_; }
  const std::string& path() const { return path_; }
  int fd() const { return fd_; }

  // True once a SIGBUS inside the mapping was caught (see the file comment);
  // the bytes are zeros from then on. Thread-safe.
  bool lost() const;
  // kIOError describing the fault when lost(), else OK.
  Status LostStatus() const;

  // Removes the file again if this Open created it and no other process
  // holds it. REQUIRES: the caller checked that no format of the region was
  // ever claimed (a region someone else formatted is never removed).
  void RemoveIfCreatedAndUnused();

  // Populates page tables for [begin, end) without changing any byte
  // (MADV_POPULATE_WRITE). Never touches pages itself on a file: kIOError
  // when the kernel cannot populate (a truncated file, no memory); OK and
  // nothing done on a kernel without MADV_POPULATE_WRITE (pages fault
  // lazily; the file is reserved, so that cannot SIGBUS for lack of space).
  Status Prefault(uint64_t begin, uint64_t end) const;

 private:
  Mapping() = default;
  std::string path_;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t offset_ = 0;
  bool devdax_ = false;
  bool created_ = false;
  int guard_ = -1;  // index of this mapping's SIGBUS guard entry, -1: none
};

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_REGION_MAPPING_H_
