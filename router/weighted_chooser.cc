#include "router/weighted_chooser.h"

namespace knap::router {

size_t chooseSplit(const std::vector<TrafficSplit>& splits, int total, uint64_t ticket) {
  if (splits.size() <= 1 || total <= 0) return 0;
  // 2^64 / golden ratio: multiplying by it walks [0, 2^64) in a Weyl sequence
  // whose consecutive points fill the interval evenly.
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  const uint64_t x = ticket * kGolden;
  // position in [0, total): high 32 bits scaled, no modulo bias worth noting.
  const uint64_t pos = ((x >> 32) * static_cast<uint64_t>(total)) >> 32;
  uint64_t acc = 0;
  for (size_t i = 0; i < splits.size(); ++i) {
    acc += static_cast<uint64_t>(splits[i].percent);
    if (pos < acc) return i;
  }
  return splits.size() - 1;
}

}  // namespace knap::router
