// Copyright cxlkv authors.
//
// Test-only: the checkpoint both checkpoint tests start from. Its content is
// exactly what testdata/checkpoint-v1.json (the file v0.1.0 writes) holds:
// two claims on node-a, one PrepareCompleted with one device and its CDI id,
// one PrepareStarted with a device of two requests and no CDI id.
#ifndef CXLKV_DRA_KUBELETPLUGIN_CHECKPOINT_FIXTURE_H_
#define CXLKV_DRA_KUBELETPLUGIN_CHECKPOINT_FIXTURE_H_

#include "kubeletplugin/checkpoint.h"

namespace cxlkv::dra::test {

inline Checkpoint SampleCheckpoint() {
  Checkpoint cp;
  cp.boot_id = "6f1c1c2e-0000-4000-8000-000000000001";
  cp.node_name = "node-a";
  ClaimEntry a;
  a.uid = "uid-a";
  a.ns = "team-1";
  a.name = "kv";
  a.memory_id = "mem-7";
  a.state = PrepareState::kPrepareCompleted;
  a.updated_unix = 1764590000;
  a.devices.push_back({{"kv"}, "cma-0-blade-0", "blade-0", "share-1", {"cxlkv.dev/region=mem-7"}});
  ClaimEntry b;
  b.uid = "uid-b";
  b.ns = "team-2";
  b.name = "other";
  b.memory_id = "mem-8";
  b.state = PrepareState::kPrepareStarted;
  b.devices.push_back({{"a", "b"}, "p", "d", "", {}});
  cp.claims[a.uid] = a;
  cp.claims[b.uid] = b;
  return cp;
}

}  // namespace cxlkv::dra::test

#endif  // CXLKV_DRA_KUBELETPLUGIN_CHECKPOINT_FIXTURE_H_
