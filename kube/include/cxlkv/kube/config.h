// Copyright cxlkv authors.
//
// Config: where the apiserver is and how to authenticate to it, loaded from a
// kubeconfig file (current context) or from the in-cluster service account.
// TLS is always verified against the configured CA (or the system store when
// none is given); there is no "insecure" switch.
//
// Thread-safety: a Config is a value; it is copied into each Client.
#ifndef CXLKV_KUBE_CONFIG_H_
#define CXLKV_KUBE_CONFIG_H_

#include <string>

#include "cxlkv/kube/status.h"

namespace cxlkv::kube {

struct Config {
  // "https://host:port", no trailing slash.
  std::string server;
  // PEM bytes of the CA bundle that signs the apiserver's serving certificate;
  // empty means the system trust store.
  std::string ca_pem;
  // PEM client certificate and key (both or neither).
  std::string client_cert_pem;
  std::string client_key_pem;
  // Bearer token, fixed. Ignored when token_file is set.
  std::string token;
  // File holding a bearer token that may rotate (service accounts); re-read
  // on every request.
  std::string token_file;
  // Namespace of the current context, or the pod's own namespace in-cluster;
  // "default" when none is named.
  std::string ns = "default";
};

// Loads the current context of the kubeconfig at `path` (a single file; the
// KUBECONFIG list form is not merged). Reads certificate-authority(-data),
// client-certificate(-data), client-key(-data), token, tokenFile, namespace.
// Relative file paths resolve against the kubeconfig's directory.
// Returns kInvalidArgument for a missing/unparsable file or context, or an
// auth method this client does not speak (exec plugins, auth providers).
Status LoadKubeconfig(const std::string& path, Config* out);

// Loads the in-cluster config: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
// (IPv6 hosts bracketed), the service-account token file, CA and namespace
// under `sa_dir` (default /var/run/secrets/kubernetes.io/serviceaccount).
// Returns kInvalidArgument when the environment or files are missing.
Status LoadInCluster(Config* out,
                     const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// In-cluster when KUBERNETES_SERVICE_HOST is set, else $KUBECONFIG, else
// ~/.kube/config.
Status LoadDefault(Config* out);

}  // namespace cxlkv::kube

#endif  // CXLKV_KUBE_CONFIG_H_
