// Copyright cxlkv authors.
#include "cxlkv/fabric/http_client.h"

#include <curl/curl.h>

#include <memory>
#include <mutex>

namespace cxlkv::fabric {
namespace {

size_t Collect(char* ptr, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(ptr, size * n);
  return size * n;
}

void GlobalInit() {
  // curl_global_init is not thread-safe; run it exactly once.
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

Status HttpDo(const HttpOptions& opt, const std::string& method, const std::string& url,
              const std::string& body, HttpResponse* resp) {
  GlobalInit();
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> h(curl_easy_init(), curl_easy_cleanup);
  if (!h) return Status::IOError(method + " " + url + ": curl_easy_init failed");
  CURL* c = h.get();
  std::string out;
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(opt.timeout_ms));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  // No proxy: every peer of ours is addressed directly.
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  if (!opt.username.empty()) {
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(c, CURLOPT_USERNAME, opt.username.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, opt.password.c_str());
  }
  if (!opt.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, opt.ca_file.c_str());
  if (opt.insecure) {
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  struct curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Accept: application/json");
  // POST/PUT/PATCH always carry a body (maybe empty) so that a
  // Content-Length goes out; servers may refuse a body-less POST.
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    if (!body.empty()) headers = curl_slist_append(headers, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) {
    std::string why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    return Status::IOError(method + " " + url + ": " + why);
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
  resp->body = std::move(out);
  return Status::OK();
}

}  // namespace cxlkv::fabric
