// Autoscaler: the KPA decider (KNATIVE-CONTRACT §4.5, Knative's
// pkg/autoscaler/scaling/autoscaler.go). decide() is a function of the window
// averages, the ready pod count and `now`; the only state it keeps is the
// panic episode (start time, highest pod count asked for while panicking) and
// the scale-down-delay window of recent decisions. It performs no I/O and
// never reads a clock.
//
//   maxUp = ceil(max_scale_up_rate * max(1, R))
//   maxDn = floor(max(1, R) / max_scale_down_rate)      (0 when unreachable)
//   dspc  = ceil(stable / target),  dppc = ceil(panic / target)
//   stable' = clamp(dspc, maxDn, maxUp),  panic' = clamp(dppc, maxDn, maxUp)
//   activation-scale A > 1 lifts non-zero wishes to A
//   over = dppc / max(1, R) >= panic threshold: start or extend panic;
//   not over for a whole stable window: leave panic
//   in panic: desired = max seen during the episode (never scale down)
//   scale-down-delay D: desired = max over the last D (2-s granularity)
//
// Thread safety: not thread-safe; one owner (the ScalerDriver) serialises calls.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>

#include "common/clock.h"
#include "scaler/metric_window.h"
#include "scaler/settings.h"

namespace knap::scaler {

struct ScaleDecision {
  bool valid = false;  // false: no metrics yet; desired_pods is -1
  int desired_pods = -1;
  int excess_burst_capacity = 0;  // EBC: < 0 means the pods could not absorb the target burst
  bool panicking = false;
};

// Sliding maximum over the last `duration`, in `granularity` steps (Knative's
// max.TimeWindow). Several records in one step keep the largest.
class MaxTimeWindow {
 public:
  MaxTimeWindow(Duration duration, Duration granularity);
  void record(MonoTime now, int value);
  // The maximum of the values recorded within the window ending at the latest
  // record; 0 before any record.
  int current() const;

 private:
  struct Entry {
    int64_t index;
    int value;
  };
  int64_t size_;
  Duration granularity_;
  std::deque<Entry> maxima_;  // indexes ascending, values descending
};

class Autoscaler {
 public:
  // `ready_pods_at_start` > 1 starts the decider in panic mode holding that
  // many pods, so a knapd restart (which loses metric history) does not scale
  // a busy revision down (Knative's newAutoscaler).
  Autoscaler(const ScalerSettings& settings, int ready_pods_at_start, MonoTime now);

  // Replaces the settings; panic state and the delay window are kept unless
  // the scale-down delay itself changed.
  void updateSettings(const ScalerSettings& settings);
  const ScalerSettings& settings() const { return settings_; }

  // The §4.5 decision. `metrics.has_data == false` returns an invalid decision
  // (desired -1) and leaves the state untouched.
  ScaleDecision decide(const MetricSnapshot& metrics, int ready_pods, MonoTime now);

  bool panicking() const { return panic_since_.has_value(); }
  int maxPanicPods() const { return max_panic_pods_; }

 private:
  ScalerSettings settings_;
  std::optional<MonoTime> panic_since_;  // last time the panic threshold was crossed
  int max_panic_pods_ = 0;
  std::optional<MaxTimeWindow> delay_window_;
};

// Excess burst capacity (§4.5): TBC 0 -> 0; TBC -1 -> -1;
// otherwise floor(ready * total_value - TBC - panic_average).
int excessBurstCapacity(double target_burst_capacity, double total_value, int ready_pods,
                        double panic_average);

}  // namespace knap::scaler
