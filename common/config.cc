// Config loading: YAML text -> Config, validating each key as Knative does
// (KNATIVE-CONTRACT §3.3, §4.1, §5.11, §6). yaml-cpp exceptions are caught here.
#include "common/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/duration.h"
#include "common/log.h"
#include "common/string_util.h"

namespace knap {
namespace {

// Collects every problem so one run of `knapd --check-config` shows them all.
class Errors {
 public:
  void add(const std::string& field, const std::string& reason) {
    errors_.push_back(FieldError{field, reason, "FieldValueInvalid"});
  }
  bool empty() const { return errors_.empty(); }
  Status status() const {
    std::string msg;
    for (const FieldError& e : errors_) {
      if (!msg.empty()) msg += "; ";
      msg += e.field.empty() ? e.message : e.field + ": " + e.message;
    }
    Status s = invalidArgument(msg);
    s.withFieldErrors(errors_);
    return s;
  }

 private:
  std::vector<FieldError> errors_;
};

std::string quoted(const std::string& v) {
  return "\"" + v + "\"";
}

// Short form for messages: 1h, 10m, 6s, 90s.
std::string shortSeconds(Seconds s) {
  int64_t n = s.count();
  if (n != 0 && n % 3600 == 0) return std::to_string(n / 3600) + "h";
  if (n != 0 && n % 60 == 0) return std::to_string(n / 60) + "m";
  return std::to_string(n) + "s";
}

// --- scalar parsers: return "" on success, else the reason --------------------

std::string parseSeconds(const std::string& v, Seconds* out) {
  StatusOr<std::chrono::nanoseconds> d = parseGoDuration(v);
  if (!d.isOk()) return d.status().message();
  if (d->count() % 1000000000 != 0) return "must be a whole number of seconds, got " + quoted(v);
  *out = std::chrono::duration_cast<Seconds>(*d);
  return "";
}

std::string parseDouble(const std::string& v, double* out) {
  std::string t(trimSpace(v));
  if (t.empty()) return "must be a number, got " + quoted(v);
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(t.c_str(), &end);
  if (*end != '\0' || errno == ERANGE || !std::isfinite(d) || t.find_first_of("xXnN") != std::string::npos) {
    return "must be a number, got " + quoted(v);
  }
  *out = d;
  return "";
}

std::string parseInt64(const std::string& v, int64_t* out) {
  std::string t(trimSpace(v));
  if (t.empty()) return "must be an integer, got " + quoted(v);
  char* end = nullptr;
  errno = 0;
  long long n = std::strtoll(t.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE) return "must be an integer, got " + quoted(v);
  *out = n;
  return "";
}

std::string parseInt32(const std::string& v, int* out) {
  int64_t n = 0;
  std::string err = parseInt64(v, &n);
  if (!err.empty()) return err;
  if (n < INT32_MIN || n > INT32_MAX) return "must be a 32-bit integer, got " + quoted(v);
  *out = static_cast<int>(n);
  return "";
}

// Go's strconv.ParseBool, which Knative's ConfigMap parsing uses.
std::string parseBool(const std::string& v, bool* out) {
  static const char* const kTrue[] = {"1", "t", "T", "TRUE", "true", "True"};
  static const char* const kFalse[] = {"0", "f", "F", "FALSE", "false", "False"};
  for (const char* s : kTrue) {
    if (v == s) return (*out = true), "";
  }
  for (const char* s : kFalse) {
    if (v == s) return (*out = false), "";
  }
  return "must be true or false, got " + quoted(v);
}

// One of `allowed`, compared case-insensitively; stores the canonical spelling.
std::string parseEnum(const std::string& v, const std::vector<std::string>& allowed, std::string* out) {
  std::string want;
  for (const std::string& a : allowed) {
    if (asciiLower(a) == asciiLower(v)) return (*out = a), "";
    want += (want.empty() ? "" : ", ") + a;
  }
  return "must be one of " + want + ", got " + quoted(v);
}

// Kubernetes resource.Quantity syntax: 100m, 1.5Gi, 2e3, 128974848.
bool isQuantity(const std::string& v) {
  size_t i = 0;
  if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
  size_t digits = 0;
  while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) ++i, ++digits;
  if (i < v.size() && v[i] == '.') {
    ++i;
    while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) ++i, ++digits;
  }
  if (digits == 0) return false;
  std::string suffix = v.substr(i);
  static const char* const kSuffixes[] = {"",  "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n",
                                          "u", "m",  "k",  "M",  "G",  "T",  "P",  "E"};
  for (const char* s : kSuffixes) {
    if (suffix == s) return true;
  }
  if (suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    size_t j = 1;
    if (suffix[j] == '+' || suffix[j] == '-') ++j;
    if (j >= suffix.size()) return false;
    for (; j < suffix.size(); ++j) {
      if (!std::isdigit(static_cast<unsigned char>(suffix[j]))) return false;
    }
    return true;
  }
  return false;
}

bool isDnsLabel(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) ||
          c == '-')) {
      return false;
    }
  }
  return s.front() != '-' && s.back() != '-';
}

bool isDnsName(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  for (;;) {
    size_t dot = s.find('.', start);
    if (!isDnsLabel(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start)))
      return false;
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

// --- Go-template sanity for domain-template, tag-template, container-name-template --

// Renders the subset of Go's text/template these templates use: {{.Field}} and
// {{index .Map "key"}} (maps render the empty string for sample data). Returns
// "" on success with the output in *out and the fields used in *used.
std::string renderTemplate(const std::string& tmpl, const std::map<std::string, std::string>& fields,
                           const std::vector<std::string>& map_fields, std::string* out,
                           std::vector<std::string>* used) {
  out->clear();
  size_t i = 0;
  while (i < tmpl.size()) {
    size_t open = tmpl.find("{{", i);
    if (open == std::string::npos) {
      out->append(tmpl, i, std::string::npos);
      break;
    }
    out->append(tmpl, i, open - i);
    size_t close = tmpl.find("}}", open + 2);
    if (close == std::string::npos) return "unclosed action \"{{\"";
    // Trim markers ({{- x -}}) and escapes are not supported by the renderer in controller/route_urls.cc
    // either.
    std::string action(trimSpace(tmpl.substr(open + 2, close - open - 2)));
    std::istringstream words(action);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (w.size() == 1 && w[0].size() > 1 && w[0][0] == '.' && fields.count(w[0].substr(1))) {
      *out += fields.at(w[0].substr(1));
      used->push_back(w[0].substr(1));
    } else if (w.size() == 3 && w[0] == "index" && w[1].size() > 1 && w[1][0] == '.' &&
               std::find(map_fields.begin(), map_fields.end(), w[1].substr(1)) != map_fields.end() &&
               w[2].size() >= 2 && w[2].front() == '"' && w[2].back() == '"' &&
               w[2].substr(1, w[2].size() - 2).find_first_of("\"\\") == std::string::npos) {
      used->push_back(w[1].substr(1));
    } else {
      std::string known;
      for (const auto& [name, value] : fields) known += (known.empty() ? "" : ", ") + ("{{." + name + "}}");
      for (const std::string& m : map_fields) known += ", {{index ." + m + " \"key\"}}";
      return "unsupported template action \"{{" + action + "}}\" (use " + known + ")";
    }
    i = close + 2;
  }
  return "";
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string checkDomainTemplate(const std::string& v) {
  std::string out;
  std::vector<std::string> used;
  std::string err = renderTemplate(v, {{"Name", "foo"}, {"Namespace", "bar"}, {"Domain", "baz.com"}},
                                   {"Annotations", "Labels"}, &out, &used);
  if (!err.empty()) return err;
  if (!contains(used, "Name")) return "must contain {{.Name}}, got " + quoted(v);
  if (out.find('/') != std::string::npos) return "must render a host name without a path, got " + quoted(v);
  if (!isDnsName(out))
    return "renders an invalid host name " + quoted(out) + " for name foo, namespace bar, domain baz.com";
  return "";
}

std::string checkTagTemplate(const std::string& v) {
  std::string out;
  std::vector<std::string> used;
  std::string err = renderTemplate(v, {{"Name", "foo"}, {"Tag", "v2"}}, {}, &out, &used);
  if (!err.empty()) return err;
  if (!contains(used, "Name") || !contains(used, "Tag"))
    return "must contain {{.Tag}} and {{.Name}}, got " + quoted(v);
  if (!isDnsLabel(out)) return "renders an invalid host label " + quoted(out) + " for tag v2, name foo";
  return "";
}

std::string checkContainerNameTemplate(const std::string& v) {
  std::string out;
  std::vector<std::string> used;
  std::string err = renderTemplate(v, {{"Name", "foo"}}, {}, &out, &used);
  if (!err.empty()) return err;
  if (!isDnsLabel(out))
    return "renders an invalid container name " + quoted(out) + " (must be a DNS-1123 label)";
  return "";
}

// host:port or [v6]:port, port 0..65535.
std::string checkListen(const std::string& v) {
  if (splitHostPort(v)) return "";
  // Which part is wrong, for the message.
  size_t colon = v.rfind(':');
  if (colon == std::string::npos || colon == 0) return "must be host:port, got " + quoted(v);
  std::string host = v.substr(0, colon);
  if (host.front() == '[' ? host.back() != ']' : host.find(':') != std::string::npos) {
    return "must be host:port (IPv6 in brackets), got " + quoted(v);
  }
  return "port must be 0..65535, got " + quoted(v);
}

std::string checkAbsolutePath(const std::string& v, bool allow_empty) {
  if (v.empty() && allow_empty) return "";
  if (v.empty() || v.front() != '/') return "must be an absolute path, got " + quoted(v);
  return "";
}

std::string checkCidr4(const std::string& v) {
  unsigned a, b, c, d, len;
  char tail;
  if (std::sscanf(v.c_str(), "%u.%u.%u.%u/%u%c", &a, &b, &c, &d, &len, &tail) != 5 || a > 255 || b > 255 ||
      c > 255 || d > 255 || len > 30 || len < 8) {
    return "must be an IPv4 CIDR with prefix length 8..30, got " + quoted(v);
  }
  return "";
}

// --- sections ---------------------------------------------------------------

// A key handler applies the value and returns "" or the reason it is invalid.
using Handler = std::function<std::string(const std::string&)>;

struct SectionSpec {
  std::map<std::string, Handler> keys;
  std::vector<std::string> ignored;  // Knative keys accepted for compatibility, with no effect in knap
};

std::string between(const std::string& v, double x, double lo, double hi, const std::string& range) {
  if (x < lo || x > hi) return "must be in " + range + ", got " + quoted(v);
  return "";
}

std::string atLeast(const std::string& v, double x, double lo, const std::string& lo_text) {
  if (x < lo) return "must be at least " + lo_text + ", got " + quoted(v);
  return "";
}

SectionSpec autoscalerSpec(AutoscalerConfig& c) {
  SectionSpec s;
  auto num = [](double* field, std::function<std::string(const std::string&, double)> check) -> Handler {
    return [field, check](const std::string& v) {
      double d = 0;
      std::string err = parseDouble(v, &d);
      if (err.empty()) err = check(v, d);
      if (err.empty()) *field = d;
      return err;
    };
  };
  auto dur = [](Seconds* field, std::function<std::string(const std::string&, Seconds)> check) -> Handler {
    return [field, check](const std::string& v) {
      Seconds d{};
      std::string err = parseSeconds(v, &d);
      if (err.empty()) err = check(v, d);
      if (err.empty()) *field = d;
      return err;
    };
  };
  auto nonNegInt = [](int* field) -> Handler {
    return [field](const std::string& v) {
      int n = 0;
      std::string err = parseInt32(v, &n);
      if (err.empty() && n < 0) err = "must be >= 0, got " + quoted(v);
      if (err.empty()) *field = n;
      return err;
    };
  };
  s.keys["container-concurrency-target-percentage"] =
      num(&c.container_concurrency_target_percentage, [](const std::string& v, double d) -> std::string {
        double f = d > 1 ? d / 100 : d;
        if (f <= 0 || f > 1) return "must be in (0, 100], got " + quoted(v);
        return "";
      });
  s.keys["container-concurrency-target-default"] =
      num(&c.container_concurrency_target_default,
          [](const std::string& v, double d) { return atLeast(v, d, 0.01, "0.01"); });
  s.keys["requests-per-second-target-default"] =
      num(&c.requests_per_second_target_default,
          [](const std::string& v, double d) { return atLeast(v, d, 0.01, "0.01"); });
  s.keys["target-burst-capacity"] =
      num(&c.target_burst_capacity, [](const std::string& v, double d) -> std::string {
        if (d < 0 && d != -1) return "must be >= 0 or -1 (unlimited), got " + quoted(v);
        return "";
      });
  s.keys["stable-window"] = dur(&c.stable_window, [](const std::string& v, Seconds d) -> std::string {
    if (d < Seconds(6) || d > Seconds(3600)) return "must be between 6s and 1h, got " + quoted(v);
    return "";
  });
  s.keys["panic-window-percentage"] = num(&c.panic_window_percentage, [](const std::string& v, double d) {
    return between(v, d, 1, 100, "[1, 100]");
  });
  s.keys["panic-threshold-percentage"] =
      num(&c.panic_threshold_percentage,
          [](const std::string& v, double d) { return between(v, d, 110, 1000, "[110, 1000]"); });
  s.keys["max-scale-up-rate"] = num(&c.max_scale_up_rate, [](const std::string& v, double d) -> std::string {
    return d > 1 ? "" : "must be greater than 1, got " + quoted(v);
  });
  s.keys["max-scale-down-rate"] =
      num(&c.max_scale_down_rate, [](const std::string& v, double d) -> std::string {
        return d > 1 ? "" : "must be greater than 1, got " + quoted(v);
      });
  s.keys["enable-scale-to-zero"] = [&c](const std::string& v) {
    return parseBool(v, &c.enable_scale_to_zero);
  };
  s.keys["scale-to-zero-grace-period"] =
      dur(&c.scale_to_zero_grace_period, [](const std::string& v, Seconds d) -> std::string {
        return d > Seconds(0) ? "" : "must be greater than 0s, got " + quoted(v);
      });
  s.keys["scale-to-zero-pod-retention-period"] =
      dur(&c.scale_to_zero_pod_retention_period, [](const std::string& v, Seconds d) -> std::string {
        return d >= Seconds(0) ? "" : "must be >= 0s, got " + quoted(v);
      });
  s.keys["pod-autoscaler-class"] = [&c](const std::string& v) -> std::string {
    if (v.empty()) return "must not be empty";
    const std::string suffix = ".knative.dev";
    if (v.size() >= suffix.size() && v.compare(v.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        v != "kpa.autoscaling.knative.dev" && v != "hpa.autoscaling.knative.dev") {
      return "must be kpa.autoscaling.knative.dev or hpa.autoscaling.knative.dev, got " + quoted(v);
    }
    c.pod_autoscaler_class = v;
    return "";
  };
  s.keys["activator-capacity"] =
      num(&c.activator_capacity, [](const std::string& v, double d) { return atLeast(v, d, 1, "1"); });
  s.keys["initial-scale"] = nonNegInt(&c.initial_scale);
  s.keys["allow-zero-initial-scale"] = [&c](const std::string& v) {
    return parseBool(v, &c.allow_zero_initial_scale);
  };
  s.keys["min-scale"] = nonNegInt(&c.min_scale);
  s.keys["max-scale"] = nonNegInt(&c.max_scale);
  s.keys["max-scale-limit"] = nonNegInt(&c.max_scale_limit);
  s.keys["scale-down-delay"] = dur(&c.scale_down_delay, [](const std::string& v, Seconds d) -> std::string {
    return d >= Seconds(0) ? "" : "must be >= 0s, got " + quoted(v);
  });
  return s;
}

void checkAutoscaler(const AutoscalerConfig& c, Errors& e) {
  double target = c.targetUtilizationFraction() * c.container_concurrency_target_default;
  if (target < 0.01) {
    e.add("autoscaler.container-concurrency-target-default",
          "container-concurrency-target-percentage x container-concurrency-target-default must be at least "
          "0.01, "
          "got " +
              std::to_string(target));
  }
  double panic_window_s = c.panic_window_percentage / 100 * static_cast<double>(c.stable_window.count());
  if (panic_window_s < 1) {
    e.add("autoscaler.panic-window-percentage", "the panic window (" + std::to_string(panic_window_s) +
                                                    "s of a " + shortSeconds(c.stable_window) +
                                                    " stable window) must be at least 1s");
  }
  if (c.initial_scale == 0 && !c.allow_zero_initial_scale) {
    e.add("autoscaler.initial-scale",
          "must be at least 1 unless allow-zero-initial-scale is true, got \"0\"");
  }
  if (c.max_scale > 0 && c.min_scale > c.max_scale) {
    e.add("autoscaler.min-scale", "must be <= max-scale (" + std::to_string(c.max_scale) + "), got " +
                                      quoted(std::to_string(c.min_scale)));
  }
  if (c.max_scale_limit > 0 && (c.max_scale < 1 || c.max_scale > c.max_scale_limit)) {
    e.add("autoscaler.max-scale", "must be in [1, max-scale-limit (" + std::to_string(c.max_scale_limit) +
                                      ")] when max-scale-limit is set, got " +
                                      quoted(std::to_string(c.max_scale)));
  }
}

SectionSpec defaultsSpec(DefaultsConfig& c) {
  SectionSpec s;
  auto int64Min = [](int64_t* field, int64_t min) -> Handler {
    return [field, min](const std::string& v) {
      int64_t n = 0;
      std::string err = parseInt64(v, &n);
      if (err.empty() && n < min) err = "must be >= " + std::to_string(min) + ", got " + quoted(v);
      if (err.empty()) *field = n;
      return err;
    };
  };
  s.keys["revision-timeout-seconds"] = int64Min(&c.revision_timeout_seconds, 1);
  s.keys["max-revision-timeout-seconds"] = int64Min(&c.max_revision_timeout_seconds, 1);
  s.keys["revision-response-start-timeout-seconds"] = [&c](const std::string& v) {
    int64_t n = 0;
    std::string err = parseInt64(v, &n);
    if (err.empty() && n < 0) err = "must be >= 0, got " + quoted(v);
    if (err.empty()) c.revision_response_start_timeout_seconds = n;
    return err;
  };
  s.keys["revision-idle-timeout-seconds"] = int64Min(&c.revision_idle_timeout_seconds, 0);
  s.keys["container-concurrency"] = int64Min(&c.container_concurrency, 0);
  s.keys["container-concurrency-max-limit"] = int64Min(&c.container_concurrency_max_limit, 1);
  s.keys["allow-container-concurrency-zero"] = [&c](const std::string& v) {
    return parseBool(v, &c.allow_container_concurrency_zero);
  };
  s.keys["enable-service-links"] = [&c](const std::string& v) {
    return parseBool(v, &c.enable_service_links);
  };
  s.keys["container-name-template"] = [&c](const std::string& v) {
    std::string err = checkContainerNameTemplate(v);
    if (err.empty()) c.container_name_template = v;
    return err;
  };
  s.keys["init-container-name-template"] = [&c](const std::string& v) {
    std::string err = checkContainerNameTemplate(v);
    if (err.empty()) c.init_container_name_template = v;
    return err;
  };
  for (const char* res : {"cpu", "memory", "ephemeral-storage"}) {
    for (const char* kind : {"request", "limit"}) {
      std::string key = std::string("revision-") + res + "-" + kind;
      s.keys[key] = [&c, key](const std::string& v) -> std::string {
        if (v.empty()) {
          c.resource_defaults.erase(key);
          return "";
        }
        if (!isQuantity(v))
          return "must be a Kubernetes quantity such as 100m, 128Mi or 1G, got " + quoted(v);
        c.resource_defaults[key] = v;
        return "";
      };
    }
  }
  return s;
}

void checkDefaults(const DefaultsConfig& c, Errors& e) {
  if (c.revision_timeout_seconds > c.max_revision_timeout_seconds) {
    e.add("defaults.revision-timeout-seconds",
          "must be <= max-revision-timeout-seconds (" + std::to_string(c.max_revision_timeout_seconds) +
              "), got " + quoted(std::to_string(c.revision_timeout_seconds)));
  }
  if (c.revision_response_start_timeout_seconds &&
      *c.revision_response_start_timeout_seconds > c.revision_timeout_seconds) {
    e.add("defaults.revision-response-start-timeout-seconds",
          "must be <= revision-timeout-seconds (" + std::to_string(c.revision_timeout_seconds) + "), got " +
              quoted(std::to_string(*c.revision_response_start_timeout_seconds)));
  }
  if (c.revision_idle_timeout_seconds > c.revision_timeout_seconds) {
    e.add("defaults.revision-idle-timeout-seconds",
          "must be <= revision-timeout-seconds (" + std::to_string(c.revision_timeout_seconds) + "), got " +
              quoted(std::to_string(c.revision_idle_timeout_seconds)));
  }
  int64_t min_cc = c.allow_container_concurrency_zero ? 0 : 1;
  if (c.container_concurrency < min_cc || c.container_concurrency > c.container_concurrency_max_limit) {
    e.add("defaults.container-concurrency",
          "must be in [" + std::to_string(min_cc) + ", container-concurrency-max-limit (" +
              std::to_string(c.container_concurrency_max_limit) + ")]" +
              (min_cc == 1 ? " because allow-container-concurrency-zero is false" : "") + ", got " +
              quoted(std::to_string(c.container_concurrency)));
  }
}

SectionSpec networkSpec(NetworkConfig& c) {
  SectionSpec s;
  s.keys["domain-template"] = [&c](const std::string& v) {
    std::string err = checkDomainTemplate(v);
    if (err.empty()) c.domain_template = v;
    return err;
  };
  s.keys["tag-template"] = [&c](const std::string& v) {
    std::string err = checkTagTemplate(v);
    if (err.empty()) c.tag_template = v;
    return err;
  };
  s.keys["default-external-scheme"] = [&c](const std::string& v) {
    return parseEnum(v, {"http", "https"}, &c.default_external_scheme);
  };
  s.keys["http-protocol"] = [&c](const std::string& v) {
    return parseEnum(v, {"Enabled", "Redirected", "Disabled"}, &c.http_protocol);
  };
  s.keys["rollout-duration"] = [&c](const std::string& v) -> std::string {
    Seconds d{};
    std::string err = parseSeconds(v, &d);
    if (err.empty() && d < Seconds(0)) err = "must be >= 0s, got " + quoted(v);
    if (err.empty()) c.rollout_duration = d;
    return err;
  };
  auto ingressClass = [&c](const std::string& v) -> std::string {
    if (v.empty()) return "must not be empty";
    c.ingress_class = v;
    return "";
  };
  s.keys["ingress-class"] = ingressClass;
  s.keys["ingress.class"] = ingressClass;  // legacy spelling
  // Accepted Knative keys knap does not act on: kept in `other`, checked for their type.
  auto other = [&c](const std::string& key,
                    std::function<std::string(const std::string&, std::string*)> check) {
    return [&c, key, check](const std::string& v) {
      std::string canonical = v;
      std::string err = check ? check(v, &canonical) : "";
      if (err.empty()) c.other[key] = canonical;
      return err;
    };
  };
  auto enabledDisabled = [](const std::string& v, std::string* out) {
    return parseEnum(v, {"Enabled", "Disabled"}, out);
  };
  auto boolean = [](const std::string& v, std::string* out) {
    bool b = false;
    std::string err = parseBool(v, &b);
    if (err.empty()) *out = b ? "true" : "false";
    return err;
  };
  s.keys["certificate-class"] = other("certificate-class", nullptr);
  s.keys["certificate.class"] = other("certificate-class", nullptr);
  s.keys["namespace-wildcard-cert-selector"] = other("namespace-wildcard-cert-selector", nullptr);
  s.keys["external-domain-tls"] = other("external-domain-tls", enabledDisabled);
  s.keys["auto-tls"] = other("external-domain-tls", enabledDisabled);  // former name
  s.keys["cluster-local-domain-tls"] = other("cluster-local-domain-tls", enabledDisabled);
  s.keys["system-internal-tls"] = other("system-internal-tls", enabledDisabled);
  s.keys["internal-encryption"] =
      other("internal-encryption", boolean);  // former name of system-internal-tls
  s.keys["autocreate-cluster-domain-claims"] = [&c](const std::string& v) {
    return parseBool(v, &c.autocreate_cluster_domain_claims);
  };
  s.keys["enable-mesh-pod-addressability"] = other("enable-mesh-pod-addressability", boolean);
  s.keys["mesh-compatibility-mode"] =
      other("mesh-compatibility-mode", [](const std::string& v, std::string* out) {
        return parseEnum(v, {"enabled", "disabled", "auto"}, out);
      });
  return s;
}

SectionSpec gcSpec(GcConfig& c) {
  SectionSpec s;
  auto retain = [](std::optional<Seconds>* field) -> Handler {
    return [field](const std::string& v) -> std::string {
      if (asciiLower(v) == "disabled") {
        *field = std::nullopt;
        return "";
      }
      Seconds d{};
      std::string err = parseSeconds(v, &d);
      if (!err.empty()) return err + " (or use \"disabled\")";
      if (d < Seconds(0)) return "must be >= 0s or \"disabled\", got " + quoted(v);
      *field = d;
      return "";
    };
  };
  s.keys["retain-since-create-time"] = retain(&c.retain_since_create_time);
  s.keys["retain-since-last-active-time"] = retain(&c.retain_since_last_active_time);
  s.keys["min-non-active-revisions"] = [&c](const std::string& v) {
    int64_t n = 0;
    std::string err = parseInt64(v, &n);
    if (err.empty() && n < 0) err = "must be >= 0, got " + quoted(v);
    if (err.empty()) c.min_non_active_revisions = n;
    return err;
  };
  s.keys["max-non-active-revisions"] = [&c](const std::string& v) -> std::string {
    if (asciiLower(v) == "disabled") {
      c.max_non_active_revisions = std::nullopt;
      return "";
    }
    int64_t n = 0;
    std::string err = parseInt64(v, &n);
    if (!err.empty()) return "must be an integer >= 0 or \"disabled\", got " + quoted(v);
    if (n < 0) return "must be >= 0 or \"disabled\", got " + quoted(v);
    c.max_non_active_revisions = n;
    return "";
  };
  return s;
}

void checkGc(const GcConfig& c, Errors& e) {
  if (c.max_non_active_revisions && c.min_non_active_revisions > *c.max_non_active_revisions) {
    e.add("gc.min-non-active-revisions", "must be <= max-non-active-revisions (" +
                                             std::to_string(*c.max_non_active_revisions) + "), got " +
                                             quoted(std::to_string(c.min_non_active_revisions)));
  }
}

SectionSpec deploymentSpec(DeploymentConfig& c) {
  SectionSpec s;
  s.keys["progress-deadline"] = [&c](const std::string& v) -> std::string {
    Seconds d{};
    std::string err = parseSeconds(v, &d);
    if (err.empty() && d <= Seconds(0)) err = "must be greater than 0s, got " + quoted(v);
    if (err.empty()) c.progress_deadline = d;
    return err;
  };
  s.keys["registries-skipping-tag-resolving"] = [&c](const std::string& v) -> std::string {
    std::vector<std::string> out;
    std::istringstream in(v);
    for (std::string item; std::getline(in, item, ',');) {
      item = trimSpace(item);
      if (item.empty()) continue;
      if (item.find_first_of(" /\t") != std::string::npos) return "invalid registry " + quoted(item);
      out.push_back(item);
    }
    c.registries_skipping_tag_resolving = out;
    return "";
  };
  s.keys["digest-resolution-timeout"] = [&c](const std::string& v) -> std::string {
    StatusOr<std::chrono::nanoseconds> d = parseGoDuration(v);
    if (!d.isOk()) return d.status().message();
    if (d->count() <= 0) return "must be greater than 0s, got " + quoted(v);
    c.digest_resolution_timeout = v;
    return "";
  };
  s.keys["queue-sidecar-image"] = [&c](const std::string& v) {
    c.queue_sidecar_image = v;
    return std::string();
  };
  s.ignored = {"queue-sidecar-cpu-request",
               "queue-sidecar-cpu-limit",
               "queue-sidecar-memory-request",
               "queue-sidecar-memory-limit",
               "queue-sidecar-ephemeral-storage-request",
               "queue-sidecar-ephemeral-storage-limit",
               "queue-sidecar-token-audiences",
               "queue-sidecar-rootca",
               "concurrency-state-endpoint",
               "concurrency-state-token-path",
               "runtime-class-name",
               "pod-is-always-schedulable"};
  return s;
}

SectionSpec knapSpec(KnapConfig& c) {
  SectionSpec s;
  auto str = [](std::string* field, std::function<std::string(const std::string&)> check) -> Handler {
    return [field, check](const std::string& v) {
      std::string err = check(v);
      if (err.empty()) *field = v;
      return err;
    };
  };
  s.keys["data-dir"] = str(&c.data_dir, [](const std::string& v) { return checkAbsolutePath(v, false); });
  s.keys["api-socket"] = str(&c.api_socket, [](const std::string& v) { return checkAbsolutePath(v, true); });
  s.keys["kubeconfig-path"] =
      str(&c.kubeconfig_path, [](const std::string& v) { return checkAbsolutePath(v, true); });
  s.keys["containerd-socket"] =
      str(&c.containerd_socket, [](const std::string& v) { return checkAbsolutePath(v, false); });
  s.keys["api-listen"] = str(&c.api_listen, checkListen);
  s.keys["router-listen"] = str(&c.router_listen, checkListen);
  s.keys["router-internal-listen"] = str(&c.router_internal_listen, [](const std::string& v) {
    return v.empty() ? std::string() : checkListen(v);
  });
  s.keys["metrics-listen"] =
      str(&c.metrics_listen, [](const std::string& v) { return v.empty() ? std::string() : checkListen(v); });
  s.keys["router-tls-listen"] = str(
      &c.router_tls_listen, [](const std::string& v) { return v.empty() ? std::string() : checkListen(v); });
  s.keys["router-tls-certificates-dir"] =
      str(&c.router_tls_certificates_dir, [](const std::string& v) { return checkAbsolutePath(v, true); });
  s.keys["acme-directory"] = str(&c.acme_directory, [](const std::string& v) -> std::string {
    if (v.empty() || v.rfind("https://", 0) == 0 || v.rfind("http://", 0) == 0) return "";
    return "must be an https:// URL (the ACME directory) or empty, got " + quoted(v);
  });
  s.keys["acme-email"] = str(&c.acme_email, [](const std::string& v) -> std::string {
    if (v.empty() || (v.find('@') != std::string::npos && v.find_first_of(" \t\r\n,<>") == std::string::npos))
      return "";
    return "must be an e-mail address or empty, got " + quoted(v);
  });
  s.keys["acme-ca-file"] =
      str(&c.acme_ca_file, [](const std::string& v) { return checkAbsolutePath(v, true); });
  s.keys["acme-renew-before"] = [&c](const std::string& v) {
    Seconds d{};
    std::string err = parseSeconds(v, &d);
    if (err.empty() && d.count() <= 0) err = "must be a positive duration, got " + quoted(v);
    if (err.empty()) c.acme_renew_before = d;
    return err;
  };
  s.keys["containerd-namespace"] = str(&c.containerd_namespace, [](const std::string& v) -> std::string {
    if (v.empty() || v.size() > 76) return "must be 1..76 characters, got " + quoted(v);
    for (char ch : v) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.') {
        return "may contain only letters, digits, '.', '_' and '-', got " + quoted(v);
      }
    }
    return "";
  });
  s.keys["pod-subnet"] = str(&c.pod_subnet, checkCidr4);
  s.keys["bridge-name"] = str(&c.bridge_name, [](const std::string& v) -> std::string {
    if (v.empty() || v.size() > 15)
      return "must be 1..15 characters (a Linux interface name), got " + quoted(v);
    for (char ch : v) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') {
        return "may contain only letters, digits, '_' and '-', got " + quoted(v);
      }
    }
    return "";
  });
  s.keys["max-request-body-bytes"] = [&c](const std::string& v) {
    int64_t n = 0;
    std::string err = parseInt64(v, &n);
    if (err.empty() && n < 1) err = "must be >= 1, got " + quoted(v);
    if (err.empty()) c.max_request_body_bytes = static_cast<size_t>(n);
    return err;
  };
  s.keys["watch-history-events"] = [&c](const std::string& v) {
    int64_t n = 0;
    std::string err = parseInt64(v, &n);
    if (err.empty() && n < 1) err = "must be >= 1, got " + quoted(v);
    if (err.empty()) c.watch_history_events = n;
    return err;
  };
  auto intIn = [](int64_t* field, int64_t lo, int64_t hi) -> Handler {
    return [field, lo, hi](const std::string& v) {
      int64_t n = 0;
      std::string err = parseInt64(v, &n);
      if (err.empty() && (n < lo || n > hi))
        err = "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + quoted(v);
      if (err.empty()) *field = n;
      return err;
    };
  };
  auto positiveSeconds = [](Seconds* field) -> Handler {
    return [field](const std::string& v) {
      Seconds d{};
      std::string err = parseSeconds(v, &d);
      if (err.empty() && d <= Seconds(0)) err = "must be greater than 0s, got " + quoted(v);
      if (err.empty()) *field = d;
      return err;
    };
  };
  auto hostList = [](std::vector<std::string>* field, bool allow_path) -> Handler {
    return [field, allow_path](const std::string& v) -> std::string {
      std::vector<std::string> out;
      std::istringstream in(v);
      for (std::string item; std::getline(in, item, ',');) {
        item = trimSpace(item);
        if (item.empty()) continue;
        if (item.find_first_of(" \t") != std::string::npos ||
            (!allow_path && item.find('/') != std::string::npos))
          return "invalid " + std::string(allow_path ? "image" : "registry") + " " + quoted(item);
        out.push_back(item);
      }
      *field = out;
      return "";
    };
  };
  s.keys["platform"] = str(&c.platform, [](const std::string& v) -> std::string {
    if (v.empty()) return "";
    size_t slash = v.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 >= v.size())
      return "must be os/arch[/variant] (e.g. linux/amd64), got " + quoted(v);
    return "";
  });
  s.keys["registry-auth-file"] = str(&c.registry_auth_file, [](const std::string& v) {
    return v.empty() ? std::string() : checkAbsolutePath(v, false);
  });
  s.keys["registry-ca-file"] = str(&c.registry_ca_file, [](const std::string& v) {
    return v.empty() ? std::string() : checkAbsolutePath(v, false);
  });
  s.keys["insecure-registries"] = hostList(&c.insecure_registries, false);
  s.keys["pull-parallelism"] = intIn(&c.pull_parallelism, 1, 64);
  s.keys["pull-retry-max"] = positiveSeconds(&c.pull_retry_max);
  s.keys["pre-pull-images"] = hostList(&c.pre_pull_images, true);
  s.keys["image-gc-interval"] = positiveSeconds(&c.image_gc_interval);
  s.keys["image-gc-min-age"] = [&c](const std::string& v) {
    Seconds d{};
    std::string err = parseSeconds(v, &d);
    if (err.empty() && d < Seconds(0)) err = "must be >= 0s, got " + quoted(v);
    if (err.empty()) c.image_gc_min_age = d;
    return err;
  };
  s.keys["image-gc-high-threshold-percent"] = intIn(&c.image_gc_high_percent, 1, 100);
  s.keys["image-gc-low-threshold-percent"] = intIn(&c.image_gc_low_percent, 0, 100);
  s.keys["router-max-connections"] = intIn(&c.router_max_connections, 0, 1000000);
  s.keys["router-keepalive-idle-timeout"] = positiveSeconds(&c.router_keepalive_idle_timeout);
  s.keys["router-tunnel-idle-timeout"] = [&c](const std::string& v) {
    Seconds d{};
    std::string err = parseSeconds(v, &d);
    if (err.empty() && d < Seconds(0)) err = "must be >= 0s (0s = never), got " + quoted(v);
    if (err.empty()) c.router_tunnel_idle_timeout = d;
    return err;
  };
  s.keys["router-drain-timeout"] = [&c](const std::string& v) {
    Seconds d{};
    std::string err = parseSeconds(v, &d);
    if (err.empty() && (d < Seconds(0) || d > Seconds(3600)))
      err = "must be between 0s and 1h, got " + quoted(v);
    if (err.empty()) c.router_drain_timeout = d;
    return err;
  };
  s.keys["router-startup-hold"] = [&c](const std::string& v) {
    Seconds d{};
    std::string err = parseSeconds(v, &d);
    if (err.empty() && (d < Seconds(0) || d > Seconds(600)))
      err = "must be between 0s and 10m, got " + quoted(v);
    if (err.empty()) c.router_startup_hold = d;
    return err;
  };
  s.keys["api-threads"] = intIn(&c.api_threads, 1, 64);
  s.keys["api-max-connections"] = intIn(&c.api_max_connections, 2, 1000000);
  s.keys["api-insecure-loopback"] = [&c](const std::string& v) {
    return parseBool(v, &c.api_insecure_loopback);
  };
  s.keys["api-token-file"] = str(&c.api_token_file, [](const std::string& v) {
    return v.empty() ? std::string() : checkAbsolutePath(v, false);
  });
  s.keys["api-role-bindings"] = [&c](const std::string& v) -> std::string {
    std::vector<ApiRoleBinding> out;
    std::istringstream in(v);
    for (std::string item; std::getline(in, item, ',');) {
      item = trimSpace(item);
      if (item.empty()) continue;
      std::istringstream words(item);
      std::vector<std::string> w;
      for (std::string x; words >> x;) w.push_back(x);
      ApiRoleBinding b;
      if (w.size() < 2 || w.size() > 3)
        return "binding " + quoted(item) + " must be \"ROLE user:NAME|group:NAME [NAMESPACE]\"";
      if (w[0] != "admin" && w[0] != "edit" && w[0] != "view")
        return "binding " + quoted(item) + ": the role must be admin, edit or view, got " + quoted(w[0]);
      b.role = w[0];
      if (w[1].rfind("user:", 0) == 0)
        b.subject = w[1].substr(5);
      else if (w[1].rfind("group:", 0) == 0)
        b.group = true, b.subject = w[1].substr(6);
      else
        return "binding " + quoted(item) + ": the subject must be user:NAME or group:NAME, got " +
               quoted(w[1]);
      if (b.subject.empty()) return "binding " + quoted(item) + ": the subject has no name";
      if (w.size() == 3 && w[2] != "*") {
        if (!isDnsLabel(w[2]))
          return "binding " + quoted(item) + ": " + quoted(w[2]) + " is not a namespace name";
        b.ns = w[2];
      }
      out.push_back(std::move(b));
    }
    c.api_role_bindings = std::move(out);
    return "";
  };
  s.keys["warm-pool-size"] = intIn(&c.warm_pool_size, 0, 100);
  s.keys["warm-pool-mode"] = str(&c.warm_pool_mode, [](const std::string& v) -> std::string {
    if (v != "frozen" && v != "created") return "must be \"frozen\" or \"created\", got " + quoted(v);
    return "";
  });
  return s;
}

// The value of a key as text: ConfigMap values are strings, YAML scalars are accepted too.
bool scalarText(const YAML::Node& node, const std::string& key, std::string* out) {
  if (node.IsNull()) {
    out->clear();
    return true;
  }
  if (node.IsScalar()) {
    *out = node.Scalar();
    return true;
  }
  // A YAML list for the one list-valued key, as a convenience.
  if (node.IsSequence() && (key == "registries-skipping-tag-resolving" || key == "insecure-registries" ||
                            key == "pre-pull-images" || key == "api-role-bindings")) {
    out->clear();
    for (const YAML::Node& item : node) {
      if (!item.IsScalar()) return false;
      *out += (out->empty() ? "" : ",") + item.Scalar();
    }
    return true;
  }
  return false;
}

void applySection(const std::string& section, const YAML::Node& node, const SectionSpec& spec, Errors& e) {
  if (node.IsNull()) return;
  if (!node.IsMap()) {
    e.add(section, "must be a mapping of keys to values");
    return;
  }
  for (const auto& kv : node) {
    std::string key = kv.first.as<std::string>();
    std::string field = section + "." + key;
    if (key == "_example") continue;  // Knative ConfigMaps carry their documentation there
    if (std::find(spec.ignored.begin(), spec.ignored.end(), key) != spec.ignored.end()) {
      LOG(INFO) << "config: " << field << " is accepted for Knative compatibility and has no effect in knap";
      continue;
    }
    auto it = spec.keys.find(key);
    if (it == spec.keys.end()) {
      e.add(field, "unknown key");
      continue;
    }
    std::string value;
    if (!scalarText(kv.second, key, &value)) {
      e.add(field, "must be a string or a scalar");
      continue;
    }
    std::string err = it->second(value);
    if (!err.empty()) e.add(field, err);
  }
}

// config-domain: domain -> "" or "selector:\n  label: value" (a YAML string or a mapping).
void applyDomain(const YAML::Node& node, DomainConfig& c, Errors& e) {
  c.domains.clear();
  if (node.IsNull()) return;
  if (!node.IsMap()) {
    e.add("domain", "must be a mapping of domain names to selectors");
    return;
  }
  for (const auto& kv : node) {
    std::string domain = kv.first.as<std::string>();
    std::string field = "domain." + domain;
    if (domain == "_example") continue;
    if (!isDnsName(domain)) {
      e.add(field, "is not a valid domain name (lower-case DNS labels separated by dots)");
      continue;
    }
    YAML::Node value = kv.second;
    if (value.IsScalar()) {
      std::string text = value.Scalar();
      if (trimSpace(text).empty()) {
        value = YAML::Node();
      } else {
        try {
          value = YAML::Load(text);
        } catch (const YAML::Exception& ex) {
          e.add(field, "invalid selector YAML: " + ex.msg);
          continue;
        }
      }
    }
    DomainEntry entry{domain, {}};
    if (!value.IsNull()) {
      if (!value.IsMap()) {
        e.add(field, "must be empty or \"selector: {label: value}\"");
        continue;
      }
      bool ok = true;
      for (const auto& sel : value) {
        std::string k = sel.first.as<std::string>();
        if (k != "selector") {
          e.add(field, "unknown key " + quoted(k) + " (only \"selector\" is allowed)");
          ok = false;
          continue;
        }
        if (sel.second.IsNull()) continue;
        if (!sel.second.IsMap()) {
          e.add(field, "selector must map label names to values");
          ok = false;
          continue;
        }
        for (const auto& label : sel.second) {
          if (!label.second.IsScalar()) {
            e.add(field, "selector value for " + quoted(label.first.as<std::string>()) + " must be a string");
            ok = false;
            continue;
          }
          entry.selector[label.first.as<std::string>()] = label.second.Scalar();
        }
      }
      if (!ok) continue;
    }
    c.domains.push_back(std::move(entry));
  }
}

}  // namespace

Config defaultConfig() {
  Config c;
  c.domain.domains.push_back({"localhost", {}});
  return c;
}

StatusOr<Config> parseConfig(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& ex) {
    return invalidArgument("invalid YAML at line " + std::to_string(ex.mark.line + 1) + ", column " +
                           std::to_string(ex.mark.column + 1) + ": " + ex.msg);
  } catch (const YAML::Exception& ex) {
    return invalidArgument(std::string("invalid YAML: ") + ex.what());
  }
  Config c = defaultConfig();
  if (root.IsNull()) return c;
  if (!root.IsMap())
    return invalidArgument("config must be a mapping of sections (autoscaler, defaults, ...)");

  Errors e;
  try {
    for (const auto& kv : root) {
      std::string section = kv.first.as<std::string>();
      const YAML::Node& node = kv.second;
      if (section == "autoscaler")
        applySection(section, node, autoscalerSpec(c.autoscaler), e);
      else if (section == "defaults")
        applySection(section, node, defaultsSpec(c.defaults), e);
      else if (section == "network")
        applySection(section, node, networkSpec(c.network), e);
      else if (section == "domain")
        applyDomain(node, c.domain, e);
      else if (section == "gc")
        applySection(section, node, gcSpec(c.gc), e);
      else if (section == "deployment")
        applySection(section, node, deploymentSpec(c.deployment), e);
      else if (section == "knap")
        applySection(section, node, knapSpec(c.knap), e);
      else
        e.add(section,
              "unknown section (known: autoscaler, defaults, network, domain, gc, deployment, knap)");
    }
  } catch (const YAML::Exception& ex) {
    return invalidArgument(std::string("invalid config: ") + ex.what());
  }
  if (e.empty()) {
    checkAutoscaler(c.autoscaler, e);
    checkDefaults(c.defaults, e);
    checkGc(c.gc, e);
    if (c.knap.image_gc_low_percent >= c.knap.image_gc_high_percent) {
      e.add("knap.image-gc-low-threshold-percent", "must be lower than image-gc-high-threshold-percent (" +
                                                       std::to_string(c.knap.image_gc_high_percent) +
                                                       "), got " +
                                                       quoted(std::to_string(c.knap.image_gc_low_percent)));
    }
  }
  if (!e.empty()) return e.status();
  return c;
}

std::vector<std::string> configKeys() {
  Config c;
  std::vector<std::string> keys;
  auto add = [&keys](const std::string& section, const SectionSpec& spec) {
    for (const auto& [key, handler] : spec.keys) keys.push_back(section + "." + key);
    for (const std::string& key : spec.ignored) keys.push_back(section + "." + key);
  };
  add("autoscaler", autoscalerSpec(c.autoscaler));
  add("defaults", defaultsSpec(c.defaults));
  add("network", networkSpec(c.network));
  add("gc", gcSpec(c.gc));
  add("deployment", deploymentSpec(c.deployment));
  add("knap", knapSpec(c.knap));
  std::sort(keys.begin(), keys.end());
  return keys;
}

StatusOr<Config> loadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return notFound("config file " + path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return internalError("config file " + path + ": read failed");
  StatusOr<Config> c = parseConfig(text.str());
  if (!c.isOk()) return c.status().annotate("config file " + path);
  return c;
}

}  // namespace knap
