#include "scaler/settings.h"

#include <algorithm>
#include <cmath>

namespace knap::scaler {

std::optional<ScalingMetric> parseScalingMetric(std::string_view text) {
  if (text == "concurrency") return ScalingMetric::kConcurrency;
  if (text == "rps") return ScalingMetric::kRps;
  return std::nullopt;
}

std::optional<Aggregation> parseAggregation(std::string_view text) {
  if (text == "linear") return Aggregation::kLinear;
  if (text == "weighted-exponential" || text == "weightedExponential") {
    return Aggregation::kWeightedExponential;
  }
  return std::nullopt;
}

const char* scalingMetricName(ScalingMetric metric) {
  return metric == ScalingMetric::kRps ? "rps" : "concurrency";
}

Duration ScalerSettings::panicWindow() const {
  // Go's Duration.Round(time.Second): half away from zero.
  double secs = std::chrono::duration<double>(stable_window).count() * panic_window_percentage / 100.0;
  auto rounded = std::chrono::seconds(static_cast<int64_t>(std::llround(secs)));
  return std::max<Duration>(rounded, kBucketSize);
}

Status validateSettings(const ScalerSettings& s) {
  auto bad = [](const std::string& field, const std::string& why) {
    return invalidArgument("scaler settings: " + field + " " + why);
  };
  if (!(s.target_value > 0)) return bad("target_value", "must be > 0");
  if (!(s.total_value > 0)) return bad("total_value", "must be > 0");
  if (s.stable_window < kBucketSize) return bad("stable_window", "must be at least 1s");
  if (!(s.panic_window_percentage > 0)) return bad("panic_window_percentage", "must be > 0");
  if (!(s.panic_threshold_percentage > 0)) return bad("panic_threshold_percentage", "must be > 0");
  if (!(s.max_scale_up_rate > 1)) return bad("max_scale_up_rate", "must be > 1");
  if (!(s.max_scale_down_rate > 1)) return bad("max_scale_down_rate", "must be > 1");
  if (s.min_scale < 0) return bad("min_scale", "must be >= 0");
  if (s.max_scale < 0) return bad("max_scale", "must be >= 0");
  if (s.max_scale != 0 && s.max_scale < s.min_scale) return bad("max_scale", "must be >= min_scale");
  if (s.initial_scale < 0) return bad("initial_scale", "must be >= 0");
  if (s.scale_down_delay < Duration(0)) return bad("scale_down_delay", "must be >= 0");
  if (s.scale_to_zero_grace_period < Duration(0)) {
    return bad("scale_to_zero_grace_period", "must be >= 0");
  }
  if (s.pod_retention_period < Duration(0)) return bad("pod_retention_period", "must be >= 0");
  if (s.target_burst_capacity < 0 && s.target_burst_capacity != -1) {
    return bad("target_burst_capacity", "must be >= 0 or -1");
  }
  if (s.progress_deadline < Duration(0)) return bad("progress_deadline", "must be >= 0");
  return Status::ok();
}

}  // namespace knap::scaler
