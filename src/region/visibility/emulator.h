// Copyright cxlkv authors.
//
// The non-coherence emulator (a stand-in, for tests only: nothing here runs
// on real non-coherent CXL memory). It implements the visibility layer
// (visibility.h) so that each *simulated host* sees the region through a
// private cache of 64-byte lines, the way hosts sharing CXL 1.1/2.0 memory
// do (docs/coherence.md, "coherence=software"):
//
//  - a load of a line this host has not cached fills it, whole, from shared
//    memory (the region's own MAP_SHARED mapping); later loads read the
//    cached copy until this host invalidates it: lines are refreshed only on
//    Invalidate, never on their own (the harshest case: real caches may also
//    drop clean lines and so refetch fresher bytes);
//  - a store changes the host's cached copy only and makes the line dirty;
//  - a dirty line reaches shared memory on Flush, on Invalidate (as CLFLUSH
//    and CLFLUSHOPT write a dirty copy back first) and also at random
//    moments (seeded): whole lines at a time, so a write-back carries the
//    host's stale copy of every other byte of the line and clobbers what
//    another host stored there;
//  - read-modify-writes are not offered at all: the interface has none, and
//    nothing is atomic across hosts beyond one line landing whole.
//
// Each host's cache lives in a file that every process of that host maps
// MAP_SHARED (`<dir>/host<N>.cache`), so processes of one host are coherent
// with each other (as they are on real hardware), and the cache outlives any
// one process: a killed or SIGSTOPped writer's dirty lines stay in its host's
// cache and can land at any later moment, written back by the host's other
// processes or by EmulatorCacheSweeper (the suites run one beside them).
// Whole lines: a per-line lock in the cache file serialises the host's
// accesses to a line, and a per-line lock in `<dir>/memory.locks` makes
// fills and write-backs of one line exclusive across hosts, so no line is
// ever torn. A lock whose holder died is taken over (its pid is recorded).
//
// Mutation testing: every Flush and Invalidate records its call site (the
// caller's return address, as an offset into the object that holds it) in
// `<dir>/sites` (or EmulatorOptions::sites_path); EmulatorOptions::drop_sites turns the calls of
// chosen sites into no-ops, as if that flush or invalidate had been removed from the engine
// (test/coherence/mutants.sh maps sites to file:line with addr2line).
//
// Thread-safety: an EmulatedHost may be called from any number of threads
// and processes at once (the line locks order them). Stores to a line are
// serialised with every other access of that line by this host.
#ifndef CXLKV_SRC_REGION_VISIBILITY_EMULATOR_H_
#define CXLKV_SRC_REGION_VISIBILITY_EMULATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cxlkv/status.h"
#include "visibility.h"

namespace cxlkv::internal {

struct EmulatorOptions {
  // Directory of the emulated machine's files (host caches, memory line
  // locks, call sites); shared by every simulated host of one test. Created
  // if missing.
  std::string dir;
  // This process's simulated host, 0..kEmulatorMaxHosts-1. Processes with
  // the same host share one cache.
  uint32_t host = 0;
  // Seed of the spontaneous write-backs (combined with host and pid).
  uint64_t seed = 1;
  // On average one spontaneous write-back of a random dirty line of this
  // host per `writeback_every` calls; 0 = never (only Flush/Invalidate).
  uint32_t writeback_every = 8;
  // Call sites (EmulatorSite::offset) whose Flush / Invalidate do nothing.
  std::vector<uint64_t> drop_sites;
  // Where call sites are recorded; empty = `<dir>/sites`. (A mutation run
  // collects the sites of many directories in one file.)
  std::string sites_path;
};

inline constexpr uint32_t kEmulatorMaxHosts = 16;
inline constexpr uint32_t kEmulatorMaxSites = 256;

// One Flush or Invalidate call site seen by any host of the directory.
struct EmulatorSite {
  uint64_t offset = 0;  // return address - load address of its object
  bool invalidate = false;
  uint64_t calls = 0;
  std::string object;  // path of the executable or library holding it
};

struct EmulatorStats {
  uint64_t fills = 0;                  // lines read from shared memory
  uint64_t flush_writebacks = 0;       // dirty lines written by Flush
  uint64_t invalidate_writebacks = 0;  // dirty lines written by Invalidate
  uint64_t random_writebacks = 0;      // spontaneous write-backs
  uint64_t dropped_calls = 0;          // Flush/Invalidate calls of drop_sites
};

class EmulatedHost final : public Visibility {
 public:
  // Opens (creating as needed) the directory's files. The cache file is
  // sized by Attach. kIOError naming the path and errno; kInvalidArgument
  // for an empty dir or a host out of range.
  static Status Open(const EmulatorOptions& options, std::unique_ptr<EmulatedHost>* out);
  ~EmulatedHost() override;

  const char* Name() const override { return name_; }
  // Maps this host's cache for [base, base + len): len must be the same for
  // every process of the directory (a mismatch aborts: a test bug).
  void Attach(uint8_t* base, uint64_t len) override;

  uint64_t Load64(const void* p) override;
  uint32_t Load32(const void* p) override;
  void Store64(void* p, uint64_t v) override;
  void Store32(void* p, uint32_t v) override;
  void CopyFromRegion(void* dst, const void* region_src, size_t n) override;
  void CopyToRegion(void* region_dst, const void* src, size_t n) override;
  void Flush(const void* p, size_t n) override;
  void Invalidate(const void* p, size_t n) override;
  void StoreFence() override;
  void FullFence() override;

  // Writes back every dirty line of this host (a host that flushes its
  // whole cache, e.g. before a test compares memory). Returns lines written.
  uint64_t WritebackAll();
  EmulatorStats stats() const;

 private:
  struct Files;
  EmulatedHost() = default;
  uint64_t Line(const void* p) const;
  // Locks line l of this host's cache, filling it first if not cached.
  // Returns the cached line's bytes.
  uint8_t* LockFilled(uint64_t l);
  void Unlock(uint64_t l, uint32_t state);
  // The lines of [p, p + n): each dirty one written back whole; then kept
  // clean (Flush) or dropped (Invalidate).
  void WriteBackLines(const void* p, size_t n, bool invalidate);
  void MaybeRandomWriteback();
  void NoteDirty(uint64_t l);
  void RecordSite(const void* ret, bool invalidate, bool* drop);

  EmulatorOptions options_;
  char name_[48] = {};
  std::unique_ptr<Files> f_;
  uint8_t* base_ = nullptr;  // the region's shared mapping (this process)
  uint64_t len_ = 0;
  uint64_t lines_ = 0;
  std::atomic<uint64_t> rng_{0};
  // Recently dirtied lines of this process (candidates for spontaneous
  // write-backs; EmulatorCacheSweeper finds the others).
  static constexpr uint32_t kRecent = 256;
  std::atomic<uint64_t> recent_[kRecent] = {};
  std::atomic<uint64_t> recent_n_{0};
  std::atomic<uint64_t> fills_{0}, flush_wb_{0}, inval_wb_{0}, random_wb_{0}, dropped_{0};
};

// Writes back random dirty lines of every host's cache in the directory,
// from outside the hosts' processes: a SIGSTOPped or killed writer's dirty
// lines land at moments nobody on its host chooses. Never waits for a line
// lock (a line locked by a stopped process is skipped).
class EmulatorCacheSweeper {
 public:
  // `len`: the region's length, as Attach got it. Hosts that attach later
  // are picked up by Sweep. kIOError.
  static Status Open(const std::string& dir, uint8_t* shared_base, uint64_t len, uint64_t seed,
                     std::unique_ptr<EmulatorCacheSweeper>* out);
  ~EmulatorCacheSweeper();
  // Visits every cached line of every host attached so far once; writes
  // back each dirty one with probability 1/`one_in` (1 = all). Returns lines
  // written back. Not thread-safe (one sweeping thread).
  uint64_t Sweep(uint32_t one_in);

 private:
  EmulatorCacheSweeper() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The call sites recorded so far in the sites file at `path` (a directory's
// `<dir>/sites`, or a sites_path). kIOError, kNotFound (none yet).
Status ReadEmulatorSites(const std::string& path, std::vector<EmulatorSite>* sites);

// Parses "0x1a2b,0x3c4d" (EmulatorOptions::drop_sites as an environment
// string). kInvalidArgument naming the bad token.
Status ParseEmulatorSites(const std::string& text, std::vector<uint64_t>* out);

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_REGION_VISIBILITY_EMULATOR_H_
