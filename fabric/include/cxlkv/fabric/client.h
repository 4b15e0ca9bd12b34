// Copyright cxlkv authors.
//
// FabricClient: a C++ client for the CFM cfm-service REST API (/cfm/v1) and
// the cxlkv share extension, over libcurl. Works against cxlkv-fabricd and,
// for the paths CFM implements, against a real cfm-service (whose regions
// then carry one port and no share fields).
//
// Errors: NotFound (404), InvalidArgument (400), NoSpace (409 on compose),
// Busy (other 409), IOError (5xx, unreachable, unparsable answer); messages
// read "<verb> <object>: <server details>".
//
// Thread-safety: safe for concurrent use (one curl handle per call).
#ifndef CXLKV_FABRIC_CLIENT_H_
#define CXLKV_FABRIC_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "cxlkv/fabric/composer.h"

namespace cxlkv::fabric {

struct ClientOptions {
  std::string base_url;            // e.g. "http://127.0.0.1:8080" (no trailing slash)
  std::string username, password;  // basic auth when both set
  std::string ca_file;             // trust anchor for https ("" = system store)
  bool insecure = false;           // skip TLS verification (CFM's default self-signed cert)
  int timeout_ms = 30000;          // per request; compose waits on host agents
};

class FabricClient : public Composer {
 public:
  // InvalidArgument: base_url is not http:// or https://.
  static Status Open(const ClientOptions& options, std::unique_ptr<FabricClient>* out);

  Status ListPools(std::vector<Pool>* pools) override;
  Status Compose(const std::string& appliance_id, const std::string& blade_id,
                 const ComposeRequest& req, ComposeResult* result) override;
  Status Free(const std::string& appliance_id, const std::string& blade_id,
              const std::string& memory_id) override;
  Status Get(const std::string& appliance_id, const std::string& blade_id,
             const std::string& memory_id, MemoryRegion* region) override;
  Status List(const std::string& appliance_id, const std::string& blade_id,
              std::vector<MemoryRegion>* regions) override;

  // The port cabled to host_id (from the blade's ports), then Assign.
  Status AddHost(const std::string& appliance_id, const std::string& blade_id,
                 const std::string& memory_id, const std::string& host_id,
                 MemoryRegion* region) override;

  // PATCH .../memory/{id}: assign (or unassign) one more port. An assign
  // gives the new mapping the region's next assignment epoch (an already
  // assigned port is OK and keeps its epoch); an unassign from here names
  // no epoch and is applied whatever the port's epoch (CFM semantics).
  Status Assign(const std::string& appliance_id, const std::string& blade_id,
                const std::string& memory_id, const std::string& port, bool assign,
                MemoryRegion* region);

  // Extension: PATCH .../memory/{id} with `Operation: unassign` and
  // `assignEpoch`: undoes the assignment of `port` made at `assign_epoch`
  // (>= 1) and nothing newer. Busy (409): the port was assigned again since
  // (a newer epoch; the manager keeps it and counts the refusal); NotFound:
  // no such region, or the port is not assigned; InvalidArgument: an epoch
  // the port never had.
  Status Unassign(const std::string& appliance_id, const std::string& blade_id,
                  const std::string& memory_id, const std::string& port, uint64_t assign_epoch,
                  MemoryRegion* region);

  // Extension (cxlkv-fabricd only): every composed region mapped to a host.
  // NotFound: unknown host; Unsupported: the server lacks the extension.
  Status HostRegions(const std::string& host_id, std::vector<MemoryRegion>* regions);

  // Extension: a host agent reports its materialization of a region
  // (kMaterialized with the device path, or kFailed with the error; any other
  // state is InvalidArgument from the server). assign_epoch: the assignment
  // the report is about (0: none named, taken as the current one); Busy
  // (409): the host's mapping has another epoch now (the report is stale).
  Status ReportMaterialization(const std::string& host_id, const std::string& memory_id,
                               Materialization state, const std::string& error,
                               const std::string& device, uint64_t assign_epoch = 0);

  // Extension: simulated power cycle of a blade ("" ids: every blade).
  Status PowerCycle(const std::string& appliance_id, const std::string& blade_id, int* forgotten);

  // Any request; *status and *body get the raw answer. IOError when no answer.
  Status Call(const std::string& method, const std::string& path, const std::string& body,
              long* status, std::string* response);

 private:
  explicit FabricClient(const ClientOptions& o) : options_(o) {}
  Status Json(const std::string& verb, const std::string& method, const std::string& path,
              const std::string& body, std::string* response, long* status = nullptr);
  const ClientOptions options_;  // immutable after construction
};

}  // namespace cxlkv::fabric

#endif  // CXLKV_FABRIC_CLIENT_H_
