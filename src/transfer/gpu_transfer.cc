// Copyright cxlkv authors.
#include "gpu_transfer.h"

#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "crc32c_gpu.h"
#include "cuda_status.h"
#include "host_registration.h"
#include "sm_copy.h"

namespace cxlkv {

using internal::CudaStatus;
using internal::GpuCrc32c;
using internal::HostRegistration;
using internal::ReportCudaFailure;
using internal::SmCopier;
using internal::SmRange;

const char* GpuPathName(GpuPath p) {
  switch (p) {
    case GpuPath::kDirect:
      return "direct";
    case GpuPath::kStaged:
      return "staged";
  }
  return "?";
}

const char* GpuCopyMethodName(GpuCopyMethod m) {
  switch (m) {
    case GpuCopyMethod::kAuto:
      return "auto";
    case GpuCopyMethod::kDma:
      return "dma";
    case GpuCopyMethod::kSm:
      return "sm";
  }
  return "?";
}

uint64_t GpuBatch::total_bytes() const {
  uint64_t t = 0;
  for (uint64_t n : block_len_) t += n;
  return t;
}

namespace {

constexpr int kMaxGroups = 32;

// One DMA: dst <- src, n bytes; exactly one side is device memory.
struct Copy {
  CUdeviceptr dst, src;
  size_t n;
};

// One staged fragment: a device range and its host bytes, at `off` in a
// staging buffer.
struct Fragment {
  uint64_t gpu;
  uint8_t* host;
  uint64_t len;
  uint64_t off;
};

}  // namespace

struct GpuTransferEngine::Impl {
  GpuTransferOptions opts;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  bool ctx_retained = false;
  std::string name;
  CUstream copy = nullptr;  // DMA
  CUstream crc = nullptr;   // CRC kernels and their descriptor uploads
  CUevent group_ev[kMaxGroups] = {};
  CUevent after_ev = nullptr;
  CUevent stage_ev[2] = {};
  uint8_t* staging[2] = {};
  std::unique_ptr<GpuCrc32c> crc32c;
  std::unique_ptr<SmCopier> sm;
  std::vector<std::unique_ptr<HostRegistration>> regs;
  bool batch_api = true;
  GpuTransferStats stats;
  mutable std::mutex mu;

  // Scratch reused between calls.
  std::vector<Copy> copies;  // by the copy engines
  std::vector<size_t> block_copy_first;
  std::vector<SmRange> sm_ranges;  // by SM threads
  std::vector<size_t> block_sm_first;
  std::vector<CUdeviceptr> dsts, srcs;
  std::vector<size_t> sizes;

  ~Impl();
  Status Init();
  const HostRegistration* FindRegistration(const void* p, uint64_t len) const {
    for (const auto& r : regs)
      if (r->Contains(p, len)) return r.get();
    return nullptr;
  }
  Status BuildDirectCopies(const GpuBatch& b, bool to_gpu);
  // Whether SM threads move a piece of `piece_len` bytes of a batch of
  // `batch_bytes` (see GpuTransferOptions for the measurements behind kAuto).
  bool UseSm(uint64_t piece_len, uint64_t batch_bytes, bool to_gpu) const {
    switch (opts.copy_method) {
      case GpuCopyMethod::kDma:
        return false;
      case GpuCopyMethod::kSm:
        return true;
      case GpuCopyMethod::kAuto:
        break;
    }
    if (to_gpu && batch_bytes >= opts.dma_load_min_batch_bytes) return false;
    return piece_len <= opts.sm_max_piece_bytes;
  }
  Status Issue(size_t begin, size_t end, bool to_gpu, CUstream s);
  // Both kinds of copies of blocks [b0, b1) on stream s.
  Status IssueBlocks(size_t b0, size_t b1, bool to_gpu, CUstream s);
  Status WaitFor(uintptr_t after_stream);
  Status Drain();
  Status Finish(Status s) {
    // Never return while a DMA may still touch the caller's memory.
    Status d = Drain();
    return s.ok() ? d : s;
  }
  Status LoadDirect(const GpuBatch& b, uint32_t* crc_out);
  Status StoreDirect(const GpuBatch& b, uint32_t* crc_out);
  void BuildFragments(const GpuBatch& b, std::vector<std::vector<Fragment>>* chunks) const;
  Status LoadStaged(const GpuBatch& b, uint32_t* crc_out);
  Status StoreStaged(const GpuBatch& b, uint32_t* crc_out);
  void CollectCrc(const GpuBatch& b, uint32_t* crc_out) const {
    for (size_t i = 0; i < b.num_blocks(); ++i) crc_out[i] = crc32c->Result(i);
  }
};

namespace {

// Makes the engine's context current for the scope of one call.
class ContextScope {
 public:
  explicit ContextScope(CUcontext c) {
    status_ = CudaStatus(cuCtxPushCurrent(c), "cuCtxPushCurrent");
  }
  ~ContextScope() {
    if (!status_.ok()) return;
    CUcontext popped = nullptr;
    const CUresult rc = cuCtxPopCurrent(&popped);
    if (rc != CUDA_SUCCESS)
      std::fprintf(stderr, "cxlkv: %s\n", CudaStatus(rc, "cuCtxPopCurrent").ToString().c_str());
  }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

}  // namespace

GpuTransferEngine::Impl::~Impl() {
  if (ctx == nullptr) return;
  if (cuCtxPushCurrent(ctx) == CUDA_SUCCESS) {
    if (copy) ReportCudaFailure(cuStreamSynchronize(copy), "cuStreamSynchronize");
    if (crc) ReportCudaFailure(cuStreamSynchronize(crc), "cuStreamSynchronize");
    regs.clear();
    crc32c.reset();
    sm.reset();
    for (CUevent& e : group_ev)
      if (e) ReportCudaFailure(cuEventDestroy(e), "cuEventDestroy");
    for (CUevent& e : stage_ev)
      if (e) ReportCudaFailure(cuEventDestroy(e), "cuEventDestroy");
    if (after_ev) ReportCudaFailure(cuEventDestroy(after_ev), "cuEventDestroy");
    for (uint8_t*& s : staging)
      if (s) ReportCudaFailure(cuMemFreeHost(s), "cuMemFreeHost(staging)");
    if (copy) ReportCudaFailure(cuStreamDestroy(copy), "cuStreamDestroy");
    if (crc) ReportCudaFailure(cuStreamDestroy(crc), "cuStreamDestroy");
    CUcontext popped;
    ReportCudaFailure(cuCtxPopCurrent(&popped), "cuCtxPopCurrent");
  }
  if (ctx_retained) ReportCudaFailure(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
}

Status GpuTransferEngine::Impl::Init() {
  CXLKV_CU(cuInit(0));
  int count = 0;
  CXLKV_CU(cuDeviceGetCount(&count));
  if (opts.device < 0 || opts.device >= count) {
    return Status::Unsupported("gpu transfer: device " + std::to_string(opts.device) +
                               " requested, " + std::to_string(count) + " present");
  }
  CXLKV_CU(cuDeviceGet(&dev, opts.device));
  char buf[256] = {};
  CXLKV_CU(cuDeviceGetName(buf, sizeof(buf) - 1, dev));
  name = buf;
  CXLKV_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  ctx_retained = true;
  ContextScope scope(ctx);
  CXLKV_RETURN_IF_ERROR(scope.status());
  CXLKV_CU(cuStreamCreate(&copy, CU_STREAM_NON_BLOCKING));
  CXLKV_CU(cuStreamCreate(&crc, CU_STREAM_NON_BLOCKING));
  for (CUevent& e : group_ev) CXLKV_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  for (CUevent& e : stage_ev) CXLKV_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CXLKV_CU(cuEventCreate(&after_ev, CU_EVENT_DISABLE_TIMING));
  if (opts.staging_bytes < 4096)
    return Status::InvalidArgument("gpu transfer: staging_bytes < 4 KiB");
  for (uint8_t*& s : staging) {
    void* p = nullptr;
    CXLKV_CU(cuMemHostAlloc(&p, opts.staging_bytes, 0));
    s = static_cast<uint8_t*>(p);
  }
  CXLKV_RETURN_IF_ERROR(GpuCrc32c::Create(&crc32c));
  CXLKV_RETURN_IF_ERROR(SmCopier::Create(&sm));
  batch_api = opts.batch_api;
  return Status::OK();
}

Status GpuTransferEngine::Impl::Drain() {
  Status a = CudaStatus(cuStreamSynchronize(copy), "cuStreamSynchronize(copy)");
  Status b = CudaStatus(cuStreamSynchronize(crc), "cuStreamSynchronize(crc)");
  return a.ok() ? b : a;
}

Status GpuTransferEngine::Impl::WaitFor(uintptr_t after_stream) {
  if (after_stream == 0) return Status::OK();
  CXLKV_CU(cuEventRecord(after_ev, reinterpret_cast<CUstream>(after_stream)));
  CXLKV_CU(cuStreamWaitEvent(copy, after_ev, 0));
  CXLKV_CU(cuStreamWaitEvent(crc, after_ev, 0));
  return Status::OK();
}

Status GpuTransferEngine::Impl::BuildDirectCopies(const GpuBatch& b, bool to_gpu) {
  copies.clear();
  sm_ranges.clear();
  block_copy_first.assign(1, 0);
  block_sm_first.assign(1, 0);
  const uint64_t batch_bytes = b.total_bytes();
  for (size_t blk = 0; blk < b.num_blocks(); ++blk) {
    uint8_t* h = b.host(blk);
    const HostRegistration* reg = FindRegistration(h, b.block_len(blk));
    if (reg == nullptr && b.block_len(blk) > 0) {
      return Status::InvalidArgument(
          "gpu transfer: direct copy of block " + std::to_string(blk) +
          " from host bytes that are not registered (RegisterHost, or use the staged path)");
    }
    for (uint32_t p = b.first_piece()[blk]; p < b.first_piece()[blk + 1]; ++p) {
      uint64_t g = b.gpu()[p], n = b.len()[p];
      const bool by_sm = UseSm(n, batch_bytes, to_gpu);
      while (n > 0) {
        // A copy stays inside one registration segment.
        const uint64_t take = std::min<uint64_t>(n, reg->SegmentEnd(h) - h);
        if (by_sm) {
          const uint64_t hd = reg->DevicePointer(h);
          sm_ranges.push_back(to_gpu ? SmRange{g, hd, take} : SmRange{hd, g, take});
        } else {
          const auto hp = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(h));
          copies.push_back(to_gpu ? Copy{g, hp, take} : Copy{hp, g, take});
        }
        h += take;
        g += take;
        n -= take;
      }
    }
    block_copy_first.push_back(copies.size());
    block_sm_first.push_back(sm_ranges.size());
  }
  return Status::OK();
}

Status GpuTransferEngine::Impl::IssueBlocks(size_t b0, size_t b1, bool to_gpu, CUstream s) {
  CXLKV_RETURN_IF_ERROR(Issue(block_copy_first[b0], block_copy_first[b1], to_gpu, s));
  const size_t r0 = block_sm_first[b0], r1 = block_sm_first[b1];
  if (r1 > r0) {
    CXLKV_RETURN_IF_ERROR(sm->Launch(r0, r1, s, opts.sm_blocks));
    ++stats.sm_launches;
    for (size_t i = r0; i < r1; ++i) stats.sm_bytes += sm_ranges[i].n;
  }
  return Status::OK();
}

Status GpuTransferEngine::Impl::Issue(size_t begin, size_t end, bool to_gpu, CUstream s) {
  if (begin == end) return Status::OK();
#if CUDA_VERSION >= 12080
  if (batch_api && end - begin > 1) {
    const size_t n = end - begin;
    dsts.resize(n);
    srcs.resize(n);
    sizes.resize(n);
    for (size_t i = 0; i < n; ++i) {
      dsts[i] = copies[begin + i].dst;
      srcs[i] = copies[begin + i].src;
      sizes[i] = copies[begin + i].n;
    }
    CUmemcpyAttributes attr;
    std::memset(&attr, 0, sizeof(attr));
    // STREAM: sources are read in stream order (our sources are produced by
    // earlier work on the stream or by the caller before the call).
    attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    size_t attr_idx = 0;
#if CUDA_VERSION >= 13000
    const CUresult rc =
        cuMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), n, &attr, &attr_idx, 1, s);
#else
    size_t fail_idx = 0;
    const CUresult rc = cuMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), n, &attr,
                                           &attr_idx, 1, &fail_idx, s);
#endif
    if (rc == CUDA_SUCCESS) {
      ++stats.batch_api_calls;
      return Status::OK();
    }
    // Some drivers refuse batches that plain copies accept (vLLM #39491).
    // Redo the group one copy at a time (re-copying from unchanged sources
    // is harmless) and stop trying batches on this engine.
    std::fprintf(stderr, "cxlkv: %s; using cuMemcpyAsync from now on\n",
                 CudaStatus(rc, "cuMemcpyBatchAsync").ToString().c_str());
    batch_api = false;
    ++stats.batch_api_fallbacks;
  }
#endif
  for (size_t i = begin; i < end; ++i) {
    const Copy& c = copies[i];
    if (to_gpu) {
      CXLKV_CU(cuMemcpyHtoDAsync(c.dst, reinterpret_cast<const void*>(c.src), c.n, s));
    } else {
      CXLKV_CU(cuMemcpyDtoHAsync(reinterpret_cast<void*>(c.dst), c.src, c.n, s));
    }
    ++stats.single_copies;
  }
  return Status::OK();
}

Status GpuTransferEngine::Impl::LoadDirect(const GpuBatch& b, uint32_t* crc_out) {
  CXLKV_RETURN_IF_ERROR(BuildDirectCopies(b, /*to_gpu=*/true));
  CXLKV_RETURN_IF_ERROR(sm->Prepare(sm_ranges.data(), sm_ranges.size(), copy));
  const size_t nb = b.num_blocks();
  if (crc_out) {
    CXLKV_RETURN_IF_ERROR(crc32c->Prepare(b.gpu(), b.len(), b.first_piece(), nb, crc));
  }
  // Groups: the CRC of group k runs on its own stream while group k+1 is
  // still on the copy engine, so only the last group's CRC adds latency.
  const uint64_t group_bytes =
      std::max<uint64_t>(opts.pipeline_bytes, (b.total_bytes() + kMaxGroups - 1) / kMaxGroups);
  size_t begin = 0;
  int g = 0;
  uint64_t acc = 0;
  for (size_t blk = 0; blk < nb; ++blk) {
    acc += b.block_len(blk);
    if (acc < group_bytes && blk + 1 < nb) continue;
    CXLKV_RETURN_IF_ERROR(IssueBlocks(begin, blk + 1, true, copy));
    if (crc_out) {
      CUevent e = group_ev[std::min(g, kMaxGroups - 1)];
      CXLKV_CU(cuEventRecord(e, copy));
      CXLKV_CU(cuStreamWaitEvent(crc, e, 0));
      CXLKV_RETURN_IF_ERROR(crc32c->Launch(begin, blk + 1, crc));
    }
    begin = blk + 1;
    acc = 0;
    ++g;
  }
  CXLKV_RETURN_IF_ERROR(Drain());
  if (crc_out) CollectCrc(b, crc_out);
  return Status::OK();
}

Status GpuTransferEngine::Impl::StoreDirect(const GpuBatch& b, uint32_t* crc_out) {
  CXLKV_RETURN_IF_ERROR(BuildDirectCopies(b, /*to_gpu=*/false));
  CXLKV_RETURN_IF_ERROR(sm->Prepare(sm_ranges.data(), sm_ranges.size(), copy));
  if (crc_out) {
    // The CRC reads the GPU bytes while the copy engine reads them too.
    CXLKV_RETURN_IF_ERROR(crc32c->Prepare(b.gpu(), b.len(), b.first_piece(), b.num_blocks(), crc));
    CXLKV_RETURN_IF_ERROR(crc32c->Launch(0, b.num_blocks(), crc));
  }
  CXLKV_RETURN_IF_ERROR(IssueBlocks(0, b.num_blocks(), false, copy));
  CXLKV_RETURN_IF_ERROR(Drain());
  if (crc_out) CollectCrc(b, crc_out);
  return Status::OK();
}

void GpuTransferEngine::Impl::BuildFragments(const GpuBatch& b,
                                             std::vector<std::vector<Fragment>>* chunks) const {
  chunks->clear();
  chunks->emplace_back();
  uint64_t fill = 0;
  for (size_t blk = 0; blk < b.num_blocks(); ++blk) {
    uint8_t* h = b.host(blk);
    for (uint32_t p = b.first_piece()[blk]; p < b.first_piece()[blk + 1]; ++p) {
      uint64_t g = b.gpu()[p], n = b.len()[p];
      while (n > 0) {
        if (fill == opts.staging_bytes) {
          chunks->emplace_back();
          fill = 0;
        }
        const uint64_t take = std::min(n, opts.staging_bytes - fill);
        chunks->back().push_back(Fragment{g, h, take, fill});
        fill += take;
        g += take;
        h += take;
        n -= take;
      }
    }
  }
  if (chunks->back().empty()) chunks->pop_back();
}

Status GpuTransferEngine::Impl::LoadStaged(const GpuBatch& b, uint32_t* crc_out) {
  std::vector<std::vector<Fragment>> chunks;
  BuildFragments(b, &chunks);
  if (crc_out) {
    CXLKV_RETURN_IF_ERROR(crc32c->Prepare(b.gpu(), b.len(), b.first_piece(), b.num_blocks(), crc));
  }
  for (size_t k = 0; k < chunks.size(); ++k) {
    const int i = static_cast<int>(k % 2);
    // Buffer i is free once the DMA of chunk k-2 has finished; meanwhile
    // the DMA of chunk k-1 overlaps with this memcpy.
    if (k >= 2) CXLKV_CU(cuEventSynchronize(stage_ev[i]));
    for (const Fragment& f : chunks[k]) std::memcpy(staging[i] + f.off, f.host, f.len);
    for (const Fragment& f : chunks[k]) {
      CXLKV_CU(cuMemcpyHtoDAsync(f.gpu, staging[i] + f.off, f.len, copy));
      ++stats.single_copies;
    }
    CXLKV_CU(cuEventRecord(stage_ev[i], copy));
  }
  if (crc_out) {
    CXLKV_CU(cuEventRecord(group_ev[0], copy));
    CXLKV_CU(cuStreamWaitEvent(crc, group_ev[0], 0));
    CXLKV_RETURN_IF_ERROR(crc32c->Launch(0, b.num_blocks(), crc));
  }
  CXLKV_RETURN_IF_ERROR(Drain());
  if (crc_out) CollectCrc(b, crc_out);
  return Status::OK();
}

Status GpuTransferEngine::Impl::StoreStaged(const GpuBatch& b, uint32_t* crc_out) {
  std::vector<std::vector<Fragment>> chunks;
  BuildFragments(b, &chunks);
  if (crc_out) {
    CXLKV_RETURN_IF_ERROR(crc32c->Prepare(b.gpu(), b.len(), b.first_piece(), b.num_blocks(), crc));
    CXLKV_RETURN_IF_ERROR(crc32c->Launch(0, b.num_blocks(), crc));
  }
  auto drain_chunk = [&](size_t k) -> Status {
    const int i = static_cast<int>(k % 2);
    CXLKV_CU(cuEventSynchronize(stage_ev[i]));
    for (const Fragment& f : chunks[k]) std::memcpy(f.host, staging[i] + f.off, f.len);
    return Status::OK();
  };
  for (size_t k = 0; k < chunks.size(); ++k) {
    // Buffer k%2 was emptied by the memcpy of chunk k-2 (done in the
    // previous iteration), so its DMA may start now.
    const int i = static_cast<int>(k % 2);
    for (const Fragment& f : chunks[k]) {
      CXLKV_CU(cuMemcpyDtoHAsync(staging[i] + f.off, f.gpu, f.len, copy));
      ++stats.single_copies;
    }
    CXLKV_CU(cuEventRecord(stage_ev[i], copy));
    if (k >= 1) CXLKV_RETURN_IF_ERROR(drain_chunk(k - 1));
  }
  if (!chunks.empty()) CXLKV_RETURN_IF_ERROR(drain_chunk(chunks.size() - 1));
  CXLKV_RETURN_IF_ERROR(Drain());
  if (crc_out) CollectCrc(b, crc_out);
  return Status::OK();
}

// ---- GpuTransferEngine ----

GpuTransferEngine::GpuTransferEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuTransferEngine::~GpuTransferEngine() = default;

Status GpuTransferEngine::Create(const GpuTransferOptions& options,
                                 std::unique_ptr<GpuTransferEngine>* out) {
  auto impl = std::make_unique<Impl>();
  impl->opts = options;
  CXLKV_RETURN_IF_ERROR(impl->Init().WithContext("gpu transfer engine"));
  out->reset(new GpuTransferEngine(std::move(impl)));
  return Status::OK();
}

Status GpuTransferEngine::RegisterHost(void* base, uint64_t len) {
  std::lock_guard<std::mutex> l(impl_->mu);
  ContextScope scope(impl_->ctx);
  CXLKV_RETURN_IF_ERROR(scope.status());
  int supported = 0;
  CXLKV_CU(
      cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, impl_->dev));
  if (!supported)
    return Status::Unsupported("register host range: device cannot register host memory");
  std::unique_ptr<HostRegistration> r;
  CXLKV_RETURN_IF_ERROR(
      HostRegistration::Register(base, len, impl_->opts.registration_segment_bytes, &r));
  impl_->regs.push_back(std::move(r));
  return Status::OK();
}

Status GpuTransferEngine::UnregisterHost(void* base) {
  std::lock_guard<std::mutex> l(impl_->mu);
  ContextScope scope(impl_->ctx);
  CXLKV_RETURN_IF_ERROR(scope.status());
  for (auto it = impl_->regs.begin(); it != impl_->regs.end(); ++it) {
    // Registrations start at `base` rounded down to a page.
    if ((*it)->Contains(base, 1) && static_cast<uint8_t*>(base) - (*it)->begin() < 4096) {
      impl_->regs.erase(it);  // the destructor unregisters every segment
      return Status::OK();
    }
  }
  return Status::NotFound("unregister host range: no registration starts there");
}

bool GpuTransferEngine::IsRegistered(const void* p, uint64_t len) const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->FindRegistration(p, len) != nullptr;
}

size_t GpuTransferEngine::RegisteredSegments() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  size_t n = 0;
  for (const auto& r : impl_->regs) n += r->num_segments();
  return n;
}

Status GpuTransferEngine::Load(const GpuBatch& batch, GpuPath path, uint32_t* crc_out) {
  std::lock_guard<std::mutex> l(impl_->mu);
  ContextScope scope(impl_->ctx);
  CXLKV_RETURN_IF_ERROR(scope.status());
  Status s = path == GpuPath::kDirect ? impl_->LoadDirect(batch, crc_out)
                                      : impl_->LoadStaged(batch, crc_out);
  s = impl_->Finish(std::move(s));
  if (s.ok()) {
    ++impl_->stats.batches;
    impl_->stats.blocks += batch.num_blocks();
    impl_->stats.bytes += batch.total_bytes();
  }
  return s;
}

Status GpuTransferEngine::Store(const GpuBatch& batch, GpuPath path, uint32_t* crc_out,
                                uintptr_t after_stream) {
  std::lock_guard<std::mutex> l(impl_->mu);
  ContextScope scope(impl_->ctx);
  CXLKV_RETURN_IF_ERROR(scope.status());
  Status s = impl_->WaitFor(after_stream);
  if (s.ok()) {
    s = path == GpuPath::kDirect ? impl_->StoreDirect(batch, crc_out)
                                 : impl_->StoreStaged(batch, crc_out);
  }
  s = impl_->Finish(std::move(s));
  if (s.ok()) {
    ++impl_->stats.batches;
    impl_->stats.blocks += batch.num_blocks();
    impl_->stats.bytes += batch.total_bytes();
  }
  return s;
}

Status GpuTransferEngine::Checksum(const GpuBatch& batch, uint32_t* crc_out,
                                   uintptr_t after_stream) {
  std::lock_guard<std::mutex> l(impl_->mu);
  ContextScope scope(impl_->ctx);
  CXLKV_RETURN_IF_ERROR(scope.status());
  Impl& m = *impl_;
  Status s = m.WaitFor(after_stream);
  if (s.ok())
    s = m.crc32c->Prepare(batch.gpu(), batch.len(), batch.first_piece(), batch.num_blocks(), m.crc);
  if (s.ok()) s = m.crc32c->Launch(0, batch.num_blocks(), m.crc);
  s = m.Finish(std::move(s));
  if (s.ok()) m.CollectCrc(batch, crc_out);
  return s;
}

GpuTransferStats GpuTransferEngine::stats() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->stats;
}
int GpuTransferEngine::device() const { return impl_->opts.device; }
const std::string& GpuTransferEngine::device_name() const { return impl_->name; }

}  // namespace cxlkv
