// Knative defaulting (knative/serving pkg/apis/serving/v1/*_defaults.go) over
// JSON objects. See admission.h.
#include <set>
#include <string>

#include "api/admission.h"
#include "api/naming.h"

namespace knap::api {
namespace {

using nlohmann::json;

bool has(const json& obj, const char* key) {
  return obj.is_object() && obj.contains(key) && !obj[key].is_null();
}

// obj[key] as an object, creating it (or replacing a null) when absent.
json& child(json& obj, const char* key) {
  if (!obj.contains(key) || obj[key].is_null()) obj[key] = json::object();
  return obj[key];
}

bool isArrayOfObjects(const json& v) {
  if (!v.is_array()) return false;
  for (const auto& e : v) {
    if (!e.is_object()) return false;
  }
  return true;
}

// Renders config-defaults' container-name-template: Knative executes it as a Go
// template over the parent's ObjectMeta; {{.Name}} is the variable used in practice.
std::string containerNameFromTemplate(const std::string& tmpl, const std::string& parent_name) {
  std::string out = tmpl;
  for (const std::string var : {"{{.Name}}", "{{ .Name }}"}) {
    for (size_t pos; (pos = out.find(var)) != std::string::npos;) out.replace(pos, var.size(), parent_name);
  }
  return out;
}

// applyDefaultContainerNames: unnamed containers get the template name, or
// name-0, name-1, ... when there are several (skipping user-chosen names).
void defaultContainerNames(json& containers, const std::string& base) {
  if (!isArrayOfObjects(containers)) return;
  std::set<std::string> taken;
  for (const auto& c : containers) {
    if (c.contains("name") && c["name"].is_string()) taken.insert(c["name"].get<std::string>());
  }
  int next_suffix = 0;
  for (auto& c : containers) {
    if (c.contains("name") && c["name"].is_string() && !c["name"].get<std::string>().empty()) continue;
    std::string name = base;
    if (containers.size() > 1 || taken.count(name)) {
      do {
        name = childName(base, "-" + std::to_string(next_suffix++));
      } while (taken.count(name));
    }
    c["name"] = name;
  }
}

void defaultGrpcService(json& container, const char* probe_key) {
  if (!has(container, probe_key) || !container[probe_key].is_object()) return;
  json& probe = container[probe_key];
  if (has(probe, "grpc") && probe["grpc"].is_object() && !has(probe["grpc"], "service"))
    probe["grpc"]["service"] = "";
}

// applyProbesWithDefaults + applyGRPCProbeDefaults, for the serving container.
void defaultProbes(json& container) {
  json& probe = child(container, "readinessProbe");
  if (!probe.is_object()) return;
  if (!has(probe, "tcpSocket") && !has(probe, "httpGet") && !has(probe, "exec") && !has(probe, "grpc")) {
    probe["tcpSocket"] = json{{"port", 0}};
  }
  auto zeroOrUnset = [&](const char* key) {
    return !has(probe, key) || (probe[key].is_number_integer() && probe[key].get<int64_t>() == 0);
  };
  if (zeroOrUnset("successThreshold")) probe["successThreshold"] = 1;
  if (!zeroOrUnset("periodSeconds")) {
    if (zeroOrUnset("failureThreshold")) probe["failureThreshold"] = 3;
    if (zeroOrUnset("timeoutSeconds")) probe["timeoutSeconds"] = 1;
  }
  for (const char* key : {"readinessProbe", "livenessProbe", "startupProbe"})
    defaultGrpcService(container, key);
}

void defaultResources(json& container, const DefaultsConfig& d) {
  static const std::pair<const char*, const char*> kResources[] = {
      {"cpu", "cpu"}, {"memory", "memory"}, {"ephemeral-storage", "ephemeral-storage"}};
  for (const auto& [resource, key_part] : kResources) {
    for (const char* kind : {"request", "limit"}) {
      auto it = d.resource_defaults.find(std::string("revision-") + key_part + "-" + kind);
      if (it == d.resource_defaults.end() || it->second.empty()) continue;
      json& resources = child(container, "resources");
      if (!resources.is_object()) continue;
      json& section = child(resources, std::string(kind) == "request" ? "requests" : "limits");
      if (section.is_object() && !has(section, resource)) section[resource] = it->second;
    }
  }
}

void defaultRevisionSpec(json& spec, const Config& config, const std::string& parent_name) {
  if (!spec.is_object()) return;
  const DefaultsConfig& d = config.defaults;
  auto isInt = [&](const char* key) { return has(spec, key) && spec[key].is_number_integer(); };

  if (!has(spec, "timeoutSeconds") ||
      (isInt("timeoutSeconds") && spec["timeoutSeconds"].get<int64_t>() == 0)) {
    spec["timeoutSeconds"] = d.revision_timeout_seconds;
  }
  if (isInt("timeoutSeconds")) {
    int64_t timeout = spec["timeoutSeconds"].get<int64_t>();
    int64_t response_start = d.revision_response_start_timeout_seconds.value_or(d.revision_timeout_seconds);
    if (!has(spec, "responseStartTimeoutSeconds") && response_start != 0 && response_start < timeout) {
      spec["responseStartTimeoutSeconds"] = response_start;
    }
    if (!has(spec, "idleTimeoutSeconds") && d.revision_idle_timeout_seconds != 0 &&
        d.revision_idle_timeout_seconds < timeout) {
      spec["idleTimeoutSeconds"] = d.revision_idle_timeout_seconds;
    }
  }
  if (!has(spec, "containerConcurrency")) spec["containerConcurrency"] = d.container_concurrency;
  if (!has(spec, "enableServiceLinks")) spec["enableServiceLinks"] = d.enable_service_links;

  if (has(spec, "containers")) {
    defaultContainerNames(spec["containers"],
                          containerNameFromTemplate(d.container_name_template, parent_name));
  }
  if (has(spec, "initContainers")) {
    defaultContainerNames(spec["initContainers"],
                          containerNameFromTemplate(d.init_container_name_template, parent_name));
  }

  // Volumes that are writable: everything else (secret, configMap, projected) is mounted read-only.
  std::set<std::string> writable;
  if (isArrayOfObjects(spec.value("volumes", json()))) {
    for (const auto& v : spec["volumes"]) {
      if ((has(v, "emptyDir") || has(v, "persistentVolumeClaim")) && v.contains("name") &&
          v["name"].is_string()) {
        writable.insert(v["name"].get<std::string>());
      }
    }
  }

  if (!has(spec, "containers") || !isArrayOfObjects(spec["containers"])) return;
  json& containers = spec["containers"];
  for (auto& c : containers) {
    defaultResources(c, d);
    // Probe defaults go to the serving container: the only one, or the one declaring a port.
    bool has_ports = has(c, "ports") && c["ports"].is_array() && !c["ports"].empty();
    if (containers.size() == 1 || has_ports) defaultProbes(c);
    if (has(c, "volumeMounts") && isArrayOfObjects(c["volumeMounts"])) {
      for (auto& m : c["volumeMounts"]) {
        std::string name =
            m.value("name", json("")).is_string() ? m.value("name", std::string()) : std::string();
        if (!writable.count(name)) m["readOnly"] = true;
      }
    }
  }
}

void defaultTemplate(json& spec, const Config& config, const std::string& parent_name) {
  if (!spec.is_object() || !has(spec, "template") || !spec["template"].is_object()) return;
  json& tmpl = spec["template"];
  if (has(tmpl, "spec")) defaultRevisionSpec(tmpl["spec"], config, parent_name);
}

void defaultTraffic(json& spec, bool service_context) {
  if (!spec.is_object()) return;
  bool empty = !has(spec, "traffic") || (spec["traffic"].is_array() && spec["traffic"].empty());
  if (empty) {
    if (!service_context) return;  // a standalone Route with no traffic stays invalid
    spec["traffic"] = json::array({json{{"percent", 100}, {"latestRevision", true}}});
  }
  if (!isArrayOfObjects(spec["traffic"])) return;
  for (auto& t : spec["traffic"]) {
    if (!has(t, "latestRevision")) {
      bool no_revision =
          !has(t, "revisionName") || (t["revisionName"].is_string() && t["revisionName"] == "");
      t["latestRevision"] = no_revision;
    }
  }
}

}  // namespace

void setDefaults(const std::string& kind, json& obj, const Config& config) {
  if (!obj.is_object()) return;
  std::string name;
  if (obj.contains("metadata") && obj["metadata"].is_object()) {
    const json& meta = obj["metadata"];
    if (meta.contains("name") && meta["name"].is_string()) name = meta["name"].get<std::string>();
  }
  if (!has(obj, "spec") || !obj["spec"].is_object()) return;  // validation reports the missing spec
  json& spec = obj["spec"];
  if (kind == "DomainMapping") {
    // KReference.SetDefaults: a ref without a namespace is in the parent's.
    const json& meta = obj.value("metadata", json::object());
    if (has(spec, "ref") && spec["ref"].is_object() && meta.is_object() && meta.contains("namespace") &&
        meta["namespace"].is_string() &&
        (!spec["ref"].contains("namespace") || spec["ref"]["namespace"] == "" ||
         spec["ref"]["namespace"].is_null()))
      spec["ref"]["namespace"] = meta["namespace"];
    return;
  }
  if (kind == "Service") {
    defaultTemplate(spec, config, name);
    defaultTraffic(spec, /*service_context=*/true);
  } else if (kind == "Configuration") {
    defaultTemplate(spec, config, name);
  } else if (kind == "Revision") {
    defaultRevisionSpec(spec, config, name);
  } else if (kind == "Route") {
    defaultTraffic(spec, /*service_context=*/false);
  }
}

}  // namespace knap::api
