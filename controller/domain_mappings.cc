#include "controller/domain_mappings.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "common/json_path.h"
#include "controller/object_util.h"

namespace knap::controller {

using nlohmann::json;

namespace {

const json& refOf(const json& dm) {
  static const json kEmpty = json::object();
  if (!dm.is_object() || !dm.contains("spec") || !dm["spec"].is_object()) return kEmpty;
  const json& spec = dm["spec"];
  auto it = spec.find("ref");
  return it != spec.end() && it->is_object() ? *it : kEmpty;
}

std::string stringField(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

bool isTrue(const json& obj, const char* type) {
  if (!obj.is_object() || !obj.contains("status") || !obj["status"].is_object()) return false;
  return conditionStateOf(obj["status"], type).status == "True";
}

}  // namespace

std::string domainMappingRoute(const json& dm) {
  const json& ref = refOf(dm);
  if (stringField(ref, "apiVersion") != "serving.knative.dev/v1") return "";
  std::string kind = stringField(ref, "kind");
  if (kind != "Service" && kind != "Route") return "";
  return stringField(ref, "name");
}

std::vector<DomainTarget> domainTargets(const Config& config, const std::vector<json>& mappings,
                                        const std::vector<json>& routes) {
  std::vector<RouteHosts> each;
  each.reserve(routes.size());
  for (const json& r : routes) each.push_back(routeHosts(config, r));
  std::map<std::pair<std::string, std::string>, const RouteHosts*> by_name;
  for (const RouteHosts& r : each) by_name[{r.ns, r.name}] = &r;
  return domainTargets(mappings, by_name);
}

std::vector<DomainTarget> domainTargets(
    const std::vector<json>& mappings,
    const std::map<std::pair<std::string, std::string>, const RouteHosts*>& by_name) {
  std::vector<const json*> ordered;
  for (const json& dm : mappings) ordered.push_back(&dm);
  auto sortKey = [](const json* m) {
    return std::make_tuple(metaString(*m, "creationTimestamp"), metaString(*m, "namespace"),
                           metaString(*m, "name"));
  };
  std::stable_sort(ordered.begin(), ordered.end(),
                   [&](const json* a, const json* b) { return sortKey(a) < sortKey(b); });
  std::map<std::string, DomainTarget> out;
  for (const json* dm : ordered) {
    if (!isTrue(*dm, "DomainClaimed") || !isTrue(*dm, "ReferenceResolved")) continue;
    std::string ns = metaString(*dm, "namespace"), host = metaString(*dm, "name");
    std::string route = domainMappingRoute(*dm);
    if (route.empty() || host.empty() || out.count(host)) continue;
    auto it = by_name.find({ns, route});
    if (it == by_name.end()) continue;
    for (const HostSplit& split : it->second->splits) {
      if (!split.tag.empty() || split.revisions.empty()) continue;
      out.emplace(host, DomainTarget{host, ns, route, split});
      break;
    }
  }
  std::vector<DomainTarget> result;
  for (auto& [host, target] : out) result.push_back(std::move(target));
  return result;
}

std::string domainFingerprint(const nlohmann::json& mapping) {
  const nlohmann::json* ref = jsonAt(mapping, {"spec", "ref"});
  return ref != nullptr ? ref->dump() : "";
}

}  // namespace knap::controller
