#include "scaler/metric_window.h"

#include <algorithm>
#include <cmath>

namespace knap::scaler {
namespace {

// Knative's weighted-exponential constants (aggregation/bucketing.go).
constexpr double kWeightPrecision = 0.9999;
constexpr double kMinExponent = 0.2;

double roundTo6(double v) {
  return std::round(v * 1e6) / 1e6;
}

int64_t bucketsFor(Duration window) {
  auto n = (window + kBucketSize - Duration(1)) / kBucketSize;  // ceil
  return std::max<int64_t>(1, n);
}

}  // namespace

BucketWindow::BucketWindow(Duration window, Aggregation aggregation)
    : buckets_(static_cast<size_t>(bucketsFor(window)), 0.0), aggregation_(aggregation) {
  double nb = static_cast<double>(buckets_.size());
  smoothing_ = std::max(1 - std::pow(1 - kWeightPrecision, 1 / nb), kMinExponent);
}

int64_t BucketWindow::index(MonoTime t) {
  return std::chrono::floor<std::chrono::seconds>(t.time_since_epoch()).count();
}

void BucketWindow::record(MonoTime now, double value) {
  const int64_t idx = index(now);
  const int64_t n = bucketCount();
  if (!last_write_ || *last_write_ != idx) {
    // Older than a whole window behind the newest write: nothing left to add it to.
    if (last_write_ && idx + n <= *last_write_) return;
    if (!first_write_ || *first_write_ > idx) first_write_ = idx;
    if (!last_write_ || idx > *last_write_) {
      if (!last_write_ || idx - *last_write_ >= n) {
        // The whole ring is stale: start over from this bucket.
        first_write_ = idx;
        std::fill(buckets_.begin(), buckets_.end(), 0.0);
        window_total_ = 0;
      } else {
        // Clear the buckets skipped since the last write; they hold data a window old.
        for (int64_t i = *last_write_ + 1; i <= idx; ++i) {
          window_total_ -= bucket(i);
          bucket(i) = 0;
        }
      }
      last_write_ = idx;
    }
  }
  bucket(idx) += value;
  window_total_ += value;
}

bool BucketWindow::isEmpty(MonoTime now) const {
  return !last_write_ || index(now) - *last_write_ > bucketCount();
}

double BucketWindow::average(MonoTime now) const {
  if (!last_write_) return 0;
  const int64_t now_idx = index(now);
  return aggregation_ == Aggregation::kWeightedExponential ? weightedAverage(now_idx)
                                                           : linearAverage(now_idx);
}

double BucketWindow::linearAverage(int64_t now_idx) const {
  const int64_t n = bucketCount();
  const int64_t last = *last_write_;
  const int64_t written = last - *first_write_ + 1;  // +1: both ends inclusive
  const int64_t gap = now_idx - last;
  if (gap <= 0) {
    return roundTo6(window_total_ / static_cast<double>(std::min(written, n)));
  }
  if (gap < n) {
    // Buckets after the last write hold data a whole window old: drop them.
    double total = window_total_;
    for (int64_t i = last + 1; i <= now_idx; ++i) total -= bucketAt(i);
    return roundTo6(total / static_cast<double>(std::min(written, n - gap)));
  }
  return 0;  // nothing for a whole window
}

double BucketWindow::weightedAverage(int64_t now_idx) const {
  const int64_t n = bucketCount();
  const int64_t last = *last_write_;
  if (now_idx - last > n) return 0;
  int64_t count = n;
  double multiplier = smoothing_;
  if (now_idx > last) {
    // Seconds without a write count as zeros at the newest end.
    const int64_t zeros = now_idx - last;
    multiplier *= std::pow(1 - smoothing_, static_cast<double>(zeros));
    count -= zeros;
  }
  double result = 0;
  for (int64_t i = 0; i < count; ++i) {
    result += bucketAt(last - i) * multiplier;
    multiplier *= 1 - smoothing_;
  }
  return result;
}

MetricWindow::MetricWindow(Duration stable_window, Duration panic_window, Aggregation aggregation)
    : stable_window_(stable_window),
      panic_window_(panic_window),
      aggregation_(aggregation),
      concurrency_stable_(stable_window, aggregation),
      concurrency_panic_(panic_window, aggregation),
      rps_stable_(stable_window, aggregation),
      rps_panic_(panic_window, aggregation) {}

void MetricWindow::record(MonoTime now, double concurrency, double requests) {
  concurrency_stable_.record(now, concurrency);
  concurrency_panic_.record(now, concurrency);
  rps_stable_.record(now, requests);
  rps_panic_.record(now, requests);
}

MetricSnapshot MetricWindow::snapshot(MonoTime now, ScalingMetric metric) const {
  const BucketWindow& stable = metric == ScalingMetric::kRps ? rps_stable_ : concurrency_stable_;
  const BucketWindow& panic = metric == ScalingMetric::kRps ? rps_panic_ : concurrency_panic_;
  MetricSnapshot snap;
  if (stable.isEmpty(now)) return snap;
  snap.has_data = true;
  snap.stable_average = stable.average(now);
  snap.panic_average = panic.average(now);
  return snap;
}

}  // namespace knap::scaler
