// Discovery and OpenAPI documents for serving.knative.dev/v1 (and core/v1's
// Namespaces, Secrets and ConfigMaps, and the DomainMapping and
// ClusterDomainClaim group versions), shaped as
// KUBECTL-WIRE §2, §3 and §5 require: /version, /apis, the group, the
// APIResourceList, and the /openapi/v3 root and group-version documents.
// Pure functions (documents are built once and cached); thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace knap::api {

inline constexpr const char* kServerMinorVersion = "30";
inline constexpr const char* kServerGitVersion = "v1.30.0-knap";

const nlohmann::json& versionDocument();
// The APIGroup document of a group served at one version.
nlohmann::json singleVersionGroupDocument(const std::string& group, const std::string& version);
const nlohmann::json& apiGroupListDocument();     // /apis
const nlohmann::json& apiGroupDocument();         // /apis/serving.knative.dev
const nlohmann::json& eventsGroupDocument();      // /apis/events.k8s.io
const nlohmann::json& apiResourceListDocument();  // /apis/serving.knative.dev/v1
// authorization.k8s.io and authentication.k8s.io (SelfSubjectAccessReview and
// SelfSubjectReview only, for `kubectl auth can-i` and `kubectl auth whoami`):
// the APIGroup of `group`, and its v1 APIResourceList; null for other groups.
const nlohmann::json* reviewGroupDocument(const std::string& group);
const nlohmann::json* reviewResourceListDocument(const std::string& group);
const nlohmann::json& openApiV3RootDocument();          // /openapi/v3
const nlohmann::json& openApiV3GroupVersionDocument();  // /openapi/v3/apis/serving.knative.dev/v1
// The content hash used in the v3 root's serverRelativeURL and as the GV document's ETag.
const std::string& openApiV3Hash();
// The same for core/v1 (Namespaces, Secrets, ConfigMaps): /openapi/v3/api/v1.
const nlohmann::json& openApiV3CoreDocument();
const std::string& openApiV3CoreHash();
// /openapi/v2: an OpenAPI v2 (Swagger 2.0) document with no paths and no
// definitions, as JSON or as the gnostic openapi.v2.Document protobuf
// (asked for as application/com.github.proto-openapi.spec.v2@v1.0+protobuf,
// the only form kubectl asks for; answered as application/octet-stream, as
// kube-apiserver does). kubectl before 1.27 (Debian's 1.20) refuses to apply
// without one; finding no schema for a kind, it applies with a JSON merge
// patch and leaves validation to the server, as for a CRD without a schema.
// The full schemas are in the v3 documents.
inline constexpr const char* kOpenApiV2Protobuf =
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
const nlohmann::json& openApiV2Document();
const std::string& openApiV2Protobuf();

// The /api/v1 APIResourceList entries of namespaces, namespaces/status, secrets, configmaps.
nlohmann::json coreApiResources();

// The custom-domain kinds' group versions: serving.knative.dev/v1beta1
// (DomainMapping) and networking.internal.knative.dev/v1alpha1
// (ClusterDomainClaim). Each returns null for any other group/version.
const nlohmann::json& networkingGroupDocument();  // /apis/networking.internal.knative.dev
const nlohmann::json* domainResourceListDocument(const std::string& group, const std::string& version);
const nlohmann::json* openApiV3DomainDocument(const std::string& group, const std::string& version);
const std::string* openApiV3DomainHash(const std::string& group, const std::string& version);

}  // namespace knap::api
