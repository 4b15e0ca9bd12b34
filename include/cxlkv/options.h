// Copyright cxlkv authors.
//
// Options for opening a region. Plain structs with in-class defaults; each
// field states its unit, default and trade-off. Correctness fields first,
// then performance.
#ifndef CXLKV_OPTIONS_H_
#define CXLKV_OPTIONS_H_

#include <cstdint>
#include <string>

namespace cxlkv {

// How stores made by one attacher become visible to another
// (docs/coherence.md). Persisted in the region; every attacher must match.
enum class CoherenceMode : uint32_t {
  // Loads, stores and atomics are coherent between all attachers: one host
  // (/dev/shm, a local devdax), or hosts sharing memory with hardware
  // coherence. Layout version 2.
  kHardware = 1,
  // Non-coherent multi-host sharing: one writer host per line (write
  // partitions), explicit flush/invalidate, no cross-host atomics, CRC
  // always verified. Layout version 4 (version 3, v0.1.0's, is refused);
  // x86 only (kUnsupported elsewhere).
  // Needs RegionConfig::software_partitions to format and
  // RegionOptions::software_partition to write. docs/coherence.md.
  kSoftware = 2,
};

const char* CoherenceModeName(CoherenceMode m);

// When the mapping's page tables are populated ([Fan26] §4.8 measured
// ~420 ms of first-touch faults on the first load).
enum class Prefault : uint8_t {
  kNone = 0,        // fault lazily on first access (first load pays it)
  kAtAttach = 1,    // Region::Open returns after every page is populated
  kBackground = 2,  // Open returns at once; a thread populates the mapping.
                    // Populating holds the process's memory map (mmap_lock):
                    // while it runs, every mmap/munmap of the process waits
                    // (docs/benchmarks.md, "A late joiner's first reads").
  kMetadata = 3,    // Open returns after the region's metadata (everything
                    // before the slot payloads: directory, pins, namespaces,
                    // participants) is populated; payload pages fault on first
                    // use. For processes that reach payloads by DMA or never.
};

// Region-level configuration. Persisted in the region header by the process
// that formats it; every later attacher must match it. A field left at its
// "accept" value (0 / empty) is not checked on attach and takes the region's
// value, so inspection tools can attach without knowing the geometry. A
// mismatch is refused with kInvalidArgument naming the field and both values.
struct RegionConfig {
  // Payload bytes per slot (one KV block). Required to format; 0 = accept.
  // Blocks up to this size can be stored; larger ones fail (kInvalidArgument,
  // counted as store_too_large).
  uint64_t slot_size = 0;

  // Name of the block-hash algorithm that produced the keys, e.g.
  // "sha256_cbor" (vLLM's). At most 31 bytes. Empty = accept.
  std::string hash_algorithm;

  // Fingerprint of the hash seed (e.g. a hash of PYTHONHASHSEED / vLLM's
  // NONE_HASH). Attachers with a different seed would silently never hit, so
  // they are refused. 0 = accept.
  uint64_t hash_seed_fingerprint = 0;

  // Coherence contract of the memory. Persisted; must match.
  CoherenceMode coherence = CoherenceMode::kHardware;

  // Maximum simultaneously attached participants (processes). A multiple of
  // 64 in [64, 1024]. Costs 8 bytes of pin bitmap per slot per 64. Used when
  // formatting (0 is refused there). On attach, 0 and the default 64 accept
  // the region's value; any other value must equal it.
  uint32_t max_participants = 64;

  // coherence=software only: number of write partitions (hosts that may
  // write), 1..16. The slots are split evenly between them, so each host
  // can fill 1/partitions of the region, and a lookup probes every
  // partition. Required to format in software mode; 0 = accept on attach.
  // Must be 0 in hardware mode.
  uint32_t software_partitions = 0;

  // Free-form JSON object recorded at format time (e.g. the formatter's
  // engine config) and shown by `cxlkv inspect`. At most 2048 bytes.
  std::string metadata_json;
};

struct RegionOptions {
  // ---- Where the region lives ----

  // Byte offset of the region inside the file or device. A multiple of 4 KiB
  // for files and of the device alignment for devdax. Lets two independent
  // regions share one device. Default 0.
  uint64_t offset = 0;

  // Region size in bytes. 0 = everything from `offset` to the end of the
  // file or device. When formatting a file that is too short it is extended
  // to offset + size.
  uint64_t size = 0;

  // Format the region if it is not formatted yet (atomic format-or-attach:
  // concurrent openers agree on one layout). false: an unformatted region is
  // kNotFound.
  bool create_if_missing = true;

  RegionConfig config;

  // ---- Participation ----

  // Register as a participant (needed to store, pin and reclaim). false: an
  // observer that can only look up and load (inspect, stats, verify).
  bool register_participant = true;

  // coherence=software only: the write partition this attacher owns,
  // 0..software_partitions-1, or -1 (an observer: reads only). Handed out by
  // an external lease (e.g. the DRA driver's ResourceClaim owner): no two
  // processes may hold one partition at once, since nothing in non-coherent
  // memory can arbitrate that without cross-host atomics. The attacher of
  // partition 0 formats a blank region; the others wait for it.
  int32_t software_partition = -1;

  // How often this participant advances its heartbeat counter. Default 100 ms.
  uint64_t heartbeat_interval_ns = 100'000'000;

  // A participant whose heartbeat has not advanced for this long, measured
  // on this process's own monotonic clock, is judged dead and reclaimed.
  // Shorter reclaims crashed writers sooner; too short declares a paused
  // (SIGSTOP, swapped) process dead; such a process is fenced when it
  // resumes (its stores fail with StoreOutcome::kFenced). Also how long an
  // orphaned slot or pin bit (owner not alive) must stay unchanged before
  // the orphan sweep releases it. Default 5 s; 100 ms works (the pause
  // tests use 150 ms). Must be at least 4 x the heartbeat interval.
  uint64_t liveness_timeout_ns = 5'000'000'000;

  // How long Open waits for another process's in-progress format before it
  // gives up with kBusy. A formatter whose progress counter stalls for
  // `format_stall_ns` is presumed dead and the format is taken over.
  uint64_t format_wait_ns = 60'000'000'000;
  uint64_t format_stall_ns = 2'000'000'000;

  // Root of sysfs, for devdax size/alignment facts. Tests point it at a fake
  // tree. Default "/sys".
  std::string sysfs_root = "/sys";

  // ---- Performance ----

  Prefault prefault = Prefault::kAtAttach;
};

}  // namespace cxlkv

#endif  // CXLKV_OPTIONS_H_
