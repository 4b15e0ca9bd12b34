// Copyright cxlkv authors.
//
// core/v1 NodeSelector evaluation, as the scheduler applies it to a
// ResourceClaim's `status.allocation.nodeSelector`: the kubelet plugin uses
// it to check that its node is one the allocation allows (k/k#140087), the
// controller to learn the candidate hosts of a multi-node allocation.
//
// Thread-safety: pure functions.
#ifndef CXLKV_DRA_COMMON_NODE_SELECTOR_H_
#define CXLKV_DRA_COMMON_NODE_SELECTOR_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cxlkv/status.h"

namespace cxlkv::dra {

// Sets *match when `node` (a core/v1 Node) satisfies `selector` (a core/v1
// NodeSelector): some term matches, and a term matches when all of its
// matchExpressions (on labels) and matchFields (only metadata.name exists)
// hold. A selector without terms, or an empty term, matches nothing.
// InvalidArgument: an unknown operator, a field other than metadata.name, or
// a malformed selector.
Status NodeSelectorMatches(const nlohmann::json& selector, const nlohmann::json& node, bool* match);

// The host names a selector names explicitly: the values of
// `kubernetes.io/hostname In [...]` expressions and `metadata.name In [...]`
// fields, over all terms, de-duplicated, in first-seen order. Empty when the
// selector names none (e.g. selects by other labels).
std::vector<std::string> SelectorHostnames(const nlohmann::json& selector);

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_COMMON_NODE_SELECTOR_H_
