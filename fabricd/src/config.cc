// Copyright cxlkv authors.
#include "cxlkv/fabricd/config.h"

#include <yaml-cpp/yaml.h>

#include <set>

#include "cxlkv/base/file.h"

namespace cxlkv::fabric {
namespace {

// yaml-cpp reports errors by exception; they stop here and become Status.
template <typename T>
T Get(const YAML::Node& n, const char* key, T def) {
  if (!n[key]) return def;
  return n[key].as<T>();
}

Status ParseRule(const YAML::Node& n, FaultRule* r) {
  r->method = Get<std::string>(n, "method", "");
  r->path_prefix = Get<std::string>(n, "path", "");
  r->status = Get<int>(n, "status", 0);
  r->delay_ms = Get<int>(n, "delayMs", 0);
  r->count = Get<int>(n, "count", -1);
  if (r->status != 0 && (r->status < 400 || r->status > 599)) {
    return Status::InvalidArgument("faults.rules.status: must be 400..599");
  }
  if (r->delay_ms < 0) return Status::InvalidArgument("faults.rules.delayMs: negative");
  return Status::OK();
}

Status ParseImpl(const YAML::Node& root, FabricConfig* c) {
  if (!root.IsMap()) return Status::InvalidArgument("config: top level must be a mapping");
  c->state_dir = Get<std::string>(root, "stateDir", c->state_dir);
  c->backing_dir = Get<std::string>(root, "backingDir", c->backing_dir);
  c->agent_timeout_ms = Get<int>(root, "agentTimeoutMs", c->agent_timeout_ms);
  if (root["auth"]) {
    c->username = Get<std::string>(root["auth"], "username", "");
    c->password = Get<std::string>(root["auth"], "password", "");
    if (c->username.empty() != c->password.empty()) {
      return Status::InvalidArgument("auth: username and password go together");
    }
  }
  if (root["tls"]) {
    c->tls_cert = Get<std::string>(root["tls"], "cert", "");
    c->tls_key = Get<std::string>(root["tls"], "key", "");
    if (c->tls_cert.empty() != c->tls_key.empty()) {
      return Status::InvalidArgument("tls: cert and key go together");
    }
  }
  std::set<std::string> host_ids;
  for (const auto& h : root["hosts"]) {
    HostConfig hc;
    hc.id = Get<std::string>(h, "id", "");
    hc.agent = Get<std::string>(h, "agent", "");
    hc.local_memory_mib = Get<int64_t>(h, "localMemoryMiB", 0);
    if (hc.id.empty()) return Status::InvalidArgument("hosts: every host needs an id");
    if (!host_ids.insert(hc.id).second) {
      return Status::InvalidArgument("hosts: duplicate id " + hc.id);
    }
    c->hosts.push_back(hc);
  }
  std::set<std::string> app_ids;
  for (const auto& a : root["appliances"]) {
    ApplianceConfig ac;
    ac.id = Get<std::string>(a, "id", "");
    if (ac.id.empty()) return Status::InvalidArgument("appliances: every appliance needs an id");
    if (!app_ids.insert(ac.id).second) {
      return Status::InvalidArgument("appliances: duplicate id " + ac.id);
    }
    std::set<std::string> blade_ids;
    for (const auto& b : a["blades"]) {
      BladeConfig bc;
      bc.id = Get<std::string>(b, "id", "");
      bc.resource_block_mib = Get<int64_t>(b, "resourceBlockMiB", bc.resource_block_mib);
      bc.channels = Get<int>(b, "channels", bc.channels);
      bc.blocks_per_channel = Get<int>(b, "blocksPerChannel", bc.blocks_per_channel);
      const std::string where = "appliances." + ac.id + ".blades." + bc.id;
      if (bc.id.empty()) return Status::InvalidArgument("blades: every blade needs an id");
      if (!blade_ids.insert(bc.id).second) {
        return Status::InvalidArgument(where + ": duplicate blade id");
      }
      if (bc.resource_block_mib < 1) {
        return Status::InvalidArgument(where + ".resourceBlockMiB: must be >= 1");
      }
      if (bc.channels < 1 || bc.channels > 64) {
        return Status::InvalidArgument(where + ".channels: must be 1..64");
      }
      if (bc.blocks_per_channel < 1 || bc.blocks_per_channel > 4096) {
        return Status::InvalidArgument(where + ".blocksPerChannel: must be 1..4096");
      }
      std::set<std::string> port_ids;
      for (const auto& p : b["ports"]) {
        PortConfig pc;
        pc.id = Get<std::string>(p, "id", "");
        pc.host = Get<std::string>(p, "host", "");
        pc.host_port = Get<std::string>(p, "hostPort", "port0");
        pc.link_up = Get<bool>(p, "linkUp", true);
        if (pc.id.empty()) return Status::InvalidArgument(where + ".ports: every port needs an id");
        if (!port_ids.insert(pc.id).second) {
          return Status::InvalidArgument(where + ".ports: duplicate id " + pc.id);
        }
        if (!pc.host.empty() && !host_ids.count(pc.host)) {
          return Status::InvalidArgument(where + ".ports." + pc.id + ".host: unknown host " +
                                         pc.host);
        }
        bc.ports.push_back(pc);
      }
      ac.blades.push_back(bc);
    }
    c->appliances.push_back(ac);
  }
  if (root["faults"]) {
    const auto& f = root["faults"];
    for (const auto& r : f["rules"]) {
      FaultRule rule;
      CXLKV_RETURN_IF_ERROR(ParseRule(r, &rule));
      c->faults.rules.push_back(rule);
    }
    for (const auto& h : f["failMaterializeHosts"]) {
      c->faults.fail_materialize_hosts.push_back(h.as<std::string>());
    }
    for (const auto& p : f["failAssignPorts"]) {
      c->faults.fail_assign_ports.push_back(p.as<std::string>());
    }
    c->faults.crash_at = Get<std::string>(f, "crashAt", "");
  }
  return Status::OK();
}

}  // namespace

Status ParseFabricConfig(const std::string& yaml_text, FabricConfig* config) {
  FabricConfig c;
  try {
    YAML::Node root = YAML::Load(yaml_text);
    Status s = ParseImpl(root, &c);
    if (!s.ok()) return s;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string("parse config: ") + e.what());
  }
  *config = std::move(c);
  return Status::OK();
}

Status LoadFabricConfig(const std::string& path, FabricConfig* config) {
  std::string text;
  CXLKV_RETURN_IF_ERROR(base::ReadFile(path, &text));
  return ParseFabricConfig(text, config).WithContext("load config " + path);
}

}  // namespace cxlkv::fabric
