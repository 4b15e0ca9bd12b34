// Copyright cxlkv authors.
//
// Backends: files (with offsets) and devdax character devices. No devdax
// device exists on CI machines, so the devdax path is exercised with a fake
// sysfs tree and /dev/zero standing in for the character device (a
// MAP_SHARED mapping of /dev/zero is shared memory, like a dax mapping).
#include "mapping.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cxlkv/region.h"
#include "region_internal.h"
#include "testutil.h"

namespace cxlkv::internal {
namespace {

class FakeSysfs {
 public:
  FakeSysfs(const std::string& dev, const std::string& size, const std::string& align) {
    root_ = "/tmp/cxlkv-fake-sysfs-" + std::to_string(::getpid());
    struct stat st {};
    EXPECT_EQ(::stat(dev.c_str(), &st), 0);
    const std::string dir = root_ + "/dev/char/" + std::to_string(major(st.st_rdev)) + ":" +
                            std::to_string(minor(st.st_rdev));
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/size") << size << "\n";
    if (!align.empty()) std::ofstream(dir + "/align") << align << "\n";
  }
  ~FakeSysfs() { std::filesystem::remove_all(root_); }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

TEST(MappingTest, DevdaxSizeAndAlignmentComeFromSysfs_FakeSysfsAndDevZero) {
  FakeSysfs sys("/dev/zero", "67108864", "2097152");
  std::unique_ptr<Mapping> m;
  ASSERT_TRUE(Mapping::Open("/dev/zero", 0, 0, false, sys.root(), &m).ok());
  EXPECT_TRUE(m->is_devdax());
  EXPECT_EQ(m->size(), 64u << 20);
  // Offset and size must honour the device alignment.
  Status s = Mapping::Open("/dev/zero", 4096, 0, false, sys.root(), &m);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("alignment"), std::string::npos);
  s = Mapping::Open("/dev/zero", 2 << 20, 3 << 20, false, sys.root(), &m);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  ASSERT_TRUE(Mapping::Open("/dev/zero", 2 << 20, 4 << 20, false, sys.root(), &m).ok());
  EXPECT_EQ(m->size(), 4u << 20);
  s = Mapping::Open("/dev/zero", 64 << 20, 0, false, sys.root(), &m);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
}

TEST(MappingTest, DevdaxWithoutAlignFileDefaultsTo2MiB_FakeSysfsAndDevZero) {
  FakeSysfs sys("/dev/zero", "8388608", "");
  std::unique_ptr<Mapping> m;
  EXPECT_TRUE(Mapping::Open("/dev/zero", 1 << 20, 0, false, sys.root(), &m).IsInvalidArgument());
  EXPECT_TRUE(Mapping::Open("/dev/zero", 2 << 20, 0, false, sys.root(), &m).ok());
}

TEST(MappingTest, UnreadableOrGarbageSysfsIsAClearError_FakeSysfsAndDevZero) {
  std::unique_ptr<Mapping> m;
  Status s = Mapping::Open("/dev/zero", 0, 0, false, "/nonexistent-sysfs", &m);
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_NE(s.message().find("/dev/zero"), std::string::npos) << s.ToString();
  FakeSysfs sys("/dev/zero", "lots", "2097152");
  s = Mapping::Open("/dev/zero", 0, 0, false, sys.root(), &m);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
}

TEST(MappingTest, RegionOnADevdaxDeviceFormatsAndServes_FakeSysfsAndDevZero) {
  FakeSysfs sys("/dev/zero", "33554432", "2097152");
  RegionOptions o = test::TestOptions(0, 4096);
  o.sysfs_root = sys.root();
  std::unique_ptr<Region> r;
  Status s = Region::Open("/dev/zero", o, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r->info().backend, "devdax");
  EXPECT_EQ(r->info().size, 32u << 20);
  NamespaceId ns;
  ASSERT_TRUE(r->RegisterNamespace({"m", "bf16", "NHD", 0, 0}, &ns).ok());
  std::vector<uint8_t> d(4096, 0x3C), got(4096);
  ASSERT_TRUE(r->Store(ns, BlockKey::FromId(1), d.data(), d.size()).ok());
  ASSERT_TRUE(r->Load(ns, BlockKey::FromId(1), got.data(), got.size()).ok());
  EXPECT_EQ(got, d);
}

TEST(MappingTest, TwoRegionsAtDifferentOffsetsOfOneFileAreIndependent) {
  test::ScratchRegion sr("offsets");
  RegionOptions a = test::TestOptions(8 << 20, 4096);
  RegionOptions b = test::TestOptions(8 << 20, 8192);
  b.offset = 8 << 20;
  std::unique_ptr<Region> ra, rb;
  ASSERT_TRUE(Region::Open(sr.path(), a, &ra).ok());
  ASSERT_TRUE(Region::Open(sr.path(), b, &rb).ok());
  EXPECT_NE(ra->info().format_epoch, rb->info().format_epoch);
  NamespaceId na, nb;
  ASSERT_TRUE(ra->RegisterNamespace({"m", "bf16", "NHD", 0, 0}, &na).ok());
  ASSERT_TRUE(rb->RegisterNamespace({"m", "bf16", "NHD", 0, 0}, &nb).ok());
  std::vector<uint8_t> d(4096, 1);
  ASSERT_TRUE(ra->Store(na, BlockKey::FromId(1), d.data(), d.size()).ok());
  EXPECT_TRUE(rb->Lookup(nb, BlockKey::FromId(1)).IsNotFound());
  // Reopening each at its offset finds its own geometry.
  rb.reset();
  RegionOptions again;
  again.offset = 8 << 20;
  again.size = 8 << 20;
  again.create_if_missing = false;
  again.prefault = Prefault::kNone;
  ASSERT_TRUE(Region::Open(sr.path(), again, &rb).ok());
  EXPECT_EQ(rb->info().slot_size, 8192u);
  EXPECT_EQ(rb->info().offset, 8u << 20);
}

TEST(MappingTest, UnalignedFileOffsetIsRefused) {
  test::ScratchRegion sr("unaligned");
  RegionOptions o = test::TestOptions(8 << 20, 4096);
  o.offset = 100;
  std::unique_ptr<Region> r;
  EXPECT_TRUE(Region::Open(sr.path(), o, &r).IsInvalidArgument());
}

TEST(MappingTest, PrefaultDoesNotChangeBytes) {
  test::ScratchRegion sr("prefault");
  RegionOptions o = test::TestOptions(8 << 20, 4096);
  std::vector<uint8_t> d(4096);
  test::FillPattern(5, d.data(), d.size());
  {
    auto r = test::MustOpen(sr.path(), o);
    NamespaceId ns;
    ASSERT_TRUE(r->RegisterNamespace({"m", "bf16", "NHD", 0, 0}, &ns).ok());
    ASSERT_TRUE(r->Store(ns, BlockKey::FromId(5), d.data(), d.size()).ok());
  }
  for (Prefault p : {Prefault::kAtAttach, Prefault::kBackground, Prefault::kMetadata}) {
    o.prefault = p;
    auto r = test::MustOpen(sr.path(), o);
    NamespaceId ns;
    ASSERT_TRUE(r->RegisterNamespace({"m", "bf16", "NHD", 0, 0}, &ns).ok());
    std::vector<uint8_t> got(4096);
    ASSERT_TRUE(r->Load(ns, BlockKey::FromId(5), got.data(), got.size()).ok());
    EXPECT_EQ(got, d);
  }
}

// kMetadata populates the metadata before Open returns and leaves every slot
// page alone: the mapping's resident pages (page-table entries, /proc's Rss)
// are about the metadata's, far fewer than the slot area's. kAtAttach, for
// contrast, populates them all.
uint64_t MappedBytes(const std::string& path) {  // Rss of this process's mappings of path
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  uint64_t kib = 0;
  while (std::getline(smaps, line)) {
    if (line.find('-') != std::string::npos && line.find(' ') != std::string::npos &&
        line.find(':') != std::string::npos && std::isxdigit(line[0]) &&
        line.find("Rss") == std::string::npos) {
      in = line.size() >= path.size() &&
           line.compare(line.size() - path.size(), path.size(), path) == 0;
    } else if (in && line.rfind("Rss:", 0) == 0) {
      kib += std::stoull(line.substr(4));
    }
  }
  return kib << 10;
}

TEST(MappingTest, MetadataPrefaultPopulatesOnlyTheMetadata) {
  const uint64_t size = 64 << 20;
  for (Prefault p : {Prefault::kNone, Prefault::kMetadata, Prefault::kAtAttach}) {
    test::ScratchRegion sr("prefault-metadata");
    RegionOptions o = test::TestOptions(size, 4096);  // 16K slots: 2 MiB of metadata
    test::MustOpen(sr.path(), o);                     // formatted, closed: no page mapped
    o.prefault = p;
    auto r = test::MustOpen(sr.path(), o);
    uint8_t* base = nullptr;
    uint64_t slot_area = 0;
    RegionInternal::SlotArea(r.get(), &base, &slot_area);
    const uint64_t metadata = size - slot_area;
    const uint64_t mapped = MappedBytes(sr.path());
    switch (p) {
      case Prefault::kNone:  // only what attaching read
        EXPECT_LT(mapped, metadata / 2);
        break;
      case Prefault::kMetadata:
        EXPECT_GE(mapped, metadata - (64 << 10)) << "metadata " << metadata;
        EXPECT_LT(mapped, metadata + (2 << 20)) << "slot pages populated too";
        break;
      default:
        EXPECT_GE(mapped, size - (64 << 10));
    }
  }
}

}  // namespace
}  // namespace cxlkv::internal
