// Copyright cxlkv authors.
//
// HostAgent: the core of cxlkv-hostd. Materializes and removes regions on
// this host through one Materializer, writes/removes their CDI specs, keeps
// a state file (atomic writes) so a restart knows what it created, and
// resyncs against the fabric manager: regions mapped to this host are
// materialized, devices of regions the manager no longer has are removed
// (after a power cycle, a crash mid-compose, or a free this host missed).
//
// Thread-safety: all methods are safe to call concurrently; they serialize
// on one mutex, except that Resync() talks to the fabric manager unlocked
// (the manager may be calling this agent at the same moment).
#ifndef CXLKV_HOSTD_AGENT_H_
#define CXLKV_HOSTD_AGENT_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cxlkv/base/mutex.h"
#include "cxlkv/fabric/client.h"
#include "cxlkv/hostd/cdi.h"
#include "cxlkv/hostd/materializer.h"
#include "cxlkv/status.h"

namespace cxlkv::hostd {

struct AgentOptions {
  std::string host_id;                             // this host's id at the fabric manager
  std::string state_dir = "/var/lib/cxlkv-hostd";  // hostd-state.json
  CdiOptions cdi;
  fabric::ClientOptions fabric;  // base_url "" = no resync
};

struct ReleaseResult {
  bool unassigned = false;  // the fabric manager unassigned this host's port
  bool removed = false;     // the device and CDI spec were here and are gone
  // The assignment epoch the unassign named (the caller's, else the one the
  // manager listed for this host; 0 when nothing was mapped here).
  uint64_t assign_epoch = 0;
};

struct ResyncResult {
  int materialized = 0;
  int removed = 0;
  int failed = 0;  // regions that could not be materialized (logged)
};

class HostAgent {
 public:
  // Loads the state file and removes CDI specs of kind cxlkv.dev/region that
  // it does not list (left by a crash between writing a spec and the state).
  // Corruption: unreadable state file (left untouched).
  static Status Open(const AgentOptions& opt, std::unique_ptr<Materializer> materializer,
                     std::unique_ptr<HostAgent>* out);

  // Materializes a region and writes its CDI spec. Idempotent: a region
  // already materialized with the same size is returned as is (a larger
  // req.assign_epoch is recorded: the manager assigned this host again).
  // Errors as Materializer::Materialize, or IOError writing spec/state.
  Status Materialize(const RegionRequest& req, Device* dev);

  // Rewrites the CDI spec of a region that is materialized here (a reboot or
  // a tmpfs wipe may have lost it) and fills *dev. NotFound: not materialized
  // here; nothing is created. IOError writing the spec. (The DRA kubelet
  // plugin's prepare calls this: it never materializes, only re-checks.)
  Status RewriteSpec(const std::string& allocation_id, Device* dev);

  // Removes a region's device and CDI spec. NotFound: not materialized here.
  Status Remove(const std::string& allocation_id);

  std::vector<Device> List();

  // Releases this host's view of a region no consumer here uses any more
  // (the DRA kubelet plugin calls it on the last unprepare of a claim on this
  // node): the fabric manager unassigns the blade port this host is cabled to
  // (CFM `PATCH .../memory/{id}` with `Operation: unassign`), which has this
  // agent remove the device, and whatever is still here is removed too. The
  // other hosts keep the region and its bytes; a later consumer here needs
  // the manager to assign the port again (the controller's add-host), after
  // which the manager has this agent materialize it again. Idempotent: a
  // region not mapped here and not materialized here is OK with nothing done.
  // Unsupported: no fabric manager URL (a local composer's node: the
  // composer frees the materialization with the claim); IOError: the manager
  // failed or is unreachable (nothing removed here, so a resync cannot
  // disagree with the manager). Talks to the manager unlocked, like Resync().
  //
  // assign_epoch names the assignment the caller means to undo (the epoch
  // its prepare saw, Device::assign_epoch): the unassign carries it, and the
  // manager refuses it when this host's port was assigned again since; then
  // nothing is removed here and the answer is Busy ("superseded"). A device
  // recorded with a newer epoch than the one undone is never removed. 0 (an
  // older caller): the epoch the manager lists for this host now is named,
  // which still fences an unassign that is delayed past a re-assign.
  Status Release(const std::string& allocation_id, uint64_t assign_epoch, ReleaseResult* result);

  // Reconciles with the fabric manager (see class comment). IOError: the
  // manager is unreachable (nothing changes); Unsupported: no fabric URL.
  Status Resync(ResyncResult* result);

  const AgentOptions& options() const { return opt_; }

 private:
  HostAgent(const AgentOptions& opt, std::unique_ptr<Materializer> m)
      : opt_(opt), materializer_(std::move(m)) {}
  Status Save() CXLKV_REQUIRES(mu_);
  Status MaterializeLocked(const RegionRequest& req, Device* dev) CXLKV_REQUIRES(mu_);
  Status RemoveLocked(const std::string& allocation_id) CXLKV_REQUIRES(mu_);

  // Immutable after construction.
  const AgentOptions opt_;
  std::string state_path_;

  base::Mutex mu_;
  std::unique_ptr<Materializer> materializer_ CXLKV_GUARDED_BY(mu_);
  std::map<std::string, Device> devices_ CXLKV_GUARDED_BY(mu_);
  // Last local change (materialize/remove) per allocation id, on a counter
  // Resync() also draws from: a resync leaves alone what changed after it
  // fetched the manager's list.
  std::map<std::string, uint64_t> changed_ CXLKV_GUARDED_BY(mu_);
  uint64_t seq_ CXLKV_GUARDED_BY(mu_) = 0;
};

}  // namespace cxlkv::hostd

#endif  // CXLKV_HOSTD_AGENT_H_
