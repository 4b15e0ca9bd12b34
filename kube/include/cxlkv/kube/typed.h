// Copyright cxlkv authors.
//
// ResourceClient: a Client bound to one ResourceType and namespace, so calls
// read like `claims.Get("c1", &obj)`. The typed factories below name the kinds
// cxlkv uses; objects stay JSON, and apiVersion/kind are filled in and checked
// on every write.
//
// Thread-safety: as Client. Lifetime: must not outlive the Client.
#ifndef CXLKV_KUBE_TYPED_H_
#define CXLKV_KUBE_TYPED_H_

#include <string>

#include "cxlkv/kube/client.h"

namespace cxlkv::kube {

class ResourceClient {
 public:
  // `ns` is ignored for cluster-scoped types.
  ResourceClient(Client* client, const ResourceType& type, std::string ns)
      : client_(client), type_(&type), ns_(type.namespaced ? std::move(ns) : "") {}

  const ResourceType& type() const { return *type_; }
  const std::string& ns() const { return ns_; }

  // Same contracts as the Client methods of the same name.
  Status Get(const std::string& name, Json* out) { return client_->Get(*type_, ns_, name, out); }
  Status List(const ListOptions& o, Json* out) { return client_->List(*type_, ns_, o, out); }
  Status Create(const Json& obj, Json* out, const WriteOptions& o = {}) {
    return client_->Create(*type_, ns_, obj, out, o);
  }
  Status Update(const Json& obj, Json* out, const WriteOptions& o = {}) {
    return client_->Update(*type_, ns_, obj, out, o);
  }
  Status UpdateStatus(const Json& obj, Json* out, const WriteOptions& o = {}) {
    return client_->UpdateStatus(*type_, ns_, obj, out, o);
  }
  Status Patch(const std::string& name, PatchType pt, const Json& patch, Json* out,
               const WriteOptions& o = {}, const std::string& subresource = "") {
    return client_->Patch(*type_, ns_, name, pt, patch, out, o, subresource);
  }
  Status Delete(const std::string& name, const DeleteOptions& o = {}, Json* out = nullptr) {
    return client_->Delete(*type_, ns_, name, o, out);
  }
  Status Watch(const WatchOptions& o, const std::function<bool(const WatchEvent&)>& on_event,
               const std::atomic<bool>* stop = nullptr) {
    return client_->Watch(*type_, ns_, o, on_event, stop);
  }

  // Lists every page (following metadata.continue with `page_size`) and
  // appends the items to *items; *resource_version receives the list's
  // version, the one to start a watch from. kGone if a continue token expired.
  Status ListAll(const ListOptions& o, int64_t page_size, std::vector<Json>* items,
                 std::string* resource_version);

 private:
  Client* client_;
  const ResourceType* type_;
  std::string ns_;
};

// resource.k8s.io/v1
inline ResourceClient ResourceSliceClient(Client* c) { return {c, ResourceSlices(), ""}; }
inline ResourceClient ResourceClaimClient(Client* c, std::string ns) {
  return {c, ResourceClaims(), std::move(ns)};
}
inline ResourceClient DeviceClassClient(Client* c) { return {c, DeviceClasses(), ""}; }
// core/v1
inline ResourceClient PodClient(Client* c, std::string ns) { return {c, Pods(), std::move(ns)}; }
inline ResourceClient NodeClient(Client* c) { return {c, Nodes(), ""}; }
// coordination.k8s.io/v1
inline ResourceClient LeaseClient(Client* c, std::string ns) {
  return {c, Leases(), std::move(ns)};
}
// events.k8s.io/v1
inline ResourceClient EventClient(Client* c, std::string ns) {
  return {c, Events(), std::move(ns)};
}

}  // namespace cxlkv::kube

#endif  // CXLKV_KUBE_TYPED_H_
