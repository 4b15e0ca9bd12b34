// Copyright cxlkv authors.
#include "host_registration.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "cuda_status.h"

namespace cxlkv::internal {

Status HostRegistration::Register(void* base, uint64_t len, uint64_t segment_bytes,
                                  std::unique_ptr<HostRegistration>* out) {
  if (base == nullptr || len == 0) {
    // cuMemHostRegister refuses size 0 with a bare INVALID_VALUE; say why.
    return Status::InvalidArgument("register host range: empty range");
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  constexpr uint64_t k2M = 2ull << 20;
  segment_bytes = std::max<uint64_t>(k2M, (segment_bytes + k2M - 1) / k2M * k2M);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(base) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(base) + len + page - 1) / page * page;

  std::unique_ptr<HostRegistration> r(new HostRegistration());
  r->begin_ = reinterpret_cast<uint8_t*>(lo);
  r->end_ = reinterpret_cast<uint8_t*>(hi);
  r->segment_bytes_ = segment_bytes;
  for (uintptr_t s = lo; s < hi; s += segment_bytes) {
    const uint64_t n = std::min<uint64_t>(segment_bytes, hi - s);
    // PORTABLE: usable from every context (PyTorch and we share the primary
    // one, but a caller may create others). DEVICEMAP: also give it a device
    // address, which kernels reading region bytes directly would need.
    const CUresult rc = cuMemHostRegister(
        reinterpret_cast<void*>(s), n, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    if (rc != CUDA_SUCCESS) {
      // The destructor of r unregisters the segments done so far.
      char what[160];
      std::snprintf(what, sizeof(what), "cuMemHostRegister(segment %zu at +%llu, %llu bytes)",
                    r->segments_.size(), static_cast<unsigned long long>(s - lo),
                    static_cast<unsigned long long>(n));
      if (rc == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
        return Status::InvalidArgument(std::string(what) +
                                       ": range already registered in this process");
      }
      return CudaStatus(rc, what);
    }
    r->segments_.push_back(reinterpret_cast<uint8_t*>(s));
    // With unified addressing this is the host address itself on most
    // systems; ask anyway (CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM may be 0).
    CUdeviceptr d = 0;
    const CUresult drc = cuMemHostGetDevicePointer(&d, reinterpret_cast<void*>(s), 0);
    if (drc != CUDA_SUCCESS) return CudaStatus(drc, "cuMemHostGetDevicePointer");
    r->dev_segments_.push_back(d);
  }
  *out = std::move(r);
  return Status::OK();
}

HostRegistration::~HostRegistration() {
  for (uint8_t* s : segments_) {
    ReportCudaFailure(cuMemHostUnregister(s), "cuMemHostUnregister");
  }
}

uint64_t HostRegistration::DevicePointer(const void* p) const {
  const uint64_t off = static_cast<const uint8_t*>(p) - begin_;
  const uint64_t seg = off / segment_bytes_;
  return dev_segments_[seg] + (off - seg * segment_bytes_);
}

const uint8_t* HostRegistration::SegmentEnd(const void* p) const {
  const uint64_t off = static_cast<const uint8_t*>(p) - begin_;
  const uint64_t seg_end = (off / segment_bytes_ + 1) * segment_bytes_;
  return begin_ + std::min<uint64_t>(seg_end, end_ - begin_);
}

}  // namespace cxlkv::internal
