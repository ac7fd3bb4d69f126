// DomainMappings (serving.knative.dev/v1beta1): what a mapping's spec.ref
// routes to, and the router's host table entries for mapped domains.
//
// A DomainMapping named "app.example.com" whose ref is a Knative Service or
// Route preserves that Route's traffic split, as Knative's reconciler does
// (routeHTTPPaths): a Service's Route has the Service's name. The data plane
// adds one plain host entry per mapping that holds its ClusterDomainClaim
// (status condition DomainClaimed True) and resolved its reference
// (ReferenceResolved True); the Route's own hosts win a clash.
//
// Pure functions of their arguments; thread-safe.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "controller/route_urls.h"

namespace knap::controller {

// The Route a DomainMapping's spec.ref routes to (same namespace): ref.name
// for apiVersion serving.knative.dev/v1 kinds Service and Route; "" for any
// other reference (knap resolves no other Addressable).
std::string domainMappingRoute(const nlohmann::json& dm);

// One mapped host and the split it serves (the target Route's main split).
struct DomainTarget {
  std::string host;   // the DomainMapping's name
  std::string ns;     // the DomainMapping's (and the Route's) namespace
  std::string route;  // the target Route's name
  HostSplit split;    // the Route's main split (tag "")
};

// Entries for every mapping in `mappings` whose status says DomainClaimed and
// ReferenceResolved are True and whose target Route (found in `routes`, full
// Route objects) has a main traffic split. Sorted by host; a host is listed
// once (the mapping created first keeps it).
std::vector<DomainTarget> domainTargets(const Config& config, const std::vector<nlohmann::json>& mappings,
                                        const std::vector<nlohmann::json>& routes);
// The same over Routes already reduced to their RouteHosts, by (namespace, name).
std::vector<DomainTarget> domainTargets(
    const std::vector<nlohmann::json>& mappings,
    const std::map<std::pair<std::string, std::string>, const RouteHosts*>& routes);

// What the router's table takes from a DomainMapping itself (its spec.ref;
// the host is its name), as text, for IngressReady
// (controller/ingress_status.h): the data plane records it for each mapping
// domainTargets() returned.
std::string domainFingerprint(const nlohmann::json& mapping);

}  // namespace knap::controller
