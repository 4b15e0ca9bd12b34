// Copyright cxlkv authors.
//
// HostRegistration: a host address range (a mapped region) registered with
// CUDA so that the copy engines can DMA to and from it directly. Registered
// in segments: single registrations of very large ranges fail on some hosts
// (one 512 GiB call was refused where 128 GiB ones worked), and the per-call
// cost (about 125 ms per GiB measured on the GPU machine) is paid segment by
// segment. Unregisters on destruction.
//
// A copy must not span two segments (the driver treats each registration as
// its own allocation): SegmentEnd() tells callers where to split.
//
// Thread-safety: immutable after Register; const methods are safe from any
// thread. Needs the CUDA context it was created in to be current.
#ifndef CXLKV_SRC_TRANSFER_HOST_REGISTRATION_H_
#define CXLKV_SRC_TRANSFER_HOST_REGISTRATION_H_

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cxlkv/status.h"

namespace cxlkv::internal {

class HostRegistration {
 public:
  // Registers [base, base + len) rounded out to whole pages, in segments of
  // `segment_bytes` (rounded up to 2 MiB). The range must be mapped.
  // kInvalidArgument for len 0 or a range already registered; kUnsupported
  // when the device cannot register host memory; kIOError/kNoSpace when the
  // driver refuses (the message names the segment). On failure nothing
  // stays registered.
  static Status Register(void* base, uint64_t len, uint64_t segment_bytes,
                         std::unique_ptr<HostRegistration>* out);
  ~HostRegistration();
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;

  uint8_t* begin() const { return begin_; }
  uint8_t* end() const { return end_; }
  size_t num_segments() const { return segments_.size(); }
  bool Contains(const void* p, uint64_t len) const {
    auto* b = static_cast<const uint8_t*>(p);
    return b >= begin_ && len <= static_cast<uint64_t>(end_ - b);
  }
  // End of the segment that holds p. REQUIRES: Contains(p, 1).
  const uint8_t* SegmentEnd(const void* p) const;
  // The device address of host byte p, for kernels that read or write the
  // range directly (registered with DEVICEMAP). REQUIRES: Contains(p, 1).
  uint64_t DevicePointer(const void* p) const;

 private:
  HostRegistration() = default;
  uint8_t* begin_ = nullptr;
  uint8_t* end_ = nullptr;
  uint64_t segment_bytes_ = 0;
  std::vector<uint8_t*> segments_;         // start of each registered segment
  std::vector<CUdeviceptr> dev_segments_;  // its device address
};

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_TRANSFER_HOST_REGISTRATION_H_
