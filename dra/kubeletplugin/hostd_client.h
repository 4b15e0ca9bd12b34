// Copyright cxlkv authors.
//
// HostdClient: the kubelet plugin's view of the local cxlkv-hostd (the one
// writer of CDI specs on this host). The plugin never materializes a region
// itself: the fabric manager has hostd do that when it composes. Prepare only
// asks whether a region is materialized here and has hostd rewrite its spec.
//
// Thread-safety: safe for concurrent use (one connection per call).
#ifndef CXLKV_DRA_KUBELETPLUGIN_HOSTD_CLIENT_H_
#define CXLKV_DRA_KUBELETPLUGIN_HOSTD_CLIENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cxlkv/status.h"

namespace cxlkv::dra {

struct HostRegion {
  std::string allocation_id;  // the fabric memory id
  std::string device;         // host path processes map
  uint64_t size_bytes = 0;
  std::string cdi_device;  // fully qualified CDI device name
  // The fabric manager's assignment epoch the device was materialized for
  // (0: hostd predates epochs).
  uint64_t assign_epoch = 0;
};

class HostdClient {
 public:
  // base_url: "http://host:port". timeout_ms bounds each call (connect + read).
  HostdClient(std::string base_url, int timeout_ms);

  // Rewrites the CDI spec of a region materialized on this host and
  // describes it. NotFound: not materialized here (yet); IOError: hostd
  // unreachable or failing ("hostd <url>: <cause>").
  Status RewriteSpec(const std::string& memory_id, HostRegion* region) const;

  // Releases this host's view of a region no claim here uses any more: hostd
  // has the fabric manager unassign this host's port and removes the device
  // and CDI spec (HostAgent::Release). assign_epoch: the assignment undone
  // (HostRegion::assign_epoch at prepare; 0: none known). Idempotent.
  // Busy: superseded, the host was assigned the region again since (hostd
  // kept it: nothing to release); Unsupported: hostd has no fabric manager
  // (a local composer's node; nothing to release through); IOError: hostd
  // or the manager unreachable or failing (the outcome is unknown: an
  // unassign may still be on its way).
  Status Release(const std::string& memory_id, uint64_t assign_epoch) const;

  // Every region materialized here. IOError as above.
  Status List(std::vector<HostRegion>* regions) const;

  const std::string& base_url() const { return base_url_; }

 private:
  const std::string base_url_;
  const int timeout_ms_;
};

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_KUBELETPLUGIN_HOSTD_CLIENT_H_
