// Copyright cxlkv authors.
//
// FabricConfig: what cxlkv-fabricd emulates, read from a YAML file (see
// deployments/examples/fabricd.yaml): appliances, blades (resource blocks per
// DIMM channel), port-to-host cabling, host agents, optional auth/TLS and
// fault injection.
//
// Thread-safety: plain values.
#ifndef CXLKV_FABRICD_CONFIG_H_
#define CXLKV_FABRICD_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cxlkv/status.h"

namespace cxlkv::fabric {

struct PortConfig {
  std::string id;         // blade port id, e.g. "P1"
  std::string host;       // host id cabled to it ("" when uncabled)
  std::string host_port;  // host-side port id (default "port0")
  bool link_up = true;    // false: assignment to this port fails (CFM 206)
};

struct BladeConfig {
  std::string id;
  int64_t resource_block_mib = 1024;  // size of one resource block
  int channels = 4;                   // DIMM channels
  int blocks_per_channel = 2;
  std::vector<PortConfig> ports;
};

struct ApplianceConfig {
  std::string id;
  std::vector<BladeConfig> blades;
};

struct HostConfig {
  std::string id;
  std::string agent;  // cxlkv-hostd base URL, e.g. http://127.0.0.1:8091 ("" = none)
  int64_t local_memory_mib = 0;
};

// One fault: requests whose method matches and whose path starts with
// path_prefix get `status` (after `delay_ms`), `count` times (-1: always).
struct FaultRule {
  std::string method;       // "" matches any
  std::string path_prefix;  // "" matches any
  int status = 0;           // 0: no error, only the delay
  int delay_ms = 0;
  int count = -1;
};

struct Faults {
  std::vector<FaultRule> rules;
  // Host ids whose materialization fails as if their agent had refused.
  std::vector<std::string> fail_materialize_hosts;
  // Blade ports whose assignment fails (compose answers 206).
  std::vector<std::string> fail_assign_ports;
  // Crash point name ("compose:allocated", "compose:assigned",
  // "compose:materialized"): the process exits there, as a crash would.
  std::string crash_at;
};

struct FabricConfig {
  std::string state_dir = "/var/lib/cxlkv-fabricd";
  std::string backing_dir = "/dev/shm/cxlkv-fabricd";  // region bytes
  std::string username, password;                      // both set: HTTP basic auth required
  std::string tls_cert, tls_key;                       // both set: HTTPS
  int agent_timeout_ms = 5000;                         // per host-agent call
  std::vector<ApplianceConfig> appliances;
  std::vector<HostConfig> hosts;
  Faults faults;
};

// Parses YAML text. InvalidArgument with "<field>: <cause>" on bad input.
Status ParseFabricConfig(const std::string& yaml_text, FabricConfig* config);

// Reads and parses a file. NotFound/IOError when unreadable.
Status LoadFabricConfig(const std::string& path, FabricConfig* config);

}  // namespace cxlkv::fabric

#endif  // CXLKV_FABRICD_CONFIG_H_
