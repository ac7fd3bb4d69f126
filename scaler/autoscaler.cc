#include "scaler/autoscaler.h"

#include <algorithm>
#include <cmath>

namespace knap::scaler {

MaxTimeWindow::MaxTimeWindow(Duration duration, Duration granularity)
    : size_(std::max<int64_t>(1, (duration + granularity - Duration(1)) / granularity)),
      granularity_(granularity) {}

void MaxTimeWindow::record(MonoTime now, int value) {
  const int64_t index = now.time_since_epoch() / granularity_;
  // A smaller older value can never be the maximum again.
  while (!maxima_.empty() && maxima_.back().value <= value) maxima_.pop_back();
  while (!maxima_.empty() && index - maxima_.front().index >= size_) maxima_.pop_front();
  if (!maxima_.empty() && maxima_.back().index == index) {
    value = std::max(value, maxima_.back().value);
    maxima_.pop_back();
  }
  maxima_.push_back({index, value});
}

int MaxTimeWindow::current() const {
  return maxima_.empty() ? 0 : maxima_.front().value;
}

int excessBurstCapacity(double target_burst_capacity, double total_value, int ready_pods,
                        double panic_average) {
  if (target_burst_capacity == 0) return 0;
  if (target_burst_capacity < 0) return -1;
  return static_cast<int>(std::floor(ready_pods * total_value - target_burst_capacity - panic_average));
}

Autoscaler::Autoscaler(const ScalerSettings& settings, int ready_pods_at_start, MonoTime now)
    : settings_(settings), max_panic_pods_(ready_pods_at_start) {
  if (ready_pods_at_start > 1) panic_since_ = now;
  if (settings_.scale_down_delay > Duration(0)) {
    delay_window_.emplace(settings_.scale_down_delay, kTickInterval);
  }
}

void Autoscaler::updateSettings(const ScalerSettings& settings) {
  if (settings.scale_down_delay != settings_.scale_down_delay) {
    delay_window_.reset();
    if (settings.scale_down_delay > Duration(0)) {
      delay_window_.emplace(settings.scale_down_delay, kTickInterval);
    }
  }
  settings_ = settings;
}

ScaleDecision Autoscaler::decide(const MetricSnapshot& metrics, int ready_pods, MonoTime now) {
  ScaleDecision out;
  if (!metrics.has_data) return out;
  const ScalerSettings& s = settings_;
  const double ready = std::max(1.0, static_cast<double>(ready_pods));

  // Ceil so a conservative rate can still add one pod (Knative's comment:
  // MSUR=1.1, 2 pods => 2.2 would otherwise round down to no growth).
  const double max_up = std::ceil(s.max_scale_up_rate * ready);
  const double max_down = s.reachable ? std::floor(ready / s.max_scale_down_rate) : 0.0;

  const double dspc = std::ceil(metrics.stable_average / s.target_value);
  const double dppc = std::ceil(metrics.panic_average / s.target_value);
  int stable = static_cast<int>(std::min(std::max(dspc, max_down), max_up));
  int panic = static_cast<int>(std::min(std::max(dppc, max_down), max_up));

  if (s.activation_scale > 1) {
    // Activation scale only applies once the revision is wanted at all.
    if (dspc > 0 && stable < s.activation_scale) stable = s.activation_scale;
    if (dppc > 0 && panic < s.activation_scale) panic = s.activation_scale;
  }

  const bool over = dppc / ready >= s.panicThreshold();
  if (!panic_since_ && over) {
    panic_since_ = now;  // start panicking
  } else if (over) {
    panic_since_ = now;  // still over: extend the episode
  } else if (panic_since_ && now > *panic_since_ + s.stable_window) {
    // The surge has made its way into the stable average.
    panic_since_.reset();
    max_panic_pods_ = 0;
  }

  int desired = stable;
  if (panic_since_) {
    desired = std::max(stable, panic);
    // Never scale down while panicking.
    max_panic_pods_ = std::max(max_panic_pods_, desired);
    desired = max_panic_pods_;
  }

  if (s.reachable && delay_window_) {
    delay_window_->record(now, desired);
    desired = delay_window_->current();
  }

  out.valid = true;
  out.desired_pods = desired;
  out.excess_burst_capacity =
      excessBurstCapacity(s.target_burst_capacity, s.total_value, ready_pods, metrics.panic_average);
  out.panicking = panic_since_.has_value();
  return out;
}

}  // namespace knap::scaler
