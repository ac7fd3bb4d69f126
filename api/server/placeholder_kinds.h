// The Kubernetes kinds knapd has no objects of but kubectl asks for: the core
// v1 services (kubectl cluster-info), and the kinds of kubectl apply --prune's
// default allowlist (core v1 endpoints, persistentvolumeclaims, pods,
// replicationcontrollers, persistentvolumes; apps/v1 daemonsets, deployments,
// replicasets, statefulsets; batch/v1 jobs, cronjobs; networking.k8s.io/v1
// ingresses). kubectl refuses `apply --prune` when one of them is missing from
// discovery, then lists each with the prune's label selector. They are
// advertised with the verbs get and list only; every list is empty and every
// get is 404 NotFound; other methods are 405.
// Pure functions over constant tables; thread-safe.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "api/server/rest_handler.h"

namespace knap::api {

struct PlaceholderKind {
  std::string group;  // "" for core
  std::string version;
  std::string plural;
  std::string singular;
  std::string kind;
  bool namespaced;
  std::vector<std::string> short_names;
};

const std::vector<PlaceholderKind>& placeholderKinds();

// APIResourceList entries of the placeholder kinds of `group`/`version`.
nlohmann::json placeholderApiResources(const std::string& group, const std::string& version);
// The groups other than core with placeholder kinds (apps, batch,
// networking.k8s.io): their APIGroup document, or nullptr.
const nlohmann::json* placeholderGroupDocument(const std::string& group);
// The group names above, for /apis.
std::vector<std::string> placeholderGroups();

// Answers a request on a placeholder kind's path (/api/v1/[namespaces/NS/]PLURAL[/NAME]
// or /apis/G/V/[namespaces/NS/]PLURAL[/NAME]); nullopt for any other path.
// `resource_version` is the store's current one, for the empty lists.
std::optional<HttpResponse> handlePlaceholderRequest(const std::string& method,
                                                     const std::vector<std::string>& segs,
                                                     int64_t resource_version);

}  // namespace knap::api
