// Copyright cxlkv authors.
//
// ResourceType: one REST resource of the Kubernetes API (group, version,
// plural resource, kind, scope), and the descriptors of the kinds cxlkv uses.
//
// Thread-safety: immutable values; the descriptors are safe to share.
#ifndef CXLKV_KUBE_RESOURCE_H_
#define CXLKV_KUBE_RESOURCE_H_

#include <string>

namespace cxlkv::kube {

struct ResourceType {
  std::string group;     // "" for the core group
  std::string version;   // "v1"
  std::string resource;  // plural, lower case: "resourceclaims"
  std::string kind;      // "ResourceClaim"
  bool namespaced = true;

  // "resource.k8s.io/v1", or "v1" for the core group.
  std::string api_version() const { return group.empty() ? version : group + "/" + version; }
  // "/api/v1" or "/apis/<group>/<version>".
  std::string base_path() const {
    return group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
  }
};

// resource.k8s.io/v1
const ResourceType& ResourceSlices();  // cluster-scoped
const ResourceType& ResourceClaims();  // namespaced, has /status
const ResourceType& DeviceClasses();   // cluster-scoped
// core/v1
const ResourceType& Pods();
const ResourceType& Nodes();       // cluster-scoped
const ResourceType& Namespaces();  // cluster-scoped
// coordination.k8s.io/v1
const ResourceType& Leases();
// events.k8s.io/v1
const ResourceType& Events();

}  // namespace cxlkv::kube

#endif  // CXLKV_KUBE_RESOURCE_H_
