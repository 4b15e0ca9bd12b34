// Copyright cxlkv authors.
//
// The environment a container gets for its shared region, through the CDI
// spec cxlkv-hostd writes (one spec per allocation). The one definition of
// that contract: hostd writes these names, the cxlkv CLI (and anything that
// attaches from inside a pod) reads them.
//
//   CXL_DAX_DEVICE  path of the region inside the container: a devdax
//                   character device or a bind-mounted file
//   CXL_DAX_SIZE    bytes of the region, decimal
//   CXL_DAX_OFFSET  bytes from the start of the device to the region,
//                   decimal ("0" when the region is the whole device)
//
// Only for a region on memory that hardware does not keep coherent between
// the hosts sharing it (docs/coherence.md, docs/dra.md "Non-coherent
// regions"); absent otherwise, which means coherence=hardware:
//   CXL_COHERENCE            "software"
//   CXL_SOFTWARE_PARTITIONS  write partitions of the region, decimal 1..16
//   CXL_SOFTWARE_PARTITION   the partition this host holds, decimal
//                            0..partitions-1 (the region's hosts in the
//                            order the fabric manager assigned them)
//   CXL_PARTITION_LOCK       a file, the same one (bind-mounted) in every
//                            container of this node that got the region:
//                            whoever writes as this host's partition holds
//                            flock(LOCK_EX) on it first, so a second writer
//                            on the node is refused instead of taking the
//                            partition over (kubelet prepares a claim once
//                            per node: its pods share one spec)
#ifndef CXLKV_BASE_CXL_DAX_ENV_H_
#define CXLKV_BASE_CXL_DAX_ENV_H_

namespace cxlkv::base {

inline constexpr char kCxlDaxDeviceEnv[] = "CXL_DAX_DEVICE";
inline constexpr char kCxlDaxSizeEnv[] = "CXL_DAX_SIZE";
inline constexpr char kCxlDaxOffsetEnv[] = "CXL_DAX_OFFSET";
inline constexpr char kCxlCoherenceEnv[] = "CXL_COHERENCE";
inline constexpr char kCxlSoftwarePartitionsEnv[] = "CXL_SOFTWARE_PARTITIONS";
inline constexpr char kCxlSoftwarePartitionEnv[] = "CXL_SOFTWARE_PARTITION";
inline constexpr char kCxlPartitionLockEnv[] = "CXL_PARTITION_LOCK";

}  // namespace cxlkv::base

#endif  // CXLKV_BASE_CXL_DAX_ENV_H_
