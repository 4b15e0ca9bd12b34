// Copyright cxlkv authors.
#include "cxlkv/kube/status.h"

#include <gtest/gtest.h>

#include "http.h"

namespace cxlkv::kube {
namespace {

// The apiserver's Status body reaches the caller unchanged: code, reason, message.
TEST(StatusTest, ErrorCarriesApiserverStatusReasonAndMessage) {
  internal::HttpResponse r;
  r.status = 409;
  r.body = R"({"kind":"Status","apiVersion":"v1","status":"Failure",
    "message":"Operation cannot be fulfilled on leases \"x\": the object has been modified",
    "reason":"Conflict","code":409})";
  Status s = internal::ErrorFromResponse(r).WithContext("update leases default/x");
  EXPECT_TRUE(s.IsConflict());
  EXPECT_EQ(s.http_status(), 409);
  EXPECT_EQ(s.reason(), "Conflict");
  EXPECT_EQ(s.message(),
            "update leases default/x: Operation cannot be fulfilled on leases \"x\": the object "
            "has been modified");
}

TEST(StatusTest, AlreadyExistsIsDistinctFromConflict) {
  EXPECT_TRUE(Status::FromHttp(409, "AlreadyExists", "exists").IsAlreadyExists());
  EXPECT_TRUE(Status::FromHttp(409, "Conflict", "stale").IsConflict());
  EXPECT_TRUE(Status::FromHttp(410, "Expired", "too old").IsGone());
  EXPECT_TRUE(Status::FromHttp(404, "NotFound", "x").IsNotFound());
  EXPECT_TRUE(Status::FromHttp(422, "Invalid", "x").IsInvalid());
  EXPECT_TRUE(Status::FromHttp(200, "", "").ok());
}

TEST(StatusTest, NonStatusBodyBecomesMessage) {
  internal::HttpResponse r;
  r.status = 503;
  r.body = "service unavailable";
  Status s = internal::ErrorFromResponse(r);
  EXPECT_EQ(s.code(), Status::Code::kServerError);
  EXPECT_EQ(s.message(), "service unavailable");
  EXPECT_EQ(s.ToString(), "ServerError (HTTP 503): service unavailable");
}

// Every code's name, in the order the API's distinctions are listed.
TEST(StatusTest, CodeNamesAreTheEnumeratorsWithoutK) {
  const char* names[] = {
      "OK",        "NotFound",     "AlreadyExists",   "Conflict",        "Gone",
      "Invalid",   "Unauthorized", "Forbidden",       "TooManyRequests", "ServerError",
      "Transport", "BadResponse",  "InvalidArgument", "Cancelled"};
  for (int i = 0; i < 14; ++i)
    EXPECT_STREQ(Status::CodeName(static_cast<Status::Code>(i)), names[i]) << i;
  EXPECT_STREQ(Status::CodeName(static_cast<Status::Code>(14)), "Unknown");
}

// WithContext keeps the HTTP answer; copies are independent; Error has none.
TEST(StatusTest, ContextAndCopiesKeepTheHttpAnswer) {
  const Status s = Status::FromHttp(403, "Forbidden", "no");
  Status c = s.WithContext("list ResourceSlices");
  EXPECT_EQ(c.code(), Status::Code::kForbidden);
  EXPECT_EQ(c.http_status(), 403);
  EXPECT_EQ(c.reason(), "Forbidden");
  EXPECT_EQ(c.ToString(), "Forbidden (HTTP 403 Forbidden): list ResourceSlices: no");
  EXPECT_EQ(s.message(), "no");
  Status copy = c;
  c = Status::OK();
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(c.http_status(), 0);
  EXPECT_EQ(c.reason(), "");
  EXPECT_EQ(c.message(), "");
  EXPECT_EQ(c.ToString(), "OK");
  EXPECT_EQ(copy.http_status(), 403);
  EXPECT_EQ(Status::FromHttp(500, "", "").ToString(), "ServerError (HTTP 500): HTTP 500");
  const Status e = Status::Error(Status::Code::kTransport, "connect: refused");
  EXPECT_EQ(e.http_status(), 0);
  EXPECT_EQ(e.ToString(), "Transport: connect: refused");
  EXPECT_TRUE(Status::OK().WithContext("x").ok());
  static_assert(sizeof(Status) == sizeof(void*));
}

}  // namespace
}  // namespace cxlkv::kube
