// Copyright cxlkv authors.
//
// Shared pieces of the lifecycle implementation (lifecycle.cc: probing and
// the attach watch; lifecycle_remove.cc: destroy, unformat, gc).
#ifndef CXLKV_SRC_REGION_LIFECYCLE_INTERNAL_H_
#define CXLKV_SRC_REGION_LIFECYCLE_INTERNAL_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cxlkv/lifecycle.h"
#include "region_impl.h"

namespace cxlkv::internal {

// A probed path: what it holds and, for a valid region, an observer over an
// unlocked, unreserved mapping (it holds no flock, so the caller can take
// the exclusive one while it keeps watching).
struct Probe {
  ProbeReport report;
  bool regular = false;  // a regular file (else a character device)
  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t file_size = 0;
  uint64_t extent = 0;                 // bytes the region spans from the offset (0: unknown)
  std::unique_ptr<RegionImpl> region;  // kRegion only
};
Status ProbePath(const std::string& path, const LifecycleOptions& o, Probe* out);

// Classifies a region's first 4 KiB (a private copy of kSuperblockBytes)
// that does not carry this build's magic: kDamaged (another layout's magic,
// an intact header, a format of ours begun: FormatBegunHere), kBlank or
// kForeign; *detail says why (not for kBlank).
RegionKind ClassifyHead(const uint8_t* head, std::string* detail);

// One region's participant records under watch.
struct WatchTarget {
  RegionImpl* region = nullptr;
  std::map<uint32_t, ParticipantInfo> seen;  // by index: the last record seen
  uint64_t window_ns = 0;                    // unchanged this long: not attached
  bool decided = false;
  bool attached = false;
  std::vector<ParticipantInfo> live;
};

// Watches all targets at once until each is decided (the definition in
// lifecycle.h). Returns the nanoseconds watched.
uint64_t Watch(const std::vector<WatchTarget*>& targets, uint64_t liveness_timeout_ns);

// One more look after the watch: true if any record changed since (a
// participant registered or beat meanwhile).
bool ChangedSinceWatch(WatchTarget* t);

// Result of trying the exclusive flock on a regular file.
enum class FlockResult { kAcquired, kHeld, kError };
// Opens `path` with `flags` and tries LOCK_EX|LOCK_NB; *fd is left open
// (the lock held when kAcquired). The file must still be (dev, ino).
FlockResult TryExclusive(const std::string& path, int flags, dev_t dev, ino_t ino, int* fd,
                         std::string* error);

}  // namespace cxlkv::internal

#endif  // CXLKV_SRC_REGION_LIFECYCLE_INTERNAL_H_
