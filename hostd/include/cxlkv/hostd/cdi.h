// Copyright cxlkv authors.
//
// CDI spec writer: one transient spec per region,
// <cdi_dir>/<allocationId>.json, kind "cxlkv.dev/region", one device named by
// the allocation id, whose container edits set CXL_DAX_DEVICE, CXL_DAX_SIZE
// (bytes) and CXL_DAX_OFFSET (bytes, 0 when the region is the whole device)
// and either bind-mount the region file (kind "file") or add a `c` device
// node (kind "devdax").
//
// Thread-safety: free functions; concurrent calls on different ids are safe.
#ifndef CXLKV_HOSTD_CDI_H_
#define CXLKV_HOSTD_CDI_H_

#include <string>

#include "cxlkv/hostd/materializer.h"
#include "cxlkv/status.h"

namespace cxlkv::hostd {

inline constexpr const char* kCdiKind = "cxlkv.dev/region";

struct CdiOptions {
  std::string cdi_dir = "/var/run/cdi";
  // Where a file-backed region appears inside the container:
  // <container_dir>/<allocationId>. "" = the host path (the same path inside
  // and outside the container).
  std::string container_dir = "/dev/cxlkv";
};

// The spec as JSON text.
std::string CdiSpecJson(const Device& dev, const CdiOptions& opt);

// Writes the spec atomically; *path gets its file name. IOError on failure.
Status WriteCdiSpec(const Device& dev, const CdiOptions& opt, std::string* path);

// Removes the spec of `allocation_id`; absent is OK.
Status RemoveCdiSpec(const std::string& allocation_id, const CdiOptions& opt);

// "cxlkv.dev/region=<allocationId>": the fully-qualified CDI device name.
std::string CdiDeviceName(const std::string& allocation_id);

}  // namespace cxlkv::hostd

#endif  // CXLKV_HOSTD_CDI_H_
