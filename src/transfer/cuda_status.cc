// Copyright cxlkv authors.
#include "cuda_status.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

namespace cxlkv::internal {

Status CudaStatus(CUresult r, std::string_view what) {
  if (r == CUDA_SUCCESS) return Status::OK();
  const char* name = nullptr;
  const char* text = nullptr;
  // Both lookups are pure table reads; they cannot fail in a way we could act on.
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) name = "CUDA_ERROR_?";
  if (cuGetErrorString(r, &text) != CUDA_SUCCESS || text == nullptr) text = "";
  std::string msg(what);
  msg += ": ";
  msg += name;
  msg += " (";
  msg += text;
  msg += ")";
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      return Status::NoSpace(msg);
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_PERMITTED:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_STUB_LIBRARY:
      return Status::Unsupported(msg);
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_DEVICE:
      return Status::InvalidArgument(msg);
    default:
      return Status::IOError(msg);
  }
}

Status LaunchStatus(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::OK();
  return Status::IOError(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                         cudaGetErrorString(e) + ")");
}

void ReportCudaFailure(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED)
    std::fprintf(stderr, "cxlkv: %s\n", CudaStatus(r, what).ToString().c_str());
}

}  // namespace cxlkv::internal
