// Copyright cxlkv authors.
#include "cxlkv/kube/typed.h"

namespace cxlkv::kube {

Status ResourceClient::ListAll(const ListOptions& o, int64_t page_size, std::vector<Json>* items,
                               std::string* resource_version) {
  ListOptions page = o;
  page.limit = page_size;
  page.continue_token.clear();
  for (;;) {
    Json list;
    Status s = List(page, &list);
    if (!s.ok()) return s;
    for (auto& item : list["items"]) {
      // List items omit apiVersion/kind; restore them so each item is a whole object.
      item["apiVersion"] = type_->api_version();
      item["kind"] = type_->kind;
      items->push_back(std::move(item));
    }
    const Json& meta = list["metadata"];
    std::string next = meta.value("continue", "");
    if (next.empty()) {
      // Every page of one paged list is served at the first page's version.
      if (resource_version != nullptr) *resource_version = meta.value("resourceVersion", "");
      return Status::OK();
    }
    page.continue_token = next;
    page.resource_version.clear();  // a continue token pins the version itself
  }
}

}  // namespace cxlkv::kube
