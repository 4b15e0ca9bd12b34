// Copyright cxlkv authors.
//
// NamespaceBudget: a namespace's total of cxlkv memory, enforced where
// composes happen. Core ResourceQuota counts devices, not bytes, and a
// ValidatingAdmissionPolicy sees only the one claim it admits (the chart's
// per-claim cap, templates/quota.yaml), so the sum over a namespace's claims
// can only be kept by the controller.
//
// Configuration: the namespace's label cxlkv.dev/memory-budget, a Kubernetes
// quantity ("8Gi", "512Mi", "0" = nothing may be composed). No label = no
// budget. A label is what a cluster administrator sets and a tenant with
// namespace-scoped rights cannot change (namespaces are cluster-scoped), and
// it sits beside the per-claim cap's label cxlkv.dev/max-claim-memory.
//
// What counts: every claim of the namespace whose current allocation is on
// this driver and is either reserved in the ledger (below) or already
// composed (its cxlkv.dev/region annotation names the current
// allocationTimestamp; claims composed before the label was set count so).
// A claim counts its requested size in MiB as the compose asks for it
// (consumable capacity: the results' consumedCapacity.memory, already
// rounded to the slice's step by the scheduler; annotation mode:
// cxlkv.dev/capacity-mib). A deallocated, reallocated or deleted claim stops
// counting at once; its region's bytes are the published capacity's business
// until the free goes through.
//
// No race between controller replicas: claims are owned per claim by
// different replicas (docs/dra.md), so composes of one namespace run in
// parallel. Every admission therefore goes through one object per
// namespace, the ledger ConfigMap `cxlkv-budget-<namespace>` in the
// controller's own namespace (the Lease's), data key `reservations`: a JSON
// object {"<claim UID>@<allocationTimestamp>": {"claim": name, "bytes": N}}.
// An admission reads the ledger, then lists the namespace's claims (in that
// order: an entry is only written after its claim was allocated, so the list
// sees every claim the ledger names), sums, and writes the ledger back with
// its resourceVersion (HTTP 409 on a concurrent write: re-read and retry).
// Two replicas admitting two claims of one namespace at once therefore
// serialize on the ledger's resourceVersion: the second sees the first's
// entry. Entries of claims that no longer hold that allocation are dropped
// on the same write.
//
// Thread-safety: Admit may be called from any number of threads at once
// (it keeps no state; the apiserver serializes).
#ifndef CXLKV_DRA_CONTROLLER_QUOTA_H_
#define CXLKV_DRA_CONTROLLER_QUOTA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cxlkv/kube/client.h"
#include "cxlkv/status.h"

namespace cxlkv::dra {

constexpr const char* kNamespaceBudgetLabel = "cxlkv.dev/memory-budget";
constexpr const char* kBudgetLedgerPrefix = "cxlkv-budget-";
constexpr const char* kBudgetLedgerKey = "reservations";
// The condition reason and Event reason of a refused admission.
constexpr const char* kBudgetExceededReason = "NamespaceBudgetExceeded";

struct BudgetDecision {
  bool limited = false;       // the namespace has a budget label
  bool admitted = true;       // false: over budget, nothing was reserved
  int64_t budget_bytes = 0;   // the label's value
  int64_t used_bytes = 0;     // what the namespace's other claims hold
  int64_t request_bytes = 0;  // what this claim asks for
  std::string message;        // for the Event and the condition when refused
};

// The bytes the namespace's claims other than `self_uid` hold against the
// budget, from the ledger's reservations object and the namespace's claims
// (ResourceClaimList items); *kept receives the reservations that still name
// a live allocation on `driver` (the rest are dropped on the next write).
// Pure; exposed for tests.
int64_t BudgetUsage(const kube::Json& reservations, const std::vector<kube::Json>& claims,
                    const std::string& driver, const std::string& self_uid, kube::Json* kept);

// "<claim UID>@<allocationTimestamp>" of the claim's current allocation.
std::string BudgetKey(const kube::Json& claim);

// True when `s` is the refusal Admit's caller turns into a condition.
bool IsBudgetExceeded(const Status& s);

class NamespaceBudget {
 public:
  // REQUIRES: kube outlives this. `ledger_namespace`: where the ledgers live
  // (the controller's namespace; RBAC: configmaps get, create, update there;
  // namespaces get).
  NamespaceBudget(kube::Client* kube, std::string driver, std::string ledger_namespace);

  // Admits `bytes` for the claim's current allocation against its
  // namespace's budget. Returns OK when admitted (no budget, already
  // reserved, or reserved now); NoSpace with a message naming the namespace,
  // the budget, what is in use and what is asked when it would exceed the
  // budget (IsBudgetExceeded() is true for it; nothing is written);
  // InvalidArgument when the label is not a quantity (refused: an
  // administrator meant a limit); Busy when 8 concurrent writers in a row won
  // the ledger; IOError when the apiserver fails. *d (may be null) gets the
  // numbers.
  Status Admit(const kube::Json& claim, int64_t bytes, BudgetDecision* d);

 private:
  kube::Client* kube_;
  std::string driver_;
  std::string ledger_ns_;
};

}  // namespace cxlkv::dra

#endif  // CXLKV_DRA_CONTROLLER_QUOTA_H_
