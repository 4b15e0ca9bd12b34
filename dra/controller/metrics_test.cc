// Copyright cxlkv authors.
#include "controller/metrics.h"

#include <gtest/gtest.h>

namespace cxlkv::dra {
namespace {

TEST(MetricsTest, ResultLabelsAreSnakeCaseCodeNames) {
  EXPECT_EQ(ControllerMetrics::ResultLabel(Status::OK()), "ok");
  EXPECT_EQ(ControllerMetrics::ResultLabel(Status::IOError("x")), "io_error");
  EXPECT_EQ(ControllerMetrics::ResultLabel(Status::NotFound("x")), "not_found");
  EXPECT_EQ(ControllerMetrics::ResultLabel(Status::NoSpace("x")), "no_space");
  EXPECT_EQ(ControllerMetrics::ResultLabel(Status::InvalidArgument("x")), "invalid_argument");
}

TEST(MetricsTest, CountersHistogramsAndGauges) {
  ControllerMetrics m;
  {
    ControllerMetrics::Op op(&m, "compose");
    EXPECT_TRUE(op.Done(Status::NoSpace("full")).IsNoSpace());
  }
  m.EndOp("free", Status::OK(), std::chrono::milliseconds(20));
  m.BeginOp("get");  // still running
  m.SetPoolBytes("cma-0/blade-0", 2LL << 30, 1LL << 30);
  m.AddFreeRetry();
  m.SetLeakedRegions(3);
  const std::string t = m.Render();
  EXPECT_NE(t.find("cxlkv_dra_operations_total{operation=\"compose\",result=\"no_space\"} 1\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("cxlkv_dra_operation_duration_seconds_bucket{operation=\"free\",result=\"ok\","
                   "le=\"0.01\"} 0\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("cxlkv_dra_operation_duration_seconds_bucket{operation=\"free\",result=\"ok\","
                   "le=\"0.025\"} 1\n"),
            std::string::npos)
      << t;
  EXPECT_NE(
      t.find("cxlkv_dra_operation_duration_seconds_count{operation=\"free\",result=\"ok\"} 1"),
      std::string::npos);
  EXPECT_NE(t.find("cxlkv_dra_operations_in_flight{operation=\"get\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("cxlkv_dra_operations_in_flight{operation=\"compose\"} 0\n"), std::string::npos);
  EXPECT_NE(t.find("cxlkv_dra_composed_bytes{pool=\"cma-0/blade-0\"} 2147483648\n"),
            std::string::npos);
  EXPECT_NE(t.find("cxlkv_dra_unusable_bytes{pool=\"cma-0/blade-0\"} 1073741824\n"),
            std::string::npos);
  EXPECT_NE(t.find("cxlkv_dra_free_retries_total 1\n"), std::string::npos);
  EXPECT_NE(t.find("cxlkv_dra_leaked_regions 3\n"), std::string::npos);
  // One registry for the whole binary: the shared renderer's HELP/TYPE lines.
  EXPECT_NE(t.find("# TYPE cxlkv_dra_operation_duration_seconds histogram\n"), std::string::npos);
}

TEST(MetricsTest, UnlabelledSeriesStartAtTheirIdleValues) {
  ControllerMetrics m;
  std::string t = m.Render();
  for (const char* want :
       {"cxlkv_dra_fabric_reachable 1\n", "cxlkv_dra_leader 0\n", "cxlkv_dra_annotation_mode 0\n",
        "cxlkv_dra_owner_takeovers_total 0\n", "cxlkv_dra_free_retries_total 0\n"}) {
    EXPECT_NE(t.find(want), std::string::npos) << want << t;
  }
  m.AddTakeover();
  m.SetAnnotationMode(true);
  m.SetFabricReachable(false);
  EXPECT_EQ(m.registry()->Value("cxlkv_dra_owner_takeovers_total", {}), 1);
  t = m.Render();
  EXPECT_NE(t.find("cxlkv_dra_annotation_mode 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("cxlkv_dra_fabric_reachable 0\n"), std::string::npos) << t;
}

}  // namespace
}  // namespace cxlkv::dra
