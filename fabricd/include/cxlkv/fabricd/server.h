// Copyright cxlkv authors.
//
// FabricServer: cxlkv-fabricd's HTTP(S) front end. Serves the CFM
// cfm-service REST API (/cfm/v1, OpenAPI 1.7.0) plus the cxlkv extension in
// fabric/api/cxlkv-overlay.yaml (share count, power cycle, fault injection,
// per-host region listing for host agents).
//
// Thread-safety: Serve() blocks its caller; Stop() may be called from any
// thread, at any time (also before Serve(), which then returns at once). Requests are served on a
// pool and serialized by the manager.
#ifndef CXLKV_FABRICD_SERVER_H_
#define CXLKV_FABRICD_SERVER_H_

#include <memory>
#include <string>

#include "cxlkv/fabricd/config.h"
#include "cxlkv/status.h"

namespace cxlkv::fabric {

class FabricServer {
 public:
  // Binds host:port (port 0 = any free port; *bound_port gets the real one),
  // then loads the state and recovers (see FabricManager). The bind comes
  // first: a daemon that cannot serve (its port taken, e.g. by a second
  // daemon on the same state) leaves the state and backing files as they
  // are. IOError "listen <host>:<port>: <cause>" for the bind; errors as
  // LoadState otherwise.
  static Status Open(const FabricConfig& config, const std::string& host, int port, int* bound_port,
                     std::unique_ptr<FabricServer>* out);
  virtual ~FabricServer() = default;

  // Serves until Stop().
  virtual Status Serve() = 0;
  // Ends Serve(), whenever it comes: before Serve() starts, while its accept
  // loop starts or while it serves; returns once Serve() has ended (at once
  // if it never started). Idempotent.
  virtual void Stop() = 0;
};

}  // namespace cxlkv::fabric

#endif  // CXLKV_FABRICD_SERVER_H_
