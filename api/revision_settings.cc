#include "api/revision_settings.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/duration.h"
#include "common/json_path.h"

namespace knap::api {
namespace {

using nlohmann::json;
using std::chrono::nanoseconds;
using std::chrono::seconds;

constexpr std::string_view kPrefix = "autoscaling.knative.dev/";
constexpr double kRpsTargetUtilization = 0.7;  // fixed for the rps metric (§4.3)
constexpr int64_t kMaxSpecSeconds = 2147483647;

// kebab-case name -> legacy camelCase alias (Knative serving pkg/apis/autoscaling).
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

template <class D>
std::string fmtDuration(D d) {
  return formatGoDuration(std::chrono::duration_cast<nanoseconds>(d));
}

// obj[name] when obj is an object that has it, else null.
// ---- annotation values (the bounds admission applies, api/validation.cc) ----

Status bad(const AnnotationValue& a, const std::string& why) {
  return invalidArgument("annotation " + a.key + "=\"" + a.value + "\": " + why);
}

const NumberRule& numberRule(std::string_view name) {
  for (const NumberRule& r : numberAnnotationRules()) {
    if (name == r.name) return r;
  }
  static const NumberRule kAny{"", -INFINITY, INFINITY, false};
  return kAny;
}

const DurationRule& durationRule(std::string_view name) {
  for (const DurationRule& r : durationAnnotationRules()) {
    if (name == r.name) return r;
  }
  static const DurationRule kAny{"", nanoseconds::min(), nanoseconds::max(), false};
  return kAny;
}

StatusOr<double> floatIn(const AnnotationValue& a, const NumberRule& rule) {
  const double lo = rule.lo, hi = rule.hi;
  const bool allow_minus_one = rule.allow_minus_one;
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

StatusOr<nanoseconds> durationIn(const AnnotationValue& a, const DurationRule& rule) {
  const nanoseconds lo = rule.lo, hi = rule.hi;
  auto d = parseGoDuration(a.value);
  if (!d.isOk()) return bad(a, d.status().message());
  if (*d < lo || *d > hi)
    return bad(a, "expected " + formatGoDuration(lo) + " <= value <= " + formatGoDuration(hi));
  return *d;
}

// Collects the rows and errors of one parse.
class Recorder {
 public:
  Recorder(const json& annotations, RevisionSettings& out) : annotations_(annotations), out_(out) {}

  // Records the row of autoscaling setting `name` — the annotation as written,
  // else `fallback` from `source` — and returns the annotation when present.
  std::optional<AnnotationValue> annotation(const char* name, std::string fallback, const char* source) {
    auto a = autoscalingAnnotation(annotations_, name);
    if (a) {
      out_.rows.push_back({name, a->value, "annotation"});
    } else {
      out_.rows.push_back({name, std::move(fallback), source});
    }
    return a;
  }

  // A setting no annotation overrides.
  void fixed(const char* name, std::string value) { out_.rows.push_back({name, std::move(value), "config"}); }

  // *field = the parsed value, or (refused) the error is kept and *field keeps its fallback.
  template <class T, class U>
  void take(StatusOr<U> parsed, T* field) {
    if (parsed.isOk()) {
      *field = *parsed;
    } else {
      error(parsed.status().message());
    }
  }
  void error(std::string message) { out_.errors.push_back(std::move(message)); }

 private:
  const json& annotations_;
  RevisionSettings& out_;
};

// §4.1-4.3, §4.7: the autoscaling annotations over config-autoscaler.
void parseAutoscaling(Recorder& r, const Config& config, int64_t cc, AutoscalingSettings& s) {
  const AutoscalerConfig& ac = config.autoscaler;
  s.container_concurrency = cc;

  s.autoscaler_class = ac.pod_autoscaler_class;
  if (auto a = r.annotation("class", ac.pod_autoscaler_class, "config")) s.autoscaler_class = a->value;
  s.metric = s.autoscaler_class == kHpaClass ? "cpu" : "concurrency";
  if (auto a = r.annotation("metric", s.metric, "default")) {
    if (s.autoscaler_class == kKpaClass && a->value != "concurrency" && a->value != "rps") {
      r.error("annotation " + a->key + "=\"" + a->value + "\": the KPA supports \"concurrency\" and \"rps\"");
    } else {
      s.metric = a->value;
    }
  }

  // Targets (§4.3).
  const bool rps = s.metric == "rps";
  double total = rps ? ac.requests_per_second_target_default
                     : (cc > 0 ? static_cast<double>(cc) : ac.container_concurrency_target_default);
  double utilization = rps ? kRpsTargetUtilization : ac.targetUtilizationFraction();
  if (auto a = r.annotation(
          "target",
          fmt(rps ? ac.requests_per_second_target_default : ac.container_concurrency_target_default),
          "config")) {
    double t = total;
    r.take(floatIn(*a, numberRule("target")), &t);
    total = t;
    if (s.metric == "concurrency" && cc > 0) total = std::min(t, static_cast<double>(cc));
  }
  if (auto a = rps ? r.annotation("target-utilization-percentage", "70", "default")
                   : r.annotation("target-utilization-percentage", fmt(ac.targetUtilizationFraction() * 100),
                                  "config")) {
    double p = utilization * 100;
    r.take(floatIn(*a, numberRule("target-utilization-percentage")), &p);
    utilization = p / 100;
  }
  s.target = total;
  s.total_value = total;
  s.target_utilization = utilization;
  s.target_value = std::max(0.01, total * utilization);

  s.target_burst_capacity = ac.target_burst_capacity;
  if (auto a = r.annotation("target-burst-capacity", fmt(ac.target_burst_capacity), "config")) {
    r.take(floatIn(*a, numberRule("target-burst-capacity")), &s.target_burst_capacity);
  }

  s.min_scale = ac.min_scale;
  s.max_scale = ac.max_scale;
  if (auto a = r.annotation("min-scale", std::to_string(ac.min_scale), "config"))
    r.take(intIn(*a, 0), &s.min_scale);
  if (auto a = r.annotation("max-scale", std::to_string(ac.max_scale), "config"))
    r.take(intIn(*a, 0), &s.max_scale);
  if (s.max_scale != 0 && s.max_scale < s.min_scale) {
    r.error("max-scale=" + std::to_string(s.max_scale) +
            " is less than min-scale=" + std::to_string(s.min_scale));
  }
  // initial-scale: the annotation counts when non-zero, or zero with allow-zero-initial-scale (§4.7).
  s.initial_scale = ac.initial_scale;
  if (auto a = r.annotation("initial-scale", std::to_string(ac.initial_scale), "config")) {
    int32_t v = s.initial_scale;
    r.take(intIn(*a, 0), &v);
    if (v != 0 || ac.allow_zero_initial_scale) s.initial_scale = v;
  }
  if (auto a = r.annotation("activation-scale", "1", "default")) r.take(intIn(*a, 1), &s.activation_scale);

  s.stable_window = std::chrono::duration_cast<nanoseconds>(ac.stable_window);
  if (auto a = r.annotation("window", fmtDuration(ac.stable_window), "config")) {
    r.take(durationIn(*a, durationRule("window")), &s.stable_window);
  }
  s.panic_window_percentage = ac.panic_window_percentage;
  if (auto a = r.annotation("panic-window-percentage", fmt(ac.panic_window_percentage), "config")) {
    r.take(floatIn(*a, numberRule("panic-window-percentage")), &s.panic_window_percentage);
  }
  {
    // Panic window = stable window * pct / 100, rounded to whole seconds, at least 1s.
    double secs = std::chrono::duration<double>(s.stable_window).count() * s.panic_window_percentage / 100.0;
    s.panic_window = seconds(std::max<int64_t>(1, std::llround(secs)));
  }
  s.panic_threshold_percentage = ac.panic_threshold_percentage;
  if (auto a = r.annotation("panic-threshold-percentage", fmt(ac.panic_threshold_percentage), "config")) {
    r.take(floatIn(*a, numberRule("panic-threshold-percentage")), &s.panic_threshold_percentage);
  }

  s.scale_down_delay = std::chrono::duration_cast<nanoseconds>(ac.scale_down_delay);
  if (auto a = r.annotation("scale-down-delay", fmtDuration(ac.scale_down_delay), "config")) {
    r.take(durationIn(*a, durationRule("scale-down-delay")), &s.scale_down_delay);
  }
  s.scale_to_zero_pod_retention_period =
      std::chrono::duration_cast<nanoseconds>(ac.scale_to_zero_pod_retention_period);
  if (auto a = r.annotation("scale-to-zero-pod-retention-period",
                            fmtDuration(ac.scale_to_zero_pod_retention_period), "config")) {
    r.take(durationIn(*a, durationRule("scale-to-zero-pod-retention-period")),
           &s.scale_to_zero_pod_retention_period);
  }
  s.enable_scale_to_zero = ac.enable_scale_to_zero;
  r.fixed("enable-scale-to-zero", ac.enable_scale_to_zero ? "true" : "false");
  s.scale_to_zero_grace_period = std::chrono::duration_cast<nanoseconds>(ac.scale_to_zero_grace_period);
  r.fixed("scale-to-zero-grace-period", fmtDuration(ac.scale_to_zero_grace_period));
  s.max_scale_up_rate = ac.max_scale_up_rate;
  r.fixed("max-scale-up-rate", fmt(ac.max_scale_up_rate));
  s.max_scale_down_rate = ac.max_scale_down_rate;
  r.fixed("max-scale-down-rate", fmt(ac.max_scale_down_rate));
  if (auto a = r.annotation("metric-aggregation-algorithm", "linear", "default")) {
    s.metric_aggregation_algorithm = a->value;
  }
}

// spec.<field> when it is an integer in [0, 2^31); else `fallback` (with an
// error when the field is set to something else). Its row goes to *rows.
int64_t specInt(const json& spec, const char* field, int64_t fallback, const char* fallback_source,
                std::vector<EffectiveValue>* rows, Recorder& r) {
  const json& v = valueAt(spec, field);
  if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxSpecSeconds) {
    rows->push_back({field, std::to_string(v.get<int64_t>()), "spec"});
    return v.get<int64_t>();
  }
  if (!v.is_null()) {
    r.error(std::string("spec.") + field + ": must be an integer in [0, 2147483647], got " +
            (v.is_number() ? v.dump() : std::string("a ") + v.type_name()));
  }
  rows->push_back({field, std::to_string(fallback), fallback_source});
  return fallback;
}

// serving.knative.dev/progress-deadline (> 0) over config-deployment.
void parseProgressDeadline(const json& annotations, const Config& config, RevisionSettings& out,
                           std::vector<EffectiveValue>* rows, Recorder& r) {
  out.progress_deadline = std::chrono::duration_cast<nanoseconds>(config.deployment.progress_deadline);
  const json& v = valueAt(annotations, kProgressDeadlineAnnotation);
  if (v.is_string()) {
    AnnotationValue a{kProgressDeadlineAnnotation, v.get<std::string>()};
    auto d = parseGoDuration(a.value);
    if (!d.isOk()) {
      r.error(bad(a, d.status().message()).message());
    } else if (d->count() < 0) {
      r.error(bad(a, "must be a non-negative duration").message());
    } else if (d->count() > 0) {
      out.progress_deadline = *d;
      rows->push_back({"progress-deadline", a.value, "annotation"});
      return;
    }
  }
  rows->push_back({"progress-deadline", fmtDuration(config.deployment.progress_deadline), "config"});
}

// knap.dev/warm-pool and knap.dev/warm-pool-mode (string values; others are ignored).
void parseWarmPool(const json& annotations, WarmPoolSettings& out) {
  if (const json& v = valueAt(annotations, kWarmPoolAnnotation); v.is_string()) {
    AnnotationValue a{kWarmPoolAnnotation, v.get<std::string>()};
    auto size = parseWarmPoolSize(a.value);
    if (size.isOk()) {
      out.size = *size;
    } else {
      out.errors.push_back(bad(a, size.status().message()).message());
    }
  }
  if (const json& v = valueAt(annotations, kWarmPoolModeAnnotation); v.is_string()) {
    AnnotationValue a{kWarmPoolModeAnnotation, v.get<std::string>()};
    auto mode = parseWarmPoolMode(a.value);
    if (mode.isOk()) {
      out.mode = *mode;
    } else {
      out.errors.push_back(bad(a, mode.status().message()).message());
    }
  }
}

}  // namespace

StatusOr<int32_t> parseWarmPoolSize(const std::string& value) {
  const bool digits = !value.empty() && value.size() <= 3 &&
                      std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoi(value) > kMaxWarmPoolSize) {
    return invalidArgument("must be an integer from 0 to " + std::to_string(kMaxWarmPoolSize));
  }
  return static_cast<int32_t>(std::stoi(value));
}

StatusOr<std::string> parseWarmPoolMode(const std::string& value) {
  if (value != "created" && value != "frozen") return invalidArgument("must be \"created\" or \"frozen\"");
  return value;
}

const std::vector<NumberRule>& numberAnnotationRules() {
  static const std::vector<NumberRule> kRules = {
      {"panic-window-percentage", 1, 100, false},
      {"panic-threshold-percentage", 110, 1000, false},
      {"target", 0.01, INFINITY, false},
      {"target-utilization-percentage", 1, 100, false},
      {"target-burst-capacity", 0, INFINITY, true},
  };
  return kRules;
}

const std::vector<DurationRule>& durationAnnotationRules() {
  static const std::vector<DurationRule> kRules = {
      {"window", seconds(6), seconds(3600), true},
      {"scale-down-delay", seconds(0), seconds(3600), true},
      {"scale-to-zero-pod-retention-period", seconds(0), seconds(3600), false},
  };
  return kRules;
}

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

Status RevisionSettings::status() const {
  return errors.empty() ? Status::ok() : invalidArgument(errors.front());
}

RevisionSettings revisionSettings(const json& revision, const Config& config) {
  RevisionSettings out;
  const json& annotations = valueAt(valueAt(revision, "metadata"), "annotations");
  const json& spec = valueAt(revision, "spec");
  Recorder r(annotations, out);
  // The spec's rows follow the autoscaling ones; containerConcurrency feeds the targets.
  std::vector<EffectiveValue> rows;
  const DefaultsConfig& d = config.defaults;
  out.container_concurrency =
      specInt(spec, "containerConcurrency", d.container_concurrency, "config", &rows, r);
  out.timeout = seconds(specInt(spec, "timeoutSeconds", d.revision_timeout_seconds, "config", &rows, r));
  out.response_start_timeout = seconds(specInt(spec, "responseStartTimeoutSeconds", 0, "default", &rows, r));
  out.idle_timeout = seconds(specInt(spec, "idleTimeoutSeconds", 0, "default", &rows, r));
  parseProgressDeadline(annotations, config, out, &rows, r);
  parseAutoscaling(r, config, out.container_concurrency, out.autoscaling);
  parseWarmPool(annotations, out.warm_pool);
  out.autoscaling_rows = out.rows.size();
  out.rows.insert(out.rows.end(), rows.begin(), rows.end());
  return out;
}

StatusOr<AutoscalingSettings> autoscalingSettings(const json& annotations, const Config& config,
                                                  int64_t container_concurrency) {
  RevisionSettings out;
  Recorder r(annotations, out);
  parseAutoscaling(r, config, container_concurrency, out.autoscaling);
  KNAP_RETURN_IF_ERROR(out.status());
  return out.autoscaling;
}

}  // namespace knap::api
