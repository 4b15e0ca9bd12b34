// Copyright cxlkv authors.
//
// Checkpoint: round trip through the file, checksum and version checks,
// tolerance of fields a newer writer adds, boot id reading.
#include "kubeletplugin/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kubeletplugin/checkpoint_fixture.h"

namespace cxlkv::dra {
namespace {

uint32_t Crc32(const std::string& s) {
  return static_cast<uint32_t>(
      ::crc32(0L, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

// Field by field (defined below the fixture).
void ExpectEqual(const Checkpoint& x, const Checkpoint& y);

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cxlkv-dra-checkpoint-test.XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/checkpoint.json";
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  static Checkpoint Sample() { return test::SampleCheckpoint(); }
  std::string Read() {
    std::ifstream f(path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  void Write(const std::string& s) { std::ofstream(path_) << s; }
  // Saves cp and loads it back: the same checkpoint.
  void ExpectRoundTrip(const Checkpoint& cp) {
    ASSERT_TRUE(SaveCheckpoint(path_, cp).ok());
    Checkpoint back;
    Status s = LoadCheckpoint(path_, &back);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ExpectEqual(cp, back);
  }
  // Writes a hand-edited checkpoint with the checksum made to match it.
  void WriteWithChecksum(nlohmann::json& j) {
    j["checksum"] = Crc32(j["data"].dump());
    Write(j.dump());
  }
  // Loading the file is refused as corruption, the message naming field.
  void ExpectCorruptionNaming(const std::string& field) {
    Checkpoint back;
    Status s = LoadCheckpoint(path_, &back);
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  }
  std::string dir_, path_;
};

void ExpectEqual(const Checkpoint& x, const Checkpoint& y) {
  EXPECT_EQ(x.version, y.version);
  EXPECT_EQ(x.boot_id, y.boot_id);
  EXPECT_EQ(x.node_name, y.node_name);
  EXPECT_EQ(x.pending_releases, y.pending_releases);
  EXPECT_EQ(x.release_epochs, y.release_epochs);
  ASSERT_EQ(x.claims.size(), y.claims.size());
  for (const auto& [uid, a] : x.claims) {
    const ClaimEntry& b = y.claims.at(uid);
    EXPECT_EQ(a.uid, b.uid);
    EXPECT_EQ(a.ns, b.ns);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.memory_id, b.memory_id);
    EXPECT_EQ(a.state, b.state);
    EXPECT_EQ(a.updated_unix, b.updated_unix);
    EXPECT_EQ(a.assign_epoch, b.assign_epoch);
    ASSERT_EQ(a.devices.size(), b.devices.size());
    for (size_t i = 0; i < a.devices.size(); ++i) {
      EXPECT_EQ(a.devices[i].request_names, b.devices[i].request_names);
      EXPECT_EQ(a.devices[i].pool_name, b.devices[i].pool_name);
      EXPECT_EQ(a.devices[i].device_name, b.devices[i].device_name);
      EXPECT_EQ(a.devices[i].share_id, b.devices[i].share_id);
      EXPECT_EQ(a.devices[i].cdi_device_ids, b.devices[i].cdi_device_ids);
    }
  }
}

TEST_F(CheckpointTest, RoundTripsThroughTheFile) {
  Checkpoint cp = Sample();
  ASSERT_TRUE(SaveCheckpoint(path_, cp).ok());
  Checkpoint back;
  Status s = LoadCheckpoint(path_, &back);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectEqual(cp, back);
  // Saving what was loaded gives the same bytes (stable encoding).
  std::string first = Read();
  ASSERT_TRUE(SaveCheckpoint(path_, back).ok());
  EXPECT_EQ(first, Read());
  // No temp file is left beside it.
  EXPECT_EQ(std::system(("test $(ls -A " + dir_ + " | wc -l) -eq 1").c_str()), 0);
}

TEST_F(CheckpointTest, MissingFileIsNotFound) {
  Checkpoint cp;
  EXPECT_TRUE(LoadCheckpoint(path_, &cp).IsNotFound());
}

TEST_F(CheckpointTest, AFlippedByteFailsTheChecksum) {
  ASSERT_TRUE(SaveCheckpoint(path_, Sample()).ok());
  std::string text = Read();
  auto pos = text.find("mem-7");
  ASSERT_NE(pos, std::string::npos);
  text[pos + 4] = '9';
  Write(text);
  Checkpoint cp;
  Status s = LoadCheckpoint(path_, &cp);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("read checkpoint " + path_ + ": checksum mismatch"), std::string::npos)
      << s.message();
}

TEST_F(CheckpointTest, GarbageAndTruncationAreCorruption) {
  for (std::string bad : {std::string("not json"), std::string("{}"), std::string("[1,2]"),
                          EncodeCheckpoint(Sample()).substr(0, 40)}) {
    Write(bad);
    Checkpoint cp;
    EXPECT_TRUE(LoadCheckpoint(path_, &cp).IsCorruption()) << bad;
  }
}

TEST_F(CheckpointTest, ANewerIncompatibleVersionIsUnsupported) {
  nlohmann::json j = nlohmann::json::parse(EncodeCheckpoint(Sample()));
  j["version"] = Checkpoint::kVersion + 1;
  Write(j.dump());
  Checkpoint cp;
  EXPECT_TRUE(LoadCheckpoint(path_, &cp).IsUnsupported());
}

// A newer plugin may add fields (additive, same version); this one reads the
// file and keeps what it knows. The checksum is the format's: CRC32 of the
// payload's canonical dump, so the newer writer's payload carries its own.
TEST_F(CheckpointTest, FieldsAddedByANewerWriterAreIgnored) {
  nlohmann::json j = nlohmann::json::parse(EncodeCheckpoint(Sample()));
  j["data"]["claims"]["uid-a"]["numaNode"] = 1;
  j["data"]["claims"]["uid-a"]["devices"][0]["metadataFile"] = "/x";
  j["data"]["futureTopLevel"] = {{"a", 1}};
  Write(j.dump());  // the old checksum no longer matches
  Checkpoint cp;
  EXPECT_TRUE(LoadCheckpoint(path_, &cp).IsCorruption());
  WriteWithChecksum(j);
  Status s = LoadCheckpoint(path_, &cp);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectEqual(Sample(), cp);
}

// Pending releases (an additive field): round trip, absent when empty (a file
// without any reads the same to an older plugin), and bad ids refused.
TEST_F(CheckpointTest, PendingReleasesRoundTripAndAreOmittedWhenEmpty) {
  Checkpoint cp = Sample();
  EXPECT_EQ(nlohmann::json::parse(EncodeCheckpoint(cp))["data"].count("pendingReleases"), 0u);
  cp.pending_releases = {"mem-1", "mem-2"};
  ASSERT_NO_FATAL_FAILURE(ExpectRoundTrip(cp));
  nlohmann::json j = nlohmann::json::parse(Read());
  EXPECT_EQ(j["data"]["pendingReleases"], nlohmann::json({"mem-1", "mem-2"}));
  j["data"]["pendingReleases"] = {"mem-1", 7};
  WriteWithChecksum(j);
  ExpectCorruptionNaming("pendingReleases");
}

// Assignment epochs (additive fields, docs/dra-design.md "Release protocol"): a
// claim's epoch and each pending release's round trip, are absent when
// unknown (the file reads the same to an older plugin), an epoch of a region
// with no pending release is not kept, and a bad epoch is refused.
TEST_F(CheckpointTest, AssignEpochsRoundTripAndAreOmittedWhenUnknown) {
  Checkpoint cp = Sample();
  nlohmann::json plain = nlohmann::json::parse(EncodeCheckpoint(cp));
  EXPECT_EQ(plain["data"].count("pendingReleaseEpochs"), 0u);
  for (const auto& [uid, c] : plain["data"]["claims"].items()) {
    EXPECT_EQ(c.count("assignEpoch"), 0u) << uid;
  }
  cp.claims.begin()->second.assign_epoch = 7;
  cp.pending_releases = {"mem-1", "mem-2"};
  cp.release_epochs = {{"mem-1", 3}};
  ASSERT_NO_FATAL_FAILURE(ExpectRoundTrip(cp));
  nlohmann::json j = nlohmann::json::parse(Read());
  EXPECT_EQ(j["data"]["pendingReleaseEpochs"], nlohmann::json({{"mem-1", 3}}));
  // An epoch for a region that is not pending (a hand edit) is dropped.
  j["data"]["pendingReleaseEpochs"]["mem-9"] = 5;
  WriteWithChecksum(j);
  Checkpoint back;
  ASSERT_TRUE(LoadCheckpoint(path_, &back).ok());
  EXPECT_EQ(back.release_epochs.count("mem-9"), 0u);
  j["data"]["pendingReleaseEpochs"]["mem-1"] = "3";
  WriteWithChecksum(j);
  ExpectCorruptionNaming("pendingReleaseEpochs");
}

TEST_F(CheckpointTest, BootIdIsTrimmed) {
  Write("abc-123\n");
  std::string id;
  ASSERT_TRUE(ReadBootId(&id, path_).ok());
  EXPECT_EQ(id, "abc-123");
  EXPECT_TRUE(ReadBootId(&id, dir_ + "/absent").IsIOError());
  std::string real;
  ASSERT_TRUE(ReadBootId(&real).ok());  // /proc/sys/kernel/random/boot_id
  EXPECT_EQ(real.size(), 36u);
}

}  // namespace
}  // namespace cxlkv::dra
