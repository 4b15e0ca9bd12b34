// Copyright cxlkv authors.
//
// ControllerMetrics: the controller's Prometheus metrics, kept in the DRA
// binaries' one registry (common/metrics.h, text exposition format 0.0.4,
// prometheus.io/docs/instrumenting/exposition_formats) under these names:
//
//   cxlkv_dra_operations_total{operation,result}          counter
//   cxlkv_dra_operation_duration_seconds{operation,result} histogram, seconds
//                                   (1 ms .. 30 s: a get to a compose that
//                                   waits on host agents)
//   cxlkv_dra_operations_in_flight{operation}             gauge
//   cxlkv_dra_composed_bytes{pool}                         gauge: bytes of regions
//                                   backing a live allocation (last resync)
//   cxlkv_dra_unusable_bytes{pool}                        gauge: orphaned,
//                                   pending-free, leaked and foreign bytes
//                                   kept out of the slice
//   cxlkv_dra_free_retries_total                           counter
//   cxlkv_dra_leaked_regions                               gauge (last resync)
//   cxlkv_dra_orphans_freed_total                          counter
//   cxlkv_dra_owner_takeovers_total                        counter: claims taken
//                                   over from a replica whose Lease expired
//   cxlkv_dra_owner_leases_collected_total                 counter: heartbeat
//                                   Leases of departed replicas deleted
//   cxlkv_dra_fabric_reachable                             gauge 0/1
//   cxlkv_dra_leader                                       gauge 0/1 (the Lease)
//   cxlkv_dra_annotation_mode                              gauge 0/1
//
// `operation` is one of compose, free, get, list, add_host, own, takeover,
// status_patch, resync, materialize (local pool: the node's hostd);
// `result` is "ok" or the error's code name in snake case ("io_error",
// "not_found", "no_space", "busy", ...).
//
// Thread-safety: every method is thread-safe (the registry's mutex).
#ifndef CXLKV_DRA_CONTROLLER_METRICS_H_
#define CXLKV_DRA_CONTROLLER_METRICS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "common/metrics.h"
#include "cxlkv/status.h"

namespace cxlkv::dra {

class ControllerMetrics {
 public:
  // Declares every metric above; the unlabelled ones start at their idle
  // values (0, fabric reachable 1) so a scrape sees them from the start.
  ControllerMetrics();

  // The label value a result gets: "ok", or the status code in snake case.
  static std::string ResultLabel(const Status& s);

  void BeginOp(const std::string& op);
  void EndOp(const std::string& op, const Status& result, std::chrono::nanoseconds took);

  void SetPoolBytes(const std::string& pool, int64_t composed, int64_t unusable);
  void AddFreeRetry();
  void AddOrphansFreed(int n);
  void AddTakeover();
  void AddOwnerLeaseCollected();
  void SetLeakedRegions(int n);
  void SetFabricReachable(bool up);
  void SetLeader(bool leader);
  void SetAnnotationMode(bool on);

  // The exposition text.
  std::string Render() { return reg_.Render(); }
  // The registry itself (values for tests and logs).
  Metrics* registry() { return &reg_; }

  // Times one operation: BeginOp now, EndOp with Done's status.
  class Op {
   public:
    Op(ControllerMetrics* m, std::string op)
        : m_(m), op_(std::move(op)), t0_(std::chrono::steady_clock::now()) {
      m_->BeginOp(op_);
    }
    Status Done(Status s) {
      m_->EndOp(op_, s, std::chrono::steady_clock::now() - t0_);
      done_ = true;
      return s;
    }
    ~Op() {
      if (!done_) m_->EndOp(op_, Status::OK(), std::chrono::steady_clock::now() - t0_);
    }

   private:
    ControllerMetrics* m_;
    std::string op_;
    std::chrono::steady_clock::time_point t0_;
    bool done_ = false;
  };

 private:
  Metrics reg_;
};

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_METRICS_H_
