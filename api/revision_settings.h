// The one typed model of a Revision's runtime settings, parsed once: its
// autoscaling.knative.dev/* annotations (with their legacy camelCase aliases,
// Knative's pkg/apis/autoscaling) merged over config-autoscaler (docs/scaling.md), the
// progress deadline (serving.knative.dev/progress-deadline over
// config-deployment), the spec's timeouts and containerConcurrency
// (over config-defaults), and knap's warm pool annotations
// (knap.dev/warm-pool, knap.dev/warm-pool-mode). Every consumer reads this model: the scaler (through
// daemon/'s mapping to scaler::ScalerSettings), the router's per-revision
// config, the pod runner, and the effective-settings view (`knap describe`,
// the console; api/effective_config.h). docs/scaling.md says how a new
// annotation is added.
//
// Each value carries where it came from (annotation, spec, config or a fixed
// default) as a display row. Parsing never throws, whatever the object's shape
// (a Revision written straight into the store may be malformed): a value that
// does not parse or is out of range keeps its fallback and is reported in
// `errors`, naming the annotation or field.
//
// Pure functions; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/status.h"

namespace knap::api {

inline constexpr const char* kKpaClass = "kpa.autoscaling.knative.dev";
inline constexpr const char* kHpaClass = "hpa.autoscaling.knative.dev";
inline constexpr const char* kProgressDeadlineAnnotation = "serving.knative.dev/progress-deadline";
inline constexpr const char* kWarmPoolAnnotation = "knap.dev/warm-pool";
inline constexpr const char* kWarmPoolModeAnnotation = "knap.dev/warm-pool-mode";
inline constexpr int32_t kMaxWarmPoolSize = 100;  // as knap.warm-pool-size (common/config.h)

// The values of the warm pool annotations, the rules admission
// (api/validation.cc) and revisionSettings both apply: a size is an integer
// from 0 to kMaxWarmPoolSize written in digits; a mode is "created" or
// "frozen". kInvalidArgument saying what the value must be.
StatusOr<int32_t> parseWarmPoolSize(const std::string& value);
StatusOr<std::string> parseWarmPoolMode(const std::string& value);

// One autoscaling annotation found in an annotation map.
struct AnnotationValue {
  std::string key;  // the full key actually used, e.g. "autoscaling.knative.dev/minScale"
  std::string value;
};

// Looks up autoscaling.knative.dev/<name> (name in kebab-case, e.g. "min-scale")
// in `annotations` (a JSON object of strings, or anything else = none),
// honouring the legacy camelCase alias (minScale, initialScale, ...); the
// kebab-case key wins when both are set. nullopt when neither is present or
// the value is not a string.
std::optional<AnnotationValue> autoscalingAnnotation(const nlohmann::json& annotations,
                                                     std::string_view name);

// The range of a numeric or duration autoscaling annotation: one table that
// admission (api/validation.cc) and revisionSettings both apply.
struct NumberRule {
  const char* name;  // kebab-case, e.g. "target"
  double lo, hi;
  bool allow_minus_one;  // -1 = unlimited (target-burst-capacity)
};
struct DurationRule {
  const char* name;
  std::chrono::nanoseconds lo, hi;
  bool whole_seconds;  // admission refuses sub-second precision
};
const std::vector<NumberRule>& numberAnnotationRules();
const std::vector<DurationRule>& durationAnnotationRules();

// One setting as shown to a user, with where its value came from.
struct EffectiveValue {
  std::string key;     // setting name: "min-scale", "window", "timeoutSeconds", "progress-deadline", ...
  std::string value;   // as a user would write it: "1", "60s", "0.7", "true"
  std::string source;  // "annotation", "spec", "config" or "default" (a fixed Knative constant)
};

// The autoscaling part: what the scaler consumes.
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

// The pod runner's warm pool (docs/pod-runner.md) for this revision. nullopt:
// the annotation is absent (or refused, see `errors`), and the runner's
// configured knap.warm-pool-size / knap.warm-pool-mode apply.
struct WarmPoolSettings {
  std::optional<int32_t> size;      // knap.dev/warm-pool
  std::optional<std::string> mode;  // knap.dev/warm-pool-mode: "created" or "frozen"
  // Values refused, each naming its annotation. Kept apart from
  // RevisionSettings::errors: only the pod runner uses the warm pool, and a
  // bad pool annotation must not keep the revision from the scaler.
  std::vector<std::string> errors;
};

struct RevisionSettings {
  AutoscalingSettings autoscaling;
  WarmPoolSettings warm_pool;                      // not among the display rows
  int64_t container_concurrency = 0;               // spec.containerConcurrency, 0 = unlimited
  std::chrono::seconds timeout{300};               // spec.timeoutSeconds
  std::chrono::seconds response_start_timeout{0};  // spec.responseStartTimeoutSeconds, 0 = none
  std::chrono::seconds idle_timeout{0};            // spec.idleTimeoutSeconds, 0 = none
  std::chrono::nanoseconds progress_deadline{std::chrono::seconds(600)};  // annotation > 0, else config

  // Every setting above, in display order: the autoscaling rows (see
  // effectiveAutoscaling), then containerConcurrency, timeoutSeconds,
  // responseStartTimeoutSeconds, idleTimeoutSeconds, progress-deadline.
  std::vector<EffectiveValue> rows;
  size_t autoscaling_rows = 0;  // how many of `rows` are the autoscaling ones
  // Values refused (each message names the annotation or field); each kept its fallback.
  std::vector<std::string> errors;

  // OK, or kInvalidArgument with the first error.
  Status status() const;
};

// The settings of `revision`: a Revision, or a revision template (any JSON:
// metadata.annotations and spec are read when they are objects). The
// annotations are checked with the rules admission applies (§3.6); the spec's
// fields must be non-negative integers.
RevisionSettings revisionSettings(const nlohmann::json& revision, const Config& config);

// The autoscaling part alone from an annotation map and a containerConcurrency;
// kInvalidArgument naming the annotation when one is refused.
StatusOr<AutoscalingSettings> autoscalingSettings(const nlohmann::json& annotations, const Config& config,
                                                  int64_t container_concurrency);

}  // namespace knap::api
