// Copyright cxlkv authors.
//
// Informer: a local cache of one resource kept current by list + watch, with
// add/update/delete handlers and periodic resync.
//
// Protocol (one background thread):
//   list (paged) -> replace cache (handlers see the difference) ->
//   watch from the list's resourceVersion (bookmarks on) -> apply events ->
//   on stream end: rewatch from the last seen resourceVersion;
//   on 410 Gone (HTTP or ERROR event): relist;
//   on any other error (apiserver down, TLS, ...): exponential backoff, rewatch.
// Resync: every resync_period the update handler is called with (obj, obj)
// for every cached object, so level-triggered controllers re-check state.
//
// Thread-safety: all public methods are thread-safe. Handlers run on the
// informer's threads, never two at a time, and must not call Stop().
#ifndef CXLKV_KUBE_INFORMER_H_
#define CXLKV_KUBE_INFORMER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cxlkv/kube/client.h"

namespace cxlkv::kube {

struct InformerOptions {
  std::string ns;  // "" = all namespaces (or cluster-scoped)
  std::string label_selector;
  std::string field_selector;
  // Items per list page.
  int64_t page_size = 500;
  // 0 = no resync. Resync re-delivers cached objects; it does not relist.
  std::chrono::milliseconds resync_period{0};
  // Retry delay after an error: doubles from initial up to max; reset after
  // a successful list or a watch that delivered events.
  std::chrono::milliseconds backoff_initial{200};
  std::chrono::milliseconds backoff_max{5000};
  // Asks the server to end each watch after this long; the informer then
  // rewatches from where it was.
  int64_t watch_timeout_seconds = 300;
  // When set, the first watch starts at this resourceVersion without a list
  // (resuming from a version saved earlier); a 410 then leads to a relist.
  std::string start_resource_version;
};

struct InformerHandlers {
  std::function<void(const Json& obj)> on_add;
  std::function<void(const Json& old_obj, const Json& new_obj)> on_update;
  std::function<void(const Json& last_known)> on_delete;
};

class Informer {
 public:
  struct Counters {
    int64_t lists = 0;    // completed relists
    int64_t watches = 0;  // watch requests started
    int64_t gone = 0;     // 410s seen (each forces a relist)
    int64_t errors = 0;   // failed list/watch attempts (each backs off)
    int64_t events = 0;   // watch events applied (bookmarks excluded)
  };

  // `client` must outlive the Informer. Handlers may be empty.
  Informer(Client* client, const ResourceType& type, InformerOptions options,
           InformerHandlers handlers);
  ~Informer();  // Stop()s
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Starts the background threads. REQUIRES: not started before.
  void Start();
  // Stops and joins the threads (returns within about a second).
  void Stop();

  // True once the first list has been applied to the cache and the handlers
  // have been called for it.
  bool HasSynced() const;
  // Waits until HasSynced() or `timeout`; returns HasSynced().
  bool WaitForSync(std::chrono::milliseconds timeout) const;

  // Copies the cached object with key "<ns>/<name>" (or "<name>"). False if absent.
  bool Get(const std::string& key, Json* out) const;
  // Copies every cached object.
  std::vector<Json> List() const;
  // The newest resourceVersion seen (list, event or bookmark).
  std::string last_resource_version() const;
  Counters counters() const;

 private:
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

}  // namespace cxlkv::kube

#endif  // CXLKV_KUBE_INFORMER_H_
