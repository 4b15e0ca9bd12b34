// Copyright cxlkv authors.
//
// E2ETest (test-only): a GoogleTest fixture for tests against the control
// plane of test/e2e/cluster.sh. Each test gets a Client built from
// $KUBECONFIG and its own namespace (deleted at the end). Every object the
// client sends is validated against the resource.k8s.io/v1 OpenAPI
// reference; a test that sent an invalid object fails in TearDown.
#ifndef CXLKV_KUBE_SRC_TESTING_E2E_ENV_H_
#define CXLKV_KUBE_SRC_TESTING_E2E_ENV_H_

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cxlkv/kube/client.h"
#include "testing/openapi_validator.h"

namespace cxlkv::kube::testing {

class E2ETest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Another client on the same cluster, with the same validation hook.
  Status NewClient(std::unique_ptr<Client>* out);
  // "<prefix>-<random hex>", a DNS label.
  static std::string UniqueName(const std::string& prefix);
  // Evaluates `cond` every 100 ms until it holds or `timeout` passes;
  // returns its last value.
  static bool Eventually(const std::function<bool()>& cond, std::chrono::milliseconds timeout);
  // Runs test/e2e/cluster.sh <args> (for restart-apiserver); returns its exit code.
  static int ClusterCommand(const std::string& args);

  std::unique_ptr<Client> client_;
  Config config_;
  std::string ns_;

 private:
  ClientOptions Options();
  std::shared_ptr<OpenApiValidator> validator_;
  std::shared_ptr<std::mutex> problems_mu_ = std::make_shared<std::mutex>();
  std::shared_ptr<std::vector<std::string>> problems_ =
      std::make_shared<std::vector<std::string>>();
};

// Definition name for a request body sent to `path`: by the body's own
// apiVersion/kind, else by the resource.k8s.io/v1 collection in the path
// (patch bodies carry no kind). "" when neither names a described kind.
std::string DefinitionForRequest(const OpenApiValidator& v, const std::string& path,
                                 const Json& body);

}  // namespace cxlkv::kube::testing

#endif  // CXLKV_KUBE_SRC_TESTING_E2E_ENV_H_
