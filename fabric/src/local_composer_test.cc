// Copyright cxlkv authors.
#include "cxlkv/fabric/local_composer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace cxlkv::fabric {
namespace {

class LocalComposerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/dev/shm/cxlkv-local-test.XXXXXX";
    char* d = mkdtemp(tmpl);
    ASSERT_NE(d, nullptr) << "/dev/shm is needed for this test";
    root_ = d;
    opt_.name = "shm";
    opt_.dir = root_ + "/pool";
    opt_.capacity_mib = 64;
    opt_.block_mib = 2;
    opt_.node_id = "gpu-node-1";
    opt_.state_dir = root_ + "/state";
  }
  void TearDown() override { std::system(("rm -rf " + root_).c_str()); }
  std::unique_ptr<LocalComposer> Open() {
    std::unique_ptr<LocalComposer> c;
    Status s = LocalComposer::Open(opt_, &c);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return c;
  }
  ComposeRequest Req(int64_t mib) {
    ComposeRequest r;
    r.size_mib = mib;
    r.qos = 1;
    return r;
  }
  std::string root_;
  LocalPoolOptions opt_;
};

TEST_F(LocalComposerTest, ComposesSharedFileRegionsWithinCapacityAndFreesThem) {
  auto c = Open();
  ComposeResult a, b;
  ASSERT_TRUE(c->Compose("local", "shm", Req(5), &a).ok());
  EXPECT_EQ(a.region.size_mib, 6) << "rounded up to whole 2 MiB blocks";
  EXPECT_EQ(a.region.mappings.at(0).host_id, "gpu-node-1");
  struct stat st;
  ASSERT_EQ(stat(a.region.backing_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 6 << 20);
  // Two mappings of the region file see the same bytes.
  int f1 = open(a.region.backing_path.c_str(), O_RDWR),
      f2 = open(a.region.backing_path.c_str(), O_RDWR);
  auto* p1 = static_cast<char*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, f1, 0));
  auto* p2 = static_cast<char*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, f2, 0));
  p1[7] = 42;
  EXPECT_EQ(p2[7], 42);
  munmap(p1, 4096);
  munmap(p2, 4096);
  close(f1);
  close(f2);

  EXPECT_TRUE(c->Compose("local", "shm", Req(60), &b).IsNoSpace());
  ASSERT_TRUE(c->Compose("local", "shm", Req(58), &b).ok());
  std::vector<Pool> pools;
  ASSERT_TRUE(c->ListPools(&pools).ok());
  EXPECT_EQ(pools.at(0).allocated_mib, 64);
  ASSERT_TRUE(c->Free("local", "shm", a.region.id).ok());
  EXPECT_NE(stat(a.region.backing_path.c_str(), &st), 0);
  ASSERT_TRUE(c->ListPools(&pools).ok());
  EXPECT_EQ(pools.at(0).allocated_mib, 58);
  EXPECT_TRUE(c->Free("local", "shm", a.region.id).IsNotFound());
}

TEST_F(LocalComposerTest, RefusesWhatOneNodeCannotDo) {
  auto c = Open();
  ComposeResult r;
  ComposeRequest req = Req(2);
  req.share_count = 2;
  EXPECT_TRUE(c->Compose("local", "shm", req, &r).IsInvalidArgument());
  req = Req(2);
  req.candidate_hosts = {"other-node"};
  EXPECT_TRUE(c->Compose("local", "shm", req, &r).IsInvalidArgument());
  EXPECT_TRUE(c->Compose("cma-0", "blade-0", Req(2), &r).IsNotFound());
  EXPECT_TRUE(c->Compose("local", "shm", Req(0), &r).IsInvalidArgument());
}

TEST_F(LocalComposerTest, RestartKeepsRegionsAndRemovesOrphanFiles) {
  std::string id;
  {
    auto c = Open();
    ComposeResult r;
    ASSERT_TRUE(c->Compose("local", "shm", Req(4), &r).ok());
    id = r.region.id;
  }
  std::ofstream(opt_.dir + "/local-orphan.region") << "x";
  auto c = Open();
  MemoryRegion r;
  ASSERT_TRUE(c->Get("local", "shm", id, &r).ok());
  EXPECT_EQ(r.size_mib, 4);
  std::vector<Pool> pools;
  ASSERT_TRUE(c->ListPools(&pools).ok());
  EXPECT_EQ(pools.at(0).allocated_mib, 4);
  struct stat st;
  EXPECT_NE(stat((opt_.dir + "/local-orphan.region").c_str(), &st), 0);
}

TEST_F(LocalComposerTest, HugetlbfsPoolWhereMounted) {
  const char* dir = std::getenv("CXLKV_TEST_HUGETLBFS");
  if (dir == nullptr) {
    GTEST_SKIP() << "set CXLKV_TEST_HUGETLBFS=<dir on a hugetlbfs mount with free huge pages> "
                    "to exercise a hugetlbfs pool";
  }
  opt_.dir = std::string(dir) + "/cxlkv-local-test";
  opt_.block_mib = 0;  // the huge page size
  opt_.capacity_mib = 0;
  auto c = Open();
  std::vector<Pool> pools;
  ASSERT_TRUE(c->ListPools(&pools).ok());
  ComposeResult r;
  ASSERT_TRUE(c->Compose("local", "shm", Req(1), &r).ok());
  EXPECT_EQ(r.region.size_mib % pools[0].block_mib, 0);
  ASSERT_TRUE(c->Free("local", "shm", r.region.id).ok());
}

}  // namespace
}  // namespace cxlkv::fabric
