// Copyright cxlkv authors.
//
// AgentServer: cxlkv-hostd's HTTP endpoint, called by the fabric manager.
//   PUT    /cxlkv/v1/regions/{allocationId}  {sizeBytes, offsetBytes, backingPath}
//          -> 200 {allocationId, device, sizeBytes, offsetBytes, cdiDevice}
//   POST   /cxlkv/v1/regions/{allocationId}/spec -> 200 as PUT after rewriting
//          the CDI spec of a region materialized here; 404 when not here
//   DELETE /cxlkv/v1/regions/{allocationId}  -> 200, or 404 when not here
//   GET    /cxlkv/v1/regions                 -> {hostId, regions: [...]}
//   POST   /cxlkv/v1/resync                  -> {materialized, removed, failed}
// Errors are {error: "<message>"} with 400/404/409/500.
//
// Thread-safety: Serve() blocks; Stop() from any thread, at any time (before
// Serve() too, which then returns at once); it returns once Serve() ended.
#ifndef CXLKV_HOSTD_AGENT_SERVER_H_
#define CXLKV_HOSTD_AGENT_SERVER_H_

#include <memory>
#include <string>

#include "cxlkv/hostd/agent.h"

namespace cxlkv::hostd {

class AgentServer {
 public:
  static std::unique_ptr<AgentServer> Create();
  virtual ~AgentServer() = default;
  // Binds host:port (0 = any free port). IOError on failure. Needs no agent:
  // cxlkv-hostd binds before it opens its state (HostAgent::Open removes
  // orphan CDI specs, a resync changes devices), so a second daemon whose
  // port is taken changes nothing.
  virtual Status Bind(const std::string& host, int port, int* bound_port) = 0;
  // Serves `agent`'s endpoints until Stop(). REQUIRES: Bind() succeeded;
  // agent outlives the server.
  virtual Status Serve(HostAgent* agent) = 0;
  virtual void Stop() = 0;
};

}  // namespace cxlkv::hostd

#endif  // CXLKV_HOSTD_AGENT_SERVER_H_
