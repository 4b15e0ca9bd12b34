// Copyright cxlkv authors.
#include "testing/openapi_validator.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "testing/e2e_env.h"

namespace cxlkv::kube::testing {
namespace {

class OpenApiValidatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* p = std::getenv("CXLKV_OPENAPI");
    Status s = OpenApiValidator::Load(p && *p ? p : CXLKV_RESOURCE_OPENAPI, &v_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::unique_ptr<OpenApiValidator> v_;
};

const Json kSlice = Json::parse(R"({
  "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
  "metadata": {"name": "s1", "labels": {"a": "b"}},
  "spec": {"driver": "cxlkv.dev", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
           "nodeName": "n1",
           "devices": [{"name": "d0", "attributes": {"type": {"string": "cxl-mem"}},
                        "capacity": {"memory": {"value": "64Gi"}},
                        "allowMultipleAllocations": true}]}})");

TEST_F(OpenApiValidatorTest, AcceptsWellFormedSlice) {
  bool known = false;
  EXPECT_TRUE(v_->ValidateObject(kSlice, &known).empty());
  EXPECT_TRUE(known);
}

TEST_F(OpenApiValidatorTest, ReportsUnknownFieldWithItsPath) {
  Json bad = kSlice;
  bad["spec"]["devices"][0]["basic"] = Json::object();  // v1beta1 shape, not v1
  auto p = v_->ValidateObject(bad);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], ".spec.devices[0].basic: unknown field");
}

TEST_F(OpenApiValidatorTest, ReportsWrongType) {
  Json bad = kSlice;
  bad["spec"]["pool"]["generation"] = "1";
  bad["metadata"]["labels"]["a"] = 3;
  auto p = v_->ValidateObject(bad);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0], ".metadata.labels.a: want string, got integer");
  EXPECT_EQ(p[1], ".spec.pool.generation: want integer, got string");
}

TEST_F(OpenApiValidatorTest, UnknownKindIsNotValidatedAndPatchBodiesMapByPath) {
  bool known = true;
  EXPECT_TRUE(v_->ValidateObject(Json{{"apiVersion", "v1"}, {"kind", "Pod"}}, &known).empty());
  EXPECT_FALSE(known);
  Json patch = {{"status", {{"devices", Json::array({{{"driver", 1}}})}}}};
  std::string def = DefinitionForRequest(
      *v_, "/apis/resource.k8s.io/v1/namespaces/x/resourceclaims/c/status", patch);
  EXPECT_EQ(def, "io.k8s.api.resource.v1.ResourceClaim");
  auto p = v_->Validate(def, patch);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], ".status.devices[0].driver: want string, got integer");
}

}  // namespace
}  // namespace cxlkv::kube::testing
