// Copyright cxlkv authors.
//
// JSON views of the emulated topology, shaped as cfm-openapi.yaml says.
#include <set>

#include "server_internal.h"

namespace cxlkv::fabric::internal {

using nlohmann::json;

std::string ApplianceUri(const std::string& aid) { return "/cfm/v1/appliances/" + aid; }
std::string BladeUri(const std::string& aid, const std::string& bid) {
  return ApplianceUri(aid) + "/blades/" + bid;
}

json Collection(const std::vector<std::string>& uris) {
  json members = json::array();
  for (const auto& u : uris) members.push_back({{"uri", u}});
  return {{"memberCount", uris.size()}, {"members", members}};
}

namespace {
void PutMiB(json& j, const char* key, int64_t v) {
  if (v >= 1) j[key] = v;  // the schema's `mebibytes` has minimum 1
}
}  // namespace

json ApplianceJson(const ApplianceState& a) {
  json j = {{"id", a.id},
            {"ipAddress", "127.0.0.1"},
            {"port", 443},
            {"status", "online"},
            {"blades", {{"uri", ApplianceUri(a.id) + "/blades"}}}};
  int64_t total = 0, alloc = 0;
  for (const auto& b : a.blades) {
    if (!b.managed) continue;
    total += b.TotalMiB();
    alloc += b.AllocatedMiB();
  }
  PutMiB(j, "totalMemoryAvailableMiB", total - alloc);
  PutMiB(j, "totalMemoryAllocatedMiB", alloc);
  return j;
}

json BladeJson(const ApplianceState& a, const BladeState& b) {
  std::string u = BladeUri(a.id, b.id);
  json j = {{"id", b.id},
            {"ipAddress", "127.0.0.1"},
            {"port", 443},
            {"status", "online"},
            {"ports", {{"uri", u + "/ports"}}},
            {"resources", {{"uri", u + "/resources"}}},
            {"memory", {{"uri", u + "/memory"}}}};
  PutMiB(j, "totalMemoryAvailableMiB", b.TotalMiB() - b.AllocatedMiB());
  PutMiB(j, "totalMemoryAllocatedMiB", b.AllocatedMiB());
  return j;
}

namespace {
// A stable GCXLID-shaped id: 8 hex bytes from a hash of the name, ":0000".
std::string GcxlId(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  char buf[40];
  snprintf(buf, sizeof(buf), "%02x-%02x-%02x-%02x-%02x-%02x-%02x-%02x:0000",
           unsigned(h >> 56 & 255), unsigned(h >> 48 & 255), unsigned(h >> 40 & 255),
           unsigned(h >> 32 & 255), unsigned(h >> 24 & 255), unsigned(h >> 16 & 255),
           unsigned(h >> 8 & 255), unsigned(h & 255));
  return buf;
}

const HostState* HostByConfigId(const FabricState& s, const std::string& cfg) {
  for (const auto& h : s.hosts) {
    if (h.config_id == cfg && h.managed) return &h;
  }
  return nullptr;
}
}  // namespace

json BladePortJson(const FabricState& s, const ApplianceState& a, const BladeState& b,
                   const PortConfig& p) {
  json j = {{"id", p.id},
            {"gCxlId", GcxlId(p.host.empty() ? a.config_id + "/" + b.config_id + "/" + p.id
                                             : p.host + "/" + p.host_port)},
            {"portProtocol", "CXL"},
            {"portMedium", "Electrical"},
            {"statusHealth", "OK"},
            {"statusState", "Enabled"},
            {"width", 16},
            {"linkState", "Enabled"}};
  const HostState* h = p.host.empty() ? nullptr : HostByConfigId(s, p.host);
  bool up = p.link_up && !p.host.empty();
  j["linkStatus"] = up ? "LinkUp" : "LinkDown";
  if (up) j["currentSpeedGbps"] = 32;
  if (h != nullptr) j["linkedPortUri"] = "/cfm/v1/hosts/" + h->id + "/ports/" + p.host_port;
  return j;
}

json ResourceJson(const BladeState& b, int index) {
  int ch = index / b.geometry.blocks_per_channel;
  int pos = index % b.geometry.blocks_per_channel;
  return {{"id", "resourceblock" + std::to_string(index)},
          {"compositionStatus", {{"compositionState", b.used[index] ? "Composed" : "Unused"}}},
          {"capacityMiB", b.geometry.block_mib},
          {"dataWidthBits", 64},
          {"memoryType", "DRAM"},
          {"memoryDeviceType", "DDR5"},
          {"manufacturer", "cxlkv emulator"},
          {"operatingSpeedMhz", 4800},
          {"partNumber", "CXLKV-EMU-BLOCK"},
          {"serialNumber", b.config_id + "-" + std::to_string(index)},
          {"rankCount", 1},
          {"channelId", ch},
          {"channelResourceIndex", pos}};
}

std::vector<std::string> HostPortIds(const FabricState& s, const HostState& h) {
  std::set<std::string> ids;
  for (const auto& a : s.appliances) {
    for (const auto& b : a.blades) {
      for (const auto& p : b.ports) {
        if (p.host == h.config_id) ids.insert(p.host_port);
      }
    }
  }
  return {ids.begin(), ids.end()};
}

namespace {
// The blade port cabled to host port `pid`, with its appliance and blade.
bool PeerPort(const FabricState& s, const HostState& h, const std::string& pid,
              const ApplianceState** ao, const BladeState** bo, const PortConfig** po) {
  for (const auto& a : s.appliances) {
    for (const auto& b : a.blades) {
      for (const auto& p : b.ports) {
        if (p.host == h.config_id && p.host_port == pid) {
          *ao = &a;
          *bo = &b;
          *po = &p;
          return true;
        }
      }
    }
  }
  return false;
}
}  // namespace

json HostJson(const FabricState& s, const HostState& h) {
  std::string u = "/cfm/v1/hosts/" + h.id;
  json j = {{"id", h.id},
            {"ipAddress", "127.0.0.1"},
            {"port", 8082},
            {"status", "online"},
            {"ports", {{"uri", u + "/ports"}}},
            {"memory-devices", {{"uri", u + "/memory-devices"}}},
            {"memory", {{"uri", u + "/memory"}}}};
  int64_t remote = 0;
  for (const auto& [id, r] : s.regions) {
    for (const auto& m : r.mappings) {
      if (m.host_id == h.id) remote += r.size_mib;
    }
  }
  PutMiB(j, "localMemoryMiB", h.local_memory_mib);
  PutMiB(j, "remoteMemoryMiB", remote);
  return j;
}

json HostPortJson(const FabricState& s, const HostState& h, const std::string& pid) {
  const ApplianceState* a = nullptr;
  const BladeState* b = nullptr;
  const PortConfig* p = nullptr;
  json j = {{"id", pid},
            {"statusHealth", "OK"},
            {"statusState", "Enabled"},
            {"portProtocol", "CXL"},
            {"portMedium", "Electrical"},
            {"width", 16},
            {"linkState", "Enabled"}};
  if (PeerPort(s, h, pid, &a, &b, &p)) {
    j["gCxlId"] = GcxlId(h.config_id + "/" + pid);
    j["linkStatus"] = p->link_up ? "LinkUp" : "LinkDown";
    if (a->managed && b->managed) j["linkedPortUri"] = BladeUri(a->id, b->id) + "/ports/" + p->id;
  }
  return j;
}

json MemoryDeviceJson(const FabricState& s, const HostState& h, const std::string& pid) {
  int64_t mib = 0;
  for (const auto& [id, r] : s.regions) {
    for (const auto& m : r.mappings) {
      if (m.host_id == h.id && m.host_port == pid) mib += r.size_mib;
    }
  }
  json j = {
      {"id", pid + "-ld0"},
      {"deviceType", "CXL Type 3"},
      {"statusState", "Enabled"},
      {"linkStatus",
       {{"currentSpeedGTps", 32}, {"maxSpeedGTps", 32}, {"currentWidth", 16}, {"maxWidth", 16}}}};
  PutMiB(j, "memorySizeMiB", mib);
  return j;
}

std::string CheckCredentials(const json& body) {
  if (!body.is_object()) return "credentials must be a JSON object";
  for (const char* k : {"username", "password", "ipAddress"}) {
    if (!body.contains(k)) return std::string(k) + " is required";
    if (!body[k].is_string()) return std::string(k) + " must be a string";
    if (body[k].get<std::string>().size() > 256) return std::string(k) + " is longer than 256";
  }
  if (!body.contains("port")) return "port is required";
  if (!body["port"].is_number_integer()) return "port must be an integer";
  int64_t port = body["port"].get<int64_t>();
  if (port < 80 || port > 65535) return "port must be 80..65535";
  if (body.contains("insecure") && !body["insecure"].is_boolean())
    return "insecure must be a boolean";
  for (const char* k : {"protocol", "backend", "customId"}) {
    if (body.contains(k) && !body[k].is_string()) return std::string(k) + " must be a string";
  }
  return "";
}

}  // namespace cxlkv::fabric::internal
