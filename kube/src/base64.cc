// Copyright cxlkv authors.
#include "base64.h"

#include <openssl/evp.h>

namespace cxlkv::kube {

bool Base64Decode(std::string_view in, std::string* out) {
  std::string clean;
  clean.reserve(in.size() + 3);
  for (char ch : in) {
    if (ch == '\n' || ch == '\r' || ch == ' ' || ch == '\t') continue;
    clean.push_back(ch);
  }
  while (clean.size() % 4 != 0) clean.push_back('=');
  std::string buf(clean.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(buf.data()),
                          reinterpret_cast<const unsigned char*>(clean.data()),
                          static_cast<int>(clean.size()));
  if (n < 0) return false;
  // EVP_DecodeBlock counts padding bytes as output; drop them.
  size_t pad = 0;
  for (size_t i = clean.size(); i > 0 && clean[i - 1] == '='; --i) ++pad;
  buf.resize(static_cast<size_t>(n) - (pad > 2 ? 2 : pad));
  *out = std::move(buf);
  return true;
}

}  // namespace cxlkv::kube
