// Copyright cxlkv authors.
//
// CDI spec writer: one transient spec per region,
// <cdi_dir>/<allocationId>.json, kind "cxlkv.dev/region", one device named by
// the allocation id, whose container edits set CXL_DAX_DEVICE, CXL_DAX_SIZE
// (bytes) and CXL_DAX_OFFSET (bytes, 0 when the region is the whole device)
// and either bind-mount the region file (kind "file") or add a `c` device
// node (kind "devdax"). On a host whose memory is not kept coherent with the
// region's other hosts by hardware (CdiOptions::coherence), the edits also
// set CXL_COHERENCE=software, CXL_SOFTWARE_PARTITIONS and
// CXL_SOFTWARE_PARTITION (cxlkv/base/cxl_dax_env.h; docs/dra.md,
// "Non-coherent regions"), so the workload opens the region in
// coherence=software as this host's write partition.
//
// Thread-safety: free functions; concurrent calls on different ids are safe.
#ifndef CXLKV_HOSTD_CDI_H_
#define CXLKV_HOSTD_CDI_H_

#include <cstdint>
#include <string>
#include <vector>

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
  // "hardware" (the default: nothing added to the environment) or
  // "software": this host shares the blade's memory with other hosts
  // without hardware coherence (CXL 1.1/2.0 multi-host), so its workloads
  // must use coherence=software (docs/coherence.md).
  std::string coherence = "hardware";
  // coherence=software: the hosts that may write regions of this blade, in
  // the order of their write partitions (e.g. the blade's ports), and this
  // host's index among them. Set by ResolveCoherence.
  std::vector<std::string> software_hosts;
  int32_t software_partition = -1;
};

// Checks the coherence fields and sets software_partition to the index of
// `host_id` in software_hosts. InvalidArgument (naming the value) for an
// unknown mode, software mode without hosts, more than 16 hosts, a host
// listed twice, or `host_id` not among them; hosts given in hardware mode.
Status ResolveCoherence(const std::string& host_id, CdiOptions* opt);

// coherence=software: the host path of the region's partition lock,
// <cdi_dir>/<allocation_id>.lock (an empty file WriteCdiSpec creates and
// RemoveCdiSpec removes; the spec bind-mounts it and names it in
// CXL_PARTITION_LOCK, base/include/cxlkv/base/cxl_dax_env.h).
std::string PartitionLockPath(const std::string& allocation_id, const CdiOptions& opt);

// The spec as JSON text.
std::string CdiSpecJson(const Device& dev, const CdiOptions& opt);

// Writes the spec atomically (coherence=software: after creating the
// partition lock file); *path gets its file name. IOError on failure.
Status WriteCdiSpec(const Device& dev, const CdiOptions& opt, std::string* path);

// Removes the spec of `allocation_id` and its partition lock; absent is OK.
Status RemoveCdiSpec(const std::string& allocation_id, const CdiOptions& opt);

// "cxlkv.dev/region=<allocationId>": the fully-qualified CDI device name.
std::string CdiDeviceName(const std::string& allocation_id);

}  // namespace cxlkv::hostd

#endif  // CXLKV_HOSTD_CDI_H_
