// Copyright cxlkv authors.
//
// In-cluster config against the real apiserver: a service-account token from
// the TokenRequest API, laid out as a pod sees it, authenticates as that
// service account (bearer token, CA verification, namespace file).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "cxlkv/kube/typed.h"
#include "testing/e2e_env.h"

namespace cxlkv::kube {
namespace {

using testing::E2ETest;

class ConfigE2ETest : public E2ETest {};

TEST_F(ConfigE2ETest, InClusterServiceAccountTokenAuthenticates) {
  const ResourceType sa_type{"", "v1", "serviceaccounts", "ServiceAccount", true};
  Json out;
  ASSERT_TRUE(client_->Create(sa_type, ns_, {{"metadata", {{"name", "driver"}}}}, &out).ok());
  Json token_review;
  Status s =
      client_->Raw("POST", ResourcePath(sa_type, ns_, "driver", "token"), "", "application/json",
                   Json{{"apiVersion", "authentication.k8s.io/v1"},
                        {"kind", "TokenRequest"},
                        {"spec", {{"expirationSeconds", 3600}}}}
                       .dump(),
                   &token_review);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::string token = token_review["status"]["token"];

  char tmpl[] = "/tmp/kube-sa-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  std::ofstream(dir + "/token") << token;
  std::ofstream(dir + "/ca.crt") << config_.ca_pem;
  std::ofstream(dir + "/namespace") << ns_;
  std::string host_port = config_.server.substr(std::string("https://").size());
  setenv("KUBERNETES_SERVICE_HOST", host_port.substr(0, host_port.rfind(':')).c_str(), 1);
  setenv("KUBERNETES_SERVICE_PORT", host_port.substr(host_port.rfind(':') + 1).c_str(), 1);
  Config in;
  s = LoadInCluster(&in, dir);
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(in.ns, ns_);
  EXPECT_EQ(in.server, config_.server);

  std::unique_ptr<Client> sa_client;
  ASSERT_TRUE(Client::New(in, ClientOptions{}, &sa_client).ok());
  Json review;
  s = sa_client->Raw(
      "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", "", "application/json",
      Json{{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "SelfSubjectReview"}}.dump(),
      &review);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(review["status"]["userInfo"]["username"], "system:serviceaccount:" + ns_ + ":driver");

  // The service account has no RBAC grants: reads are refused with 403.
  s = ResourceSliceClient(sa_client.get()).List({}, &out);
  EXPECT_EQ(s.code(), Status::Code::kForbidden) << s.ToString();
  EXPECT_EQ(s.http_status(), 403);

  // The token file is re-read per request: a rotated (here: broken) token is
  // used at once and refused with 401.
  std::ofstream(dir + "/token") << "not-a-token";
  s = sa_client->Raw("GET", "/version", "", "", "", &out);
  EXPECT_EQ(s.code(), Status::Code::kUnauthorized) << s.ToString();
  std::filesystem::remove_all(dir);
}

// A CA that did not sign the apiserver's certificate makes every request fail:
// TLS is verified.
TEST_F(ConfigE2ETest, WrongCaIsRefused) {
  Config bad = config_;
  bad.ca_pem = "";  // the system store does not know the test CA
  std::unique_ptr<Client> c;
  ASSERT_TRUE(Client::New(bad, ClientOptions{}, &c).ok());
  Json out;
  Status s = c->Raw("GET", "/version", "", "", "", &out);
  EXPECT_EQ(s.code(), Status::Code::kTransport) << s.ToString();
  EXPECT_EQ(s.http_status(), 0);
}

}  // namespace
}  // namespace cxlkv::kube
