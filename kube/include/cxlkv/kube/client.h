// Copyright cxlkv authors.
//
// Client: a Kubernetes REST client over HTTPS (libcurl, TLS verified).
// Objects are nlohmann::json values in the API's own JSON shape; there is no
// code generation. Every call is synchronous and returns a Status whose
// http_status(), reason() and message() are the apiserver's own when it
// answered with an error.
//
// Thread-safety: all methods may be called concurrently from any thread
// (each request uses its own connection handle).
#ifndef CXLKV_KUBE_CLIENT_H_
#define CXLKV_KUBE_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cxlkv/kube/config.h"
#include "cxlkv/kube/resource.h"
#include "cxlkv/kube/status.h"

namespace cxlkv::kube {

using Json = nlohmann::json;

struct ClientOptions {
  // Sent as User-Agent; shows up in audit logs and managedFields.
  std::string user_agent = "cxlkv-kube/0.1";
  // Whole-request timeout for non-watch requests, milliseconds.
  long request_timeout_ms = 30000;
  // Connect timeout for every request (watch included), milliseconds.
  long connect_timeout_ms = 5000;
  // Called before every request that carries a body (create, update, patch),
  // with the HTTP method, the path and the body. Tests use it to validate
  // every object sent against an OpenAPI document. May be empty.
  std::function<void(const std::string& method, const std::string& path, const std::string& body)>
      on_request_body;
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  // Page size; 0 means no limit. When the apiserver returns
  // metadata.continue, pass it back in `continue_token` for the next page.
  int64_t limit = 0;
  std::string continue_token;
  // "" = most recent (quorum read); "0" = any (from cache).
  std::string resource_version;
};

struct WriteOptions {
  // Recorded in managedFields. Required for server-side apply.
  std::string field_manager;
  // Ask the apiserver to validate and admit, but not persist.
  bool dry_run = false;
  // "Strict" rejects unknown or duplicate fields (HTTP 400), "Warn", "Ignore";
  // "" leaves the server default.
  std::string field_validation = "Strict";
  // Server-side apply only: take ownership of conflicting fields.
  bool force = false;
};

struct DeleteOptions {
  // Preconditions: the delete fails with kConflict unless the live object
  // still has this UID / resourceVersion.
  std::optional<std::string> uid;
  std::optional<std::string> resource_version;
  std::optional<int64_t> grace_period_seconds;
  // "Foreground", "Background", "Orphan", or "" for the server default.
  std::string propagation_policy;
};

enum class PatchType : unsigned char {
  kMerge,           // application/merge-patch+json (RFC 7386)
  kJson,            // application/json-patch+json (RFC 6902)
  kStrategicMerge,  // application/strategic-merge-patch+json (built-in kinds only)
  kApply,           // application/apply-patch+yaml: server-side apply (JSON body)
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  // Start after this version. "" = the current state: the apiserver first
  // sends a synthetic ADDED for every existing object, then changes. A
  // version older than the server's history window gives 410 Gone.
  std::string resource_version;
  bool allow_bookmarks = true;
  // Server closes the stream after this many seconds; 0 = server default.
  int64_t timeout_seconds = 0;
};

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  Json object;       // the object; for ERROR, a meta/v1 Status
};

class Client {
 public:
  // Creates a client for `config`. Returns kInvalidArgument for an empty
  // server or unusable credentials.
  static Status New(const Config& config, const ClientOptions& options,
                    std::unique_ptr<Client>* out);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Config& config() const;

  // Reads one object into *out. kNotFound when absent. `ns` is ignored for
  // cluster-scoped types.
  Status Get(const ResourceType& type, const std::string& ns, const std::string& name, Json* out);

  // Lists into *out (a `<Kind>List`: items, metadata.resourceVersion,
  // metadata.continue). `ns` "" lists across all namespaces. kGone when a
  // continue token expired.
  Status List(const ResourceType& type, const std::string& ns, const ListOptions& opts, Json* out);

  // Creates `obj` (apiVersion/kind filled in when absent; kInvalidArgument
  // when present and different). *out (may be null) receives the stored object.
  // kAlreadyExists when the name is taken.
  Status Create(const ResourceType& type, const std::string& ns, const Json& obj, Json* out,
                const WriteOptions& opts = {});

  // Replaces the object (PUT). `obj` must carry metadata.name and
  // metadata.resourceVersion; a stale resourceVersion returns kConflict.
  // Status changes are ignored here on kinds with a status subresource.
  Status Update(const ResourceType& type, const std::string& ns, const Json& obj, Json* out,
                const WriteOptions& opts = {});

  // Replaces only the status of the object (PUT .../status); other changes
  // are ignored by the apiserver. Same conflict rule as Update.
  Status UpdateStatus(const ResourceType& type, const std::string& ns, const Json& obj, Json* out,
                      const WriteOptions& opts = {});

  // Patches `name` with `patch` (a JSON value; a JSON array for kJson).
  // `subresource` is "" or "status". kApply needs opts.field_manager; a
  // field owned by another manager returns kConflict unless opts.force.
  Status Patch(const ResourceType& type, const std::string& ns, const std::string& name,
               PatchType patch_type, const Json& patch, Json* out, const WriteOptions& opts = {},
               const std::string& subresource = "");

  // Deletes `name`. With finalizers present the object stays (with
  // metadata.deletionTimestamp) until they are removed. *out (may be null)
  // receives the object or Status the apiserver returned. kNotFound when
  // absent; kConflict when a precondition fails.
  Status Delete(const ResourceType& type, const std::string& ns, const std::string& name,
                const DeleteOptions& opts = {}, Json* out = nullptr);

  // Streams watch events to `on_event` until the server closes the stream
  // (returns OK), `on_event` returns false (OK), *stop becomes true
  // (kCancelled; checked at least once a second), or an error. An HTTP 410
  // returns kGone; an ERROR event is delivered to `on_event` as is.
  // `on_event` runs on the calling thread.
  Status Watch(const ResourceType& type, const std::string& ns, const WatchOptions& opts,
               const std::function<bool(const WatchEvent&)>& on_event,
               const std::atomic<bool>* stop = nullptr);

  // A request to any path (e.g. "/version", "/readyz"). `query` without '?'.
  // `content_type` is used when `body` is not empty. *out receives the parsed
  // JSON body (or a JSON string when the body is not JSON).
  Status Raw(const std::string& method, const std::string& path, const std::string& query,
             const std::string& content_type, const std::string& body, Json* out);

 private:
  struct Rep;
  explicit Client(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

// Path of a collection or object: "/apis/g/v/namespaces/ns/res[/name[/sub]]".
std::string ResourcePath(const ResourceType& type, const std::string& ns,
                         const std::string& name = "", const std::string& subresource = "");

// Percent-encodes `s` for use in a query string.
std::string QueryEscape(const std::string& s);

// "<ns>/<name>" for namespaced objects, "<name>" otherwise: the cache key
// informers and work queues use.
std::string ObjectKey(const Json& obj);

}  // namespace cxlkv::kube

#endif  // CXLKV_KUBE_CLIENT_H_
