// Copyright cxlkv authors.
#include <gtest/gtest.h>

#include "cxlkv/kube/event_recorder.h"
#include "cxlkv/kube/typed.h"
#include "testing/e2e_env.h"

namespace cxlkv::kube {
namespace {

using testing::E2ETest;

class EventRecorderE2ETest : public E2ETest {};

// Recorded events land as events.k8s.io/v1 Events regarding the object, in
// its namespace, with reason, note, type and the reporting controller.
TEST_F(EventRecorderE2ETest, RecordsEventsRegardingAnObject) {
  ResourceClient claims = ResourceClaimClient(client_.get(), ns_);
  Json claim;
  ASSERT_TRUE(
      claims
          .Create({{"metadata", {{"name", "evt"}}},
                   {"spec",
                    {{"devices",
                      {{"requests", Json::array({{{"name", "r"},
                                                  {"exactly", {{"deviceClassName", "c"}}}}})}}}}}},
                  &claim)
          .ok());
  std::unique_ptr<EventRecorder> rec;
  ASSERT_TRUE(EventRecorder::New(client_.get(), {"cxlkv.dev/e2e", "instance-0"}, &rec).ok());
  rec->Record(claim, EventRecorder::Type::kNormal, "RegionComposed", "Compose", "composed 64 GiB");
  rec->Record(claim, EventRecorder::Type::kWarning, "FreeFailed", "Free", "fabric manager said no");
  ASSERT_TRUE(rec->Flush(std::chrono::seconds(30)));
  EXPECT_EQ(rec->written(), 2);
  EXPECT_EQ(rec->dropped(), 0);

  Json list;
  ListOptions lo;
  lo.field_selector = "regarding.name=evt";
  Status s = EventClient(client_.get(), ns_).List(lo, &list);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(list["items"].size(), 2u);
  std::map<std::string, Json> by_reason;
  for (const auto& e : list["items"]) by_reason[e.value("reason", "")] = e;
  ASSERT_TRUE(by_reason.count("RegionComposed"));
  ASSERT_TRUE(by_reason.count("FreeFailed"));
  EXPECT_EQ(by_reason["FreeFailed"]["type"], "Warning");
  EXPECT_EQ(by_reason["FreeFailed"]["note"], "fabric manager said no");
  EXPECT_EQ(by_reason["RegionComposed"]["regarding"]["uid"], claim["metadata"]["uid"]);
  EXPECT_EQ(by_reason["RegionComposed"]["regarding"]["kind"], "ResourceClaim");
  EXPECT_EQ(by_reason["RegionComposed"]["reportingController"], "cxlkv.dev/e2e");
  EXPECT_EQ(by_reason["RegionComposed"]["reportingInstance"], "instance-0");
}

}  // namespace
}  // namespace cxlkv::kube
