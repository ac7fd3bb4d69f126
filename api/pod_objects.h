// What a Revision's pods read from Secrets and ConfigMaps: env
// valueFrom.secretKeyRef / configMapKeyRef, envFrom, and the files of
// secret, configMap and projected volumes — resolved against the objects in
// the Revision's namespace, with Kubernetes' (kubelet's) rules and messages:
// - env: envFrom entries first (in order, prefix applied; keys that are not
//   valid env var names are skipped, as the kubelet does), then env; a missing
//   object or key fails unless `optional: true`, with
//   `secret "db" not found` / `couldn't find key password in Secret default/db`;
// - volumes: every key (or `items` only, each a relative path without ".."),
//   mode = item mode, else defaultMode, else 0644; Secret data is base64
//   decoded, ConfigMap data and binaryData are both projected; a missing object
//   or item key fails unless optional;
// - projected serviceAccountToken sources: a token from the TokenIssuer for
//   spec.serviceAccountName (default "default"), the source's audience and
//   expirationSeconds (default 3600), at the source's path.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace knap::api {

// Finds a Secret or ConfigMap ("Secret"/"ConfigMap", name) in the Revision's
// namespace; nullopt when it does not exist.
using ObjectLookup =
    std::function<std::optional<nlohmann::json>(const std::string& kind, const std::string& name)>;

// Issues a service account token (api/server/service_account_token.h):
// namespace, service account, audience ("" = the API's), lifetime in seconds.
using TokenIssuer =
    std::function<StatusOr<std::string>(const std::string& ns, const std::string& service_account,
                                        const std::string& audience, int64_t expiration_seconds)>;

struct ProjectedFile {
  std::string path;  // relative: "password", "conf/app.yaml"
  std::string data;  // the bytes
  int mode = 0644;
  bool operator==(const ProjectedFile&) const = default;
};

struct PodObjects {
  struct ContainerEnv {
    // From envFrom and then from env entries whose value comes from a Secret
    // or ConfigMap, in that order; an optional reference that is missing
    // defines nothing.
    std::vector<std::pair<std::string, std::string>> from_env_from;
    std::map<std::string, std::string> from_refs;  // env[].name -> value
  };
  std::map<std::string, ContainerEnv> env;                    // by container name
  std::map<std::string, std::vector<ProjectedFile>> volumes;  // secret/configMap/projected volume -> files
  bool operator==(const PodObjects&) const = default;
};

struct PodObjectsError {
  std::string reason;   // "CreateContainerConfigError" (env) or "FailedMount" (volumes)
  std::string message;  // names the object and key
};

// Resolves a RevisionSpec ({containers, volumes, ...}) in namespace `ns`.
// On failure returns nullopt and fills *error.
// Without an `issue_token`, a serviceAccountToken projection fails (FailedMount).
std::optional<PodObjects> resolvePodObjects(const nlohmann::json& revision_spec, const std::string& ns,
                                            const ObjectLookup& lookup, PodObjectsError* error,
                                            const TokenIssuer& issue_token = {});

// Whether the RevisionSpec reads any Secret or ConfigMap (so its pods need a
// lookup and their volumes a periodic refresh).
bool readsObjects(const nlohmann::json& revision_spec);

// Kubernetes' env var name rule for envFrom keys: [-._a-zA-Z][-._a-zA-Z0-9]*.
bool isEnvVarName(const std::string& name);

}  // namespace knap::api
