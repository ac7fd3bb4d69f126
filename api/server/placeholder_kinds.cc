#include "api/server/placeholder_kinds.h"

#include "api/codec.h"
#include "api/server/discovery.h"
#include "api/server/k8s_status.h"

namespace knap::api {

using nlohmann::json;

const std::vector<PlaceholderKind>& placeholderKinds() {
  static const std::vector<PlaceholderKind> kKinds = {
      {"", "v1", "services", "service", "Service", true, {"svc"}},
      {"", "v1", "endpoints", "endpoints", "Endpoints", true, {"ep"}},
      {"", "v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", true, {"pvc"}},
      {"", "v1", "pods", "pod", "Pod", true, {"po"}},
      {"", "v1", "replicationcontrollers", "replicationcontroller", "ReplicationController", true, {"rc"}},
      {"", "v1", "persistentvolumes", "persistentvolume", "PersistentVolume", false, {"pv"}},
      {"apps", "v1", "daemonsets", "daemonset", "DaemonSet", true, {"ds"}},
      {"apps", "v1", "deployments", "deployment", "Deployment", true, {"deploy"}},
      {"apps", "v1", "replicasets", "replicaset", "ReplicaSet", true, {"rs"}},
      {"apps", "v1", "statefulsets", "statefulset", "StatefulSet", true, {"sts"}},
      {"batch", "v1", "jobs", "job", "Job", true, {}},
      {"batch", "v1", "cronjobs", "cronjob", "CronJob", true, {"cj"}},
      {"networking.k8s.io", "v1", "ingresses", "ingress", "Ingress", true, {"ing"}},
  };
  return kKinds;
}

json placeholderApiResources(const std::string& group, const std::string& version) {
  json list = json::array();
  for (const PlaceholderKind& k : placeholderKinds()) {
    if (k.group != group || k.version != version) continue;
    json e = {{"name", k.plural},
              {"singularName", k.singular},
              {"namespaced", k.namespaced},
              {"kind", k.kind},
              {"verbs", json::array({"get", "list"})}};
    if (!k.short_names.empty()) e["shortNames"] = k.short_names;
    list.push_back(e);
  }
  return list;
}

std::vector<std::string> placeholderGroups() {
  std::vector<std::string> out;
  for (const PlaceholderKind& k : placeholderKinds()) {
    if (k.group.empty()) continue;
    if (out.empty() || out.back() != k.group) out.push_back(k.group);
  }
  return out;
}

const json* placeholderGroupDocument(const std::string& group) {
  static const std::map<std::string, json> docs = [] {
    std::map<std::string, json> m;
    for (const std::string& g : placeholderGroups()) m[g] = singleVersionGroupDocument(g, "v1");
    return m;
  }();
  auto it = docs.find(group);
  return it == docs.end() ? nullptr : &it->second;
}

std::optional<HttpResponse> handlePlaceholderRequest(const std::string& method,
                                                     const std::vector<std::string>& s,
                                                     int64_t resource_version) {
  // Split into group, version and the rest after it.
  std::string group, version;
  size_t base;
  if (s.size() >= 3 && s[0] == "api" && s[1] == "v1") {
    version = "v1";
    base = 2;
  } else if (s.size() >= 4 && s[0] == "apis") {
    group = s[1];
    version = s[2];
    base = 3;
  } else {
    return std::nullopt;
  }
  std::vector<std::string> rest(s.begin() + static_cast<long>(base), s.end());
  std::string ns;
  if (rest.size() >= 3 && rest[0] == "namespaces") {
    ns = rest[1];
    rest.erase(rest.begin(), rest.begin() + 2);
  }
  if (rest.empty() || rest.size() > 2) return std::nullopt;
  const PlaceholderKind* kind = nullptr;
  for (const PlaceholderKind& k : placeholderKinds()) {
    if (k.group == group && k.version == version && k.plural == rest[0]) kind = &k;
  }
  if (kind == nullptr || (!ns.empty() && !kind->namespaced)) return std::nullopt;
  HttpResponse r;
  if (method != "GET" && method != "HEAD") {
    r.code = 405;
    r.body = toJsonText(makeApiError(405, "MethodNotAllowed",
                                     "the server does not allow this method on the requested resource (" +
                                         method + "): knap keeps no " + kind->plural,
                                     json::object())
                            .body);
    return r;
  }
  if (rest.size() == 2) {
    r.code = 404;
    r.body = toJsonText(makeApiError(404, "NotFound", kind->plural + " \"" + rest[1] + "\" not found",
                                     {{"name", rest[1]}, {"group", group}, {"kind", kind->plural}})
                            .body);
    return r;
  }
  json list = {{"kind", kind->kind + "List"},
               {"apiVersion", group.empty() ? version : group + "/" + version},
               {"metadata", {{"resourceVersion", std::to_string(resource_version)}}},
               {"items", json::array()}};
  r.body = toJsonText(list);
  return r;
}

}  // namespace knap::api
