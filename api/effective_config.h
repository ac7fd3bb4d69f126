// The effective autoscaling configuration of a Revision: its
// autoscaling.knative.dev/* annotations merged over config-autoscaler
// (KNATIVE-CONTRACT §4.1-4.3), in two forms: display rows (value + where it
// came from, for `knap describe`) and typed settings for the scaler.
// Pure functions; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/status.h"

namespace knap::api {

inline constexpr const char* kKpaClass = "kpa.autoscaling.knative.dev";
inline constexpr const char* kHpaClass = "hpa.autoscaling.knative.dev";

// One autoscaling annotation found in an annotation map.
struct AnnotationValue {
  std::string key;  // the full key actually used, e.g. "autoscaling.knative.dev/minScale"
  std::string value;
};

// Looks up autoscaling.knative.dev/<name> (name in kebab-case, e.g. "min-scale")
// in `annotations` (a JSON object of strings, or null), honouring the legacy
// camelCase alias (minScale, ...); the kebab-case key wins when both are set.
// nullopt when neither is present or the value is not a string.
std::optional<AnnotationValue> autoscalingAnnotation(const nlohmann::json& annotations,
                                                     std::string_view name);

struct EffectiveValue {
  std::string key;     // kebab-case setting name: "min-scale", "window", ...
  std::string value;   // as a user would write it: "1", "60s", "0.7", "true"
  std::string source;  // "annotation", "config" or "default" (a fixed Knative constant)
};

// Every KPA setting (class, metric, target, target-utilization-percentage,
// target-burst-capacity, min-scale, max-scale, initial-scale, activation-scale,
// window, panic-window-percentage, panic-threshold-percentage,
// scale-down-delay, scale-to-zero-pod-retention-period, enable-scale-to-zero,
// scale-to-zero-grace-period, max-scale-up-rate, max-scale-down-rate,
// metric-aggregation-algorithm), in that order. Values of annotations are shown
// as written (validation has already checked them).
std::vector<EffectiveValue> effectiveAutoscaling(const nlohmann::json& annotations, const Config& config);

// The typed settings the scaler consumes.
struct AutoscalingSettings {
  std::string autoscaler_class = kKpaClass;
  std::string metric = "concurrency";  // "concurrency" or "rps" for the KPA
  std::string metric_aggregation_algorithm = "linear";
  int64_t container_concurrency = 0;  // the Revision's hard limit, 0 = unlimited
  double target = 100;                // per-pod target before utilization (TotalValue)
  double target_utilization = 0.7;    // fraction in (0, 1]
  double target_value = 70;           // max(0.01, total_value * target_utilization)
  double total_value = 100;
  double target_burst_capacity = 211;  // -1 = unlimited
  int32_t min_scale = 0;
  int32_t max_scale = 0;  // 0 = unbounded
  int32_t initial_scale = 1;
  int32_t activation_scale = 1;
  std::chrono::nanoseconds stable_window = std::chrono::seconds(60);
  double panic_window_percentage = 10;
  std::chrono::nanoseconds panic_window = std::chrono::seconds(6);  // round(W * pct / 100), >= 1s
  double panic_threshold_percentage = 200;
  std::chrono::nanoseconds scale_down_delay{0};
  std::chrono::nanoseconds scale_to_zero_pod_retention_period{0};
  std::chrono::nanoseconds scale_to_zero_grace_period = std::chrono::seconds(30);
  bool enable_scale_to_zero = true;
  double max_scale_up_rate = 1000;
  double max_scale_down_rate = 2;
};

// Parses `annotations` (a Revision's, or a template's) over `config` and
// computes TargetValue / TotalValue per §4.3 with the Revision's
// containerConcurrency. Returns kInvalidArgument naming the annotation when a
// value does not parse or is out of range (the same rules validation applies).
StatusOr<AutoscalingSettings> autoscalingSettings(const nlohmann::json& annotations, const Config& config,
                                                  int64_t container_concurrency);

}  // namespace knap::api
