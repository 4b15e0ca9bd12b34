// Copyright cxlkv authors.
//
// Maps CUDA driver results to Status. The transfer engine calls the driver
// API (cu*) rather than the runtime (cuda*) wherever a failure is expected
// and recoverable (registration, allocation, copies): a failed runtime call
// leaves a thread-local "last error" that a later, unrelated runtime call in
// the same thread (PyTorch's, say) would report as its own. Kernel launches
// go through the runtime and are checked with cudaGetLastError at once.
#ifndef CXLKV_SRC_TRANSFER_CUDA_STATUS_H_
#define CXLKV_SRC_TRANSFER_CUDA_STATUS_H_

#include <cuda.h>

#include <string_view>

#include "cxlkv/status.h"

namespace cxlkv::internal {

// OK for CUDA_SUCCESS. Otherwise "<what>: <CUDA_ERROR_NAME> (<description>)"
// with the code: kNoSpace for out-of-memory, kUnsupported for
// not-supported/not-permitted/no-device, kInvalidArgument for invalid
// value/handle, kIOError for everything else (the driver refused).
Status CudaStatus(CUresult r, std::string_view what);

// After a kernel launch: OK, or kIOError "<what>: <cudaError name>
// (<description>)" for the runtime's last error (cudaGetLastError, which
// also clears it, so a later runtime call in this thread does not see it).
Status LaunchStatus(const char* what);

// For destructors, which cannot return a Status: prints CudaStatus(r, what)
// to stderr unless r is CUDA_SUCCESS or CUDA_ERROR_DEINITIALIZED (the
// context is already gone at process exit; nothing is left to free).
void ReportCudaFailure(CUresult r, const char* what);

}  // namespace cxlkv::internal

// Returns from the enclosing function with a Status if the driver call fails.
#define CXLKV_CU(call) CXLKV_RETURN_IF_ERROR(::cxlkv::internal::CudaStatus((call), #call))

#endif  // CXLKV_SRC_TRANSFER_CUDA_STATUS_H_
