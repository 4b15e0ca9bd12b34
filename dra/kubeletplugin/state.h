// Copyright cxlkv authors.
//
// DeviceState: what NodePrepareResources and NodeUnprepareResources do, free
// of gRPC. Per claim, Prepare
//   1. reads the claim and checks its UID (a replaced claim is refused) and
//      that it is allocated;
//   2. checks that this node is in the allocation's node selector
//      (k/k#140087: the scheduler once skipped that check for shared claims);
//   3. takes the region from the controller's `status.devices[].data`
//      (common/claim_status.h); none yet = "not ready yet";
//   4. refuses a region still prepared here for another claim;
//   5. records PrepareStarted in the checkpoint, has the local hostd rewrite
//      the region's CDI spec (a reboot wipes /var/run/cdi; hostd answers
//      NotFound until the fabric manager had it materialize the region here:
//      "not ready yet"), checks the spec file exists, records
//      PrepareCompleted and returns the CDI ids.
// Every step is redone on every call: Prepare is idempotent and never trusts
// the checkpoint alone. Errors are per claim and fast (every remote call is
// bounded well under the kubelet's fixed 45 s), so the kubelet retries.
// Unprepare forgets the claim; an unknown claim is success. When no other
// claim here uses the claim's region, the node's materialization is released
// (hostd::Client::Release: the fabric manager unassigns this host's port, hostd
// removes the device and CDI spec; the other hosts keep the region and its
// bytes). The release is recorded in the checkpoint first, with the
// assignment epoch the claim prepared on (hostd's device), and does not fail
// the unprepare: one that does not go through (hostd or the manager down, or
// a call that timed out) is retried by RetryReleases. A claim that prepares
// the region here while its release is pending finishes the release first
// (a timed-out attempt may still be on its way), never drops it. A later
// consumer here then waits ("not ready yet") until the controller has added
// this host back (add-host, a newer epoch) and hostd materialized it; a
// release that arrives after that names the older epoch and the fabric
// manager refuses it (superseded: dropped here).
// Log lines name the claim as `claim=<name> namespace=<ns> uid=<uid>`.
//
// Failpoint (tests only): CXLKV_FAILPOINT=dra.prepare.after_started makes the
// process SIGKILL itself right after PrepareStarted is durable and before
// hostd is asked, so a crash test hits that exact window (the name follows
// src/region/failpoint.h's convention).
//
// Thread-safety: Prepare, Unprepare, Cleanup, RetryReleases and Prepared serialize on one
// mutex (as the Go helper serializes gRPC calls by default). Across
// processes: two plugin pods of a rolling update share the state dir, so
// every mutating call holds an exclusive flock(2) on
// <checkpoint>.lock and re-reads the checkpoint first; the file, not a
// process's memory, is the truth, and neither instance overwrites what the
// other recorded.
#ifndef CXLKV_DRA_KUBELETPLUGIN_STATE_H_
#define CXLKV_DRA_KUBELETPLUGIN_STATE_H_

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "cxlkv/hostd/client.h"
#include "cxlkv/kube/client.h"
#include "cxlkv/status.h"
#include "kubeletplugin/checkpoint.h"

namespace cxlkv::dra {

struct StateOptions {
  std::string driver_name = "cxlkv.dev";
  std::string node_name;        // REQUIRES: non-empty
  std::string checkpoint_path;  // REQUIRES: non-empty; its directory must exist
  std::string boot_id_path = "/proc/sys/kernel/random/boot_id";
  // Where hostd writes CDI specs; the spec file <cdi_dir>/<memoryId>.json is
  // checked after every rewrite. "" skips the check.
  std::string cdi_dir = "/var/run/cdi";
  // Where operation counters, latencies and gauges go (see
  // DeclarePluginMetrics); nullptr = none. REQUIRES: outlives the state.
  Metrics* metrics = nullptr;
};

// Declares the plugin's metrics in *m:
//   cxlkv_dra_plugin_operations_total{operation,result}  counter
//   cxlkv_dra_plugin_operation_duration_seconds{operation,result}  histogram
//   cxlkv_dra_plugin_operations_in_flight{operation}  gauge
//   cxlkv_dra_plugin_prepared_claims  gauge (checkpoint entries)
// operation: prepare | unprepare | cleanup | release; result: success | not_ready
// (a "not ready yet" answer the kubelet retries) | error | superseded (release
// only: the host was assigned the region again since; nothing released).
void DeclarePluginMetrics(Metrics* m);

// What the kubelet sends for one claim.
struct ClaimRef {
  std::string ns;
  std::string uid;
  std::string name;
};

struct PrepareResult {
  std::vector<PreparedDevice> devices;
  std::string error;  // "" = success
};

class DeviceState {
 public:
  // Loads the checkpoint (a missing one is empty) and stamps it with this
  // boot's id. A checkpoint from an earlier boot keeps its entries (the
  // kubelet re-prepares them after a reboot, and Prepare redoes the work).
  // Corruption / Unsupported: the checkpoint cannot be read; it is left in
  // place, never reset (resetting could hand a region to a second claim).
  // REQUIRES: kube and hostd outlive the state.
  static Status Open(const StateOptions& opt, kube::Client* kube, const hostd::Client* hostd,
                     std::unique_ptr<DeviceState>* out);

  PrepareResult Prepare(const ClaimRef& claim);
  // One NodePrepareResources claim's outcome, for metrics: "success",
  // "not_ready" or "error".
  static const char* ResultOf(const std::string& error);
  // "" = success (also for a claim this node never prepared).
  std::string Unprepare(const ClaimRef& claim);

  // Drops checkpoint entries whose claim is gone from the API server (or was
  // replaced by one with another UID): claims deleted while the plugin was
  // down. Returns how many were dropped in *dropped. Entries whose claim
  // cannot be read for another reason stay.
  Status Cleanup(int* dropped);

  // Retries the releases that have not gone through (see Unprepare); returns
  // how many are still pending.
  int RetryReleases();

  // A copy of the checkpoint's entries.
  std::vector<ClaimEntry> Prepared();
  // True when the checkpoint came from an earlier boot.
  bool rebooted() const { return rebooted_; }

 private:
  DeviceState(const StateOptions& opt, kube::Client* kube, const hostd::Client* hostd)
      : opt_(opt), kube_(kube), hostd_(hostd) {}
  std::string PrepareLocked(const ClaimRef& claim, std::vector<PreparedDevice>* devices);
  Status NodeLocked(nlohmann::json* node);
  Status SaveLocked();
  // Replaces cp_.claims with the file's (another instance may have written
  // it). Corruption/Unsupported as LoadCheckpoint.
  Status ReloadLocked();
  // True when a checkpoint entry uses the region.
  bool InUseLocked(const std::string& memory_id) const;
  // True when a PrepareCompleted entry uses the region.
  bool CompletedLocked(const std::string& memory_id) const;
  // Records a pending release of the region undoing assign_epoch (0: none
  // known), or forgets one.
  void AddReleaseLocked(const std::string& memory_id, uint64_t assign_epoch);
  void DropReleaseLocked(const std::string& memory_id);
  // Asks hostd to release the region here, naming the pending release's
  // epoch; on success, superseded, or when hostd has nothing to release
  // through, drops it from pending_releases and saves. False: not through.
  bool ReleaseLocked(const std::string& memory_id);
  void Record(const char* op, const char* result, std::chrono::steady_clock::time_point start);

  // Immutable after construction.
  const StateOptions opt_;
  kube::Client* const kube_;
  const hostd::Client* const hostd_;
  bool rebooted_ = false;

  std::mutex mu_;
  Checkpoint cp_;                                    // guarded by mu_
  nlohmann::json node_;                              // guarded by mu_; this node, cached
  std::chrono::steady_clock::time_point node_read_;  // guarded by mu_
};

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_KUBELETPLUGIN_STATE_H_
