// Copyright cxlkv authors.
#include "cxlkv/base/file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "cxlkv/base/json.h"

namespace cxlkv::base {
namespace {

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cxlkv-base-test.XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_;
};

TEST_F(FileTest, AtomicWriteReplacesWholeFileAndLeavesNoTempFile) {
  const std::string p = dir_ + "/a.json";
  ASSERT_TRUE(WriteFileAtomic(p, "first, longer contents").ok());
  ASSERT_TRUE(WriteFileAtomic(p, "second").ok());
  std::string got;
  ASSERT_TRUE(ReadFile(p, &got).ok());
  EXPECT_EQ(got, "second");
  struct stat st;
  EXPECT_NE(stat((p + ".tmp").c_str(), &st), 0);
}

TEST_F(FileTest, MissingFileIsNotFoundAndUnwritableDirIsIOError) {
  std::string got;
  EXPECT_TRUE(ReadFile(dir_ + "/absent", &got).IsNotFound());
  Status s = WriteFileAtomic(dir_ + "/no/such/dir/f", "x");
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_NE(s.message().find("write " + dir_ + "/no/such/dir/f"), std::string::npos);
  ASSERT_TRUE(MakeDirs(dir_ + "/x/y/z").ok());
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/x/y/z/f", "x").ok());
  EXPECT_TRUE(RemoveFile(dir_ + "/x/y/z/f").ok());
  EXPECT_TRUE(RemoveFile(dir_ + "/x/y/z/f").ok()) << "already gone is OK";
}

TEST_F(FileTest, StateFileRoundTripsAndOtherVersionsAreCorruption) {
  const std::string p = dir_ + "/state.json";
  ASSERT_TRUE(SaveStateFile(p, 3, {{"b", 1}, {"a", "x"}}).ok());
  std::string text;
  ASSERT_TRUE(ReadFile(p, &text).ok());
  EXPECT_EQ(text, "{\n  \"a\": \"x\",\n  \"b\": 1,\n  \"version\": 3\n}");
  nlohmann::json j;
  ASSERT_TRUE(ParseState(text, 3, &j).ok());
  EXPECT_EQ(j["b"], 1);
  EXPECT_TRUE(ParseState(text, 1, &j).IsCorruption());
  EXPECT_TRUE(ParseState("[1, 2]", 1, &j).IsCorruption());
  Status s = ParseState("{not json", 1, &j);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.message().rfind("malformed JSON: ", 0), 0u) << s.message();
}

TEST(JsonTest, OptionalFieldsCheckTypesAndNameTheField) {
  nlohmann::json j;
  ASSERT_TRUE(ParseJson(R"({"s": "v", "i": 7, "l": ["a", "b"], "bad": 1.5, "n": null})", &j).ok());
  std::string s = "default";
  int64_t i = 0;
  std::vector<std::string> l;
  EXPECT_TRUE(OptString(j, "s", &s).ok());
  EXPECT_EQ(s, "v");
  EXPECT_TRUE(OptString(j, "n", &s).ok());
  EXPECT_EQ(s, "v") << "null leaves the value";
  EXPECT_TRUE(OptInt(j, "i", &i).ok());
  EXPECT_EQ(i, 7);
  EXPECT_TRUE(OptStrings(j, "l", &l).ok());
  EXPECT_EQ(l, (std::vector<std::string>{"a", "b"}));
  Status bad = OptInt(j, "bad", &i);
  EXPECT_TRUE(bad.IsInvalidArgument());
  EXPECT_EQ(bad.message(), "bad: must be an integer");
  EXPECT_TRUE(OptString(j, "i", &s).IsInvalidArgument());
  EXPECT_TRUE(ParseJson("{", &j).IsInvalidArgument());
}

}  // namespace
}  // namespace cxlkv::base
