// Copyright cxlkv authors.
#include "cxlkv/hostd/cdi.h"

#include <nlohmann/json.hpp>

#include "cxlkv/base/cxl_dax_env.h"
#include "cxlkv/base/file.h"

namespace cxlkv::hostd {

using nlohmann::json;

std::string CdiDeviceName(const std::string& allocation_id) {
  return std::string(kCdiKind) + "=" + allocation_id;
}

std::string CdiSpecJson(const Device& dev, const CdiOptions& opt) {
  std::string ctr_path = dev.path;
  if (dev.kind == "file" && !opt.container_dir.empty()) {
    ctr_path = opt.container_dir + "/" + dev.allocation_id;
  }
  json edits = {{"env",
                 {std::string(base::kCxlDaxDeviceEnv) + "=" + ctr_path,
                  std::string(base::kCxlDaxSizeEnv) + "=" + std::to_string(dev.size_bytes),
                  std::string(base::kCxlDaxOffsetEnv) + "=" + std::to_string(dev.offset_bytes)}}};
  if (dev.kind == "devdax") {
    json node = {{"path", dev.path}, {"hostPath", dev.path}, {"type", "c"}, {"permissions", "rw"}};
    // Numbers from sysfs let a runtime create the node without stat-ing it.
    if (dev.major >= 0 && dev.minor >= 0) {
      node["major"] = dev.major;
      node["minor"] = dev.minor;
    }
    edits["deviceNodes"] = json::array({node});
  } else {
    edits["mounts"] = json::array(
        {{{"hostPath", dev.path}, {"containerPath", ctr_path}, {"options", {"bind", "rw"}}}});
  }
  // 0.5.0 is the lowest version with device-node hostPath; mounts and env
  // are older.
  json spec = {
      {"cdiVersion", "0.5.0"},
      {"kind", kCdiKind},
      {"devices", json::array({{{"name", dev.allocation_id}, {"containerEdits", edits}}})}};
  return spec.dump(2) + "\n";
}

Status WriteCdiSpec(const Device& dev, const CdiOptions& opt, std::string* path) {
  CXLKV_RETURN_IF_ERROR(base::MakeDirs(opt.cdi_dir));
  std::string p = opt.cdi_dir + "/" + dev.allocation_id + ".json";
  CXLKV_RETURN_IF_ERROR(
      base::WriteFileAtomic(p, CdiSpecJson(dev, opt)).WithContext("write CDI spec"));
  *path = p;
  return Status::OK();
}

Status RemoveCdiSpec(const std::string& allocation_id, const CdiOptions& opt) {
  return base::RemoveFile(opt.cdi_dir + "/" + allocation_id + ".json");
}

}  // namespace cxlkv::hostd
