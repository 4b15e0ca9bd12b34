// Copyright cxlkv authors.
//
// Test-only failpoints, compiled in only with -DCXLKV_FAILPOINTS=ON (the test
// stages' builds and the vLLM test venv's; off by default and in the wheel,
// so a stray CXLKV_FAILPOINT in a serving environment does nothing).
//
// In a build that has them, CXLKV_FAILPOINT=<point>[,<point>...] with each
// <point> = <name>[:<action>] makes the process act at the named points, so
// crash and pause tests hit exact windows:
//   <name>           same as <name>:kill
//   <name>:kill      raise SIGKILL (the process dies holding whatever it held)
//   <name>:stop      raise SIGSTOP (a paused process; resume with SIGCONT)
//   <name>:sleep=MS  sleep MS milliseconds, then continue
// Every hit of a listed point acts. Points (grep CXLKV_FAILPOINT_HIT):
// open.after_create, format.after_lock, format.mid_zero, write.before_claim,
// write.after_claim, write.mid_copy, write.before_commit, write.after_ready,
// evict.after_take, evict.mid_move, pin.before_pin, pin.after_pin,
// read.after_data, read.mid_copy, reclaim.mid_sweep, sw.commit.before_ready,
// sw.format.after_zero (coherence=software). The Spin
// model (model/) names its steps after these; keep the names stable.
//
// Thread-safety: hits are safe from any thread; ReloadFailpoints is for a
// single-threaded (just forked) test child.
#ifndef CXLKV_SRC_REGION_FAILPOINT_H_
#define CXLKV_SRC_REGION_FAILPOINT_H_

#include <cstdint>

namespace cxlkv::internal {

#if defined(CXLKV_FAILPOINTS) && CXLKV_FAILPOINTS

// Whether this build has failpoints (tests that need them skip without).
inline constexpr bool kFailpointsBuilt = true;
// True when any failpoint is configured (read once per process).
bool FailpointsEnabled();
void FailpointHit(const char* name);
// Re-reads CXLKV_FAILPOINT (for a forked test child that just set it).
void ReloadFailpoints();

// The eviction clocks' skew in this process, milliseconds: RecencyTick() and
// software mode's tick add it. A test of age order moves it forward
// (AdvanceEvictionClock) instead of sleeping, so ages stay apart however slow
// the run is (ThreadSanitizer on a loaded machine outgrew a 100 ms sleep).
uint32_t EvictionClockSkewMs();
void AdvanceEvictionClock(uint32_t ms);
// While held (HoldEvictionClock(true)), each eviction clock stands still at
// the first reading it gave after the hold, so only AdvanceEvictionClock
// moves it: a test's ages then do not depend on how long it runs at all.
// EvictionClock(clock, real_ms) is the reading of eviction clock `clock`
// (kRecencyClock: RecencyTick; kSoftwareClock: software mode's tick) whose
// real reading is real_ms, skew included.
enum EvictionClockId : int { kRecencyClock = 0, kSoftwareClock = 1 };
void HoldEvictionClock(bool hold);
uint32_t EvictionClock(EvictionClockId clock, uint32_t real_ms);

#define CXLKV_FAILPOINT_HIT(name)                                                      \
  do {                                                                                 \
    if (::cxlkv::internal::FailpointsEnabled()) ::cxlkv::internal::FailpointHit(name); \
  } while (0)

#else

inline constexpr bool kFailpointsBuilt = false;
inline bool FailpointsEnabled() { return false; }
inline void ReloadFailpoints() {}
inline uint32_t EvictionClockSkewMs() { return 0; }
inline void AdvanceEvictionClock(uint32_t) {}  // callers check kFailpointsBuilt
enum EvictionClockId : int { kRecencyClock = 0, kSoftwareClock = 1 };
inline void HoldEvictionClock(bool) {}
inline uint32_t EvictionClock(EvictionClockId, uint32_t real_ms) { return real_ms; }
// Compiled out: the name is not even evaluated.
#define CXLKV_FAILPOINT_HIT(name) \
  do {                            \
  } while (0)

#endif

}  // namespace cxlkv::internal

// For tests: skip (with the reason) where the build has no failpoints.
#define CXLKV_SKIP_WITHOUT_FAILPOINTS()                                                 \
  do {                                                                                  \
    if (!::cxlkv::internal::kFailpointsBuilt)                                           \
      GTEST_SKIP() << "built without failpoints; configure with -DCXLKV_FAILPOINTS=ON"; \
  } while (0)

#endif  // CXLKV_SRC_REGION_FAILPOINT_H_
