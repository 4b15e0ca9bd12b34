// Copyright cxlkv authors.
//
// The visibility layer on this machine's CPU: the instruction CPUID chose,
// that flushes and invalidates keep the bytes (on one host the memory is
// coherent, so an invalidate that lost a dirty line would show here), on
// anonymous and on MAP_SHARED file memory, any alignment; and that
// CountingVisibility counts each call and the lines it touches.
#include "visibility/visibility.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

namespace cxlkv::internal {
namespace {

TEST(LinesTouched, CountsWholeLines) {
  alignas(64) static uint8_t buf[256];
  EXPECT_EQ(LinesTouched(buf, 0), 0u);
  EXPECT_EQ(LinesTouched(buf, 1), 1u);
  EXPECT_EQ(LinesTouched(buf, 64), 1u);
  EXPECT_EQ(LinesTouched(buf, 65), 2u);
  EXPECT_EQ(LinesTouched(buf + 63, 2), 2u);
  EXPECT_EQ(LinesTouched(buf + 1, 128), 3u);
}

#if !(defined(CXLKV_GENERIC_ARCH) && CXLKV_GENERIC_ARCH) && (defined(__x86_64__))
TEST(CpuVisibility, X86NamesTheInstructionItUses) {
  auto v = NewCpuVisibility();
  ASSERT_NE(v, nullptr);
  const std::string name = v->Name();
  EXPECT_EQ(name.rfind("x86-", 0), 0u) << name;
}

// Flush and invalidate over a MAP_SHARED file mapping (what a region is),
// at odd offsets and lengths: the bytes stored through the layer are the
// bytes read back through it and through the file.
TEST(CpuVisibility, FlushAndInvalidateKeepTheBytesOfASharedFileMapping) {
  char path[] = "/dev/shm/cxlkv-vis-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const size_t len = 1 << 16;
  ASSERT_EQ(ftruncate(fd, len), 0);
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* base = static_cast<uint8_t*>(m);
  auto v = NewCpuVisibility();
  std::vector<uint8_t> src(5000), back(5000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
  v->CopyToRegion(base + 13, src.data(), src.size());
  v->Store64(base + 8192, 0x1122334455667788ull);
  v->Store32(base + 8200, 0xAABBCCDDu);
  v->Flush(base + 13, src.size());
  v->Flush(base + 8192, 12);
  v->StoreFence();
  v->Invalidate(base, len);
  v->FullFence();
  v->CopyFromRegion(back.data(), base + 13, back.size());
  EXPECT_EQ(back, src);
  EXPECT_EQ(v->Load64(base + 8192), 0x1122334455667788ull);
  EXPECT_EQ(v->Load32(base + 8200), 0xAABBCCDDu);
  std::vector<uint8_t> viafile(src.size());
  ASSERT_EQ(pread(fd, viafile.data(), viafile.size(), 13), static_cast<ssize_t>(viafile.size()));
  EXPECT_EQ(viafile, src);
  munmap(m, len);
  close(fd);
  unlink(path);
}
#else
TEST(CpuVisibility, UnsupportedArchitectureHasNone) { EXPECT_EQ(NewCpuVisibility(), nullptr); }
#endif

// A recording inner layer, so the test sees what the wrapper forwards.
class Recorder final : public Visibility {
 public:
  const char* Name() const override { return "recorder"; }
  uint64_t Load64(const void* p) override { return *static_cast<const uint64_t*>(p); }
  uint32_t Load32(const void* p) override { return *static_cast<const uint32_t*>(p); }
  void Store64(void* p, uint64_t v) override { *static_cast<uint64_t*>(p) = v; }
  void Store32(void* p, uint32_t v) override { *static_cast<uint32_t*>(p) = v; }
  void CopyFromRegion(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void CopyToRegion(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void Flush(const void*, size_t n) override { flushed += n; }
  void Invalidate(const void*, size_t n) override { invalidated += n; }
  void StoreFence() override { ++fences; }
  void FullFence() override { ++fences; }
  size_t flushed = 0, invalidated = 0, fences = 0;
};

TEST(CountingVisibility, CountsEveryCallAndForwardsIt) {
  auto rec = std::make_unique<Recorder>();
  Recorder* r = rec.get();
  CountingVisibility c(std::move(rec));
  EXPECT_STREQ(c.Name(), "counting(recorder)");
  alignas(64) uint8_t buf[512] = {};
  c.Store64(buf, 42);
  c.Store32(buf + 8, 7);
  EXPECT_EQ(c.Load64(buf), 42u);
  EXPECT_EQ(c.Load32(buf + 8), 7u);
  uint8_t tmp[100] = {1, 2, 3};
  c.CopyToRegion(buf + 100, tmp, sizeof tmp);
  c.CopyFromRegion(tmp, buf + 100, 50);
  c.Flush(buf + 60, 10);     // 2 lines
  c.Invalidate(buf, 256);    // 4 lines
  c.Invalidate(buf + 1, 0);  // 0 lines, still a call
  c.StoreFence();
  c.FullFence();
  c.FullFence();
  const auto k = c.counts();
  EXPECT_EQ(k.loads, 2u);
  EXPECT_EQ(k.stores, 2u);
  EXPECT_EQ(k.copy_in_bytes, 100u);
  EXPECT_EQ(k.copy_out_bytes, 50u);
  EXPECT_EQ(k.flushes, 1u);
  EXPECT_EQ(k.flush_lines, 2u);
  EXPECT_EQ(k.invalidates, 2u);
  EXPECT_EQ(k.invalidate_lines, 4u);
  EXPECT_EQ(k.store_fences, 1u);
  EXPECT_EQ(k.full_fences, 2u);
  EXPECT_EQ(r->flushed, 10u);
  EXPECT_EQ(r->invalidated, 256u);
  EXPECT_EQ(r->fences, 3u);
  c.Reset();
  EXPECT_EQ(c.counts().loads, 0u);
  EXPECT_EQ(c.counts().invalidate_lines, 0u);
}

}  // namespace
}  // namespace cxlkv::internal
