// Copyright cxlkv authors.
//
// EventRecorder: writes events.k8s.io/v1 Events about objects, the messages
// a person reads with `kubectl events` / `kubectl describe`.
//
// Record() never blocks on the network: events go to a bounded in-memory
// queue that a background thread drains (a full queue drops the event and
// counts it). Writes that fail are retried a few times, then dropped and
// counted; events are advisory and never worth stalling a controller.
//
// Thread-safety: all methods are thread-safe.
#ifndef CXLKV_KUBE_EVENT_RECORDER_H_
#define CXLKV_KUBE_EVENT_RECORDER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "cxlkv/kube/client.h"

namespace cxlkv::kube {

struct EventRecorderOptions {
  // reportingController, e.g. "cxlkv.dev/dra-controller" (required).
  std::string controller;
  // reportingInstance, e.g. the pod name (required).
  std::string instance;
  // Events waiting to be written; beyond this Record() drops.
  size_t queue_limit = 1000;
  // Attempts per event before it is dropped.
  int max_attempts = 3;
};

class EventRecorder {
 public:
  enum class Type : unsigned char { kNormal, kWarning };

  // `client` must outlive the recorder. kInvalidArgument without controller
  // or instance.
  static Status New(Client* client, EventRecorderOptions options,
                    std::unique_ptr<EventRecorder>* out);
  ~EventRecorder();  // writes what is queued (bounded by max_attempts), then stops
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  // Queues an Event regarding `regarding` (any object with apiVersion, kind
  // and metadata). `reason` is UpperCamelCase ("RegionComposed"), `action`
  // what was done ("Compose"), `note` the human message (max 1 KiB kept).
  // The Event lives in the object's namespace ("default" when cluster-scoped).
  void Record(const Json& regarding, Type type, const std::string& reason,
              const std::string& action, const std::string& note);

  // Blocks until every event queued so far was written or dropped, or
  // `timeout` passed; returns true when the queue drained.
  bool Flush(std::chrono::milliseconds timeout);

  int64_t written() const;
  int64_t dropped() const;

 private:
  struct Rep;
  explicit EventRecorder(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace cxlkv::kube

#endif  // CXLKV_KUBE_EVENT_RECORDER_H_
