// Copyright cxlkv authors.
//
// Test helpers for the GPU data path: a fixture that makes the device's
// primary context current (and skips, with the reason, where there is no
// GPU — unless CXLKV_REQUIRE_GPU=1, as scripts/gpu.sh sets, turns that into
// a failure), device buffers, and mapped /dev/shm files.
#ifndef CXLKV_SRC_TRANSFER_GPU_TESTUTIL_H_
#define CXLKV_SRC_TRANSFER_GPU_TESTUTIL_H_

#include <cuda.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace cxlkv::test {

// Why there is no usable GPU, or "" if there is one.
inline std::string NoGpuReason() {
  CUresult r = cuInit(0);
  if (r != CUDA_SUCCESS) return "cuInit failed (" + std::to_string(r) + "): no driver or no GPU";
  int n = 0;
  if (cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) return "no CUDA device";
  return "";
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = NoGpuReason();
    if (!why.empty()) {
      const char* req = std::getenv("CXLKV_REQUIRE_GPU");
      if (req != nullptr && std::string(req) == "1") FAIL() << "GPU required: " << why;
      GTEST_SKIP() << "GPU test skipped: " << why;
    }
    ASSERT_EQ(cuDeviceGet(&dev_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, dev_), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  }
  void TearDown() override {
    if (ctx_ != nullptr) {
      EXPECT_EQ(cuDevicePrimaryCtxRelease(dev_), CUDA_SUCCESS);
    }
  }
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
};

// cuMemAlloc'd bytes, freed on destruction.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) { EXPECT_EQ(cuMemAlloc(&p_, n), CUDA_SUCCESS); }
  ~DeviceBuffer() {
    if (p_) {
      EXPECT_EQ(cuMemFree(p_), CUDA_SUCCESS);
    }
  }
  CUdeviceptr get() const { return p_; }
  size_t size() const { return n_; }
  void Upload(const void* src, size_t n, size_t off = 0) const {
    ASSERT_EQ(cuMemcpyHtoD(p_ + off, src, n), CUDA_SUCCESS);
  }
  std::vector<uint8_t> Download(size_t off, size_t n) const {
    std::vector<uint8_t> v(n);
    EXPECT_EQ(cuMemcpyDtoH(v.data(), p_ + off, n), CUDA_SUCCESS);
    return v;
  }
  // Synchronous: cuMemsetD8 runs on the legacy stream, which the engine's
  // non-blocking streams do not wait for.
  void Fill(uint8_t byte) const {
    ASSERT_EQ(cuMemsetD8(p_, byte, n_), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  }

 private:
  CUdeviceptr p_ = 0;
  size_t n_;
};

// A /dev/shm file mapped MAP_SHARED (like a region), removed on destruction.
class ShmMapping {
 public:
  explicit ShmMapping(size_t n) : n_(n) {
    path_ = "/dev/shm/cxlkv-gputest-" + std::to_string(::getpid()) + "-" + std::to_string(n);
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(n)), 0);
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(p, MAP_FAILED);
    base_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
    ::close(fd);
  }
  ~ShmMapping() {
    if (base_) ::munmap(base_, n_);
    ::unlink(path_.c_str());
  }
  uint8_t* base() const { return base_; }
  size_t size() const { return n_; }

 private:
  std::string path_;
  uint8_t* base_ = nullptr;
  size_t n_;
};

}  // namespace cxlkv::test

#endif  // CXLKV_SRC_TRANSFER_GPU_TESTUTIL_H_
