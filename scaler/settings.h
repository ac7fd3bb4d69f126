// ScalerSettings: every knob of the Knative Pod Autoscaler (KPA) for one
// revision, already merged (annotation over config-autoscaler default) by the
// caller. scaler/ deliberately knows nothing of api/ or common/config.h: the
// merges (targets §4.3, initial scale §4.7, the progress deadline) are the
// Revision settings model's (api/revision_settings.h), which daemon/ maps
// into these plain values.
//
// Thread safety: plain values; copy freely.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"

namespace knap::scaler {

using namespace std::chrono_literals;

// Fixed constants of the KPA (KNATIVE-CONTRACT §4.1 "Fixed constants").
inline constexpr Duration kTickInterval = 2s;  // decision cadence
inline constexpr Duration kBucketSize = 1s;    // metric bucket and collection cadence
inline constexpr Duration kActivationTimeoutBuffer = 30s;

enum class ScalingMetric { kConcurrency, kRps };
enum class Aggregation { kLinear, kWeightedExponential };

// "concurrency" | "rps" (the KPA's metric annotation). nullopt for anything else.
std::optional<ScalingMetric> parseScalingMetric(std::string_view text);
// "linear" | "weighted-exponential" | "weightedExponential".
std::optional<Aggregation> parseAggregation(std::string_view text);
const char* scalingMetricName(ScalingMetric metric);

struct ScalerSettings {
  ScalingMetric metric = ScalingMetric::kConcurrency;
  double target_value = 70;  // per-pod target (TargetValue, §4.3); > 0
  double total_value = 100;  // per-pod capacity (TotalValue, §4.3); used by excess burst capacity
  Aggregation aggregation = Aggregation::kLinear;
  Duration stable_window = 60s;           // whole seconds, [6s, 1h] after validation upstream
  double panic_window_percentage = 10.0;  // [1, 100]
  double panic_threshold_percentage = 200.0;
  double max_scale_up_rate = 1000.0;  // > 1
  double max_scale_down_rate = 2.0;   // > 1
  int min_scale = 0;
  int max_scale = 0;         // 0 = unbounded
  int initial_scale = 1;     // already resolved (annotation, allow-zero-initial-scale, config)
  int activation_scale = 0;  // <= 1 means off
  Duration scale_down_delay = 0s;
  bool enable_scale_to_zero = true;
  Duration scale_to_zero_grace_period = 30s;
  Duration pod_retention_period = 0s;  // scale-to-zero-pod-retention-period
  double target_burst_capacity = 211;  // >= 0 or -1
  bool reachable = true;               // false: routingState "reserve" (no route points here)
  Duration progress_deadline = 600s;   // config-deployment or serving.knative.dev/progress-deadline

  // round(stable_window * panic% / 100) to whole seconds, at least one bucket.
  Duration panicWindow() const;
  double panicThreshold() const { return panic_threshold_percentage / 100.0; }
  Duration activationTimeout() const { return progress_deadline + kActivationTimeoutBuffer; }
  // Pod retention that applies: 0 when unreachable (§4.8).
  Duration effectiveRetention() const { return reachable ? pod_retention_period : Duration(0); }
};

// Refuses settings the arithmetic cannot work with (target <= 0, rates <= 1,
// windows < 1 s, negative scales, max < min). The message names the field.
Status validateSettings(const ScalerSettings& settings);

}  // namespace knap::scaler
