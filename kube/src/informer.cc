// Copyright cxlkv authors.
#include "cxlkv/kube/informer.h"

#include <atomic>
#include <map>
#include <thread>

#include "cxlkv/base/mutex.h"
#include "cxlkv/kube/typed.h"

namespace cxlkv::kube {

struct Informer::Rep {
  Rep(Client* c, const ResourceType& t, InformerOptions o, InformerHandlers h)
      : client(c), type(t), opts(std::move(o)), handlers(std::move(h)) {}

  // Immutable after construction.
  Client* const client;
  const ResourceType type;
  const InformerOptions opts;
  const InformerHandlers handlers;

  std::atomic<bool> stop{false};
  std::thread loop_thread;
  std::thread resync_thread;

  mutable base::Mutex mu;
  mutable base::CondVar cv;
  std::map<std::string, Json> cache CXLKV_GUARDED_BY(mu);
  std::string rv CXLKV_GUARDED_BY(mu);
  bool synced CXLKV_GUARDED_BY(mu) = false;
  Counters counters CXLKV_GUARDED_BY(mu);

  // Held while a handler runs, so handlers never overlap (loop vs resync).
  base::Mutex handler_mu;

  void Loop();
  void ResyncLoop();
  Status Relist();
  void DeliverListDiff(const std::map<std::string, Json>& old,
                       const std::map<std::string, Json>& fresh) CXLKV_REQUIRES(handler_mu);
  void Apply(const WatchEvent& ev);
  std::string last_rv() {
    base::MutexLock l(&mu);
    return rv;
  }
  void SleepFor(std::chrono::milliseconds d) {
    const auto deadline = std::chrono::steady_clock::now() + d;
    base::MutexLock l(&mu);
    while (!stop.load()) {
      if (!cv.WaitUntil(&mu, deadline)) break;
    }
  }
};

Informer::Informer(Client* client, const ResourceType& type, InformerOptions options,
                   InformerHandlers handlers)
    : rep_(std::make_unique<Rep>(client, type, std::move(options), std::move(handlers))) {}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  rep_->loop_thread = std::thread([r = rep_.get()] { r->Loop(); });
  if (rep_->opts.resync_period.count() > 0) {
    rep_->resync_thread = std::thread([r = rep_.get()] { r->ResyncLoop(); });
  }
}

void Informer::Stop() {
  {
    base::MutexLock l(&rep_->mu);
    rep_->stop = true;
  }
  rep_->cv.SignalAll();
  if (rep_->loop_thread.joinable()) rep_->loop_thread.join();
  if (rep_->resync_thread.joinable()) rep_->resync_thread.join();
}

bool Informer::HasSynced() const {
  base::MutexLock l(&rep_->mu);
  return rep_->synced;
}

bool Informer::WaitForSync(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  base::MutexLock l(&rep_->mu);
  while (!rep_->synced) {
    if (!rep_->cv.WaitUntil(&rep_->mu, deadline)) return rep_->synced;
  }
  return true;
}

bool Informer::Get(const std::string& key, Json* out) const {
  base::MutexLock l(&rep_->mu);
  auto it = rep_->cache.find(key);
  if (it == rep_->cache.end()) return false;
  *out = it->second;
  return true;
}

std::vector<Json> Informer::List() const {
  base::MutexLock l(&rep_->mu);
  std::vector<Json> v;
  for (const auto& [k, obj] : rep_->cache) v.push_back(obj);
  return v;
}

std::string Informer::last_resource_version() const {
  base::MutexLock l(&rep_->mu);
  return rep_->rv;
}

Informer::Counters Informer::counters() const {
  base::MutexLock l(&rep_->mu);
  return rep_->counters;
}

Status Informer::Rep::Relist() {
  ResourceClient rc(client, type, opts.ns);
  ListOptions lo;
  lo.label_selector = opts.label_selector;
  lo.field_selector = opts.field_selector;
  std::vector<Json> items;
  std::string list_rv;
  Status s = rc.ListAll(lo, opts.page_size, &items, &list_rv);
  if (!s.ok()) return s;

  // Replace the cache, then tell handlers what changed: objects gone while
  // we were not watching are deletes, new ones adds, changed ones updates.
  std::map<std::string, Json> fresh;
  for (auto& obj : items) fresh.emplace(ObjectKey(obj), std::move(obj));
  std::map<std::string, Json> old;
  {
    base::MutexLock l(&mu);
    old.swap(cache);
    cache = fresh;
    rv = list_rv;
    counters.lists++;
  }
  {
    base::MutexLock h(&handler_mu);
    DeliverListDiff(old, fresh);
  }
  // Synced only after the handlers saw the first list, so a caller that
  // waited for sync can rely on its add handler having run for every object.
  {
    base::MutexLock l(&mu);
    synced = true;
  }
  cv.SignalAll();
  return Status::OK();
}

void Informer::Rep::DeliverListDiff(const std::map<std::string, Json>& old,
                                    const std::map<std::string, Json>& fresh) {
  for (const auto& [key, obj] : old) {
    if (!fresh.count(key) && handlers.on_delete) handlers.on_delete(obj);
  }
  for (const auto& [key, obj] : fresh) {
    auto it = old.find(key);
    if (it == old.end()) {
      if (handlers.on_add) handlers.on_add(obj);
    } else if (it->second["metadata"].value("resourceVersion", "") !=
               obj["metadata"].value("resourceVersion", "")) {
      if (handlers.on_update) handlers.on_update(it->second, obj);
    }
  }
}

void Informer::Rep::Apply(const WatchEvent& ev) {
  Json obj = ev.object;
  obj["apiVersion"] = type.api_version();
  obj["kind"] = type.kind;
  std::string key = ObjectKey(obj);
  std::string obj_rv = obj["metadata"].value("resourceVersion", "");
  Json old;
  bool existed;
  {
    base::MutexLock l(&mu);
    auto it = cache.find(key);
    existed = it != cache.end();
    if (existed) old = it->second;
    if (ev.type == "DELETED") {
      cache.erase(key);
    } else {
      cache[key] = obj;
    }
    if (!obj_rv.empty()) rv = obj_rv;
    counters.events++;
  }
  base::MutexLock h(&handler_mu);
  if (ev.type == "DELETED") {
    if (handlers.on_delete) handlers.on_delete(obj);
  } else if (existed) {
    if (handlers.on_update) handlers.on_update(old, obj);
  } else if (handlers.on_add) {
    handlers.on_add(obj);
  }
}

void Informer::Rep::Loop() {
  bool need_list = opts.start_resource_version.empty();
  if (!need_list) {
    base::MutexLock l(&mu);
    rv = opts.start_resource_version;
  }
  auto backoff = opts.backoff_initial;
  auto fail = [&](const Status&) {
    {
      base::MutexLock l(&mu);
      counters.errors++;
    }
    SleepFor(backoff);
    backoff = std::min(backoff * 2, opts.backoff_max);
  };
  while (!stop) {
    if (need_list) {
      Status s = Relist();
      if (s.IsGone()) continue;  // a continue token expired mid-list: start over
      if (!s.ok()) {
        fail(s);
        continue;
      }
      need_list = false;
      backoff = opts.backoff_initial;
    }
    WatchOptions wo;
    wo.label_selector = opts.label_selector;
    wo.field_selector = opts.field_selector;
    wo.resource_version = last_rv();
    wo.allow_bookmarks = true;
    wo.timeout_seconds = opts.watch_timeout_seconds;
    bool gone = false, error_event = false, got_events = false;
    {
      base::MutexLock l(&mu);
      counters.watches++;
    }
    Status s = client->Watch(
        type, opts.ns, wo,
        [&](const WatchEvent& ev) {
          if (ev.type == "BOOKMARK") {
            std::string b = ev.object["metadata"].value("resourceVersion", "");
            base::MutexLock l(&mu);
            if (!b.empty()) rv = b;
            return true;
          }
          if (ev.type == "ERROR") {
            // A Status object; 410 (reason Expired/Gone) means our version fell
            // out of the server's history window.
            if (ev.object.value("code", 0) == 410)
              gone = true;
            else
              error_event = true;
            return false;
          }
          got_events = true;
          Apply(ev);
          return true;
        },
        &stop);
    if (stop) break;
    if (gone || s.IsGone()) {
      base::MutexLock l(&mu);
      counters.gone++;
      need_list = true;
      continue;
    }
    if (!s.ok() || error_event) {
      fail(s);
      continue;
    }
    if (got_events) backoff = opts.backoff_initial;
  }
}

void Informer::Rep::ResyncLoop() {
  while (!stop) {
    SleepFor(opts.resync_period);
    if (stop) break;
    std::vector<Json> objs;
    {
      base::MutexLock l(&mu);
      if (!synced) continue;
      for (const auto& [k, obj] : cache) objs.push_back(obj);
    }
    base::MutexLock h(&handler_mu);
    for (const auto& obj : objs) {
      if (handlers.on_update) handlers.on_update(obj, obj);
    }
  }
}

}  // namespace cxlkv::kube
