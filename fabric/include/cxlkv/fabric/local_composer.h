// Copyright cxlkv authors.
//
// LocalComposer: the Composer for a single node with several GPUs and no
// appliance (the most common deployment). Carves regions from a node-local
// pool: a directory on /dev/shm (tmpfs) or hugetlbfs, where each region is a
// file <dir>/<id>.region; or a devdax region, where each region is a
// sub-device made by a RegionCarver (cxlkv-hostd's NewDevdaxCarver). Sizes
// are rounded up to whole blocks; the pool's capacity is accounted here and
// persisted (atomic writes) in <state_dir>.
// To the driver it looks like a fabric manager with one appliance ("local"),
// one blade (the pool name) and one host (this node); host agents
// materialize its regions with the file backend as they do cxlkv-fabricd's.
//
// Thread-safety: safe for concurrent use (one mutex).
#ifndef CXLKV_FABRIC_LOCAL_COMPOSER_H_
#define CXLKV_FABRIC_LOCAL_COMPOSER_H_

#include <map>
#include <memory>
#include <string>

#include "cxlkv/base/mutex.h"
#include "cxlkv/fabric/composer.h"

namespace cxlkv::fabric {

// Makes and removes device-backed regions for a devdax pool.
class RegionCarver {
 public:
  virtual ~RegionCarver() = default;
  // Creates a device of size_bytes for region `id`; *device gets its path,
  // *handle whatever Release needs later (persisted with the region).
  virtual Status Carve(const std::string& id, uint64_t size_bytes, std::string* device,
                       std::string* handle) = 0;
  // Removes what Carve made. Already gone is OK.
  virtual Status Release(const std::string& device, const std::string& handle) = 0;
};

struct LocalPoolOptions {
  std::string name = "shm";                 // the pool's blade id
  std::string dir = "/dev/shm/cxlkv-pool";  // tmpfs or hugetlbfs directory (file pools)
  // Pool size in MiB; 0 = the file system's total size.
  int64_t capacity_mib = 0;
  // Allocation granularity in MiB; 0 = the file system's block size rounded
  // up to 1 MiB (the huge page size on hugetlbfs, so every region maps with
  // huge pages).
  int64_t block_mib = 0;
  std::string node_id;                             // this node's host id
  std::string state_dir = "/var/lib/cxlkv-local";  // local-composer-state.json
};

class LocalComposer : public Composer {
 public:
  // Creates the pool directory if needed, loads the state, and deletes
  // region files the state does not list. With a carver the pool is a
  // devdax pool: REQUIRES capacity_mib > 0 and block_mib > 0; `dir` is not
  // used. InvalidArgument: no node id, or a devdax pool without sizes;
  // Corruption: unreadable state file; IOError: unusable directories.
  static Status Open(const LocalPoolOptions& opt, std::unique_ptr<LocalComposer>* out,
                     std::unique_ptr<RegionCarver> carver = nullptr);

  Status ListPools(std::vector<Pool>* pools) override;
  // share_count > 1, or candidate hosts other than this node: InvalidArgument.
  Status Compose(const std::string& appliance_id, const std::string& blade_id,
                 const ComposeRequest& req, ComposeResult* result) override;
  Status Free(const std::string& appliance_id, const std::string& blade_id,
              const std::string& memory_id) override;
  Status Get(const std::string& appliance_id, const std::string& blade_id,
             const std::string& memory_id, MemoryRegion* region) override;
  Status List(const std::string& appliance_id, const std::string& blade_id,
              std::vector<MemoryRegion>* regions) override;

  // This node only (OK, nothing to do); any other host: InvalidArgument.
  Status AddHost(const std::string& appliance_id, const std::string& blade_id,
                 const std::string& memory_id, const std::string& host_id,
                 MemoryRegion* region) override;
  static constexpr const char* kApplianceId = "local";

 private:
  explicit LocalComposer(const LocalPoolOptions& o) : opt_(o) {}
  Status CheckPool(const std::string& aid, const std::string& bid);
  Status Save(const std::map<std::string, MemoryRegion>& regions,
              const std::map<std::string, std::string>& handles);

  LocalPoolOptions opt_;  // immutable after Open
  std::string state_path_;
  std::unique_ptr<RegionCarver> carver_;  // devdax pools only
  base::Mutex mu_;
  std::map<std::string, std::string> handles_ CXLKV_GUARDED_BY(mu_);  // carver handles
  std::map<std::string, MemoryRegion> regions_ CXLKV_GUARDED_BY(mu_);
  int64_t allocated_mib_ CXLKV_GUARDED_BY(mu_) = 0;
};

}  // namespace cxlkv::fabric

#endif  // CXLKV_FABRIC_LOCAL_COMPOSER_H_
