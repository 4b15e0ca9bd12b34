// Copyright cxlkv authors.
#include "cxlkv/kube/event_recorder.h"

#include <atomic>
#include <deque>
#include <random>
#include <thread>

#include "cxlkv/base/mutex.h"
#include "cxlkv/kube/leader_election.h"  // FormatMicroTime
#include "cxlkv/kube/typed.h"

namespace cxlkv::kube {

struct EventRecorder::Rep {
  Rep(Client* c, EventRecorderOptions o) : client(c), opts(std::move(o)) {}
  Client* const client;
  const EventRecorderOptions opts;

  base::Mutex mu;
  base::CondVar cv;
  std::deque<Json> queue CXLKV_GUARDED_BY(mu);
  int in_flight CXLKV_GUARDED_BY(mu) = 0;
  bool stopping CXLKV_GUARDED_BY(mu) = false;
  std::mt19937_64 rng CXLKV_GUARDED_BY(mu){std::random_device{}()};
  std::atomic<int64_t> written{0};
  std::atomic<int64_t> dropped{0};
  std::thread thread;

  void Run();
  std::string Suffix() CXLKV_REQUIRES(mu) {
    static const char* kHex = "0123456789abcdef";
    std::string s;
    uint64_t r = rng();
    for (int i = 0; i < 16; ++i, r >>= 4) s.push_back(kHex[r & 15]);
    return s;
  }
};

Status EventRecorder::New(Client* client, EventRecorderOptions options,
                          std::unique_ptr<EventRecorder>* out) {
  if (options.controller.empty() || options.instance.empty()) {
    return Status::Error(Status::Code::kInvalidArgument,
                         "create event recorder: controller and instance are required");
  }
  out->reset(new EventRecorder(std::make_unique<Rep>(client, std::move(options))));
  return Status::OK();
}

EventRecorder::EventRecorder(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {
  rep_->thread = std::thread([r = rep_.get()] { r->Run(); });
}

EventRecorder::~EventRecorder() {
  {
    base::MutexLock l(&rep_->mu);
    rep_->stopping = true;
  }
  rep_->cv.SignalAll();
  rep_->thread.join();
}

void EventRecorder::Record(const Json& regarding, Type type, const std::string& reason,
                           const std::string& action, const std::string& note) {
  const Json& meta = regarding.contains("metadata") ? regarding["metadata"] : Json::object();
  std::string obj_ns = meta.value("namespace", "");
  std::string ns = obj_ns.empty() ? "default" : obj_ns;
  Json ref = {{"apiVersion", regarding.value("apiVersion", "")},
              {"kind", regarding.value("kind", "")},
              {"name", meta.value("name", "")}};
  if (!obj_ns.empty()) ref["namespace"] = obj_ns;
  if (meta.contains("uid")) ref["uid"] = meta["uid"];
  if (meta.contains("resourceVersion")) ref["resourceVersion"] = meta["resourceVersion"];
  base::MutexLock l(&rep_->mu);
  if (rep_->stopping || rep_->queue.size() >= rep_->opts.queue_limit) {
    rep_->dropped++;
    return;
  }
  Json ev = {
      {"metadata",
       {{"name", meta.value("name", "object") + "." + rep_->Suffix()}, {"namespace", ns}}},
      {"eventTime", FormatMicroTime(std::chrono::system_clock::now())},
      {"reportingController", rep_->opts.controller},
      {"reportingInstance", rep_->opts.instance},
      {"action", action},
      {"reason", reason},
      {"regarding", ref},
      {"note", note.substr(0, 1024)},
      {"type", type == Type::kWarning ? "Warning" : "Normal"},
  };
  rep_->queue.push_back(std::move(ev));
  rep_->cv.SignalAll();
}

void EventRecorder::Rep::Run() {
  for (;;) {
    Json ev;
    {
      base::MutexLock l(&mu);
      while (!stopping && queue.empty()) cv.Wait(&mu);
      if (queue.empty()) return;  // stopping and drained
      ev = std::move(queue.front());
      queue.pop_front();
      in_flight++;
    }
    std::string ns = ev["metadata"]["namespace"];
    bool ok = false;
    for (int attempt = 0; attempt < opts.max_attempts && !ok; ++attempt) {
      Json created;
      Status s = EventClient(client, ns).Create(ev, &created);
      ok = s.ok() || s.IsAlreadyExists();
      if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(100 << attempt));
    }
    {
      base::MutexLock l(&mu);
      in_flight--;
      (ok ? written : dropped)++;
    }
    cv.SignalAll();
  }
}

bool EventRecorder::Flush(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  base::MutexLock l(&rep_->mu);
  while (!rep_->queue.empty() || rep_->in_flight != 0) {
    if (!rep_->cv.WaitUntil(&rep_->mu, deadline)) {
      return rep_->queue.empty() && rep_->in_flight == 0;
    }
  }
  return true;
}

int64_t EventRecorder::written() const { return rep_->written; }
int64_t EventRecorder::dropped() const { return rep_->dropped; }

}  // namespace cxlkv::kube
