// Copyright cxlkv authors.
//
// Standard (RFC 4648) base64 decoding for kubeconfig `*-data` fields.
#ifndef CXLKV_KUBE_SRC_BASE64_H_
#define CXLKV_KUBE_SRC_BASE64_H_

#include <string>
#include <string_view>

namespace cxlkv::kube {

// Decodes `in` (whitespace ignored, padding optional) into *out. Returns false
// on a character outside the alphabet.
bool Base64Decode(std::string_view in, std::string* out);

}  // namespace cxlkv::kube

#endif  // CXLKV_KUBE_SRC_BASE64_H_
