// Copyright cxlkv authors.
//
// Resource-block allocation by QoS, as CFM's blade compose does it: QoS is
// the number of DIMM channels interleaved; the same number of consecutive
// free blocks is taken on each chosen channel, preferring channels that keep
// the longest free run; the size is rounded up to whole blocks per channel.
#ifndef CXLKV_FABRIC_ALLOCATOR_H_
#define CXLKV_FABRIC_ALLOCATOR_H_

#include <cstdint>
#include <vector>

#include "cxlkv/status.h"

namespace cxlkv::fabric::internal {

struct BladeGeometry {
  int channels = 0;
  int blocks_per_channel = 0;
  int64_t block_mib = 0;
  // Block index of (channel, position): channel * blocks_per_channel + position.
  int Index(int channel, int position) const { return channel * blocks_per_channel + position; }
};

struct Allocation {
  std::vector<int> blocks;  // sorted block indexes
  int qos = 0;              // channels actually interleaved
  int64_t size_mib = 0;     // rounded-up size
};

// Chooses blocks for size_mib at `qos` from the free blocks (used[i] false).
// QoS 0 or above the channel count means all channels. InvalidArgument:
// size_mib < 1 or qos not in {0,1,2,4,8}; NoSpace: no placement fits.
Status AllocateByQoS(const BladeGeometry& g, const std::vector<bool>& used, int64_t size_mib,
                     int qos, Allocation* out);

}  // namespace cxlkv::fabric::internal

#endif  // CXLKV_FABRIC_ALLOCATOR_H_
