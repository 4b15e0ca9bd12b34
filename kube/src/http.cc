// Copyright cxlkv authors.
#include "http.h"

#include <curl/curl.h>

#include <fstream>
#include <mutex>
#include <sstream>

namespace cxlkv::kube::internal {

namespace {

std::once_flag g_curl_once;

struct CallState {
  CURL* handle;
  const HttpRequest* req;
  HttpResponse* resp;
  bool aborted_by_callback = false;
};

// Header lines arrive before any body byte; the status code is known by then,
// so OnWrite can tell a successful stream from an error body.
size_t OnHeader(char* /*ptr*/, size_t size, size_t n, void* ud) {
  auto* st = static_cast<CallState*>(ud);
  long code = 0;
  curl_easy_getinfo(st->handle, CURLINFO_RESPONSE_CODE, &code);
  st->resp->status = static_cast<int>(code);
  return size * n;
}

size_t OnWrite(char* ptr, size_t size, size_t n, void* ud) {
  auto* st = static_cast<CallState*>(ud);
  size_t len = size * n;
  if (st->req->on_data) {
    // Stream only a successful body; buffer an error body for ErrorFromResponse.
    if (st->resp->status >= 200 && st->resp->status < 300) {
      if (!st->req->on_data(std::string_view(ptr, len))) {
        st->aborted_by_callback = true;
        return 0;  // makes curl stop with CURLE_WRITE_ERROR
      }
      return len;
    }
  }
  st->resp->body.append(ptr, len);
  return len;
}

int OnProgress(void* ud, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* st = static_cast<CallState*>(ud);
  return (st->req->stop != nullptr && st->req->stop->load(std::memory_order_relaxed)) ? 1 : 0;
}

}  // namespace

Transport::Transport(const Config& config, const ClientOptions& options)
    : config_(config), options_(options) {
  std::call_once(g_curl_once, [] { curl_global_init(CURL_GLOBAL_ALL); });
}

Transport::~Transport() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* Transport::Acquire() {
  {
    base::MutexLock l(&mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void Transport::Release(void* handle) {
  // curl_easy_reset clears options but keeps the connection and TLS session
  // caches, which is the point of pooling.
  curl_easy_reset(static_cast<CURL*>(handle));
  base::MutexLock l(&mu_);
  if (idle_.size() < 8) {
    idle_.push_back(handle);
    return;
  }
  curl_easy_cleanup(static_cast<CURL*>(handle));
}

Status Transport::AuthHeader(std::string* out) const {
  out->clear();
  std::string token = config_.token;
  if (!config_.token_file.empty()) {
    // Service-account tokens rotate; read the file for every request.
    std::ifstream f(config_.token_file);
    if (!f) {
      return Status::Error(Status::Code::kInvalidArgument,
                           "read token " + config_.token_file + ": cannot open");
    }
    std::ostringstream ss;
    ss << f.rdbuf();
    token = ss.str();
    while (!token.empty() && (token.back() == '\n' || token.back() == ' ')) token.pop_back();
  }
  if (!token.empty()) *out = "Authorization: Bearer " + token;
  return Status::OK();
}

Status Transport::Do(const HttpRequest& req, HttpResponse* resp) {
  resp->status = 0;
  resp->body.clear();
  std::string auth;
  Status s = AuthHeader(&auth);
  if (!s.ok()) return s;

  CURL* h = static_cast<CURL*>(Acquire());
  if (h == nullptr) return Status::Error(Status::Code::kTransport, "curl_easy_init failed");
  CallState st{h, &req, resp};
  std::string url = config_.server + req.path_and_query;
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM-based timeouts
  curl_easy_setopt(h, CURLOPT_USERAGENT, options_.user_agent.c_str());
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, options_.connect_timeout_ms);
  if (req.timeout_ms > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, req.timeout_ms);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
  curl_blob ca{const_cast<char*>(config_.ca_pem.data()), config_.ca_pem.size(), CURL_BLOB_COPY};
  if (!config_.ca_pem.empty()) curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
  curl_blob cert{const_cast<char*>(config_.client_cert_pem.data()), config_.client_cert_pem.size(),
                 CURL_BLOB_COPY};
  curl_blob key{const_cast<char*>(config_.client_key_pem.data()), config_.client_key_pem.size(),
                CURL_BLOB_COPY};
  if (!config_.client_cert_pem.empty()) {
    curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
    curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
    curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
  }
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Accept: application/json");
  if (!auth.empty()) headers = curl_slist_append(headers, auth.c_str());
  std::string ct;
  if (!req.body.empty()) {
    ct = "Content-Type: " + req.content_type;
    headers = curl_slist_append(headers, ct.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
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
  CURLcode rc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  resp->status = static_cast<int>(code);
  curl_slist_free_all(headers);
  Release(h);

  if (rc == CURLE_ABORTED_BY_CALLBACK) {
    return Status::Error(Status::Code::kCancelled,
                         req.method + " " + req.path_and_query + ": stopped");
  }
  if (rc == CURLE_WRITE_ERROR && st.aborted_by_callback) return Status::OK();
  if (rc != CURLE_OK) {
    return Status::Error(Status::Code::kTransport,
                         req.method + " " + url + ": " + curl_easy_strerror(rc));
  }
  return Status::OK();
}

Status ErrorFromResponse(const HttpResponse& resp) {
  std::string reason, message;
  Json j = Json::parse(resp.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.value("kind", "") == "Status") {
    reason = j.value("reason", "");
    message = j.value("message", "");
  } else {
    message = resp.body.substr(0, 512);
  }
  return Status::FromHttp(resp.status, reason, message);
}

}  // namespace cxlkv::kube::internal
