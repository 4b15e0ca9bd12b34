// Copyright cxlkv authors.
#include "cxlkv/kube/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace cxlkv::kube {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kube-config-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::string p = dir_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  std::string dir_;
};

// "-----BEGIN CERT-----\n" in base64, as kubeconfig *-data fields carry it.
constexpr char kCaB64[] = "LS0tLS1CRUdJTiBDRVJULS0tLS0K";

TEST_F(ConfigTest, KubeconfigCurrentContextWithInlineDataAndFiles) {
  Write("client.crt", "CERT");
  Write("client.key", "KEY");
  std::string path = Write("config", std::string(R"(apiVersion: v1
kind: Config
clusters:
- name: other
  cluster: {server: "https://10.0.0.9:6443"}
- name: c1
  cluster:
    server: https://127.0.0.1:6443/
    certificate-authority-data: )") + kCaB64 +
                                         R"(
users:
- name: u1
  user:
    client-certificate: client.crt
    client-key: client.key
contexts:
- name: ctx
  context: {cluster: c1, user: u1, namespace: team-a}
current-context: ctx
)");
  Config c;
  Status s = LoadKubeconfig(path, &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.server, "https://127.0.0.1:6443");
  EXPECT_EQ(c.ca_pem, "-----BEGIN CERT-----\n");
  EXPECT_EQ(c.client_cert_pem, "CERT");  // relative path resolved against the kubeconfig dir
  EXPECT_EQ(c.client_key_pem, "KEY");
  EXPECT_EQ(c.ns, "team-a");
}

TEST_F(ConfigTest, KubeconfigTokenAndDefaultNamespace) {
  std::string path = Write("config", R"(clusters:
- name: c
  cluster: {server: "https://h:1"}
users:
- name: u
  user: {token: abc}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
)");
  Config c;
  ASSERT_TRUE(LoadKubeconfig(path, &c).ok());
  EXPECT_EQ(c.token, "abc");
  EXPECT_EQ(c.ns, "default");
}

TEST_F(ConfigTest, KubeconfigRefusesInsecureAndExec) {
  std::string insecure = Write("a", R"(clusters:
- name: c
  cluster: {server: "https://h:1", insecure-skip-tls-verify: true}
contexts:
- name: x
  context: {cluster: c}
current-context: x
)");
  Config c;
  Status s = LoadKubeconfig(insecure, &c);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("insecure-skip-tls-verify"), std::string::npos) << s.message();
  std::string exec = Write("b", R"(clusters:
- name: c
  cluster: {server: "https://h:1"}
users:
- name: u
  user: {exec: {command: foo}}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
)");
  EXPECT_EQ(LoadKubeconfig(exec, &c).code(), Status::Code::kInvalidArgument);
}

TEST_F(ConfigTest, KubeconfigMissingContextOrFile) {
  Config c;
  EXPECT_EQ(LoadKubeconfig(dir_ + "/absent", &c).code(), Status::Code::kInvalidArgument);
  std::string p = Write("c", "current-context: nope\ncontexts: []\n");
  Status s = LoadKubeconfig(p, &c);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("context nope not found"), std::string::npos) << s.message();
}

TEST_F(ConfigTest, InClusterReadsServiceAccountFilesAndBracketsIPv6) {
  Write("token", "tok\n");
  Write("ca.crt", "CA");
  Write("namespace", "kube-system\n");
  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  Config c;
  Status s = LoadInCluster(&c, dir_);
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.server, "https://[fd00::1]:443");
  EXPECT_EQ(c.token_file, dir_ + "/token");
  EXPECT_EQ(c.ca_pem, "CA");
  EXPECT_EQ(c.ns, "kube-system");
}

TEST_F(ConfigTest, InClusterWithoutEnvironmentIsAnError) {
  unsetenv("KUBERNETES_SERVICE_HOST");
  Config c;
  EXPECT_EQ(LoadInCluster(&c, dir_).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace cxlkv::kube
