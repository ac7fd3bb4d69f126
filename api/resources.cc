#include "api/resources.h"

#include <algorithm>

namespace knap::api {

const std::vector<ResourceInfo>& resources() {
  static const std::vector<ResourceInfo> kResources = {
      {"Service", "services", "service", {"kservice", "ksvc"}, true},
      {"Configuration", "configurations", "configuration", {"config", "cfg"}, true},
      {"Revision", "revisions", "revision", {"rev"}, false},
      {"Route", "routes", "route", {"rt"}, true},
  };
  return kResources;
}

const ResourceInfo* findResource(std::string_view name) {
  for (const auto& r : resources()) {
    if (r.kind == name || r.plural == name || r.singular == name) return &r;
    if (std::find(r.short_names.begin(), r.short_names.end(), name) != r.short_names.end()) return &r;
  }
  return nullptr;
}

const std::vector<ResourceInfo>& coreResources() {
  static const std::vector<ResourceInfo> kCore = [] {
    std::vector<ResourceInfo> v = {
        {"Namespace", "namespaces", "namespace", {"ns"}, true},
        {"Secret", "secrets", "secret", {}, true},
        {"ConfigMap", "configmaps", "configmap", {"cm"}, true},
    };
    for (ResourceInfo& r : v) {
      r.group = "";
      r.has_status = r.kind == "Namespace";
    }
    v[0].namespaced = false;
    return v;
  }();
  return kCore;
}

const ResourceInfo* findCoreResource(std::string_view plural) {
  for (const auto& r : coreResources())
    if (r.plural == plural) return &r;
  return nullptr;
}

const std::vector<ResourceInfo>& domainResources() {
  static const std::vector<ResourceInfo> kDomain = [] {
    std::vector<ResourceInfo> v = {
        {"DomainMapping", "domainmappings", "domainmapping", {"dm"}, true},
        {"ClusterDomainClaim", "clusterdomainclaims", "clusterdomainclaim", {"cdc"}, true},
    };
    v[0].version = std::string(kDomainMappingVersion);
    v[1].group = std::string(kNetworkingGroup);
    v[1].version = std::string(kNetworkingVersion);
    v[1].namespaced = false;
    v[1].has_status = false;
    return v;
  }();
  return kDomain;
}

const ResourceInfo* findApiResource(std::string_view group, std::string_view version,
                                    std::string_view plural) {
  for (const auto* list : {&resources(), &coreResources(), &domainResources()})
    for (const auto& r : *list)
      if (r.group == group && r.version == version && r.plural == plural) return &r;
  return nullptr;
}

const ResourceInfo* findKind(std::string_view kind) {
  for (const auto* list : {&resources(), &coreResources(), &domainResources()})
    for (const auto& r : *list)
      if (r.kind == kind) return &r;
  return nullptr;
}

std::vector<const ResourceInfo*> namespacedResources() {
  std::vector<const ResourceInfo*> out;
  for (const auto& r : resources()) out.push_back(&r);
  for (const auto& r : coreResources())
    if (r.namespaced) out.push_back(&r);
  for (const auto& r : domainResources())
    if (r.namespaced) out.push_back(&r);
  return out;
}

}  // namespace knap::api
