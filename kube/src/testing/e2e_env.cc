// Copyright cxlkv authors.
#include "testing/e2e_env.h"

#include <cstdlib>
#include <random>
#include <thread>

#include "cxlkv/kube/typed.h"

namespace cxlkv::kube::testing {

namespace {

std::string OpenApiPath() {
  if (const char* p = std::getenv("CXLKV_OPENAPI"); p != nullptr && *p != '\0') return p;
  return CXLKV_RESOURCE_OPENAPI;
}

}  // namespace

std::string DefinitionForRequest(const OpenApiValidator& v, const std::string& path,
                                 const Json& body) {
  if (body.is_object() && body.contains("apiVersion") && body.contains("kind")) {
    return v.DefinitionFor(body.value("apiVersion", ""), body.value("kind", ""));
  }
  static const std::pair<const char*, const char*> kCollections[] = {
      {"/resourceslices", "ResourceSlice"},
      {"/resourceclaims", "ResourceClaim"},
      {"/deviceclasses", "DeviceClass"},
      {"/resourceclaimtemplates", "ResourceClaimTemplate"},
  };
  if (path.rfind("/apis/resource.k8s.io/v1/", 0) != 0) return "";
  for (const auto& [seg, kind] : kCollections) {
    if (path.find(seg) != std::string::npos) return v.DefinitionFor("resource.k8s.io/v1", kind);
  }
  return "";
}

ClientOptions E2ETest::Options() {
  ClientOptions o;
  o.user_agent = "cxlkv-kube-e2e";
  auto validator = validator_;
  auto mu = problems_mu_;
  auto problems = problems_;
  o.on_request_body = [validator, mu, problems](const std::string& method, const std::string& path,
                                                const std::string& body) {
    Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return;  // JSON-patch arrays are operations, not objects
    std::string def = DefinitionForRequest(*validator, path, j);
    if (def.empty()) return;
    for (const auto& p : validator->Validate(def, j)) {
      std::lock_guard<std::mutex> l(*mu);
      problems->push_back(method + " " + path + ": " + def + p);
    }
  };
  return o;
}

void E2ETest::SetUp() {
  const char* kc = std::getenv("KUBECONFIG");
  ASSERT_TRUE(kc != nullptr && *kc != '\0')
      << "KUBECONFIG is not set: e2e tests need the control plane; run "
         "scripts/test.d/20-kube.sh or `eval $(test/e2e/cluster.sh env)`";
  std::unique_ptr<OpenApiValidator> v;
  Status s = OpenApiValidator::Load(OpenApiPath(), &v);
  ASSERT_TRUE(s.ok()) << s.ToString();
  validator_ = std::move(v);
  s = LoadKubeconfig(kc, &config_);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(NewClient(&client_).ok());
  ns_ = UniqueName("e2e");
  Json created;
  s = client_->Create(Namespaces(), "", Json{{"metadata", {{"name", ns_}}}}, &created);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

void E2ETest::TearDown() {
  if (client_ && !ns_.empty()) {
    Status s = client_->Delete(Namespaces(), "", ns_);
    EXPECT_TRUE(s.ok() || s.IsNotFound()) << s.ToString();
  }
  std::lock_guard<std::mutex> l(*problems_mu_);
  for (const auto& p : *problems_)
    ADD_FAILURE() << "object sent does not match the OpenAPI reference: " << p;
}

Status E2ETest::NewClient(std::unique_ptr<Client>* out) {
  return Client::New(config_, Options(), out);
}

std::string E2ETest::UniqueName(const std::string& prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  static std::mutex mu;
  std::lock_guard<std::mutex> l(mu);
  static const char* kHex = "0123456789abcdef";
  std::string s = prefix + "-";
  uint64_t r = rng();
  for (int i = 0; i < 10; ++i, r >>= 4) s.push_back(kHex[r & 15]);
  return s;
}

bool E2ETest::Eventually(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return cond();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

int E2ETest::ClusterCommand(const std::string& args) {
  const char* script = std::getenv("CXLKV_E2E_CLUSTER");
  if (script == nullptr || *script == '\0') return -1;
  std::string cmd = std::string("bash ") + script + " " + args;
  return std::system(cmd.c_str());
}

}  // namespace cxlkv::kube::testing
