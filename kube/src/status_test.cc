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

}  // namespace
}  // namespace cxlkv::kube
