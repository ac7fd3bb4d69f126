// Metric windows of the KPA (KNATIVE-CONTRACT §4.4): 1-second buckets of
// time-weighted concurrency and request counts, averaged over the stable
// window (default 60 s) and the panic window (default 6 s).
//
// BucketWindow is Knative's TimedFloat64Buckets / WeightedFloat64Buckets: a
// ring of ceil(window / 1 s) buckets indexed by whole monotonic seconds.
// The linear average is the sum of the buckets still inside the window divided
// by the number of buckets between the first and the last write (capped by the
// window); seconds with no record at all do not dilute it, which is why the
// driver records a sample every second while the revision has pods. Nothing
// recorded for longer than a whole window means empty: average 0 and
// MetricWindow::snapshot() reports no data.
//
// Thread safety: none; each revision's window is owned by the ScalerDriver,
// which serialises access. Times are MonoTime; no clock is read here.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/clock.h"
#include "scaler/settings.h"

namespace knap::scaler {

class BucketWindow {
 public:
  BucketWindow(Duration window, Aggregation aggregation);

  // Adds `value` to the bucket of `now`. Values older than the window behind
  // the newest write are dropped.
  void record(MonoTime now, double value);
  // True when nothing was recorded within the last window before `now`.
  bool isEmpty(MonoTime now) const;
  // Linear: mean over the buckets since the first write (capped by the window),
  // rounded to 6 decimals. Weighted-exponential: newer buckets weigh more.
  // 0 when empty.
  double average(MonoTime now) const;
  int64_t bucketCount() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  static int64_t index(MonoTime t);
  double& bucket(int64_t idx) { return buckets_[static_cast<size_t>(slot(idx))]; }
  double bucketAt(int64_t idx) const { return buckets_[static_cast<size_t>(slot(idx))]; }
  int64_t slot(int64_t idx) const {
    int64_t n = bucketCount();
    return ((idx % n) + n) % n;
  }
  double linearAverage(int64_t now_idx) const;
  double weightedAverage(int64_t now_idx) const;

  std::vector<double> buckets_;
  Aggregation aggregation_;
  double smoothing_;  // weighted-exponential alpha
  double window_total_ = 0;
  std::optional<int64_t> first_write_;  // bucket index (monotonic second)
  std::optional<int64_t> last_write_;
};

// What the decider needs from the windows at one instant.
struct MetricSnapshot {
  bool has_data = false;  // false: nothing for a whole stable window -> decision "unknown"
  double stable_average = 0;
  double panic_average = 0;
};

// Stable and panic windows for both metrics of one revision.
class MetricWindow {
 public:
  MetricWindow(Duration stable_window, Duration panic_window, Aggregation aggregation);
  explicit MetricWindow(const ScalerSettings& settings)
      : MetricWindow(settings.stable_window, settings.panicWindow(), settings.aggregation) {}

  // One collection: the time-weighted average concurrency over the last
  // interval (in requests) and the requests that arrived in it.
  void record(MonoTime now, double concurrency, double requests);
  MetricSnapshot snapshot(MonoTime now, ScalingMetric metric) const;

  Duration stableWindow() const { return stable_window_; }
  Duration panicWindow() const { return panic_window_; }
  Aggregation aggregation() const { return aggregation_; }

 private:
  Duration stable_window_;
  Duration panic_window_;
  Aggregation aggregation_;
  BucketWindow concurrency_stable_;
  BucketWindow concurrency_panic_;
  BucketWindow rps_stable_;
  BucketWindow rps_panic_;
};

}  // namespace knap::scaler
