// Copyright cxlkv authors.
//
// Test helpers: scratch region files under /dev/shm that are removed when
// the test ends, options with short heartbeats, child processes.
#ifndef CXLKV_SRC_REGION_TESTUTIL_H_
#define CXLKV_SRC_REGION_TESTUTIL_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <new>
#include <string>

#include "cxlkv/region.h"

namespace cxlkv::test {

// A unique region path, unlinked (with its directory) on destruction.
class ScratchRegion {
 public:
  explicit ScratchRegion(const std::string& tag = "t");
  ~ScratchRegion();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Options for tests: formats with `slot_size`, heartbeats every 5 ms, dead
// after 150 ms, no prefault.
RegionOptions TestOptions(uint64_t size, uint64_t slot_size);

// Opens or dies (ASSERT inside).
std::unique_ptr<Region> MustOpen(const std::string& path, const RegionOptions& o);

// Deterministic payload for block `id` (what the replay also uses).
void FillPattern(uint64_t id, void* dst, size_t n);

// Runs fn in a forked child; returns its pid. The child exits with fn()'s
// return value (and never returns into the test framework). The child is in
// a process group of its own, so that a child the test stops (SIGSTOP, a
// failpoint's `stop`) is never a stopped job of the test runner's group:
// when that group is orphaned (the last of its processes whose parent is in
// another group of the session exits: a wrapper script, a shell that
// started the run in the background), the kernel sends each of its
// processes SIGHUP and SIGCONT when it has a stopped one, which killed a
// paused child (exit 128 + SIGHUP) or resumed it before the test let it. A
// group whose one process's parent (the test) is in another group of the
// session is never orphaned while the test runs. Out of that group the
// child would miss a ^C or a kill of the group, so it gets SIGKILL when the
// process that spawned it dies (PR_SET_PDEATHSIG; Spawn from the test's
// main thread: the signal follows the spawning thread's exit).
pid_t Spawn(const std::function<int()>& fn);
// Waits for pid; returns its exit status (or 128+signal).
int Reap(pid_t pid);
// Waits until pid has stopped (SIGSTOP, e.g. a failpoint's `stop`); false
// if it exited instead.
bool WaitStopped(pid_t pid);
// A T in an anonymous shared mapping, visible to forked children (for
// parent/child coordination; never freed).
template <typename T>
T* SharedAnon();
// Polls cond every 2 ms for at most limit_ms; returns its last value.
bool WaitFor(const std::function<bool()>& cond, int limit_ms = 5000);

// The acceptance scenario of prefix-aware eviction (issue 24): fill the
// region (or the caller's write partition) to 95 % with single-chunk
// requests, store one 127-chunk chain (depth 0..126), let it age behind
// newer single-chunk stores until it has lost a third of its chunks, and
// report what is left. Presence is read without touching (no use counted).
// In a test build (failpoints on) the eviction clocks are held for the whole
// scenario and moved only by its own steps (HoldEvictionClock,
// AdvanceEvictionClock), so the ages it sets up do not depend on how fast
// it runs; without failpoints it sleeps between its steps.
struct ChainAging {
  uint64_t slots = 0;               // slots of the region (or partition)
  uint64_t stored_after = 0;        // newer stores until a third was lost
  uint64_t present = 0;             // chain chunks still there
  uint64_t leading = 0;             // leading chunks there without a gap
  uint64_t head_present = 0;        // of the first 16 chunks
  uint64_t deepest_lost_first = 0;  // depth of the first chunk lost
  uint64_t older_left = 0;          // older fill blocks still there then
  // Newer stores that evicted a chain chunk while an older fill block (never
  // read) was among the store's candidate slots.
  uint64_t out_of_order = 0;
  // Chain chunks evicted while an older fill block (never read) was still
  // anywhere in the region (or partition): the victim was not the oldest of
  // the whole region.
  uint64_t out_of_order_region = 0;
};
ChainAging AgeAChain(Region* r, NamespaceId ns, uint64_t slot_bytes);
// What RegionTest and Software expect of AgeAChain's outcome, printed and
// checked in one place for both modes (gtest failures in the caller's test):
// the chain left tail first among each store's candidates and its head
// stayed (ExpectTailFirstAmongCandidates); no chunk left while an older
// block nobody read stayed anywhere in the region or partition
// (ExpectNoChunkBeforeAnOlderBlock).
void ExpectTailFirstAmongCandidates(const ChainAging& a);
void ExpectNoChunkBeforeAnOlderBlock(const ChainAging& a);

// Layout 5's data slot accounting, "" if it holds: every READY entry's data
// slot is HELD by its lease (the entry at its generation), and every HELD
// data slot is named by exactly one READY entry
// (else a READY block sits on a slot the next claim overwrites, or a slot
// is lost until `cxlkv format`). `quiescent` (no write or eviction in
// flight, every dead participant reclaimed): also no data word in any
// other state than FREE or HELD (a MOVING or damaged word nobody settles
// is a leaked slot). Else the first violation, in words.
std::string DataSlotViolation(Region* r, bool quiescent = false);

void* SharedAnonBytes(size_t n);
template <typename T>
T* SharedAnon() {
  return new (SharedAnonBytes(sizeof(T))) T();
}

}  // namespace cxlkv::test

#endif  // CXLKV_SRC_REGION_TESTUTIL_H_
