// Knative validation (knative/serving pkg/apis/serving/{metadata_validation,
// k8s_validation,fieldmask}.go, v1/*_validation.go, pkg/apis/autoscaling/
// annotation_validation.go) over JSON objects. See admission.h and
// KNATIVE-CONTRACT §3. Messages follow Knative's wording ("missing field(s)",
// "must not set the field(s)", "expected 0 <= 1001 <= 1000") and add the
// allowed values.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "api/admission.h"
#include "api/effective_config.h"
#include "api/naming.h"
#include "api/quantity.h"
#include "api/resources.h"
#include "common/duration.h"
#include "common/json_path.h"

namespace knap::api {
namespace {

using nlohmann::json;
using std::chrono::nanoseconds;
using std::chrono::seconds;

constexpr const char* kInvalid = "FieldValueInvalid";
constexpr const char* kRequired = "FieldValueRequired";
constexpr const char* kNotSupported = "FieldValueNotSupported";
constexpr const char* kForbidden = "FieldValueForbidden";
constexpr const char* kDuplicate = "FieldValueDuplicate";
constexpr const char* kTooMany = "FieldValueTooMany";

// Containers (and init containers) per Revision. Kubernetes sets no hard cap;
// each of knap's containers costs a snapshot, a shim and a waiting thread,
// so a Revision may have at most this many (field.TooMany's wording).
constexpr size_t kMaxContainers = 10;

constexpr int64_t kMaxInt32 = 2147483647;

// config-features flags (Knative defaults). knap's Config has no features
// section yet, so the defaults apply: every gated PodSpec field is disabled
// except emptyDir volumes and multi-container.
struct Features {
  std::map<std::string, bool> enabled = {
      {"multi-container", true},
      {"kubernetes.podspec-emptydir", true},
  };
  bool on(const std::string& flag) const {
    auto it = enabled.find(flag);
    return it != enabled.end() && it->second;
  }
};

const Features& features(const Config&) {
  static const Features f;
  return f;
}

std::string quoteList(std::initializer_list<const char*> values) {
  std::string out;
  for (const char* v : values) {
    if (!out.empty()) out += ", ";
    out += "\"" + std::string(v) + "\"";
  }
  return out;
}

std::string show(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string fmtNumber(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

class Errors {
 public:
  void add(std::string field, std::string message, const char* reason = kInvalid) {
    errors_.push_back({std::move(field), std::move(message), reason});
  }
  void missing(const std::string& field, std::string detail = "") {
    add(field, detail.empty() ? "missing field(s)" : "missing field(s): " + detail, kRequired);
  }
  void disallowed(const std::string& field, const std::string& detail = "") {
    add(field, detail.empty() ? "must not set the field(s)" : "must not set the field(s): " + detail,
        kForbidden);
  }
  void gated(const std::string& field, const std::string& flag) {
    add(field, "must not set the field(s): the feature flag " + flag + " is not enabled", kForbidden);
  }
  void outOfBounds(const std::string& field, const std::string& value, const std::string& lo,
                   const std::string& hi) {
    add(field, "expected " + lo + " <= " + value + " <= " + hi);
  }
  void notOneOf(const std::string& field, const std::string& value, const std::string& allowed) {
    add(field, "invalid value: \"" + value + "\": must be one of " + allowed, kNotSupported);
  }
  bool empty() const { return errors_.empty(); }
  std::vector<FieldError>& list() { return errors_; }

 private:
  std::vector<FieldError> errors_;
};

// ---- small JSON accessors (the schema pass has checked the types) ----

bool has(const json& o, const char* k) {
  return o.is_object() && o.contains(k) && !o[k].is_null();
}
std::string str(const json& o, const char* k) {
  const json& v = valueAt(o, k);
  return v.is_string() ? v.get<std::string>() : std::string();
}
std::optional<int64_t> integer(const json& o, const char* k) {
  const json& v = valueAt(o, k);
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}
const json& arr(const json& o, const char* k) {
  static const json kEmpty = json::array();
  const json& v = valueAt(o, k);
  return v.is_array() ? v : kEmpty;
}
const json& objOrEmpty(const json& o, const char* k) {
  static const json kEmpty = json::object();
  const json& v = valueAt(o, k);
  return v.is_object() ? v : kEmpty;
}
std::string idx(const std::string& path, const char* field, size_t i) {
  return path + "." + field + "[" + std::to_string(i) + "]";
}
std::string key(const std::string& path, const std::string& k) {
  return path + "[" + k + "]";
}

// Fields of `o` not in `allowed` are reported as disallowed ("must not set").
void checkAllowedFields(const json& o, const std::string& path, std::initializer_list<const char*> allowed,
                        Errors& errs) {
  if (!o.is_object()) return;
  for (auto it = o.begin(); it != o.end(); ++it) {
    if (it.value().is_null()) continue;
    bool ok = false;
    for (const char* a : allowed) ok = ok || it.key() == a;
    if (!ok) errs.disallowed(path + "." + it.key());
  }
}

// ---- metadata ----

void validateObjectName(const json& meta, const std::string& path, Errors& errs) {
  std::string name = str(meta, "name"), generate = str(meta, "generateName");
  if (!generate.empty() && !isDns1035Prefix(generate)) {
    errs.add(path + ".generateName", "not a DNS 1035 label prefix: \"" + generate +
                                         "\": lower-case letters, digits and '-', starting with a letter");
  }
  if (!name.empty() && !isDns1035Label(name)) {
    errs.add(path + ".name",
             "not a DNS 1035 label: \"" + name +
                 "\": 1-63 lower-case letters, digits and '-', starting with a letter and ending "
                 "with a letter or digit");
  }
  if (name.empty() && generate.empty()) errs.missing(path + ".name", "name or generateName is required");
}

bool hasPrefix(const std::string& s, const std::string& p) {
  return s.rfind(p, 0) == 0;
}

bool isLabelValue(const std::string& v) {
  if (v.empty()) return true;
  if (v.size() > 63) return false;
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (!alnum(v.front()) || !alnum(v.back())) return false;
  for (char c : v) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

// The Kubernetes API server's ObjectMeta checks that also apply to Knative
// objects: namespace syntax, label keys/values, annotation keys and size.
void validateLabelsAndAnnotations(const json& meta, const std::string& path, Errors& errs) {
  std::string ns = str(meta, "namespace");
  if (!ns.empty() && !isDns1123Label(ns)) {
    errs.add(path + ".namespace", "invalid value: \"" + ns + "\": a namespace must be a DNS-1123 label");
  }
  const json& labels = objOrEmpty(meta, "labels");
  for (auto it = labels.begin(); it != labels.end(); ++it) {
    if (!isQualifiedName(it.key())) {
      errs.add(key(path + ".labels", it.key()),
               "invalid label key: must be a qualified name ([prefix/]name, name of up to 63 characters "
               "[A-Za-z0-9-_.] starting and ending alphanumeric)");
    }
    std::string v = it.value().is_string() ? it.value().get<std::string>() : "";
    if (!isLabelValue(v)) {
      errs.add(key(path + ".labels", it.key()),
               "invalid label value \"" + v +
                   "\": at most 63 characters [A-Za-z0-9-_.], starting and ending alphanumeric");
    }
  }
  const json& annotations = objOrEmpty(meta, "annotations");
  size_t total = 0;
  for (auto it = annotations.begin(); it != annotations.end(); ++it) {
    std::string lower = it.key();
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!isQualifiedName(lower)) {
      errs.add(key(path + ".annotations", it.key()), "invalid annotation key: must be a qualified name");
    }
    total += it.key().size() + (it.value().is_string() ? it.value().get<std::string>().size() : 0);
  }
  constexpr size_t kMaxAnnotationBytes = 256 * 1024;
  if (total > kMaxAnnotationBytes) {
    errs.add(path + ".annotations", "Too long: must have at most 262144 bytes", "FieldValueTooLong");
  }
}

void validateNoAutoscalingAnnotations(const json& meta, const std::string& path, Errors& errs) {
  for (auto it = objOrEmpty(meta, "annotations").begin(); it != objOrEmpty(meta, "annotations").end(); ++it) {
    if (hasPrefix(it.key(), "autoscaling.knative.dev")) {
      errs.add(key(path + ".annotations", it.key()),
               "autoscaling annotations must be put under `spec.template.metadata.annotations` to work",
               kForbidden);
    }
  }
}

// A Go duration with whole-second precision and >= 0 (rollout-duration, progress-deadline).
void validateSecondDuration(const json& annotations, const std::vector<std::string>& keys,
                            const std::string& path, Errors& errs) {
  for (const auto& k : keys) {
    if (!has(annotations, k.c_str()) || !annotations[k].is_string()) continue;
    std::string v = annotations[k].get<std::string>();
    auto d = parseGoDuration(v);
    std::string short_key = k.substr(k.find('/') + 1);
    if (!d.isOk()) {
      errs.add(key(path, k), short_key + "=" + v + ": " + d.status().message());
    } else if (d->count() < 0) {
      errs.add(key(path, k), short_key + "=" + v + " must be a non-negative duration");
    } else if (d->count() % 1000000000 != 0) {
      errs.add(key(path, k), short_key + "=" + v + " is not at second precision");
    }
    return;  // the first key found wins (kebab-case is listed first)
  }
}

void validateVisibilityLabel(const json& meta, const std::string& path, Errors& errs) {
  const json& labels = objOrEmpty(meta, "labels");
  if (has(labels, labels::kVisibility) && labels[labels::kVisibility] != "cluster-local") {
    errs.notOneOf(key(path + ".labels", labels::kVisibility), show(labels[labels::kVisibility]),
                  "\"cluster-local\"");
  }
}

// Label `label` may only be set when an ownerReference of `owner_kind` with that name exists.
void validateOwnerLabel(const json& meta, const std::string& path, const char* label, const char* owner_kind,
                        Errors& errs) {
  const json& labels = objOrEmpty(meta, "labels");
  if (!has(labels, label)) return;
  std::string value = show(labels[label]);
  for (const auto& ref : arr(meta, "ownerReferences")) {
    if (str(ref, "kind") == owner_kind && str(ref, "name") == value) return;
  }
  errs.add(key(path + ".labels", label),
           std::string("label needs a matching metadata.ownerReferences entry of kind ") + owner_kind +
               " named \"" + value + "\"",
           kInvalid);
}

// ---- autoscaling annotations (§3.6) ----

std::optional<double> parseFloat(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == nullptr || *end != '\0' || std::isnan(v) || std::isinf(v)) return std::nullopt;
  return v;
}

std::optional<int64_t> parseInt(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == nullptr || *end != '\0' || errno == ERANGE) return std::nullopt;
  return v;
}

void validateAutoscalingAnnotations(const json& annotations, const std::string& path, const Config& config,
                                    Errors& errs) {
  const AutoscalerConfig& ac = config.autoscaler;
  auto lookup = [&](const char* name) { return autoscalingAnnotation(annotations, name); };
  auto field = [&](const AnnotationValue& a) { return key(path, a.key); };

  std::string klass = ac.pod_autoscaler_class;
  bool class_explicit = false;
  if (auto c = lookup("class")) {
    klass = c->value;
    class_explicit = true;
    if (klass.size() >= 12 && klass.compare(klass.size() - 12, 12, ".knative.dev") == 0 &&
        klass != kKpaClass && klass != kHpaClass) {
      errs.notOneOf(field(*c), klass,
                    quoteList({kKpaClass, kHpaClass}) + " (or a class outside knative.dev)");
    }
  }

  // min-scale / max-scale: int32 >= 0, max >= min unless max is 0, max within max-scale-limit.
  auto intGE0 = [&](const char* name) -> std::pair<std::optional<AnnotationValue>, int64_t> {
    auto a = lookup(name);
    if (!a) return {std::nullopt, 0};
    auto v = parseInt(a->value);
    if (!v || *v > kMaxInt32) {
      errs.add(field(*a), "invalid value: \"" + a->value + "\": must be an integer in [0, 2147483647]");
      return {a, 0};
    }
    if (*v < 0) {
      errs.outOfBounds(field(*a), a->value, "0", std::to_string(kMaxInt32));
      return {a, 0};
    }
    return {a, *v};
  };
  auto [min_a, min_scale] = intGE0("min-scale");
  auto [max_a, max_scale] = intGE0("max-scale");
  if (min_a && max_a && max_scale != 0 && max_scale < min_scale) {
    errs.add(field(*max_a), "max-scale=" + std::to_string(max_scale) +
                                " is less than min-scale=" + std::to_string(min_scale));
  }
  if (max_a && ac.max_scale_limit > 0) {
    if (max_scale > ac.max_scale_limit) {
      errs.outOfBounds(field(*max_a), max_a->value, "1", std::to_string(ac.max_scale_limit));
    } else if (max_scale == 0) {
      errs.add(field(*max_a),
               "max-scale=0 (unlimited), must be less than " + std::to_string(ac.max_scale_limit));
    }
  }

  // Float settings with their bounds (the settings model's table).
  for (const NumberRule& rule : numberAnnotationRules()) {
    auto a = lookup(rule.name);
    if (!a) continue;
    auto v = parseFloat(a->value);
    if (!v) {
      errs.add(field(*a), "invalid value: \"" + a->value + "\": must be a number");
      continue;
    }
    if (rule.allow_minus_one && *v == -1) continue;
    if (*v < rule.lo || *v > rule.hi) {
      errs.add(field(*a), "expected " + fmtNumber(rule.lo) + " <= " + a->value +
                              " <= " + (std::isinf(rule.hi) ? "+Inf" : fmtNumber(rule.hi)) +
                              (rule.allow_minus_one ? " (or -1 for unlimited)" : ""));
    }
  }

  // Durations (the settings model's table).
  for (const DurationRule& rule : durationAnnotationRules()) {
    auto a = lookup(rule.name);
    if (!a) continue;
    auto d = parseGoDuration(a->value);
    if (!d.isOk()) {
      errs.add(field(*a), "invalid value: \"" + a->value + "\": " + d.status().message());
    } else if (*d < rule.lo || *d > rule.hi) {
      errs.outOfBounds(field(*a), a->value, formatGoDuration(rule.lo), formatGoDuration(rule.hi));
    } else if (rule.whole_seconds && d->count() % 1000000000 != 0) {
      errs.add(field(*a),
               "invalid value: \"" + a->value + "\": must be specified with at most second precision");
    }
  }

  // metric: KPA concurrency|rps; HPA any non-empty; other classes unchecked.
  if (auto m = lookup("metric")) {
    if (klass == kKpaClass && m->value != "concurrency" && m->value != "rps") {
      errs.notOneOf(field(*m), m->value, quoteList({"concurrency", "rps"}) + " for the KPA class");
    } else if (klass == kHpaClass && m->value.empty()) {
      errs.add(field(*m),
               "invalid value: \"\": the HPA class needs a metric (cpu, memory or a custom metric)");
    }
  }

  if (auto alg = lookup("metric-aggregation-algorithm"); alg && class_explicit && klass == kKpaClass) {
    if (alg->value != "linear" && alg->value != "weighted-exponential" &&
        alg->value != "weightedExponential") {
      errs.notOneOf(field(*alg), alg->value,
                    quoteList({"linear", "weighted-exponential", "weightedExponential"}));
    }
  }

  if (auto init = lookup("initial-scale")) {
    auto v = parseInt(init->value);
    if (!v || *v < 0 || *v > kMaxInt32 || (*v == 0 && !ac.allow_zero_initial_scale)) {
      errs.add(field(*init),
               "invalid value: \"" + init->value + "\": must be an integer >= " +
                   (ac.allow_zero_initial_scale ? "0" : "1 (0 needs allow-zero-initial-scale: true)"));
    }
  }

  if (auto act = lookup("activation-scale")) {
    auto v = parseInt(act->value);
    if (!v) {
      errs.add(field(*act), "invalid value: \"" + act->value + "\": must be an integer >= 2");
    } else if (*v < 2 || *v > kMaxInt32) {
      errs.outOfBounds(field(*act), act->value, "2", std::to_string(kMaxInt32));
    } else {
      if (min_a && min_scale > *v) {
        errs.add(field(*act),
                 "activation-scale=" + act->value + " must be >= min-scale=" + std::to_string(min_scale));
      }
      if (max_a && max_scale != 0 && *v > max_scale) {
        errs.add(field(*act),
                 "activation-scale=" + act->value + " must be <= max-scale=" + std::to_string(max_scale));
      }
    }
  }
}

void validateTemplateAnnotations(const json& meta, const std::string& path, const Config& config,
                                 Errors& errs) {
  const json& annotations = objOrEmpty(meta, "annotations");
  std::string ann_path = path + ".annotations";
  validateAutoscalingAnnotations(annotations, ann_path, config, errs);

  static const std::set<std::string> kNetworking = {"networking.knative.dev/ingress.class",
                                                    "networking.knative.dev/ingress-class",
                                                    "networking.knative.dev/certificate.class",
                                                    "networking.knative.dev/certificate-class",
                                                    "networking.knative.dev/disableAutoTLS",
                                                    "networking.knative.dev/disable-auto-tls",
                                                    "networking.knative.dev/disable-external-domain-tls",
                                                    "networking.knative.dev/httpOption",
                                                    "networking.knative.dev/http-protocol"};
  static const std::set<std::string> kQueueResources = {
      "queue.sidecar.serving.knative.dev/cpu-resource-request",
      "queue.sidecar.serving.knative.dev/cpu-resource-limit",
      "queue.sidecar.serving.knative.dev/memory-resource-request",
      "queue.sidecar.serving.knative.dev/memory-resource-limit",
      "queue.sidecar.serving.knative.dev/ephemeral-storage-resource-request",
      "queue.sidecar.serving.knative.dev/ephemeral-storage-resource-limit"};
  for (auto it = annotations.begin(); it != annotations.end(); ++it) {
    const std::string& k = it.key();
    std::string v = it.value().is_string() ? it.value().get<std::string>() : "";
    if (hasPrefix(k, "networking.knative.dev/") && !kNetworking.count(k)) {
      errs.add(key(ann_path, k),
               "invalid key name \"" + k +
                   "\": networking.knative.dev annotations must be one of "
                   "ingress.class, ingress-class, certificate.class, certificate-class, "
                   "disableAutoTLS, disable-auto-tls, disable-external-domain-tls, httpOption, "
                   "http-protocol",
               kNotSupported);
    }
    if (kQueueResources.count(k) && !parseQuantity(v).isOk()) {
      errs.add(key(ann_path, k),
               "invalid value: \"" + v + "\": must be a Kubernetes quantity such as 100m or 128Mi");
    }
    // knap's warm pool (runtime/runner, issue 5): the rules of api/revision_settings.h.
    if (k == kWarmPoolAnnotation) {
      if (auto size = parseWarmPoolSize(v); !size.isOk()) {
        errs.add(key(ann_path, k), "invalid value: \"" + v + "\": " + size.status().message());
      }
    }
    if (k == kWarmPoolModeAnnotation) {
      if (auto mode = parseWarmPoolMode(v); !mode.isOk()) {
        errs.add(key(ann_path, k), "invalid value: \"" + v + "\": " + mode.status().message());
      }
    }
    if (k == "queue.sidecar.serving.knative.dev/resource-percentage") {
      auto f = parseFloat(v);
      if (!f || *f < 0.1 || *f > 100) errs.outOfBounds(key(ann_path, k), v, "0.1", "100");
    }
  }
  validateSecondDuration(annotations, {annotations::kProgressDeadline}, ann_path, errs);
}

// ---- PodSpec / containers (§3.4, §3.5) ----

struct PodContext {
  const Config& config;
  const Features& feats;
  std::set<std::string> volumes;           // declared volume names
  std::set<std::string> writable_volumes;  // emptyDir / persistentVolumeClaim
};

void validateNonNegative(const json& o, const std::string& path, std::initializer_list<const char*> fields,
                         Errors& errs) {
  for (const char* f : fields) {
    if (auto v = integer(o, f); v && *v < 0)
      errs.outOfBounds(path + "." + f, std::to_string(*v), "0", std::to_string(kMaxInt32));
  }
}

// Probe shape; `port_name` is the serving port's name (for named probe ports).
void validateProbe(const json& probe, const std::string& path, const std::string& port_name, Errors& errs) {
  if (!probe.is_object()) return;
  std::vector<std::string> handlers;
  for (const char* h : {"httpGet", "tcpSocket", "exec", "grpc"}) {
    if (has(probe, h)) handlers.push_back(h);
  }
  if (handlers.empty()) {
    errs.add(path, "expected exactly one, got neither: one of httpGet, tcpSocket, exec, grpc", kRequired);
  } else if (handlers.size() > 1) {
    std::string both;
    for (const auto& h : handlers) both += (both.empty() ? "" : ", ") + path + "." + h;
    errs.add(path, "expected exactly one, got both: " + both);
  }
  for (const char* h : {"httpGet", "tcpSocket"}) {
    const json& action = valueAt(probe, h);
    if (!action.is_object()) continue;
    const json& port = valueAt(action, "port");
    if (port.is_string() && port.get<std::string>() != port_name) {
      errs.add(path + "." + h + ".port",
               "invalid value: \"" + port.get<std::string>() +
                   "\": a named probe port must match the container port's name (\"" + port_name + "\")");
    }
    if (port.is_number_integer() && (port.get<int64_t>() < 0 || port.get<int64_t>() > 65535)) {
      errs.outOfBounds(path + "." + h + ".port", port.dump(), "0", "65535");
    }
  }
  if (const json& http = valueAt(probe, "httpGet"); http.is_object()) {
    std::string scheme = str(http, "scheme");
    if (!scheme.empty() && scheme != "HTTP" && scheme != "HTTPS") {
      errs.notOneOf(path + ".httpGet.scheme", scheme, quoteList({"HTTP", "HTTPS"}));
    }
    for (size_t i = 0; i < arr(http, "httpHeaders").size(); ++i) {
      if (str(arr(http, "httpHeaders")[i], "name").empty())
        errs.missing(idx(path + ".httpGet", "httpHeaders", i) + ".name");
    }
  }
  if (const json& exec = valueAt(probe, "exec"); exec.is_object() && arr(exec, "command").empty()) {
    errs.missing(path + ".exec.command");
  }
  validateNonNegative(probe, path,
                      {"initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold",
                       "failureThreshold", "terminationGracePeriodSeconds"},
                      errs);
}

void validateReadinessProbe(const json& probe, const std::string& path, const std::string& port_name,
                            Errors& errs) {
  validateProbe(probe, path, port_name, errs);
  if (!probe.is_object()) return;
  int64_t period = integer(probe, "periodSeconds").value_or(0);
  int64_t success = integer(probe, "successThreshold").value_or(0);
  int64_t failure = integer(probe, "failureThreshold").value_or(0);
  int64_t timeout = integer(probe, "timeoutSeconds").value_or(0);
  if (success < 1)
    errs.outOfBounds(path + ".successThreshold", std::to_string(success), "1", std::to_string(kMaxInt32));
  if (period == 0) {
    // periodSeconds 0 = Knative's aggressive probing; its own retry budget applies.
    if (failure != 0)
      errs.add(path + ".failureThreshold", "failureThreshold is disallowed when periodSeconds is zero",
               kForbidden);
    if (timeout != 0)
      errs.add(path + ".timeoutSeconds", "timeoutSeconds is disallowed when periodSeconds is zero",
               kForbidden);
  } else if (period > 0) {
    if (timeout < 1)
      errs.outOfBounds(path + ".timeoutSeconds", std::to_string(timeout), "1", std::to_string(kMaxInt32));
    if (failure < 1)
      errs.outOfBounds(path + ".failureThreshold", std::to_string(failure), "1", std::to_string(kMaxInt32));
  }
}

void validateSecurityContext(const json& sc, const std::string& path, const PodContext& pod, Errors& errs) {
  if (!sc.is_object()) return;
  for (auto it = sc.begin(); it != sc.end(); ++it) {
    const std::string& f = it.key();
    if (it.value().is_null()) continue;
    if (f == "privileged") {
      if (it.value() == true)
        errs.add(path + ".privileged", "must not set the field(s): only false is allowed", kForbidden);
    } else if (f == "capabilities") {
      checkAllowedFields(it.value(), path + ".capabilities", {"add", "drop"}, errs);
      if (has(it.value(), "add") && !arr(it.value(), "add").empty() &&
          !pod.feats.on("kubernetes.containerspec-addcapabilities")) {
        errs.gated(path + ".capabilities.add", "kubernetes.containerspec-addcapabilities");
      }
    } else if (f == "runAsUser" || f == "runAsGroup") {
      if (auto v = integer(sc, f.c_str()); v && (*v < 0 || *v > kMaxInt32)) {
        errs.outOfBounds(path + "." + f, std::to_string(*v), "0", std::to_string(kMaxInt32));
      }
    } else if (f == "seccompProfile") {
      std::string type = str(it.value(), "type");
      if (type != "RuntimeDefault" && type != "Localhost" && type != "Unconfined") {
        errs.notOneOf(path + ".seccompProfile.type", type,
                      quoteList({"RuntimeDefault", "Localhost", "Unconfined"}));
      } else if ((type == "Localhost") != has(it.value(), "localhostProfile")) {
        errs.add(path + ".seccompProfile.localhostProfile",
                 "must be set if and only if type is \"Localhost\"",
                 type == "Localhost" ? kRequired : kForbidden);
      }
    } else if (f != "readOnlyRootFilesystem" && f != "runAsNonRoot" && f != "allowPrivilegeEscalation") {
      errs.disallowed(path + "." + f);
    }
  }
}

void validatePodSecurityContext(const json& sc, const std::string& path, const PodContext& pod,
                                Errors& errs) {
  if (!sc.is_object()) return;
  static const std::set<std::string> kAllowed = {"runAsUser", "runAsGroup",         "runAsNonRoot",
                                                 "fsGroup",   "supplementalGroups", "seccompProfile"};
  bool enabled = pod.feats.on("kubernetes.podspec-securitycontext");
  for (auto it = sc.begin(); it != sc.end(); ++it) {
    if (it.value().is_null()) continue;
    if (!kAllowed.count(it.key())) {
      errs.disallowed(path + "." + it.key());
    } else if (!enabled) {
      errs.gated(path + "." + it.key(), "kubernetes.podspec-securitycontext");
    }
  }
  if (!enabled) return;
  for (const char* f : {"runAsUser", "runAsGroup", "fsGroup"}) {
    if (auto v = integer(sc, f); v && (*v < 0 || *v > kMaxInt32)) {
      errs.outOfBounds(path + "." + f, std::to_string(*v), "0", std::to_string(kMaxInt32));
    }
  }
  const json& groups = arr(sc, "supplementalGroups");
  for (size_t i = 0; i < groups.size(); ++i) {
    if (groups[i].is_number_integer() &&
        (groups[i].get<int64_t>() < 0 || groups[i].get<int64_t>() > kMaxInt32)) {
      errs.outOfBounds(path + ".supplementalGroups[" + std::to_string(i) + "]", groups[i].dump(), "0",
                       std::to_string(kMaxInt32));
    }
  }
}

void validateResources(const json& res, const std::string& path, Errors& errs) {
  if (!res.is_object()) return;
  checkAllowedFields(res, path, {"limits", "requests"}, errs);
  std::map<std::string, double> limits;
  for (const char* section : {"limits", "requests"}) {
    const json& m = objOrEmpty(res, section);
    for (auto it = m.begin(); it != m.end(); ++it) {
      auto q = parseQuantity(it.value());
      if (!q.isOk()) {
        errs.add(key(path + "." + section, it.key()),
                 "invalid value: " + show(it.value()) + ": " + q.status().message());
      } else if (*q < 0) {
        errs.add(key(path + "." + section, it.key()),
                 "invalid value: " + show(it.value()) + ": must be >= 0");
      } else if (std::string(section) == "limits") {
        limits[it.key()] = *q;
      } else if (limits.count(it.key()) && *q > limits[it.key()]) {
        errs.add(key(path + ".requests", it.key()), "must be less than or equal to " + it.key() +
                                                        " limit of " +
                                                        show(objOrEmpty(res, "limits")[it.key()]));
      }
    }
  }
}

void validateEnv(const json& c, const std::string& path, bool serving, const PodContext& pod, Errors& errs) {
  const json& env = arr(c, "env");
  for (size_t i = 0; i < env.size(); ++i) {
    std::string p = idx(path, "env", i);
    const json& e = env[i];
    std::string name = str(e, "name");
    if (name.empty()) {
      errs.missing(p + ".name");
    } else if (name == "K_SERVICE" || name == "K_CONFIGURATION" || name == "K_REVISION" ||
               (serving && name == "PORT")) {
      errs.add(p + ".name",
               "\"" + name +
                   "\" is a reserved environment variable (PORT, K_SERVICE, K_CONFIGURATION "
                   "and K_REVISION are set by the platform)",
               kForbidden);
    }
    const json& from = valueAt(e, "valueFrom");
    if (!from.is_object()) continue;
    if (has(e, "value") && !str(e, "value").empty()) {
      errs.add(p + ".valueFrom", "may not be specified when `value` is not empty", kForbidden);
    }
    std::vector<std::string> sources;
    for (auto it = from.begin(); it != from.end(); ++it) {
      if (it.value().is_null()) continue;
      sources.push_back(it.key());
      if (it.key() == "fieldRef" || it.key() == "resourceFieldRef") {
        if (!pod.feats.on("kubernetes.podspec-fieldref"))
          errs.gated(p + ".valueFrom." + it.key(), "kubernetes.podspec-fieldref");
      } else if (it.key() == "configMapKeyRef" || it.key() == "secretKeyRef") {
        if (str(it.value(), "key").empty()) errs.missing(p + ".valueFrom." + it.key() + ".key");
      }
    }
    if (sources.empty())
      errs.add(p + ".valueFrom", "expected exactly one, got neither: one of configMapKeyRef, secretKeyRef",
               kRequired);
    if (sources.size() > 1)
      errs.add(p + ".valueFrom", "expected exactly one, got both: only one source may be set");
  }
  const json& env_from = arr(c, "envFrom");
  for (size_t i = 0; i < env_from.size(); ++i) {
    std::string p = idx(path, "envFrom", i);
    bool cm = has(env_from[i], "configMapRef"), sec = has(env_from[i], "secretRef");
    if (cm && sec) errs.add(p, "expected exactly one, got both: configMapRef, secretRef");
    if (!cm && !sec) errs.add(p, "expected exactly one, got neither: configMapRef, secretRef", kRequired);
  }
}

void validatePort(const json& port, const std::string& path, Errors& errs) {
  checkAllowedFields(port, path, {"containerPort", "name", "protocol"}, errs);
  std::string protocol = str(port, "protocol");
  if (!protocol.empty() && protocol != "TCP")
    errs.notOneOf(path + ".protocol", protocol, quoteList({"", "TCP"}));
  if (auto n = integer(port, "containerPort")) {
    static const std::set<int64_t> kReserved = {8012, 8013, 8022, 9090, 9091, 8008};
    if (*n < 0 || *n > 65535) {
      errs.outOfBounds(path + ".containerPort", std::to_string(*n), "0", "65535");
    } else if (kReserved.count(*n)) {
      errs.add(path + ".containerPort", "invalid value: " + std::to_string(*n) +
                                            ": the ports 8008, 8012, 8013, 8022, 9090 and 9091 are reserved");
    }
  }
  std::string name = str(port, "name");
  if (name != "" && name != "http1" && name != "h2c") {
    errs.add(path + ".name", "Port name " + name + " is not allowed: must be one of \"\", \"http1\", \"h2c\"",
             kNotSupported);
  }
}

void validateVolumeMounts(const json& c, const std::string& path, const PodContext& pod, Errors& errs) {
  const json& mounts = arr(c, "volumeMounts");
  std::set<std::string> seen_paths;
  for (size_t i = 0; i < mounts.size(); ++i) {
    std::string p = idx(path, "volumeMounts", i);
    const json& m = mounts[i];
    std::string name = str(m, "name");
    if (!pod.volumes.count(name))
      errs.add(p + ".name", "volumeMount has no matching volume \"" + name + "\"");
    std::string mount_path = str(m, "mountPath");
    std::string clean = mount_path;
    while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
    static const std::set<std::string> kReservedPaths = {"/", "/dev", "/dev/log", "/tmp", "/var", "/var/log"};
    if (mount_path.empty()) {
      errs.missing(p + ".mountPath");
    } else if (kReservedPaths.count(clean)) {
      errs.add(p + ".mountPath",
               "mountPath \"" + clean + "\" is a reserved path (/, /dev, /dev/log, /tmp, /var, /var/log)");
    } else if (mount_path[0] != '/') {
      errs.add(p + ".mountPath", "invalid value: \"" + mount_path + "\": must be an absolute path");
    } else if (seen_paths.count(clean)) {
      errs.add(p + ".mountPath", "\"" + mount_path + "\" must be unique", kDuplicate);
    }
    seen_paths.insert(clean);
    if (pod.volumes.count(name) && !pod.writable_volumes.count(name) && valueAt(m, "readOnly") != true) {
      errs.add(p + ".readOnly",
               "missing field(s): mounts of secret, configMap and projected volumes must be readOnly: true",
               kRequired);
    }
    if (has(m, "mountPropagation")) {
      if (!pod.feats.on("kubernetes.podspec-volumes-mount-propagation")) {
        errs.gated(p + ".mountPropagation", "kubernetes.podspec-volumes-mount-propagation");
      } else if (str(m, "mountPropagation") != "None" && str(m, "mountPropagation") != "HostToContainer") {
        errs.notOneOf(p + ".mountPropagation", str(m, "mountPropagation"),
                      quoteList({"None", "HostToContainer"}));
      }
    }
    if (std::string sub = str(m, "subPath"); !sub.empty()) {
      // Kubernetes' validateLocalDescendingPath.
      bool back = false;
      for (size_t start = 0; start <= sub.size();) {
        size_t slash = sub.find('/', start);
        if (sub.substr(start, slash == std::string::npos ? std::string::npos : slash - start) == "..")
          back = true;
        if (slash == std::string::npos) break;
        start = slash + 1;
      }
      if (sub[0] == '/') {
        errs.add(p + ".subPath", "invalid value: \"" + sub + "\": must be a relative path");
      } else if (back) {
        errs.add(p + ".subPath", "invalid value: \"" + sub + "\": must not contain '..'");
      }
    }
    checkAllowedFields(m, p, {"name", "readOnly", "mountPath", "subPath", "mountPropagation"}, errs);
  }
}

// kind: "serving" (declares the port, or the only container), "sidecar", "init".
void validateContainer(const json& c, const std::string& path, const std::string& kind, const PodContext& pod,
                       Errors& errs) {
  if (!c.is_object() || c.empty()) {
    errs.missing(path);
    return;
  }
  checkAllowedFields(
      c, path,
      {"name", "args", "command", "env", "envFrom", "workingDir", "image", "imagePullPolicy", "livenessProbe",
       "readinessProbe", "startupProbe", "ports", "resources", "securityContext", "terminationMessagePath",
       "terminationMessagePolicy", "volumeMounts"},
      errs);
  std::string name = str(c, "name");
  if (name == "queue-proxy") {
    errs.add(path + ".name", "\"queue-proxy\" is a reserved container name", kForbidden);
  } else if (!name.empty() && !isDns1123Label(name)) {
    errs.add(path + ".name", "invalid value: \"" + name +
                                 "\": must be a DNS-1123 label (lower-case letters, digits and '-')");
  }
  std::string image = str(c, "image");
  std::string why;
  if (image.empty()) {
    errs.missing(path + ".image");
  } else if (!isValidImageReference(image, &why)) {
    errs.add(path + ".image", "Failed to parse image reference \"" + image + "\": " + why);
  }
  std::string pull = str(c, "imagePullPolicy");
  if (!pull.empty() && pull != "Always" && pull != "IfNotPresent" && pull != "Never") {
    errs.notOneOf(path + ".imagePullPolicy", pull, quoteList({"Always", "IfNotPresent", "Never"}));
  }
  std::string tmp = str(c, "terminationMessagePolicy");
  if (!tmp.empty() && tmp != "File" && tmp != "FallbackToLogsOnError") {
    errs.notOneOf(path + ".terminationMessagePolicy", tmp, quoteList({"", "File", "FallbackToLogsOnError"}));
  }
  validateEnv(c, path, kind == "serving", pod, errs);
  const json& ports = arr(c, "ports");
  if (ports.size() > 1) {
    errs.add(path + ".ports",
             "more than one container port is set: only a single port is allowed across all containers");
  }
  if (!ports.empty()) validatePort(ports[0], path + ".ports[0]", errs);
  validateResources(valueAt(c, "resources"), path + ".resources", errs);
  validateSecurityContext(valueAt(c, "securityContext"), path + ".securityContext", pod, errs);
  validateVolumeMounts(c, path, pod, errs);

  std::string port_name = ports.empty() ? "" : str(ports[0], "name");
  if (kind == "serving") {
    validateReadinessProbe(valueAt(c, "readinessProbe"), path + ".readinessProbe", port_name, errs);
    validateProbe(valueAt(c, "livenessProbe"), path + ".livenessProbe", port_name, errs);
    validateProbe(valueAt(c, "startupProbe"), path + ".startupProbe", port_name, errs);
  } else {
    bool probes_ok = kind == "sidecar" && pod.feats.on("multi-container-probing");
    for (const char* probe : {"readinessProbe", "livenessProbe", "startupProbe"}) {
      if (!has(c, probe)) continue;
      if (probes_ok) {
        validateProbe(valueAt(c, probe), path + "." + probe, port_name, errs);
      } else if (kind == "init") {
        errs.disallowed(path + "." + probe, "init containers cannot have probes");
      } else {
        errs.gated(path + "." + probe, "multi-container-probing");
      }
    }
  }
}

void validateKeyToPaths(const json& items, const std::string& path, Errors& errs) {
  if (!items.is_array()) return;
  for (size_t i = 0; i < items.size(); ++i) {
    std::string p = path + ".items[" + std::to_string(i) + "]";
    if (str(items[i], "key").empty()) errs.missing(p + ".key");
    if (str(items[i], "path").empty()) errs.missing(p + ".path");
  }
}

void validateVolume(const json& v, const std::string& path, const PodContext& pod, Errors& errs) {
  std::string name = str(v, "name");
  if (name.empty()) {
    errs.missing(path + ".name");
  } else if (!isDns1123Label(name)) {
    errs.add(path + ".name", "invalid value: \"" + name + "\": must be a DNS-1123 label");
  }
  static const std::map<std::string, std::string> kGated = {
      {"emptyDir", "kubernetes.podspec-emptydir"},
      {"hostPath", "kubernetes.podspec-hostpath"},
      {"persistentVolumeClaim", "kubernetes.podspec-persistent-volume-claim"},
      {"csi", "kubernetes.podspec-volumes-csi"},
      {"ephemeral", "kubernetes.podspec-volumes-ephemeral"},
      {"image", "kubernetes.podspec-volumes-image"},
  };
  if (!v.is_object()) return;  // the schema pass reports the type
  std::vector<std::string> sources;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() == "name" || it.value().is_null()) continue;
    sources.push_back(it.key());
    const std::string& src = it.key();
    std::string p = path + "." + src;
    if (src == "secret") {
      validateKeyToPaths(valueAt(it.value(), "items"), p, errs);
    } else if (src == "configMap") {
      validateKeyToPaths(valueAt(it.value(), "items"), p, errs);
    } else if (src == "projected") {
      const json& proj = arr(it.value(), "sources");
      for (size_t i = 0; i < proj.size(); ++i) {
        std::string pp = p + ".sources[" + std::to_string(i) + "]";
        std::vector<std::string> kinds;
        if (!proj[i].is_object()) continue;
        for (auto s = proj[i].begin(); s != proj[i].end(); ++s) {
          if (s.value().is_null()) continue;
          kinds.push_back(s.key());
          if (s.key() == "secret" || s.key() == "configMap") {
            if (str(s.value(), "name").empty()) errs.missing(pp + "." + s.key() + ".name");
            validateKeyToPaths(valueAt(s.value(), "items"), pp + "." + s.key(), errs);
          } else if (s.key() == "serviceAccountToken") {
            if (str(s.value(), "path").empty()) errs.missing(pp + ".serviceAccountToken.path");
            if (const json& exp = valueAt(s.value(), "expirationSeconds"); exp.is_number_integer()) {
              int64_t e = exp.get<int64_t>();
              if (e < 600) {
                errs.add(pp + ".serviceAccountToken.expirationSeconds",
                         "invalid value: " + std::to_string(e) +
                             ": may not specify a duration less than 10 minutes");
              } else if (e > (int64_t{1} << 32)) {
                errs.add(pp + ".serviceAccountToken.expirationSeconds",
                         "invalid value: " + std::to_string(e) +
                             ": may not specify a duration larger than 2^32 seconds");
              }
            }
          } else if (s.key() != "downwardAPI") {
            errs.disallowed(pp + "." + s.key());
          }
        }
        if (kinds.empty()) {
          errs.add(pp,
                   "expected exactly one, got neither: secret, configMap, serviceAccountToken, downwardAPI",
                   kRequired);
        } else if (kinds.size() > 1) {
          errs.add(pp, "expected exactly one, got both: only one projection source per entry");
        }
      }
    } else if (auto g = kGated.find(src); g != kGated.end()) {
      if (!pod.feats.on(g->second)) {
        errs.gated(p, g->second);
      } else if (src == "emptyDir") {
        std::string medium = str(it.value(), "medium");
        if (!medium.empty() && medium != "Memory")
          errs.notOneOf(p + ".medium", medium, quoteList({"", "Memory"}));
        if (has(it.value(), "sizeLimit")) {
          auto q = parseQuantity(it.value()["sizeLimit"]);
          if (!q.isOk() || *q < 0)
            errs.add(p + ".sizeLimit",
                     "invalid value: " + show(it.value()["sizeLimit"]) + ": must be a quantity >= 0");
        }
      }
    } else {
      errs.disallowed(p);
    }
  }
  if (sources.empty()) {
    errs.add(path, "expected exactly one, got neither: secret, configMap, projected, emptyDir", kRequired);
  } else if (sources.size() > 1) {
    std::string all;
    for (const auto& s : sources) all += (all.empty() ? "" : ", ") + s;
    errs.add(path, "expected exactly one, got both: " + all);
  }
}

void validatePodSpec(const json& spec, const std::string& path, const Config& config, Errors& errs) {
  const Features& feats = features(config);
  PodContext pod{config, feats, {}, {}};

  static const std::map<std::string, std::string> kGatedFields = {
      {"affinity", "kubernetes.podspec-affinity"},
      {"topologySpreadConstraints", "kubernetes.podspec-topologyspreadconstraints"},
      {"hostAliases", "kubernetes.podspec-hostaliases"},
      {"nodeSelector", "kubernetes.podspec-nodeselector"},
      {"runtimeClassName", "kubernetes.podspec-runtimeclassname"},
      {"tolerations", "kubernetes.podspec-tolerations"},
      {"shareProcessNamespace", "kubernetes.podspec-shareprocessnamespace"},
      {"priorityClassName", "kubernetes.podspec-priorityclassname"},
      {"schedulerName", "kubernetes.podspec-schedulername"},
      {"initContainers", "kubernetes.podspec-init-containers"},
      {"dnsPolicy", "kubernetes.podspec-dnspolicy"},
      {"dnsConfig", "kubernetes.podspec-dnsconfig"},
      {"hostIPC", "kubernetes.podspec-hostipc"},
      {"hostPID", "kubernetes.podspec-hostpid"},
      {"hostNetwork", "kubernetes.podspec-hostnetwork"},
  };
  static const std::set<std::string> kAllowed = {
      "containerConcurrency",         "timeoutSeconds",   "responseStartTimeoutSeconds",
      "idleTimeoutSeconds",           "containers",       "volumes",
      "serviceAccountName",           "imagePullSecrets", "enableServiceLinks",
      "automountServiceAccountToken", "securityContext"};
  for (auto it = spec.begin(); it != spec.end(); ++it) {
    if (it.value().is_null()) continue;
    const std::string& f = it.key();
    if (kAllowed.count(f)) continue;
    if (auto g = kGatedFields.find(f); g != kGatedFields.end()) {
      if (!feats.on(g->second)) errs.gated(path + "." + f, g->second);
    } else {
      errs.disallowed(path + "." + f);
    }
  }
  if (has(spec, "automountServiceAccountToken") && spec["automountServiceAccountToken"] != false) {
    errs.add(path + ".automountServiceAccountToken", "must not set the field(s): only false is allowed",
             kForbidden);
  }
  std::string sa = str(spec, "serviceAccountName");
  if (!sa.empty() && !isDns1123Subdomain(sa)) {
    // Knative's webhook text (TestServiceAccountValidation looks for it):
    // "<value>: <field>" and then Kubernetes' IsDNS1123Subdomain explanation.
    const std::string field = path + ".serviceAccountName";
    errs.add(
        field,
        "invalid value: " + sa + ": " + field +
            "\na lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
            "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
            "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
  }
  const json& pull_secrets = arr(spec, "imagePullSecrets");
  for (size_t i = 0; i < pull_secrets.size(); ++i) {
    if (str(pull_secrets[i], "name").empty()) errs.missing(idx(path, "imagePullSecrets", i) + ".name");
  }
  validatePodSecurityContext(valueAt(spec, "securityContext"), path + ".securityContext", pod, errs);

  // Volumes: names unique, each mounted by some container, exactly one allowed source.
  const json& volumes = arr(spec, "volumes");
  const json& containers = arr(spec, "containers");
  std::set<std::string> mounted;
  for (const char* list : {"containers", "initContainers"}) {
    for (const auto& c : arr(spec, list)) {
      for (const auto& m : arr(c, "volumeMounts")) mounted.insert(str(m, "name"));
    }
  }
  for (size_t i = 0; i < volumes.size(); ++i) {
    std::string p = idx(path, "volumes", i);
    std::string name = str(volumes[i], "name");
    validateVolume(volumes[i], p, pod, errs);
    if (name.empty()) continue;
    if (pod.volumes.count(name)) errs.add(p + ".name", "duplicate volume name \"" + name + "\"", kDuplicate);
    pod.volumes.insert(name);
    if (has(volumes[i], "emptyDir") || has(volumes[i], "persistentVolumeClaim"))
      pod.writable_volumes.insert(name);
    if (!mounted.count(name)) errs.add(p + ".name", "volume with name \"" + name + "\" not mounted");
  }

  // Containers.
  for (const char* list : {"containers", "initContainers"}) {
    if (size_t n = arr(spec, list).size(); n > kMaxContainers) {
      errs.add(path + "." + list,
               "Too many: " + std::to_string(n) + ": must have at most " + std::to_string(kMaxContainers) +
                   " items",
               kTooMany);
      return;  // not each of thousands of containers
    }
  }
  if (containers.empty()) {
    errs.missing(path + ".containers");
  } else if (containers.size() > 1) {
    if (!feats.on("multi-container")) {
      errs.add(path + ".containers",
               "multi-container is off, but found " + std::to_string(containers.size()) + " containers",
               kForbidden);
    }
    size_t port_count = 0;
    for (const auto& c : containers) port_count += arr(c, "ports").size();
    if (port_count == 0) {
      errs.missing(path + ".containers.ports", "exactly one container must declare a port");
    } else if (port_count > 1) {
      errs.add(path + ".containers[*].ports",
               "more than one container port is set: only a single port is allowed across all containers");
    }
  }
  std::set<std::string> names;
  auto checkName = [&](const std::string& name, const std::string& p) {
    if (name.empty()) return;
    if (names.count(name)) errs.add(p + ".name", "duplicate container name \"" + name + "\"", kDuplicate);
    names.insert(name);
  };
  // An unnamed sidecar runs (and logs) as "container-<index>" (the pod
  // driver's name for it), so that name must not be taken by another one.
  for (size_t i = 0; i < containers.size(); ++i) {
    std::string name = str(containers[i], "name");
    bool serving = containers.size() == 1 || !arr(containers[i], "ports").empty();
    if (name.empty() && !serving) checkName("container-" + std::to_string(i), idx(path, "containers", i));
  }
  for (size_t i = 0; i < containers.size(); ++i) {
    std::string p = idx(path, "containers", i);
    bool serving = containers.size() == 1 || !arr(containers[i], "ports").empty();
    validateContainer(containers[i], p, serving ? "serving" : "sidecar", pod, errs);
    checkName(str(containers[i], "name"), p);
  }
  if (feats.on("kubernetes.podspec-init-containers")) {
    const json& inits = arr(spec, "initContainers");
    for (size_t i = 0; i < inits.size(); ++i) {
      std::string p = idx(path, "initContainers", i);
      validateContainer(inits[i], p, "init", pod, errs);
      checkName(str(inits[i], "name"), p);
    }
  }
}

void validateRevisionSpec(const json& spec, const std::string& path, const Config& config, Errors& errs) {
  if (!spec.is_object()) {
    errs.missing(path);
    return;
  }
  const DefaultsConfig& d = config.defaults;
  if (auto cc = integer(spec, "containerConcurrency")) {
    int64_t lo = d.allow_container_concurrency_zero ? 0 : 1;
    if (*cc < lo || *cc > d.container_concurrency_max_limit) {
      errs.outOfBounds(path + ".containerConcurrency", std::to_string(*cc), std::to_string(lo),
                       std::to_string(d.container_concurrency_max_limit));
    }
  }
  for (const char* f : {"timeoutSeconds", "responseStartTimeoutSeconds", "idleTimeoutSeconds"}) {
    if (auto t = integer(spec, f); t && (*t < 0 || *t > d.max_revision_timeout_seconds)) {
      errs.outOfBounds(path + "." + f, std::to_string(*t), "0",
                       std::to_string(d.max_revision_timeout_seconds));
    }
  }
  auto timeout = integer(spec, "timeoutSeconds");
  for (const char* f : {"responseStartTimeoutSeconds", "idleTimeoutSeconds"}) {
    auto t = integer(spec, f);
    if (t && timeout && *timeout > 0 && *t > *timeout && *t <= d.max_revision_timeout_seconds) {
      errs.add(path + "." + f, "expected 0 <= " + std::to_string(*t) + " <= " + std::to_string(*timeout) +
                                   " (must not exceed timeoutSeconds)");
    }
  }
  validatePodSpec(spec, path, config, errs);
}

// parent_meta: the Service/Configuration metadata (for the BYO revision name rules).
void validateTemplate(const json& tmpl, const std::string& path, const json& parent_meta,
                      const Config& config, Errors& errs) {
  if (!tmpl.is_object()) {
    errs.missing(path);
    return;
  }
  const json& meta = objOrEmpty(tmpl, "metadata");
  validateLabelsAndAnnotations(meta, path + ".metadata", errs);
  std::string name = str(meta, "name"), generate = str(meta, "generateName");
  if (!generate.empty() && !isDns1035Prefix(generate)) {
    errs.add(path + ".metadata.generateName", "not a DNS 1035 label prefix: \"" + generate + "\"");
  }
  if (!name.empty()) {
    std::string parent = str(parent_meta, "name");
    if (!isDns1035Label(name)) {
      errs.add(path + ".metadata.name", "not a DNS 1035 label: \"" + name + "\"");
    } else if (parent.empty() && !str(parent_meta, "generateName").empty()) {
      errs.add(path + ".metadata.name",
               "must not set the field(s): a revision name cannot be chosen when the parent "
               "uses generateName",
               kForbidden);
    } else if (!hasPrefix(name, parent + "-")) {
      errs.add(path + ".metadata.name", "\"" + name + "\" must have prefix \"" + parent + "-\"");
    }
  }
  validateTemplateAnnotations(meta, path + ".metadata", config, errs);
  if (!has(tmpl, "spec")) {
    errs.missing(path + ".spec");
    return;
  }
  validateRevisionSpec(tmpl["spec"], path + ".spec", config, errs);
}

// ---- traffic (§3.2) ----

void validateTraffic(const json& traffic, const std::string& path, bool service_context, bool in_status,
                     Errors& errs) {
  if (!traffic.is_array()) return;
  std::map<std::string, size_t> tags;
  int64_t sum = 0;
  for (size_t i = 0; i < traffic.size(); ++i) {
    const json& t = traffic[i];
    std::string p = path + "[" + std::to_string(i) + "]";
    std::string rev = str(t, "revisionName"), cfg = str(t, "configurationName"), tag = str(t, "tag");
    if (!in_status && has(t, "latestRevision") && t["latestRevision"].is_boolean()) {
      bool latest = t["latestRevision"].get<bool>();
      if (latest == !rev.empty()) {
        errs.add(p + ".latestRevision",
                 "may not set revisionName \"" + rev + "\" when latestRevision is " +
                     (latest ? "true" : "false") +
                     " (latestRevision: true needs an empty revisionName, false needs one)");
      }
    }
    if (service_context && !cfg.empty()) {
      errs.disallowed(p + ".configurationName", "a Service's traffic always targets its own Configuration");
    } else if (!rev.empty() && !cfg.empty()) {
      errs.add(p, "expected exactly one, got both: revisionName, configurationName");
    } else if (!rev.empty()) {
      if (!isQualifiedName(rev))
        errs.add(p + ".revisionName", "invalid key name \"" + rev + "\": must be a qualified name");
    } else if (in_status) {
      errs.missing(p + ".revisionName");
    } else if (!cfg.empty()) {
      if (!isQualifiedName(cfg))
        errs.add(p + ".configurationName", "invalid key name \"" + cfg + "\": must be a qualified name");
    } else if (!service_context) {
      errs.add(p, "expected exactly one, got neither: revisionName, configurationName", kRequired);
    }
    if (auto pct = integer(t, "percent")) {
      if (*pct < 0 || *pct > 100) errs.outOfBounds(p + ".percent", std::to_string(*pct), "0", "100");
      sum += *pct;
    }
    bool has_url = !str(t, "url").empty();
    if (has_url && !in_status) {
      errs.disallowed(p + ".url", "url is set by the system in status only");
    } else if (has_url && tag.empty()) {
      errs.disallowed(p + ".url", "url is only allowed on tagged targets");
    } else if (!has_url && !tag.empty() && in_status) {
      errs.missing(p + ".url");
    }
    if (tag.empty()) continue;
    if (!in_status && !isDns1035Label(tag)) {
      errs.add(p + ".tag", "invalid value: \"" + tag +
                               "\": a tag must be a DNS-1035 label (lower-case letters, digits "
                               "and '-', starting with a letter)");
    }
    if (auto it = tags.find(tag); it != tags.end()) {
      errs.add(p + ".tag",
               "Multiple definitions for \"" + tag + "\" (also " + path + "[" + std::to_string(it->second) +
                   "].tag)",
               kDuplicate);
    } else {
      tags[tag] = i;
    }
  }
  if (sum != 100) errs.add(path, "Traffic targets sum to " + std::to_string(sum) + ", want 100");
}

// ---- update rules (§3.7) ----

void validateCreatorAndModifier(const json& obj, const json& old, Errors& errs) {
  const json& ann = objOrEmpty(objOrEmpty(obj, "metadata"), "annotations");
  const json& old_ann = objOrEmpty(objOrEmpty(old, "metadata"), "annotations");
  auto val = [](const json& a, const char* k) { return has(a, k) ? show(a[k]) : std::string(); };
  if (val(ann, annotations::kCreator) != val(old_ann, annotations::kCreator)) {
    errs.add(key("metadata.annotations", annotations::kCreator), "annotation value is immutable", kForbidden);
  }
  if (valueAt(obj, "spec") == valueAt(old, "spec") &&
      val(ann, annotations::kLastModifier) != val(old_ann, annotations::kLastModifier)) {
    errs.add(key("metadata.annotations", annotations::kLastModifier),
             "annotation value is immutable (it may only change together with the spec)", kForbidden);
  }
}

// A short "(-old +new)" summary of which top-level template fields differ.
std::string templateDiff(const json& old_t, const json& new_t) {
  json patch = json::diff(old_t, new_t);
  std::string out;
  size_t shown = 0;
  for (const auto& op : patch) {
    if (shown++ == 5) {
      out += "; ...";
      break;
    }
    if (!out.empty()) out += "; ";
    out += op.value("op", std::string()) + " " + op.value("path", std::string());
  }
  return out;
}

void validateNameChange(const json& obj, const json& old, Errors& errs) {
  const json& tmpl = valueAt(valueAt(obj, "spec"), "template");
  const json& old_tmpl = valueAt(valueAt(old, "spec"), "template");
  std::string name = str(objOrEmpty(tmpl, "metadata"), "name");
  if (name.empty() || name != str(objOrEmpty(old_tmpl, "metadata"), "name")) return;
  if (tmpl != old_tmpl) {
    errs.add("spec.template.metadata.name",
             "Saw the following changes without a name change (-old +new): " + templateDiff(old_tmpl, tmpl) +
                 "; a template with a chosen revision name needs a new name when it changes");
  }
}

bool isOwned(const json& meta) {
  return !arr(meta, "ownerReferences").empty();
}

// k8s.io/apimachinery IsFullyQualifiedDomainName's complaints about `name`,
// in its ToAggregate() wording; "" when valid.
std::string fqdnProblem(std::string name) {
  if (!name.empty() && name.back() == '.') name.pop_back();
  auto invalid = [](const std::string& v, const std::string& why) {
    return "name: Invalid value: \"" + v + "\": " + why;
  };
  if (!isDns1123Subdomain(name)) {
    return invalid(name, name.size() > 253
                             ? "must be no more than 253 characters"
                             : "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                               "characters, '-' or '.', and must start and end with an alphanumeric "
                               "character (e.g. 'example.com')");
  }
  if (name.find('.') == std::string::npos)
    return invalid(name, "should be a domain with at least two segments separated by dots");
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    std::string label = name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (label.size() > 63) return invalid(label, "must be no more than 63 characters");
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return "";
}

// serving.knative.dev/v1beta1 DomainMapping (Knative's DomainMapping.Validate):
// the name is the mapped domain, a fully qualified domain name outside the
// cluster-local domain; generateName is refused; spec.ref is a KReference in
// the DomainMapping's own namespace; spec.tls needs a secretName.
void validateDomainMapping(const json& obj, const json* old, Errors& errs) {
  const json& meta = objOrEmpty(obj, "metadata");
  if (!str(meta, "generateName").empty()) errs.disallowed("metadata.generateName");
  std::string name = str(meta, "name");
  if (name.empty()) {
    errs.missing("metadata.name");
  } else {
    if (std::string why = fqdnProblem(name); !why.empty())
      errs.add("metadata.name", "invalid name \"" + name + "\": " + why);
    const std::string local = "cluster.local";
    if (name.size() > local.size() &&
        name.compare(name.size() - local.size() - 1, std::string::npos, "." + local) == 0) {
      errs.add("metadata.name", "invalid name \"" + name +
                                    "\": must not be a subdomain of cluster local domain \"" + local + "\"");
    }
  }
  validateLabelsAndAnnotations(meta, "metadata", errs);
  const json& spec = valueAt(obj, "spec");
  if (!spec.is_object()) {
    errs.missing("spec.ref.apiVersion");
    errs.missing("spec.ref.kind");
    errs.missing("spec.ref.name");
  } else {
    const json& ref = objOrEmpty(spec, "ref");
    for (const char* f : {"apiVersion", "kind", "name"}) {
      if (str(ref, f).empty()) errs.missing(std::string("spec.ref.") + f);
    }
    std::string ns = str(meta, "namespace"), ref_ns = str(ref, "namespace");
    if (!ns.empty() && !ref_ns.empty() && ns != ref_ns) {
      errs.add("spec.ref.namespace", "mismatched namespaces: parent namespace: \"" + ns +
                                         "\" does not match ref: \"" + ref_ns + "\"");
    }
    if (has(spec, "tls") && !valueAt(spec, "tls").is_null() &&
        str(valueAt(spec, "tls"), "secretName").empty())
      errs.missing("spec.tls.secretName");
  }
  if (old != nullptr) validateCreatorAndModifier(obj, *old, errs);
}

// networking.internal.knative.dev/v1alpha1 ClusterDomainClaim: the name is the
// claimed domain, spec.namespace the namespace whose DomainMappings may use it.
void validateClusterDomainClaim(const json& obj, Errors& errs) {
  const json& meta = objOrEmpty(obj, "metadata");
  std::string name = str(meta, "name");
  if (!name.empty()) {
    if (std::string why = fqdnProblem(name); !why.empty())
      errs.add("metadata.name", "invalid name \"" + name + "\": " + why);
  }
  validateLabelsAndAnnotations(meta, "metadata", errs);
  std::string ns = str(objOrEmpty(obj, "spec"), "namespace");
  if (ns.empty()) {
    errs.missing("spec.namespace");
  } else if (!isDns1123Label(ns)) {
    errs.add("spec.namespace", "not a namespace name: \"" + ns + "\": a DNS-1123 label is required");
  }
}

Status toStatus(const std::string& kind, const json& obj, Errors& errs) {
  if (errs.empty()) return Status::ok();
  std::string name = str(objOrEmpty(obj, "metadata"), "name");
  std::string group = kind == "ClusterDomainClaim" ? std::string(kNetworkingGroup) : std::string(kGroup);
  std::string msg = kind + "." + group + " \"" + name + "\" is invalid: ";
  for (size_t i = 0; i < errs.list().size(); ++i) {
    if (i > 0) msg += "; ";
    msg += errs.list()[i].field + ": " + errs.list()[i].message;
  }
  return invalidArgument(msg).withFieldErrors(std::move(errs.list()));
}

}  // namespace

Status validate(const std::string& kind, const json& obj, const json* old, Operation op,
                const Config& config) {
  Errors errs;
  if (kind == "DomainMapping" || kind == "ClusterDomainClaim") {
    if (!obj.is_object()) return invalidArgument(kind + ": the object must be a JSON object");
    if (kind == "DomainMapping")
      validateDomainMapping(obj, op == Operation::kUpdate ? old : nullptr, errs);
    else
      validateClusterDomainClaim(obj, errs);
    return toStatus(kind, obj, errs);
  }
  if (kind != "Service" && kind != "Configuration" && kind != "Revision" && kind != "Route") {
    return invalidArgument("unknown kind \"" + kind + "\"");
  }
  if (!obj.is_object()) return invalidArgument(kind + ": the object must be a JSON object");
  const json& meta = objOrEmpty(obj, "metadata");
  validateObjectName(meta, "metadata", errs);
  validateLabelsAndAnnotations(meta, "metadata", errs);
  const json& spec = valueAt(obj, "spec");
  bool update = op == Operation::kUpdate && old != nullptr;

  if (kind == "Revision") {
    validateOwnerLabel(meta, "metadata", labels::kConfiguration, "Configuration", errs);
    if (update) {
      // Revision spec is immutable; Revision defaulting is skipped on update.
      if (valueAt(obj, "spec") != valueAt(*old, "spec")) {
        errs.add("spec",
                 "Immutable fields changed (-old +new): " +
                     templateDiff(valueAt(*old, "spec"), valueAt(obj, "spec")),
                 kForbidden);
      }
    } else {
      validateTemplateAnnotations(meta, "metadata", config, errs);
      validateRevisionSpec(spec, "spec", config, errs);
    }
    return toStatus(kind, obj, errs);
  }

  validateNoAutoscalingAnnotations(meta, "metadata", errs);
  if (!spec.is_object()) {
    errs.missing("spec");
    return toStatus(kind, obj, errs);
  }
  if (kind == "Service" || kind == "Route") {
    validateVisibilityLabel(meta, "metadata", errs);
    validateSecondDuration(objOrEmpty(meta, "annotations"),
                           {annotations::kRolloutDuration, "serving.knative.dev/rolloutDuration"},
                           "metadata.annotations", errs);
  }
  if (kind == "Configuration" || kind == "Route")
    validateOwnerLabel(meta, "metadata", labels::kService, "Service", errs);

  if (kind == "Service" || kind == "Configuration") {
    if (!has(spec, "template")) {
      errs.missing("spec.template");
    } else {
      validateTemplate(spec["template"], "spec.template", meta, config, errs);
    }
  }
  if (kind == "Service") {
    validateTraffic(arr(spec, "traffic"), "spec.traffic", /*service_context=*/true, /*in_status=*/false,
                    errs);
  } else if (kind == "Route") {
    validateTraffic(arr(spec, "traffic"), "spec.traffic", /*service_context=*/false, /*in_status=*/false,
                    errs);
  }
  if (kind != "Configuration" && has(valueAt(obj, "status"), "traffic")) {
    const json& st = valueAt(valueAt(obj, "status"), "traffic");
    if (st.is_array() && !st.empty()) validateTraffic(st, "status.traffic", false, /*in_status=*/true, errs);
  }

  if (update) {
    // Owned Configurations/Routes are rewritten by the Service controller; the
    // creator/lastModifier rule applies to objects users own directly.
    if (kind == "Service" || !isOwned(meta)) validateCreatorAndModifier(obj, *old, errs);
    if (kind == "Service" || kind == "Configuration") validateNameChange(obj, *old, errs);
  }
  return toStatus(kind, obj, errs);
}

}  // namespace knap::api
