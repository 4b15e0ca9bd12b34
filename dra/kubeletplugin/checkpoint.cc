// Copyright cxlkv authors.
#include "kubeletplugin/checkpoint.h"

#include <zlib.h>

#include <nlohmann/json.hpp>

#include "cxlkv/base/file.h"

namespace cxlkv::dra {

using nlohmann::json;

namespace {

uint32_t Crc32(const std::string& s) {
  return static_cast<uint32_t>(
      ::crc32(0L, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

json DeviceToJson(const PreparedDevice& d) {
  json j = {{"requestNames", d.request_names},
            {"poolName", d.pool_name},
            {"deviceName", d.device_name},
            {"cdiDeviceIds", d.cdi_device_ids}};
  if (!d.share_id.empty()) j["shareId"] = d.share_id;
  return j;
}

json ClaimToJson(const ClaimEntry& c) {
  json devs = json::array();
  for (const auto& d : c.devices) devs.push_back(DeviceToJson(d));
  json j = {{"uid", c.uid},
            {"namespace", c.ns},
            {"name", c.name},
            {"memoryId", c.memory_id},
            {"state", PrepareStateName(c.state)},
            {"devices", devs},
            {"updatedUnix", c.updated_unix}};
  // Only when known: an entry without it reads the same to an older plugin.
  if (c.assign_epoch > 0) j["assignEpoch"] = c.assign_epoch;
  return j;
}

Status ClaimFromJson(const json& j, ClaimEntry* c) {
  try {
    c->uid = j.at("uid").get<std::string>();
    c->ns = j.at("namespace").get<std::string>();
    c->name = j.at("name").get<std::string>();
    c->memory_id = j.value("memoryId", "");
    std::string st = j.at("state").get<std::string>();
    if (st == PrepareStateName(PrepareState::kPrepareStarted)) {
      c->state = PrepareState::kPrepareStarted;
    } else if (st == PrepareStateName(PrepareState::kPrepareCompleted)) {
      c->state = PrepareState::kPrepareCompleted;
    } else {
      return Status::Corruption("claim " + c->uid + ": unknown state \"" + st + "\"");
    }
    c->updated_unix = j.value("updatedUnix", int64_t{0});
    c->assign_epoch = j.value("assignEpoch", uint64_t{0});
    c->devices.clear();
    for (const auto& dj : j.value("devices", json::array())) {
      PreparedDevice d;
      d.request_names = dj.value("requestNames", std::vector<std::string>{});
      d.pool_name = dj.at("poolName").get<std::string>();
      d.device_name = dj.at("deviceName").get<std::string>();
      d.share_id = dj.value("shareId", "");
      d.cdi_device_ids = dj.value("cdiDeviceIds", std::vector<std::string>{});
      c->devices.push_back(std::move(d));
    }
  } catch (const json::exception& e) {
    return Status::Corruption(std::string("claim entry: ") + e.what());
  }
  if (c->uid.empty()) return Status::Corruption("claim entry without uid");
  return Status::OK();
}

}  // namespace

const char* PrepareStateName(PrepareState s) {
  switch (s) {
    case PrepareState::kPrepareStarted:
      return "PrepareStarted";
    case PrepareState::kPrepareCompleted:
      return "PrepareCompleted";
  }
  return "?";
}

std::string EncodeCheckpoint(const Checkpoint& cp) {
  json claims = json::object();
  for (const auto& [uid, c] : cp.claims) claims[uid] = ClaimToJson(c);
  json payload = {{"bootId", cp.boot_id}, {"nodeName", cp.node_name}, {"claims", claims}};
  // Written only when non-empty: a file without pending releases reads the
  // same to a plugin that predates the field.
  if (!cp.pending_releases.empty()) payload["pendingReleases"] = cp.pending_releases;
  json epochs = json::object();
  for (const auto& [id, e] : cp.release_epochs) {
    if (cp.pending_releases.count(id) && e > 0) epochs[id] = e;
  }
  if (!epochs.empty()) payload["pendingReleaseEpochs"] = epochs;
  // The checksum covers the payload's canonical dump (object keys sorted), so
  // it can be recomputed from the parsed value whatever the file's spacing.
  json j = {{"version", cp.version}, {"checksum", Crc32(payload.dump())}, {"data", payload}};
  return j.dump(2) + "\n";
}

Status DecodeCheckpoint(const std::string& text, Checkpoint* cp) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Corruption("not a JSON object");
  if (!j.contains("version") || !j["version"].is_number_integer()) {
    return Status::Corruption("no version");
  }
  int version = j["version"].get<int>();
  if (version > Checkpoint::kVersion || version < 1) {
    return Status::Unsupported("checkpoint version " + std::to_string(version) +
                               " (this plugin reads version " +
                               std::to_string(Checkpoint::kVersion) + ")");
  }
  if (!j.contains("data") || !j["data"].is_object() || !j.contains("checksum") ||
      !j["checksum"].is_number_unsigned()) {
    return Status::Corruption("no data or checksum");
  }
  const json& data = j["data"];
  uint32_t want = j["checksum"].get<uint32_t>();
  uint32_t got = Crc32(data.dump());
  if (want != got) {
    return Status::Corruption("checksum mismatch (stored " + std::to_string(want) + ", computed " +
                              std::to_string(got) + ")");
  }
  Checkpoint out;
  out.version = version;
  try {
    out.boot_id = data.at("bootId").get<std::string>();
    out.node_name = data.value("nodeName", "");
    const json claims = data.value("claims", json::object());
    for (const auto& [uid, cj] : claims.items()) {
      ClaimEntry c;
      CXLKV_RETURN_IF_ERROR(ClaimFromJson(cj, &c));
      if (c.uid != uid) return Status::Corruption("claim key " + uid + " holds claim " + c.uid);
      out.claims[uid] = std::move(c);
    }
    for (const auto& id : data.value("pendingReleases", json::array())) {
      if (!id.is_string() || id.get<std::string>().empty()) {
        return Status::Corruption("pendingReleases: not a list of region ids");
      }
      out.pending_releases.insert(id.get<std::string>());
    }
    const json epochs = data.value("pendingReleaseEpochs", json::object());
    if (!epochs.is_object()) return Status::Corruption("pendingReleaseEpochs: not an object");
    for (const auto& [id, e] : epochs.items()) {
      if (!e.is_number_unsigned()) {
        return Status::Corruption("pendingReleaseEpochs: " + id + ": not an epoch");
      }
      if (out.pending_releases.count(id)) out.release_epochs[id] = e.get<uint64_t>();
    }
  } catch (const json::exception& e) {
    return Status::Corruption(std::string("checkpoint data: ") + e.what());
  }
  *cp = std::move(out);
  return Status::OK();
}

Status LoadCheckpoint(const std::string& path, Checkpoint* cp) {
  std::string text;
  Status s = base::ReadFile(path, &text);
  if (s.IsNotFound()) return s;
  if (!s.ok()) return s.WithContext("read checkpoint " + path);
  return DecodeCheckpoint(text, cp).WithContext("read checkpoint " + path);
}

Status SaveCheckpoint(const std::string& path, const Checkpoint& cp) {
  return base::WriteFileAtomic(path, EncodeCheckpoint(cp)).WithContext("write checkpoint " + path);
}

Status ReadBootId(std::string* boot_id, const std::string& path) {
  std::string text;
  Status s = base::ReadFile(path, &text);
  if (!s.ok()) return Status::IOError("read boot id " + path + ": " + s.message());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.empty()) return Status::IOError("read boot id " + path + ": empty");
  *boot_id = text;
  return Status::OK();
}

}  // namespace cxlkv::dra
