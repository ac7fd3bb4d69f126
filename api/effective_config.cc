#include "api/effective_config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/duration.h"

namespace knap::api {
namespace {

using nlohmann::json;
using std::chrono::nanoseconds;
using std::chrono::seconds;

constexpr std::string_view kPrefix = "autoscaling.knative.dev/";

// kebab-case name -> legacy camelCase alias (KNATIVE-CONTRACT §3.6).
std::string legacyAlias(std::string_view name) {
  static const std::pair<std::string_view, std::string_view> kAliases[] = {
      {"initial-scale", "initialScale"},
      {"max-scale", "maxScale"},
      {"min-scale", "minScale"},
      {"metric-aggregation-algorithm", "metricAggregationAlgorithm"},
      {"panic-threshold-percentage", "panicThresholdPercentage"},
      {"panic-window-percentage", "panicWindowPercentage"},
      {"scale-down-delay", "scaleDownDelay"},
      {"scale-to-zero-pod-retention-period", "scaleToZeroPodRetentionPeriod"},
      {"target-burst-capacity", "targetBurstCapacity"},
      {"target-utilization-percentage", "targetUtilizationPercentage"},
  };
  for (const auto& [kebab, camel] : kAliases) {
    if (kebab == name) return std::string(camel);
  }
  return "";
}

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(15);
  os << v;
  return os.str();
}

std::string fmtSeconds(Seconds s) {
  return formatGoDuration(std::chrono::duration_cast<nanoseconds>(s));
}

}  // namespace

std::optional<AnnotationValue> autoscalingAnnotation(const json& annotations, std::string_view name) {
  if (!annotations.is_object()) return std::nullopt;
  std::string kebab = std::string(kPrefix) + std::string(name);
  if (auto it = annotations.find(kebab); it != annotations.end() && it->is_string()) {
    return AnnotationValue{kebab, it->get<std::string>()};
  }
  std::string alias = legacyAlias(name);
  if (alias.empty()) return std::nullopt;
  std::string camel = std::string(kPrefix) + alias;
  if (auto it = annotations.find(camel); it != annotations.end() && it->is_string()) {
    return AnnotationValue{camel, it->get<std::string>()};
  }
  return std::nullopt;
}

std::vector<EffectiveValue> effectiveAutoscaling(const json& annotations, const Config& config) {
  const AutoscalerConfig& ac = config.autoscaler;
  std::vector<EffectiveValue> out;
  auto add = [&](const char* name, std::string fallback, const char* fallback_source) {
    if (auto a = autoscalingAnnotation(annotations, name)) {
      out.push_back({name, a->value, "annotation"});
    } else {
      out.push_back({name, std::move(fallback), fallback_source});
    }
  };
  add("class", ac.pod_autoscaler_class, "config");
  std::string klass = out.back().value;
  add("metric", klass == kHpaClass ? "cpu" : "concurrency", "default");
  std::string metric = out.back().value;
  if (metric == "rps") {
    add("target", fmt(ac.requests_per_second_target_default), "config");
    add("target-utilization-percentage", "70", "default");  // fixed for rps
  } else {
    add("target", fmt(ac.container_concurrency_target_default), "config");
    add("target-utilization-percentage", fmt(ac.targetUtilizationFraction() * 100), "config");
  }
  add("target-burst-capacity", fmt(ac.target_burst_capacity), "config");
  add("min-scale", std::to_string(ac.min_scale), "config");
  add("max-scale", std::to_string(ac.max_scale), "config");
  add("initial-scale", std::to_string(ac.initial_scale), "config");
  add("activation-scale", "1", "default");
  add("window", fmtSeconds(ac.stable_window), "config");
  add("panic-window-percentage", fmt(ac.panic_window_percentage), "config");
  add("panic-threshold-percentage", fmt(ac.panic_threshold_percentage), "config");
  add("scale-down-delay", fmtSeconds(ac.scale_down_delay), "config");
  add("scale-to-zero-pod-retention-period", fmtSeconds(ac.scale_to_zero_pod_retention_period), "config");
  out.push_back({"enable-scale-to-zero", ac.enable_scale_to_zero ? "true" : "false", "config"});
  out.push_back({"scale-to-zero-grace-period", fmtSeconds(ac.scale_to_zero_grace_period), "config"});
  out.push_back({"max-scale-up-rate", fmt(ac.max_scale_up_rate), "config"});
  out.push_back({"max-scale-down-rate", fmt(ac.max_scale_down_rate), "config"});
  add("metric-aggregation-algorithm", "linear", "default");
  return out;
}

namespace {

Status bad(const AnnotationValue& a, const std::string& why) {
  return invalidArgument("annotation " + a.key + "=\"" + a.value + "\": " + why);
}

StatusOr<double> floatIn(const AnnotationValue& a, double lo, double hi, bool allow_minus_one = false) {
  char* end = nullptr;
  double v = std::strtod(a.value.c_str(), &end);
  if (a.value.empty() || *end != '\0' || std::isnan(v) || std::isinf(v)) return bad(a, "not a number");
  if (allow_minus_one && v == -1) return v;
  if (v < lo || v > hi)
    return bad(a, "expected " + fmt(lo) + " <= value <= " + (std::isinf(hi) ? "+Inf" : fmt(hi)));
  return v;
}

StatusOr<int32_t> intIn(const AnnotationValue& a, int64_t lo) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(a.value.c_str(), &end, 10);
  if (a.value.empty() || *end != '\0' || errno == ERANGE || v > 2147483647) return bad(a, "not an int32");
  if (v < lo) return bad(a, "must be >= " + std::to_string(lo));
  return static_cast<int32_t>(v);
}

StatusOr<nanoseconds> durationIn(const AnnotationValue& a, nanoseconds lo, nanoseconds hi) {
  auto d = parseGoDuration(a.value);
  if (!d.isOk()) return bad(a, d.status().message());
  if (*d < lo || *d > hi)
    return bad(a, "expected " + formatGoDuration(lo) + " <= value <= " + formatGoDuration(hi));
  return *d;
}

}  // namespace

StatusOr<AutoscalingSettings> autoscalingSettings(const json& annotations, const Config& config,
                                                  int64_t container_concurrency) {
  const AutoscalerConfig& ac = config.autoscaler;
  AutoscalingSettings s;
  auto ann = [&](const char* name) { return autoscalingAnnotation(annotations, name); };

  s.autoscaler_class = ac.pod_autoscaler_class;
  if (auto a = ann("class")) s.autoscaler_class = a->value;
  s.metric = s.autoscaler_class == kHpaClass ? "cpu" : "concurrency";
  if (auto a = ann("metric")) s.metric = a->value;
  if (s.autoscaler_class == kKpaClass && s.metric != "concurrency" && s.metric != "rps") {
    return invalidArgument("annotation autoscaling.knative.dev/metric=\"" + s.metric +
                           "\": the KPA supports \"concurrency\" and \"rps\"");
  }
  if (auto a = ann("metric-aggregation-algorithm")) s.metric_aggregation_algorithm = a->value;
  s.container_concurrency = container_concurrency;

  // Targets (§4.3).
  double total;
  double utilization;
  if (s.metric == "rps") {
    total = ac.requests_per_second_target_default;
    utilization = 0.7;
  } else {
    total = container_concurrency > 0 ? static_cast<double>(container_concurrency)
                                      : ac.container_concurrency_target_default;
    utilization = ac.targetUtilizationFraction();
  }
  if (auto a = ann("target")) {
    KNAP_ASSIGN_OR_RETURN(double t, floatIn(*a, 0.01, INFINITY));
    total = t;
    if (s.metric == "concurrency" && container_concurrency > 0)
      total = std::min(t, static_cast<double>(container_concurrency));
  }
  if (auto a = ann("target-utilization-percentage")) {
    KNAP_ASSIGN_OR_RETURN(double p, floatIn(*a, 1, 100));
    utilization = p / 100;
  }
  s.target = total;
  s.total_value = total;
  s.target_utilization = utilization;
  s.target_value = std::max(0.01, total * utilization);

  s.target_burst_capacity = ac.target_burst_capacity;
  if (auto a = ann("target-burst-capacity")) {
    KNAP_ASSIGN_OR_RETURN(s.target_burst_capacity, floatIn(*a, 0, INFINITY, /*allow_minus_one=*/true));
  }

  s.min_scale = ac.min_scale;
  s.max_scale = ac.max_scale;
  if (auto a = ann("min-scale")) {
    KNAP_ASSIGN_OR_RETURN(s.min_scale, intIn(*a, 0));
  }
  if (auto a = ann("max-scale")) {
    KNAP_ASSIGN_OR_RETURN(s.max_scale, intIn(*a, 0));
  }
  if (s.max_scale != 0 && s.max_scale < s.min_scale) {
    return invalidArgument("max-scale=" + std::to_string(s.max_scale) +
                           " is less than min-scale=" + std::to_string(s.min_scale));
  }
  // initial-scale: the annotation counts when non-zero, or zero with allow-zero-initial-scale (§4.7).
  s.initial_scale = ac.initial_scale;
  if (auto a = ann("initial-scale")) {
    KNAP_ASSIGN_OR_RETURN(int32_t v, intIn(*a, 0));
    if (v != 0 || ac.allow_zero_initial_scale) s.initial_scale = v;
  }
  if (auto a = ann("activation-scale")) {
    KNAP_ASSIGN_OR_RETURN(s.activation_scale, intIn(*a, 1));
  }

  s.stable_window = std::chrono::duration_cast<nanoseconds>(ac.stable_window);
  if (auto a = ann("window")) {
    KNAP_ASSIGN_OR_RETURN(s.stable_window, durationIn(*a, seconds(6), seconds(3600)));
  }
  s.panic_window_percentage = ac.panic_window_percentage;
  if (auto a = ann("panic-window-percentage")) {
    KNAP_ASSIGN_OR_RETURN(s.panic_window_percentage, floatIn(*a, 1, 100));
  }
  {
    // Panic window = stable window * pct / 100, rounded to whole seconds, at least 1s.
    double secs = std::chrono::duration<double>(s.stable_window).count() * s.panic_window_percentage / 100.0;
    s.panic_window = seconds(std::max<int64_t>(1, std::llround(secs)));
  }
  s.panic_threshold_percentage = ac.panic_threshold_percentage;
  if (auto a = ann("panic-threshold-percentage")) {
    KNAP_ASSIGN_OR_RETURN(s.panic_threshold_percentage, floatIn(*a, 110, 1000));
  }

  s.scale_down_delay = std::chrono::duration_cast<nanoseconds>(ac.scale_down_delay);
  if (auto a = ann("scale-down-delay")) {
    KNAP_ASSIGN_OR_RETURN(s.scale_down_delay, durationIn(*a, seconds(0), seconds(3600)));
  }
  s.scale_to_zero_pod_retention_period =
      std::chrono::duration_cast<nanoseconds>(ac.scale_to_zero_pod_retention_period);
  if (auto a = ann("scale-to-zero-pod-retention-period")) {
    KNAP_ASSIGN_OR_RETURN(s.scale_to_zero_pod_retention_period, durationIn(*a, seconds(0), seconds(3600)));
  }
  s.scale_to_zero_grace_period = std::chrono::duration_cast<nanoseconds>(ac.scale_to_zero_grace_period);
  s.enable_scale_to_zero = ac.enable_scale_to_zero;
  s.max_scale_up_rate = ac.max_scale_up_rate;
  s.max_scale_down_rate = ac.max_scale_down_rate;
  return s;
}

}  // namespace knap::api
