// Copyright cxlkv authors.
//
// OpenApiValidator (test-only): checks JSON objects against the definitions
// of an OpenAPI v2 (swagger) document such as the Kubernetes resource.k8s.io
// reference: unknown fields and wrong JSON types. It does not check value
// formats, enums, required fields or CEL rules; the apiserver does those.
//
// Thread-safety: immutable after Load(); Validate* may run concurrently.
#ifndef CXLKV_KUBE_SRC_TESTING_OPENAPI_VALIDATOR_H_
#define CXLKV_KUBE_SRC_TESTING_OPENAPI_VALIDATOR_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cxlkv/kube/client.h"

namespace cxlkv::kube::testing {

class OpenApiValidator {
 public:
  // Reads the document at `path`. kInvalidArgument when unreadable or not
  // swagger 2.0 with `definitions`.
  static Status Load(const std::string& path, std::unique_ptr<OpenApiValidator>* out);

  // The definition name for (apiVersion, kind) from x-kubernetes-group-version-kind,
  // or "" when the document does not describe that kind.
  std::string DefinitionFor(const std::string& api_version, const std::string& kind) const;

  // Validates `value` against definition `def`. Returns one line per problem
  // ("<json path>: unknown field", "<json path>: want string, got number"),
  // empty when valid. Null values are accepted anywhere (the API reads null
  // as unset).
  std::vector<std::string> Validate(const std::string& def, const Json& value) const;

  // Validates a whole object by its apiVersion/kind; an object of a kind the
  // document does not describe yields no problems (*known set false).
  std::vector<std::string> ValidateObject(const Json& obj, bool* known = nullptr) const;

 private:
  OpenApiValidator() = default;
  void Check(const Json& schema, const Json& value, const std::string& path,
             std::vector<std::string>* problems, int depth) const;
  Json doc_;
  std::map<std::string, std::string> by_gvk_;  // "<apiVersion>/<kind>" -> definition
};

}  // namespace cxlkv::kube::testing

#endif  // CXLKV_KUBE_SRC_TESTING_OPENAPI_VALIDATOR_H_
