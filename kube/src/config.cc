// Copyright cxlkv authors.
#include "cxlkv/kube/config.h"

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base64.h"

namespace cxlkv::kube {

namespace {

// Reads the file at `path` whole. The error says why not (it does not
// exist, is a directory, cannot be read); the caller names the path.
Status ReadFile(const std::string& path, std::string* out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    return Status::Error(Status::Code::kInvalidArgument,
                         err == ENOENT ? "the file does not exist" : std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    return Status::Error(Status::Code::kInvalidArgument, "a directory, not a file");
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::Error(Status::Code::kInvalidArgument, std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return Status::OK();
}

std::string Resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return base_dir + "/" + p;
}

// Reads `<key>-data` (base64) or `<key>` (a file path) from `node` into *out.
Status DataOrFile(const YAML::Node& node, const std::string& key, const std::string& base_dir,
                  std::string* out) {
  if (node[key + "-data"]) {
    if (!Base64Decode(node[key + "-data"].as<std::string>(), out)) {
      return Status::Error(Status::Code::kInvalidArgument, key + "-data: not valid base64");
    }
    return Status::OK();
  }
  if (node[key]) {
    const std::string path = Resolve(base_dir, node[key].as<std::string>());
    return ReadFile(path, out).WithContext(key + " " + path);
  }
  return Status::OK();
}

// Finds the entry of list `list` whose `name` is `name`, returning its `field`.
YAML::Node Named(const YAML::Node& list, const std::string& name, const std::string& field) {
  if (!list || !list.IsSequence()) return YAML::Node();
  for (const auto& e : list) {
    if (e["name"] && e["name"].as<std::string>() == name) return e[field];
  }
  return YAML::Node();
}

Status Parse(const std::string& path, Config* out) {
  std::string text;
  if (Status s = ReadFile(path, &text); !s.ok()) {
    // Say how to go on: every program of the tree that loads a kubeconfig
    // takes --kubeconfig (its environment variable: KUBECONFIG).
    return Status::Error(Status::Code::kInvalidArgument,
                         s.message() +
                             ": name an existing kubeconfig file with --kubeconfig or $KUBECONFIG "
                             "(in a pod, set neither: the pod's service account is used)");
  }
  YAML::Node root = YAML::Load(text);
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  if (!root["current-context"])
    return Status::Error(Status::Code::kInvalidArgument, "no current-context");
  std::string cur = root["current-context"].as<std::string>();
  YAML::Node ctx = Named(root["contexts"], cur, "context");
  if (!ctx) return Status::Error(Status::Code::kInvalidArgument, "context " + cur + " not found");
  YAML::Node cluster = Named(root["clusters"], ctx["cluster"].as<std::string>(""), "cluster");
  if (!cluster || !cluster["server"]) {
    return Status::Error(Status::Code::kInvalidArgument,
                         "cluster of context " + cur + " not found");
  }
  Config c;
  c.server = cluster["server"].as<std::string>();
  while (!c.server.empty() && c.server.back() == '/') c.server.pop_back();
  if (cluster["insecure-skip-tls-verify"] && cluster["insecure-skip-tls-verify"].as<bool>()) {
    return Status::Error(Status::Code::kInvalidArgument,
                         "insecure-skip-tls-verify is not supported (TLS is always verified)");
  }
  Status s = DataOrFile(cluster, "certificate-authority", dir, &c.ca_pem);
  if (!s.ok()) return s;
  if (ctx["namespace"]) c.ns = ctx["namespace"].as<std::string>();
  if (ctx["user"]) {
    YAML::Node user = Named(root["users"], ctx["user"].as<std::string>(), "user");
    if (user) {
      if (user["exec"] || user["auth-provider"]) {
        return Status::Error(Status::Code::kInvalidArgument,
                             "exec and auth-provider credentials are not supported");
      }
      if (!(s = DataOrFile(user, "client-certificate", dir, &c.client_cert_pem)).ok()) return s;
      if (!(s = DataOrFile(user, "client-key", dir, &c.client_key_pem)).ok()) return s;
      if (c.client_cert_pem.empty() != c.client_key_pem.empty()) {
        return Status::Error(Status::Code::kInvalidArgument,
                             "client certificate and key must be given together");
      }
      if (user["token"]) c.token = user["token"].as<std::string>();
      if (user["tokenFile"]) c.token_file = Resolve(dir, user["tokenFile"].as<std::string>());
    }
  }
  *out = std::move(c);
  return Status::OK();
}

}  // namespace

Status LoadKubeconfig(const std::string& path, Config* out) {
  try {
    return Parse(path, out).WithContext("load kubeconfig " + path);
  } catch (const YAML::Exception& e) {
    // yaml-cpp reports by exception; it stops here.
    return Status::Error(Status::Code::kInvalidArgument,
                         "load kubeconfig " + path + ": " + e.what());
  }
}

Status LoadInCluster(Config* out, const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr || *host == '\0' || *port == '\0') {
    return Status::Error(Status::Code::kInvalidArgument,
                         "load in-cluster config: KUBERNETES_SERVICE_HOST/PORT not set");
  }
  Config c;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6 literal
  c.server = "https://" + h + ":" + port;
  c.token_file = sa_dir + "/token";
  std::string token;
  Status s = ReadFile(c.token_file, &token).WithContext(c.token_file);
  if (s.ok()) s = ReadFile(sa_dir + "/ca.crt", &c.ca_pem).WithContext(sa_dir + "/ca.crt");
  if (!s.ok()) return s.WithContext("load in-cluster config");
  std::string ns;
  if (ReadFile(sa_dir + "/namespace", &ns).ok()) {
    while (!ns.empty() && (ns.back() == '\n' || ns.back() == ' ')) ns.pop_back();
    if (!ns.empty()) c.ns = ns;
  }
  *out = std::move(c);
  return Status::OK();
}

Status LoadDefault(Config* out) {
  if (std::getenv("KUBERNETES_SERVICE_HOST") != nullptr) return LoadInCluster(out);
  if (const char* kc = std::getenv("KUBECONFIG"); kc != nullptr && *kc != '\0') {
    std::string first(kc);
    first = first.substr(0, first.find(':'));
    return LoadKubeconfig(first, out);
  }
  const char* home = std::getenv("HOME");
  return LoadKubeconfig(std::string(home ? home : "") + "/.kube/config", out);
}

}  // namespace cxlkv::kube
