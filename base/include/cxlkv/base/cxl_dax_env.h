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
#ifndef CXLKV_BASE_CXL_DAX_ENV_H_
#define CXLKV_BASE_CXL_DAX_ENV_H_

namespace cxlkv::base {

inline constexpr char kCxlDaxDeviceEnv[] = "CXL_DAX_DEVICE";
inline constexpr char kCxlDaxSizeEnv[] = "CXL_DAX_SIZE";
inline constexpr char kCxlDaxOffsetEnv[] = "CXL_DAX_OFFSET";

}  // namespace cxlkv::base

#endif  // CXLKV_BASE_CXL_DAX_ENV_H_
