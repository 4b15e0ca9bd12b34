// Copyright cxlkv authors.
//
// What a namespace's claims hold against its budget (controller/quota.h):
// reservations of live allocations, composed claims without one, and what
// stops counting. Admit itself runs against the real apiserver in the dra
// stage (test/e2e/dra-quota.bats).
#include "controller/quota.h"

#include <gtest/gtest.h>

namespace cxlkv::dra {
namespace {

using kube::Json;

constexpr int64_t kGiB = int64_t{1} << 30;

Json Claim(const std::string& uid, const std::string& ts, const std::string& driver = "cxlkv.dev") {
  Json c = {{"metadata", {{"name", "c-" + uid}, {"namespace", "team-a"}, {"uid", uid}}}};
  if (!ts.empty()) {
    c["status"]["allocation"] = {
        {"allocationTimestamp", ts},
        {"devices",
         {{"results", {{{"driver", driver}, {"pool", "cma-0/blade-0"}, {"device", "blade-0"}}}}}}};
  }
  return c;
}

Json Entry(int64_t bytes) { return {{"claim", "x"}, {"bytes", bytes}}; }

TEST(BudgetUsageTest, CountsReservationsOfLiveAllocationsOnly) {
  std::vector<Json> claims = {Claim("a", "t1"), Claim("b", "t2"), Claim("c", "")};
  Json res = {{"a@t1", Entry(2 * kGiB)},      // live
              {"b@t0", Entry(4 * kGiB)},      // b was reallocated since (t0 -> t2)
              {"c@t5", Entry(1 * kGiB)},      // c is deallocated
              {"gone@t9", Entry(8 * kGiB)}};  // claim deleted
  Json kept;
  EXPECT_EQ(BudgetUsage(res, claims, "cxlkv.dev", "self", &kept), 2 * kGiB);
  EXPECT_EQ(kept.size(), 1u);
  EXPECT_TRUE(kept.contains("a@t1"));
}

TEST(BudgetUsageTest, ExcludesTheClaimBeingAdmittedButKeepsItsEntry) {
  std::vector<Json> claims = {Claim("a", "t1"), Claim("self", "t3")};
  Json res = {{"a@t1", Entry(2 * kGiB)}, {"self@t3", Entry(3 * kGiB)}};
  Json kept;
  EXPECT_EQ(BudgetUsage(res, claims, "cxlkv.dev", "self", &kept), 2 * kGiB);
  EXPECT_EQ(kept.size(), 2u);
}

TEST(BudgetUsageTest, ComposedClaimsWithoutReservationCountTheirAnnotation) {
  Json composed = Claim("old", "t1");
  composed["metadata"]["annotations"]["cxlkv.dev/region"] =
      R"({"applianceId":"cma-0","bladeId":"blade-0","memoryId":"m1","allocationTimestamp":"t1","sizeMiB":1024})";
  Json stale = Claim("stale", "t2");  // annotation of an earlier allocation
  stale["metadata"]["annotations"]["cxlkv.dev/region"] =
      R"({"memoryId":"m2","allocationTimestamp":"t0","sizeMiB":4096})";
  Json garbage = Claim("garbage", "t3");  // unparseable: counts nothing
  garbage["metadata"]["annotations"]["cxlkv.dev/region"] = "{not json";
  Json kept;
  EXPECT_EQ(BudgetUsage(Json::object(), {composed, stale, garbage}, "cxlkv.dev", "self", &kept),
            kGiB);
  EXPECT_TRUE(kept.empty());
}

TEST(BudgetUsageTest, IgnoresOtherDriversAndBadLedgers) {
  std::vector<Json> claims = {Claim("gpu", "t1", "gpu.example.com"), Claim("a", "t1")};
  Json res = {{"gpu@t1", Entry(8 * kGiB)}, {"a@t1", {{"bytes", "lots"}}}};
  Json kept;
  EXPECT_EQ(BudgetUsage(res, claims, "cxlkv.dev", "self", &kept), 0);
  EXPECT_TRUE(kept.empty());
  EXPECT_EQ(BudgetUsage(Json::array({1, 2}), claims, "cxlkv.dev", "self", &kept), 0);
}

TEST(BudgetKeyTest, UidAtAllocationTimestamp) {
  EXPECT_EQ(BudgetKey(Claim("u1", "2026-12-01T16:00:00Z")), "u1@2026-12-01T16:00:00Z");
  EXPECT_EQ(BudgetKey(Claim("u1", "")), "u1@");
}

TEST(BudgetRefusalTest, RecognisedThroughContext) {
  EXPECT_FALSE(IsBudgetExceeded(Status::NoSpace("blade full")));
  EXPECT_FALSE(IsBudgetExceeded(Status::OK()));
  Status s = Status::NoSpace("namespace memory budget exceeded: claim team-a/x asks for 4 GiB");
  EXPECT_TRUE(IsBudgetExceeded(s));
  EXPECT_TRUE(IsBudgetExceeded(s.WithContext("compose for claim team-a/x")));
  EXPECT_FALSE(IsBudgetExceeded(Status::InvalidArgument(s.message())));
}

}  // namespace
}  // namespace cxlkv::dra
