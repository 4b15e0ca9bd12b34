// Copyright cxlkv authors.
//
// DevdaxMaterializer over SysfsDaxBus on a fake sysfs tree. The hook plays
// the kernel: `create` makes a new seed device, `size` moves available_size,
// `bind`/`unbind` flip the driver link, `delete` removes the device.
#include "cxlkv/hostd/devdax.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "cxlkv/fabric/local_composer.h"
#include "cxlkv/hostd/cdi.h"

namespace cxlkv::hostd {
namespace {

std::string Read(const std::string& p) {
  std::ifstream f(p);
  std::string s;
  std::getline(f, s);
  return s;
}
void Put(const std::string& p, const std::string& v) { std::ofstream(p) << v << "\n"; }

class FakeKernel {
 public:
  explicit FakeKernel(std::string root) : root_(std::move(root)) {
    region_ = root_ + "/devices/platform/hmem.0";
    std::system(("mkdir -p " + region_ + "/dax_region " + region_ + "/dax0.0 " + root_ +
                 "/bus/dax/devices " + root_ + "/bus/dax/drivers/device_dax")
                    .c_str());
    symlink((region_ + "/dax0.0").c_str(), (root_ + "/bus/dax/devices/dax0.0").c_str());
    Put(region_ + "/dax_region/size", std::to_string(kSize));
    Put(region_ + "/dax_region/available_size", std::to_string(kSize));
    Put(region_ + "/dax_region/align", std::to_string(2 << 20));
    Put(region_ + "/dax0.0/size", "0");
    Put(region_ + "/dax_region/seed", "dax0.0");
    Put(root_ + "/bus/dax/drivers/device_dax/bind", "");
    Put(root_ + "/bus/dax/drivers/device_dax/unbind", "");
    sizes_["dax0.0"] = 0;
  }
  static constexpr uint64_t kSize = 64ull << 20;

  void OnWrite(const std::string& path, const std::string& value) {
    writes.push_back(path.substr(root_.size()) + "=" + value);
    std::string base = path.substr(path.rfind('/') + 1);
    if (base == "create") {
      std::string name = "dax0." + std::to_string(++next_);
      std::system(("mkdir -p " + region_ + "/" + name).c_str());
      Put(region_ + "/" + name + "/size", "0");
      Put(region_ + "/" + name + "/dev", "251:" + std::to_string(next_));
      Put(region_ + "/dax_region/seed", name);
      sizes_[name] = 0;
    } else if (base == "size") {
      std::string dev = path.substr(0, path.rfind('/'));
      dev = dev.substr(dev.rfind('/') + 1);
      sizes_[dev] = std::stoull(value);
      uint64_t used = 0;
      for (auto& [n, s] : sizes_) used += s;
      Put(region_ + "/dax_region/available_size", std::to_string(kSize - used));
    } else if (base == "bind") {
      bound.insert(value);
    } else if (base == "unbind") {
      bound.erase(value);
    } else if (base == "delete") {
      sizes_.erase(value);
      std::system(("rm -rf " + region_ + "/" + value).c_str());
    }
  }
  std::vector<std::string> writes;
  std::set<std::string> bound;
  std::map<std::string, uint64_t> sizes_;

 private:
  std::string root_, region_;
  int next_ = 0;
};

class DevdaxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cxlkv-devdax-test.XXXXXX";
    root_ = mkdtemp(tmpl);
    kernel_ = std::make_unique<FakeKernel>(root_);
    DevdaxOptions o;
    o.region_id = 0;
    o.align = 2 << 20;
    m_ = std::make_unique<DevdaxMaterializer>(
        NewSysfsDaxBus(
            root_, [this](const std::string& p, const std::string& v) { kernel_->OnWrite(p, v); }),
        o);
  }
  void TearDown() override { std::system(("rm -rf " + root_).c_str()); }
  std::string root_;
  std::unique_ptr<FakeKernel> kernel_;
  std::unique_ptr<DevdaxMaterializer> m_;
};

TEST_F(DevdaxTest, CreatesAlignedSizedBoundSubDeviceAndDestroysIt) {
  Device d;
  Status s = m_->Materialize({"devdax-r1", 8 << 20, 0, ""}, &d);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(d.path, "/dev/dax0.1");
  EXPECT_EQ(d.major, 251);
  EXPECT_EQ(d.minor, 1);
  EXPECT_TRUE(d.pad_devices.empty());
  EXPECT_EQ(kernel_->sizes_["dax0.1"], 8u << 20);
  EXPECT_TRUE(kernel_->bound.count("dax0.1"));
  // daxctl's order: create, align, size, bind.
  ASSERT_GE(kernel_->writes.size(), 4u);
  EXPECT_NE(kernel_->writes[0].find("dax_region/create=1"), std::string::npos);
  EXPECT_NE(kernel_->writes[1].find("dax0.1/align=2097152"), std::string::npos);
  EXPECT_NE(kernel_->writes[2].find("dax0.1/size=8388608"), std::string::npos);
  EXPECT_NE(kernel_->writes[3].find("device_dax/bind=dax0.1"), std::string::npos);

  std::string spec = CdiSpecJson(d, CdiOptions{});
  EXPECT_NE(spec.find("\"type\": \"c\""), std::string::npos) << spec;
  EXPECT_NE(spec.find("\"hostPath\": \"/dev/dax0.1\""), std::string::npos) << spec;
  EXPECT_NE(spec.find("CXL_DAX_DEVICE=/dev/dax0.1"), std::string::npos) << spec;

  // The stage's CDI check (scripts/test.d/30-fabric.sh) feeds this spec to
  // the reference CDI implementation.
  if (const char* dir = std::getenv("CXLKV_CDI_EXPORT_DIR")) {
    CdiOptions o;
    o.cdi_dir = dir;
    std::string path;
    ASSERT_TRUE(WriteCdiSpec(d, o, &path).ok());
  }

  ASSERT_TRUE(m_->Remove(d).ok());
  EXPECT_FALSE(kernel_->bound.count("dax0.1"));
  EXPECT_EQ(kernel_->sizes_.count("dax0.1"), 0u);
  EXPECT_EQ(Read(root_ + "/devices/platform/hmem.0/dax_region/available_size"),
            std::to_string(FakeKernel::kSize));
}

TEST_F(DevdaxTest, PadDeviceAlignsTheOffsetAndGoesAwayWithTheRegion) {
  Device d;
  ASSERT_TRUE(m_->Materialize({"r1", 4 << 20, 6 << 20, ""}, &d).ok());
  ASSERT_EQ(d.pad_devices.size(), 1u);
  EXPECT_EQ(kernel_->sizes_[d.pad_devices[0]], 6u << 20);
  EXPECT_EQ(d.path, "/dev/dax0.2");
  EXPECT_EQ(d.offset_bytes, 0u) << "the sub-device is the whole region";
  // Offset below what is allocated: refused, nothing created.
  Device e;
  size_t before = kernel_->sizes_.size();
  EXPECT_TRUE(m_->Materialize({"r2", 2 << 20, 2 << 20, ""}, &e).IsBusy());
  EXPECT_EQ(kernel_->sizes_.size(), before);
  ASSERT_TRUE(m_->Remove(d).ok());
  EXPECT_EQ(Read(root_ + "/devices/platform/hmem.0/dax_region/available_size"),
            std::to_string(FakeKernel::kSize));
}

TEST_F(DevdaxTest, RejectsMisalignedAndOversizedRegions) {
  Device d;
  EXPECT_TRUE(m_->Materialize({"r1", 3 << 20, 0, ""}, &d).IsInvalidArgument());
  EXPECT_TRUE(m_->Materialize({"r1", 2 << 20, 1 << 20, ""}, &d).IsInvalidArgument());
  EXPECT_TRUE(m_->Materialize({"r1", 128 << 20, 0, ""}, &d).IsNoSpace());
}

TEST_F(DevdaxTest, LocalComposerDevdaxPoolCarvesSubDevicesAndSurvivesRestart) {
  fabric::LocalPoolOptions o;
  o.name = "dax0";
  o.node_id = "gpu-node-1";
  o.capacity_mib = 32;
  o.block_mib = 2;
  o.state_dir = root_ + "/local-state";
  DevdaxOptions d;
  auto hook = [this](const std::string& p, const std::string& v) { kernel_->OnWrite(p, v); };
  std::unique_ptr<fabric::LocalComposer> c;
  ASSERT_TRUE(
      fabric::LocalComposer::Open(o, &c, NewDevdaxCarver(NewSysfsDaxBus(root_, hook), d)).ok());
  fabric::ComposeRequest req;
  req.size_mib = 5;
  req.qos = 1;
  fabric::ComposeResult r;
  ASSERT_TRUE(c->Compose("local", "dax0", req, &r).ok());
  EXPECT_EQ(r.region.size_mib, 6);
  EXPECT_EQ(r.region.backing_path, "/dev/dax0.1");
  EXPECT_EQ(kernel_->sizes_["dax0.1"], 6u << 20);
  req.size_mib = 30;
  EXPECT_TRUE(c->Compose("local", "dax0", req, &r).IsNoSpace()) << "pool capacity is 32 MiB";
  c.reset();
  ASSERT_TRUE(
      fabric::LocalComposer::Open(o, &c, NewDevdaxCarver(NewSysfsDaxBus(root_, hook), d)).ok());
  std::vector<fabric::MemoryRegion> regions;
  ASSERT_TRUE(c->List("local", "dax0", &regions).ok());
  ASSERT_EQ(regions.size(), 1u);
  ASSERT_TRUE(c->Free("local", "dax0", regions[0].id).ok());
  EXPECT_EQ(kernel_->sizes_.count("dax0.1"), 0u);
}

TEST(FileMaterializerTest, CharacterDevicesPassThroughAsDeviceNodes) {
  FileMaterializer m("/nonexistent-dev-dir", {"/dev"});
  Device d;
  ASSERT_TRUE(m.Materialize({"local-1", 4096, 0, "/dev/null"}, &d).ok());
  EXPECT_EQ(d.kind, "devdax");
  EXPECT_EQ(d.path, "/dev/null");
  EXPECT_EQ(d.major, 1);
  EXPECT_EQ(d.minor, 3);
  std::string spec = CdiSpecJson(d, CdiOptions{});
  EXPECT_NE(spec.find("\"deviceNodes\""), std::string::npos) << spec;
  ASSERT_TRUE(m.Remove(d).ok());
  struct stat st;
  EXPECT_EQ(stat("/dev/null", &st), 0) << "the pool owns the device; removal leaves it";
}

TEST(DevdaxHardwareTest, LibdaxctlOnARealDaxRegion) {
  const char* region = std::getenv("CXLKV_TEST_DAX_REGION");
  if (region == nullptr) {
    GTEST_SKIP() << "set CXLKV_TEST_DAX_REGION=<id> on a host with a dynamic dax region "
                    "(daxctl list -R) to run this against real hardware";
  }
  DevdaxOptions o;
  o.region_id = std::atoi(region);
  DevdaxMaterializer m(NewLibDaxctlBus(), o);
  Device d;
  Status s = m.Materialize({"hw-test", 2 << 20, 0, ""}, &d);
  ASSERT_TRUE(s.ok()) << s.ToString();
  struct stat st;
  EXPECT_EQ(stat(d.path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  ASSERT_TRUE(m.Remove(d).ok());
}

}  // namespace
}  // namespace cxlkv::hostd
