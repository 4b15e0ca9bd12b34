// Copyright cxlkv authors.
#include "cxlkv/kube/resource.h"

namespace cxlkv::kube {

const ResourceType& ResourceSlices() {
  static const ResourceType t{"resource.k8s.io", "v1", "resourceslices", "ResourceSlice", false};
  return t;
}
const ResourceType& ResourceClaims() {
  static const ResourceType t{"resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", true};
  return t;
}
const ResourceType& DeviceClasses() {
  static const ResourceType t{"resource.k8s.io", "v1", "deviceclasses", "DeviceClass", false};
  return t;
}
const ResourceType& Pods() {
  static const ResourceType t{"", "v1", "pods", "Pod", true};
  return t;
}
const ResourceType& Nodes() {
  static const ResourceType t{"", "v1", "nodes", "Node", false};
  return t;
}
const ResourceType& Namespaces() {
  static const ResourceType t{"", "v1", "namespaces", "Namespace", false};
  return t;
}
const ResourceType& Leases() {
  static const ResourceType t{"coordination.k8s.io", "v1", "leases", "Lease", true};
  return t;
}
const ResourceType& Events() {
  static const ResourceType t{"events.k8s.io", "v1", "events", "Event", true};
  return t;
}

}  // namespace cxlkv::kube
