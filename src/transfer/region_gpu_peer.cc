// Copyright cxlkv authors.
//
// The "other process" of region_gpu_test: attaches to a region another
// process stored blocks into from its GPU, loads them into this process's
// GPU through RegionGpu, and checks every byte against the pattern. Also
// loads one block with the CPU and CRC verification on, which proves the
// writer's GPU-computed CRC equals the engine's CPU CRC32C.
//
//   region_gpu_peer <region path> <region bytes> <slot bytes> <blocks> <first id>
// Exit status 0: all blocks bit-exact; 1: a mismatch or error (printed).
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "region_gpu.h"
#include "testutil.h"

using namespace cxlkv;

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "peer: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) return Fail("usage: region_gpu_peer PATH REGION_BYTES SLOT_BYTES BLOCKS FIRST_ID");
  const std::string path = argv[1];
  const uint64_t region_bytes = std::strtoull(argv[2], nullptr, 10);
  const uint64_t slot = std::strtoull(argv[3], nullptr, 10);
  const size_t n = std::strtoull(argv[4], nullptr, 10);
  const uint64_t first = std::strtoull(argv[5], nullptr, 10);

  RegionOptions o = test::TestOptions(region_bytes, slot);
  o.create_if_missing = false;
  std::unique_ptr<Region> region;
  Status s = Region::Open(path, o, &region);
  if (!s.ok()) return Fail("open: " + s.ToString());
  NamespaceId ns = 0;
  s = region->RegisterNamespace(NamespaceDesc{"gpu-test", "bfloat16", "HND", 0, 0}, &ns);
  if (!s.ok()) return Fail("namespace: " + s.ToString());

  CUdevice dev;
  CUcontext ctx;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    return Fail("no usable GPU");
  }
  std::unique_ptr<RegionGpu> gpu;
  s = RegionGpu::Open(region.get(), RegionGpuOptions{}, &gpu);
  if (!s.ok()) return Fail("RegionGpu::Open: " + s.ToString());
  if (!gpu->direct()) return Fail("region could not be registered for the direct path");

  CUdeviceptr dst = 0;
  if (cuMemAlloc(&dst, n * slot) != CUDA_SUCCESS) return Fail("cuMemAlloc");
  if (cuMemsetD8(dst, 0x5A, n * slot) != CUDA_SUCCESS) return Fail("cuMemsetD8");
  std::vector<BlockKey> keys(n);
  std::vector<uint64_t> ptr(n), len(n, slot);
  std::vector<uint32_t> first_piece(n + 1);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = BlockKey::FromId(first + i);
    ptr[i] = dst + i * slot;
    first_piece[i] = static_cast<uint32_t>(i);
  }
  first_piece[n] = static_cast<uint32_t>(n);
  GpuLoadResult res;
  s = gpu->Load(ns, keys.data(), GpuBlocks{ptr.data(), len.data(), first_piece.data(), n},
                GpuPath::kDirect, &res);
  if (!s.ok()) return Fail("load: " + s.ToString());
  for (size_t i = 0; i < n; ++i) {
    if (!res.status[i].ok())
      return Fail("block " + std::to_string(i) + ": " + res.status[i].ToString());
  }
  std::vector<uint8_t> got(slot), want(slot);
  for (size_t i = 0; i < n; ++i) {
    if (cuMemcpyDtoH(got.data(), dst + i * slot, slot) != CUDA_SUCCESS) return Fail("cuMemcpyDtoH");
    test::FillPattern(first + i, want.data(), slot);
    if (std::memcmp(got.data(), want.data(), slot) != 0) {
      return Fail("block " + std::to_string(i) + " differs from what the writer stored");
    }
  }
  LoadOptions lo;
  lo.verify_crc = true;
  s = region->Load(ns, keys[0], got.data(), got.size(), lo);
  if (!s.ok()) return Fail("CPU load with CRC verification: " + s.ToString());
  if (cuMemFree(dst) != CUDA_SUCCESS) return Fail("cuMemFree");
  std::printf("peer: %zu blocks of %llu bytes loaded to the GPU bit-exact; CPU CRC agrees\n", n,
              static_cast<unsigned long long>(slot));
  return 0;
}
