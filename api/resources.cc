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

}  // namespace knap::api
