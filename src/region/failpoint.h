// Copyright cxlkv authors.
//
// Test-only failpoints. CXLKV_FAILPOINT=<point>[,<point>...] with each
// <point> = <name>[:<action>] makes the process act at the named points, so
// crash and pause tests hit exact windows:
//   <name>           same as <name>:kill
//   <name>:kill      raise SIGKILL (the process dies holding whatever it held)
//   <name>:stop      raise SIGSTOP (a paused process; resume with SIGCONT)
//   <name>:sleep=MS  sleep MS milliseconds, then continue
// Every hit of a listed point acts. Points (grep CXLKV_FAILPOINT_HIT):
// format.after_lock, format.mid_zero, write.before_claim, write.after_claim,
// write.mid_copy, write.before_commit, evict.after_take, pin.before_pin,
// pin.after_pin, read.mid_copy, reclaim.mid_sweep. The Spin model
// (model/) names its steps after these; keep the names stable.
#ifndef CXLKV_SRC_REGION_FAILPOINT_H_
#define CXLKV_SRC_REGION_FAILPOINT_H_

namespace cxlkv::internal {

// True when any failpoint is configured (read once per process).
bool FailpointsEnabled();
void FailpointHit(const char* name);
// Re-reads CXLKV_FAILPOINT (for a forked test child that just set it).
void ReloadFailpoints();

}  // namespace cxlkv::internal

#define CXLKV_FAILPOINT_HIT(name)                                                      \
  do {                                                                                 \
    if (::cxlkv::internal::FailpointsEnabled()) ::cxlkv::internal::FailpointHit(name); \
  } while (0)

#endif  // CXLKV_SRC_REGION_FAILPOINT_H_
