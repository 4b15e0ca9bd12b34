// Copyright cxlkv authors.
//
// cxlkv::Status over base::StatusCore: what callers see (names, messages,
// copies) is what it was before the two Status types shared their core.
#include "cxlkv/status.h"

#include <gtest/gtest.h>

#include <string>

namespace cxlkv {
namespace {

TEST(StatusTest, OkIsOnePointerAndAllocatesNothing) {
  static_assert(sizeof(Status) == sizeof(void*));
  const Status s = Status::OK();
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(s.WithContext("attach").ok());
}

// Bit (value - 1) set for each Is* predicate that holds.
unsigned Predicates(const Status& s) {
  return (s.IsNotFound() << 0) | (s.IsBusy() << 1) | (s.IsNoSpace() << 2) |
         (s.IsCorruption() << 3) | (s.IsInvalidArgument() << 4) | (s.IsIOError() << 5) |
         (s.IsUnsupported() << 6);
}

TEST(StatusTest, EachFactoryGivesItsCodeNameAndOnlyItsPredicate) {
  const Status cases[] = {Status::NotFound("m"),        Status::Busy("m"),
                          Status::NoSpace("m"),         Status::Corruption("m"),
                          Status::InvalidArgument("m"), Status::IOError("m"),
                          Status::Unsupported("m")};
  const char* names[] = {"NotFound",        "Busy",    "NoSpace",    "Corruption",
                         "InvalidArgument", "IOError", "Unsupported"};
  for (int i = 0; i < 7; ++i) {
    const Status& s = cases[i];
    EXPECT_FALSE(s.ok()) << names[i];
    EXPECT_EQ(static_cast<int>(s.code()), i + 1) << names[i];  // the codes are persisted values
    EXPECT_STREQ(Status::CodeName(s.code()), names[i]);
    EXPECT_EQ(s.ToString(), std::string(names[i]) + ": m");
    EXPECT_EQ(s.message(), "m");
    EXPECT_EQ(Predicates(s), 1u << i) << names[i];
  }
  EXPECT_EQ(Predicates(Status::OK()), 0u);
  EXPECT_STREQ(Status::CodeName(Status::Code::kOk), "OK");
  EXPECT_STREQ(Status::CodeName(static_cast<Status::Code>(200)), "Unknown");
}

TEST(StatusTest, WithContextPrefixesAndLeavesTheOriginalAlone) {
  const Status s = Status::Corruption("bad magic");
  const Status c = s.WithContext("attach /dev/shm/r").WithContext("open");
  EXPECT_TRUE(c.IsCorruption());
  EXPECT_EQ(c.message(), "open: attach /dev/shm/r: bad magic");
  EXPECT_EQ(c.ToString(), "Corruption: open: attach /dev/shm/r: bad magic");
  EXPECT_EQ(s.message(), "bad magic");
}

TEST(StatusTest, CopiesAreDeepAndMovesLeaveOk) {
  Status a = Status::Busy("held");
  Status b = a;
  a = a.WithContext("x");  // a gets a new state; b must not see it
  EXPECT_EQ(b.message(), "held");
  EXPECT_EQ(a.message(), "x: held");
  Status& self = b;
  b = self;
  EXPECT_EQ(b.message(), "held");
  Status m = std::move(b);
  EXPECT_TRUE(m.IsBusy());
  b = Status::OK();
  EXPECT_TRUE(b.ok());
  b = m;
  EXPECT_EQ(b.ToString(), "Busy: held");
}

Status FailsAt(int step, int fail) {
  if (step == fail) return Status::IOError("step " + std::to_string(step));
  return Status::OK();
}

Status RunsSteps(int fail, int* done) {
  for (int i = 0; i < 3; ++i) {
    CXLKV_RETURN_IF_ERROR(FailsAt(i, fail));
    ++*done;
  }
  return Status::OK();
}

TEST(StatusTest, ReturnIfErrorStopsAtTheFirstFailure) {
  int done = 0;
  EXPECT_TRUE(RunsSteps(-1, &done).ok());
  EXPECT_EQ(done, 3);
  done = 0;
  const Status s = RunsSteps(1, &done);
  EXPECT_EQ(s.ToString(), "IOError: step 1");
  EXPECT_EQ(done, 1);
}

}  // namespace
}  // namespace cxlkv
