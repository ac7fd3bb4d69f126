// The resource kinds knapd serves: the four serving.knative.dev/v1 kinds,
// the core/v1 Namespaces, Secrets and ConfigMaps, and the custom-domain kinds
// (serving.knative.dev/v1beta1 DomainMapping, networking.internal.knative.dev/
// v1alpha1 ClusterDomainClaim); and the well-known label and annotation keys.
// Plain data; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace knap::api {

inline constexpr std::string_view kGroup = "serving.knative.dev";
inline constexpr std::string_view kVersion = "v1";
inline constexpr std::string_view kApiVersion = "serving.knative.dev/v1";
inline constexpr std::string_view kDomainMappingVersion = "v1beta1";  // of serving.knative.dev
inline constexpr std::string_view kNetworkingGroup = "networking.internal.knative.dev";
inline constexpr std::string_view kNetworkingVersion = "v1alpha1";

struct ResourceInfo {
  std::string kind;                         // "Service"
  std::string plural;                       // "services"
  std::string singular;                     // "service"
  std::vector<std::string> short_names;     // {"ksvc"}
  bool user_creatable;                      // Revisions are created only by the Configuration controller
  std::string group = std::string(kGroup);  // "" for core/v1
  std::string version = std::string(kVersion);
  bool namespaced = true;  // false: Namespaces
  bool has_status = true;  // a /status subresource
  // "serving.knative.dev/v1", or "v1" for the core group.
  std::string apiVersion() const { return group.empty() ? version : group + "/" + version; }
  bool core() const { return group.empty(); }
};

// Service, Configuration, Revision, Route (in that order).
const std::vector<ResourceInfo>& resources();
// By plural ("services"), kind ("Service"), singular or short name; nullptr if unknown.
const ResourceInfo* findResource(std::string_view name);

// The core/v1 kinds: Namespace, Secret, ConfigMap (in that order).
const std::vector<ResourceInfo>& coreResources();
// A core kind by plural ("secrets"); nullptr if unknown.
const ResourceInfo* findCoreResource(std::string_view plural);
// DomainMapping (serving.knative.dev/v1beta1, namespaced) and
// ClusterDomainClaim (networking.internal.knative.dev/v1alpha1, cluster-scoped).
const std::vector<ResourceInfo>& domainResources();
// Any served kind by its group, version and plural ("" group: core/v1);
// nullptr if unknown.
const ResourceInfo* findApiResource(std::string_view group, std::string_view version,
                                    std::string_view plural);
// Any served kind by kind name ("DomainMapping"); nullptr if unknown.
const ResourceInfo* findKind(std::string_view kind);
// Every kind above that is namespaced (the kinds a namespace holds, besides Events).
std::vector<const ResourceInfo*> namespacedResources();

namespace labels {
inline constexpr const char* kService = "serving.knative.dev/service";
inline constexpr const char* kServiceUid = "serving.knative.dev/serviceUID";
inline constexpr const char* kConfiguration = "serving.knative.dev/configuration";
inline constexpr const char* kConfigurationUid = "serving.knative.dev/configurationUID";
inline constexpr const char* kConfigurationGeneration = "serving.knative.dev/configurationGeneration";
inline constexpr const char* kRevision = "serving.knative.dev/revision";
inline constexpr const char* kRevisionUid = "serving.knative.dev/revisionUID";
inline constexpr const char* kRoute = "serving.knative.dev/route";
inline constexpr const char* kRoutingState = "serving.knative.dev/routingState";
inline constexpr const char* kVisibility = "networking.knative.dev/visibility";
}  // namespace labels

namespace annotations {
inline constexpr const char* kRoutes = "serving.knative.dev/routes";
inline constexpr const char* kRoutingStateModified = "serving.knative.dev/routingStateModified";
inline constexpr const char* kCreator = "serving.knative.dev/creator";
inline constexpr const char* kLastModifier = "serving.knative.dev/lastModifier";
inline constexpr const char* kNoGc = "serving.knative.dev/no-gc";
inline constexpr const char* kLastApplied = "kubectl.kubernetes.io/last-applied-configuration";
inline constexpr const char* kRolloutDuration = "serving.knative.dev/rollout-duration";
inline constexpr const char* kProgressDeadline = "serving.knative.dev/progress-deadline";
inline constexpr const char* kAutoscalingPrefix = "autoscaling.knative.dev/";
}  // namespace annotations

}  // namespace knap::api
