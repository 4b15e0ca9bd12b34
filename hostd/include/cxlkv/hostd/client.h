// Copyright cxlkv authors.
//
// hostd::Client: the one client of a host agent's HTTP API (cxlkv-hostd,
// hostd/src/agent_server.cc). Its callers:
//  - the fabric manager (fabricd): Materialize when it maps a region to a
//    host, Remove when it unmaps or frees it;
//  - the DRA controller with a local pool (no fabric manager): the same two;
//  - the DRA kubelet plugin: RewriteSpec at prepare, Release on the last
//    unprepare of a region on its node, List for device health.
// The wire shapes live in one place (hostd/src/wire.h), which the server
// reads too. Every error carries "hostd <base url>: <cause>".
//
// Thread-safety: safe for concurrent use (one connection per call: hostd
// serves one request per connection).
#ifndef CXLKV_HOSTD_CLIENT_H_
#define CXLKV_HOSTD_CLIENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cxlkv/status.h"

namespace cxlkv::hostd {

// What a caller asks a host to materialize: a composed region as the fabric
// manager (or a local pool) describes it.
struct MaterializeRequest {
  std::string allocation_id;  // the fabric memory id; the CDI device name
  uint64_t size_bytes = 0;
  uint64_t offset_bytes = 0;  // within this host's view of the appliance memory
  std::string backing_path;   // emulation: the file holding the region's bytes
  std::string appliance_id, blade_id;
  std::string appliance_port, host_port;  // the mapping's ports ("" for a local pool)
  // The mapping's assignment epoch (docs/fabric.md, "Assignment epochs"); a
  // local pool issues none (0), which hostd reads as "none named".
  uint64_t assign_epoch = 0;
};

// A region materialized on a host, as hostd describes it.
struct HostRegion {
  std::string allocation_id;  // the fabric memory id
  std::string device;         // host path processes map
  uint64_t size_bytes = 0;
  std::string cdi_device;  // fully qualified CDI device name
  // The fabric manager's assignment epoch the device was materialized for
  // (0: hostd predates epochs, or a local pool).
  uint64_t assign_epoch = 0;
};

struct ClientOptions {
  std::string base_url;    // "http://host:port", no trailing slash
  int timeout_ms = 10000;  // each call, connect included, milliseconds
};

class Client {
 public:
  explicit Client(ClientOptions options);

  // Has hostd materialize a region and write its CDI spec (idempotent
  // there). IOError: hostd unreachable, or it refused (its HTTP status and
  // error text in the message).
  Status Materialize(const MaterializeRequest& req, HostRegion* region) const;

  // Has hostd remove a region's device and CDI spec. NotFound: not
  // materialized there; IOError as above.
  Status Remove(const std::string& memory_id) const;

  // Rewrites the CDI spec of a region materialized on the host and
  // describes it. NotFound: not materialized there (yet); IOError as above.
  Status RewriteSpec(const std::string& memory_id, HostRegion* region) const;

  // Releases the host's view of a region no claim there uses any more: hostd
  // has the fabric manager unassign its port and removes the device and CDI
  // spec (HostAgent::Release). assign_epoch: the assignment undone (0: none
  // known). Idempotent. Busy: superseded, the host was assigned the region
  // again since (hostd kept it); Unsupported: hostd has no fabric manager (a
  // local pool's node); IOError: hostd or the manager unreachable or failing
  // (the outcome is unknown: an unassign may still be on its way).
  Status Release(const std::string& memory_id, uint64_t assign_epoch) const;

  // Every region materialized on the host. IOError as above.
  Status List(std::vector<HostRegion>* regions) const;

  const std::string& base_url() const { return options_.base_url; }

 private:
  const ClientOptions options_;
};

}  // namespace cxlkv::hostd

#endif  // CXLKV_HOSTD_CLIENT_H_
