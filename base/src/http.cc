// Copyright cxlkv authors.
#include "cxlkv/base/http.h"

#include <curl/curl.h>

#include <mutex>

namespace cxlkv::base {
namespace {

struct CallState {
  CURL* handle;
  const HttpRequest* req;
  HttpResponse* resp;
  bool ended_by_reader = false;
};

// Header lines arrive before any body byte, and the status code is known by
// then: OnWrite can tell a successful stream from an error body.
size_t OnHeader(char* /*ptr*/, size_t size, size_t n, void* ud) {
  auto* st = static_cast<CallState*>(ud);
  long code = 0;
  curl_easy_getinfo(st->handle, CURLINFO_RESPONSE_CODE, &code);
  st->resp->status = code;
  return size * n;
}

size_t OnWrite(char* ptr, size_t size, size_t n, void* ud) {
  auto* st = static_cast<CallState*>(ud);
  const size_t len = size * n;
  if (st->req->on_data && st->resp->status >= 200 && st->resp->status < 300) {
    if (!st->req->on_data(std::string_view(ptr, len))) {
      st->ended_by_reader = true;
      return 0;  // curl stops with CURLE_WRITE_ERROR
    }
    return len;
  }
  st->resp->body.append(ptr, len);
  return len;
}

int OnProgress(void* ud, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* st = static_cast<CallState*>(ud);
  return st->req->stop->load(std::memory_order_relaxed) ? 1 : 0;
}

bool AlwaysHasBody(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH";
}

}  // namespace

HttpClient::HttpClient(size_t max_idle) : max_idle_(max_idle) {
  // curl_global_init is not thread-safe: exactly once per process.
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_ALL); });
}

HttpClient::~HttpClient() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* HttpClient::Acquire() {
  {
    MutexLock l(&mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void HttpClient::Release(void* handle) {
  // curl_easy_reset clears the options but keeps the connection and TLS
  // session caches, which is the point of keeping the handle.
  curl_easy_reset(static_cast<CURL*>(handle));
  {
    MutexLock l(&mu_);
    if (idle_.size() < max_idle_) {
      idle_.push_back(handle);
      return;
    }
  }
  curl_easy_cleanup(static_cast<CURL*>(handle));
}

Status HttpClient::Do(const HttpRequest& req, HttpResponse* resp) {
  resp->status = 0;
  resp->body.clear();
  resp->cancelled = false;
  const std::string what = req.method + " " + req.url;
  CURL* h = static_cast<CURL*>(Acquire());
  if (h == nullptr) return Status::IOError(what + ": curl_easy_init failed");

  CallState st{h, &req, resp};
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM-based timeouts
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  if (!req.proxy_from_environment) curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
  if (!req.user_agent.empty()) curl_easy_setopt(h, CURLOPT_USERAGENT, req.user_agent.c_str());
  if (req.timeout_ms > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, req.timeout_ms);
  if (req.connect_timeout_ms > 0) {
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, req.connect_timeout_ms);
  }

  if (req.insecure) {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  } else {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
  }
  // The blobs are copied by libcurl (CURL_BLOB_COPY) before setopt returns.
  curl_blob ca{const_cast<char*>(req.ca_pem.data()), req.ca_pem.size(), CURL_BLOB_COPY};
  if (!req.ca_pem.empty()) {
    curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
  } else if (!req.ca_file.empty()) {
    curl_easy_setopt(h, CURLOPT_CAINFO, req.ca_file.c_str());
  }
  curl_blob cert{const_cast<char*>(req.client_cert_pem.data()), req.client_cert_pem.size(),
                 CURL_BLOB_COPY};
  curl_blob key{const_cast<char*>(req.client_key_pem.data()), req.client_key_pem.size(),
                CURL_BLOB_COPY};
  if (!req.client_cert_pem.empty() && !req.client_key_pem.empty()) {
    curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
    curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
    curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
  }
  if (!req.username.empty()) {
    curl_easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(h, CURLOPT_USERNAME, req.username.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, req.password.c_str());
  }

  curl_slist* headers = curl_slist_append(nullptr, "Accept: application/json");
  for (const std::string& line : req.headers) headers = curl_slist_append(headers, line.c_str());
  std::string content_type;
  if (!req.body.empty() || AlwaysHasBody(req.method)) {
    // An empty "Content-Type:" line keeps libcurl from sending its form
    // default for a request that names no type.
    content_type = "Content-Type: " + req.content_type;
    if (req.content_type.empty()) content_type.pop_back();
    headers = curl_slist_append(headers, content_type.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    // POSTFIELDS turns the request into a POST: keep the method asked for.
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &st);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnWrite);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &st);
  if (req.stop != nullptr) {
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, OnProgress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &st);
  }

  const CURLcode rc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  resp->status = code;
  curl_slist_free_all(headers);
  const std::string why = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc);
  Release(h);

  if (rc == CURLE_ABORTED_BY_CALLBACK) {
    resp->cancelled = true;
    return Status::IOError(what + ": stopped");
  }
  if (rc == CURLE_WRITE_ERROR && st.ended_by_reader) return Status::OK();
  if (rc != CURLE_OK) return Status::IOError(what + ": " + why);
  return Status::OK();
}

}  // namespace cxlkv::base
