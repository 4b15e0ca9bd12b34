// Copyright cxlkv authors.
//
// Composer: what the DRA driver needs from whatever carves shared memory. Two
// implementations: FabricComposer (a CFM-compatible fabric manager over
// HTTP, cxlkv-fabricd or a real cfm-service) and LocalComposer (a node-local
// /dev/shm, hugetlbfs or devdax pool, no appliance).
//
// Thread-safety: implementations are safe for concurrent use.
#ifndef CXLKV_FABRIC_COMPOSER_H_
#define CXLKV_FABRIC_COMPOSER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cxlkv/fabric/types.h"
#include "cxlkv/status.h"

namespace cxlkv::fabric {

// One place regions are carved from (a blade, or a local pool).
struct Pool {
  std::string appliance_id;
  std::string blade_id;
  int64_t block_mib = 0;  // allocation granularity (resource block size)
  int64_t total_mib = 0;
  int64_t allocated_mib = 0;
  std::vector<std::string> hosts;  // hosts that can map regions of this pool
  // Which blade port each cabled host is behind (fabric pools; empty for a
  // local pool), in the manager's port order.
  struct Port {
    std::string port_id;
    std::string host_id;
  };
  std::vector<Port> ports;
};

struct ComposeResult {
  MemoryRegion region;
  // True when the region was allocated but not every requested port was
  // assigned (HTTP 206): the caller owns the region and must free or retry.
  bool partial = false;
};

class Composer {
 public:
  virtual ~Composer() = default;

  // Fills *pools with every pool and its capacity. IOError: manager unreachable.
  virtual Status ListPools(std::vector<Pool>* pools) = 0;

  // Composes a region on pool (appliance_id, blade_id). InvalidArgument: a
  // request that can never succeed (bad size/QoS/share count, unknown port);
  // NotFound: no such pool; NoSpace: not enough free capacity; IOError:
  // the manager failed or is unreachable.
  virtual Status Compose(const std::string& appliance_id, const std::string& blade_id,
                         const ComposeRequest& req, ComposeResult* result) = 0;

  // Frees a region and every host's view of it. NotFound: no such region.
  virtual Status Free(const std::string& appliance_id, const std::string& blade_id,
                      const std::string& memory_id) = 0;

  // Reads one region. NotFound: no such region.
  virtual Status Get(const std::string& appliance_id, const std::string& blade_id,
                     const std::string& memory_id, MemoryRegion* region) = 0;

  // Fills *regions with every region of the pool.
  virtual Status List(const std::string& appliance_id, const std::string& blade_id,
                      std::vector<MemoryRegion>* regions) = 0;

  // Maps an existing region to one more host (a later consumer of a shared
  // claim): the manager assigns the port that host is cabled to and has the
  // host's agent materialize the region; *region gets the result (that
  // host's mapping may be Failed: materialization is per host). A host the
  // region already reaches is OK. InvalidArgument: the host is not cabled to
  // the pool; NotFound: no such region; IOError: the manager failed.
  virtual Status AddHost(const std::string& appliance_id, const std::string& blade_id,
                         const std::string& memory_id, const std::string& host_id,
                         MemoryRegion* region) = 0;
};

}  // namespace cxlkv::fabric

#endif  // CXLKV_FABRIC_COMPOSER_H_
