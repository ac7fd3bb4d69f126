// Weighted choice of a revision from a traffic split (§5.1: dispatch by Route
// weights). Deterministic: the n-th request on a host takes the split that
// covers position frac(n * golden ratio) * total, a low-discrepancy sequence,
// so any window of N consecutive requests matches the percentages to within
// about one request per split, without shared random state on the hot path.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "router/routing_table.h"

namespace knap::router {

// Index into `splits` for request number `ticket`. `splits` must be non-empty
// with positive percents summing to `total` (> 0).
size_t chooseSplit(const std::vector<TrafficSplit>& splits, int total, uint64_t ticket);

}  // namespace knap::router
