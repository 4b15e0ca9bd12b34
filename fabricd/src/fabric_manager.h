// Copyright cxlkv authors.
//
// FabricManager: the emulated appliance behind cxlkv-fabricd. Owns the state,
// composes and frees regions (backing each with a file), assigns ports, asks
// each mapped host's cxlkv-hostd to materialize or remove the region, and
// persists every change before answering.
//
// Crash safety: compose first persists the region as "Composing" (a journal
// entry), then creates the backing file, assigns and materializes, then
// persists "Composed". Open() rolls back any "Composing" region left by a
// crash and deletes backing files no region owns.
//
// Thread-safety: every public method takes one mutex; requests are fully
// serialized, as in cfm-service.
#ifndef CXLKV_FABRIC_FABRIC_MANAGER_H_
#define CXLKV_FABRIC_FABRIC_MANAGER_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cxlkv/base/mutex.h"
#include "cxlkv/fabric/composer.h"
#include "cxlkv/fabricd/config.h"
#include "state.h"

namespace cxlkv::fabric::internal {

class FabricManager {
 public:
  // Loads <stateDir>/fabric-state.json (if any) and recovers. Corruption on a
  // bad state file (it is left untouched); IOError on unusable directories.
  static Status Open(const FabricConfig& config, std::unique_ptr<FabricManager>* out);

  // Runs f(const FabricState&) under the lock and returns its result.
  template <typename F>
  auto Read(F&& f) {
    base::MutexLock l(&mu_);
    return f(static_cast<const FabricState&>(state_));
  }

  Status Compose(const std::string& aid, const std::string& bid, const ComposeRequest& req,
                 ComposeResult* result);
  Status ComposeByResource(const std::string& aid, const std::string& bid,
                           const std::vector<std::string>& resource_ids, const std::string& port,
                           ComposeResult* result);
  // Assigns (or unassigns) one port (CFM PATCH .../memory/{id}). A new
  // mapping takes the region's next assignment epoch; an already assigned
  // port is OK and keeps its epoch. Unassign with unassign_epoch >= 1 undoes
  // only the assignment made at that epoch: Busy when the port was assigned
  // again since (refused: logged and counted in stats), InvalidArgument for
  // an epoch the port never had; 0 (a client without the extension, as
  // CFM) unassigns whatever is there, counted as such. NotFound: no region,
  // or unassign of a port not assigned.
  Status Assign(const std::string& aid, const std::string& bid, const std::string& mid,
                const std::string& port, bool assign, uint64_t unassign_epoch, MemoryRegion* out);
  Status Free(const std::string& aid, const std::string& bid, const std::string& mid,
              MemoryRegion* out);
  Status HostCompose(const std::string& hid, const ComposeRequest& req, ComposeResult* result);
  Status HostFree(const std::string& hid, const std::string& mid, MemoryRegion* out);

  // Simulated power cycle of one blade (or every blade when aid is ""): all
  // its composed regions are forgotten and their bytes lost; hosts are not
  // told ([Fan26] §2.6: an operator or the host agents must resync).
  Status PowerCycle(const std::string& aid, const std::string& bid, int* forgotten);

  // A host agent reports what it did with a region mapped to it (after a
  // resync repaired a failed materialization, say). NotFound: the region is
  // not mapped to that host; InvalidArgument: unknown state; Busy: the
  // report names an assignment epoch the host's mapping no longer has (a
  // stale report; refused and counted). assign_epoch 0: none named.
  Status ReportMaterialization(const std::string& hid, const std::string& mid,
                               Materialization state, const std::string& error,
                               const std::string& device, uint64_t assign_epoch, MemoryRegion* out);

  // Counters of the assignment-epoch protocol since start (GET
  // /cxlkv/v1/stats).
  struct EpochStats {
    uint64_t stale_unassigns_refused = 0;  // unassign naming an older epoch
    uint64_t unassigns_without_epoch = 0;  // CFM-style unassign, applied
    uint64_t stale_reports_refused = 0;    // materialization report of an older epoch
  };
  EpochStats GetEpochStats();

  // Management: add (by customId, "" = first unmanaged), remove, rename.
  Status AddAppliance(const std::string& custom_id, std::string* id);
  Status DeleteAppliance(const std::string& aid);
  Status RenameAppliance(const std::string& aid, const std::string& new_id);
  Status AddBlade(const std::string& aid, const std::string& custom_id, std::string* id);
  Status DeleteBlade(const std::string& aid, const std::string& bid);
  Status RenameBlade(const std::string& aid, const std::string& bid, const std::string& new_id);
  Status AddHost(const std::string& custom_id, std::string* id);
  Status DeleteHost(const std::string& hid);
  Status RenameHost(const std::string& hid, const std::string& new_id);

  Faults GetFaults();
  void SetFaults(const Faults& f);
  // True (and *rule filled, count consumed) when a fault rule matches.
  bool MatchFault(const std::string& method, const std::string& path, FaultRule* rule);

 private:
  explicit FabricManager(const FabricConfig& config) : config_(config) {}
  Status Recover() CXLKV_REQUIRES(mu_);
  Status Save(const FabricState& s);
  // Makes `next` the current state once it is on disk, so a failed write
  // leaves the file and the state as they were: every change is a copy of
  // the state, edited, then installed.
  Status Install(FabricState next) CXLKV_REQUIRES(mu_);
  Status ComposeLocked(ApplianceState* app, BladeState* blade, const Allocation& alloc,
                       const std::vector<std::string>& ports, const ComposeRequest& req,
                       ComposeResult* result) CXLKV_REQUIRES(mu_);
  Status PickPorts(const BladeState& blade, const ComposeRequest& req,
                   std::vector<std::string>* ports) CXLKV_REQUIRES(mu_);
  void Materialize(const MemoryRegion& r, Mapping* m) CXLKV_REQUIRES(mu_);
  void Unmaterialize(const MemoryRegion& r, const Mapping& m) CXLKV_REQUIRES(mu_);
  void CrashPoint(const char* name) CXLKV_REQUIRES(mu_);
  std::string BackingPath(const std::string& mid) const;
  Status FindRegion(const std::string& aid, const std::string& bid, const std::string& mid,
                    MemoryRegion** r) CXLKV_REQUIRES(mu_);

  // Immutable after construction.
  const FabricConfig config_;
  std::string state_path_;

  base::Mutex mu_;
  FabricState state_ CXLKV_GUARDED_BY(mu_);
  Faults faults_ CXLKV_GUARDED_BY(mu_);
  EpochStats epoch_stats_ CXLKV_GUARDED_BY(mu_);
};

// Validates a user-chosen id (rename, customId): 1..64 of [A-Za-z0-9._-].
Status ValidateId(const std::string& id);

}  // namespace cxlkv::fabric::internal

#endif  // CXLKV_FABRIC_FABRIC_MANAGER_H_
