// Copyright cxlkv authors.
#include "allocator.h"

#include <algorithm>
#include <string>

namespace cxlkv::fabric::internal {
namespace {

struct ChannelChoice {
  int channel = -1;
  int start = -1;         // first block position taken
  int longest_left = -1;  // longest free run left on the channel afterwards
};

// Best fit on one channel: the smallest free run that holds `need` blocks,
// so large runs stay intact for later large requests.
ChannelChoice FitChannel(const BladeGeometry& g, const std::vector<bool>& used, int ch, int need) {
  std::vector<std::pair<int, int>> runs;  // (start, length)
  int p = 0;
  while (p < g.blocks_per_channel) {
    if (used[g.Index(ch, p)]) {
      ++p;
      continue;
    }
    int s = p;
    while (p < g.blocks_per_channel && !used[g.Index(ch, p)]) ++p;
    runs.emplace_back(s, p - s);
  }
  ChannelChoice best;
  int best_len = 0;
  for (auto [s, len] : runs) {
    if (len < need) continue;
    if (best.start < 0 || len < best_len) {
      best.start = s;
      best_len = len;
    }
  }
  if (best.start < 0) return best;
  best.channel = ch;
  int longest = best_len - need;
  for (auto [s, len] : runs) {
    if (s != best.start) longest = std::max(longest, len);
  }
  best.longest_left = longest;
  return best;
}

}  // namespace

Status AllocateByQoS(const BladeGeometry& g, const std::vector<bool>& used, int64_t size_mib,
                     int qos, Allocation* out) {
  if (size_mib < 1) return Status::InvalidArgument("memorySizeMiB must be >= 1");
  if (qos != 0 && qos != 1 && qos != 2 && qos != 4 && qos != 8) {
    return Status::InvalidArgument("QoS must be 1, 2, 4 or 8");
  }
  if (g.channels < 1 || g.blocks_per_channel < 1 || g.block_mib < 1 ||
      used.size() != static_cast<size_t>(g.channels * g.blocks_per_channel)) {
    return Status::InvalidArgument("blade geometry is inconsistent");
  }
  int q = (qos == 0 || qos > g.channels) ? g.channels : qos;
  int64_t per_channel64 = (size_mib + g.block_mib * q - 1) / (g.block_mib * q);
  if (per_channel64 > g.blocks_per_channel) {
    return Status::NoSpace("request of " + std::to_string(size_mib) + " MiB at QoS " +
                           std::to_string(q) + " exceeds the blade's channel capacity");
  }
  int per_channel = static_cast<int>(per_channel64);
  std::vector<ChannelChoice> fits;
  for (int ch = 0; ch < g.channels; ++ch) {
    ChannelChoice c = FitChannel(g, used, ch, per_channel);
    if (c.channel >= 0) fits.push_back(c);
  }
  if (static_cast<int>(fits.size()) < q) {
    return Status::NoSpace("not enough free resource blocks for " + std::to_string(size_mib) +
                           " MiB at QoS " + std::to_string(q));
  }
  std::stable_sort(fits.begin(), fits.end(), [](const ChannelChoice& a, const ChannelChoice& b) {
    return a.longest_left > b.longest_left;
  });
  Allocation a;
  a.qos = q;
  a.size_mib = per_channel64 * q * g.block_mib;
  for (int i = 0; i < q; ++i) {
    for (int k = 0; k < per_channel; ++k)
      a.blocks.push_back(g.Index(fits[i].channel, fits[i].start + k));
  }
  std::sort(a.blocks.begin(), a.blocks.end());
  *out = std::move(a);
  return Status::OK();
}

}  // namespace cxlkv::fabric::internal
