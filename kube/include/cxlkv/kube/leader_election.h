// Copyright cxlkv authors.
//
// LeaderElector: Lease-based leader election (coordination.k8s.io/v1), for
// singleton jobs such as slice publishing.
//
// Protocol: every retry_period each contender GETs the Lease.
//   - absent: create it with holderIdentity = self (wins unless another
//     create wins first: 409 AlreadyExists);
//   - held by another and renewed within lease_duration (judged by the local
//     clock from when this contender last saw the record change, so clocks
//     need not agree): wait;
//   - otherwise (expired, released, or ours): PUT with the resourceVersion
//     read, holderIdentity = self, renewTime = now; a 409 means another
//     contender wrote first and this round is lost.
// A leader that cannot renew for renew_deadline stops leading (callback)
// and keeps contending. Stop() releases the lease when held (holder cleared,
// so others need not wait for expiry).
//
// Thread-safety: all public methods are thread-safe; callbacks run on the
// elector's thread.
#ifndef CXLKV_KUBE_LEADER_ELECTION_H_
#define CXLKV_KUBE_LEADER_ELECTION_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "cxlkv/kube/client.h"

namespace cxlkv::kube {

struct LeaderElectionOptions {
  std::string ns = "default";
  std::string lease_name;
  std::string identity;  // unique per contender, e.g. "<pod>-<uid>"
  // How long a lease is valid after its last renewal; a contender waits this
  // long after the last change it saw before taking over. Default 15 s.
  std::chrono::milliseconds lease_duration{15000};
  // The leader gives up leading if it could not renew for this long. Must be
  // less than lease_duration. Default 10 s.
  std::chrono::milliseconds renew_deadline{10000};
  // Time between attempts (acquire or renew). Default 2 s.
  std::chrono::milliseconds retry_period{2000};
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;
  // Called when the observed holder changes (including to self).
  std::function<void(const std::string& identity)> on_new_leader;
};

class LeaderElector {
 public:
  // `client` must outlive the elector. Returns kInvalidArgument for an empty
  // lease name or identity, or renew_deadline >= lease_duration.
  static Status New(Client* client, LeaderElectionOptions options,
                    std::unique_ptr<LeaderElector>* out);
  ~LeaderElector();  // Stop()s
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // Starts contending on a background thread.
  void Start();
  // Stops contending and releases the lease if held. Returns after the
  // thread has ended (within about one retry period plus one request).
  void Stop();
  bool IsLeader() const;
  // The holder last observed ("" when none).
  std::string leader() const;

 private:
  struct Rep;
  explicit LeaderElector(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

// Formats `t` as RFC 3339 with microseconds in UTC ("2026-01-02T03:04:05.000006Z"),
// the MicroTime format of Lease and Event fields.
std::string FormatMicroTime(std::chrono::system_clock::time_point t);

}  // namespace cxlkv::kube

#endif  // CXLKV_KUBE_LEADER_ELECTION_H_
