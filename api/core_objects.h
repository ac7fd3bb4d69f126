// Admission of the core/v1 kinds knapd serves — Namespace, Secret, ConfigMap —
// with kube-apiserver's defaulting and validation rules and messages:
// - Secret: type defaults to Opaque; stringData is merged into data (base64,
//   stringData wins) and dropped; keys are config keys ([-._a-zA-Z0-9]+, at
//   most 253 characters, not "." or ".."), the values base64 strings; the
//   data total at most 1 MiB; kubernetes.io/tls needs tls.crt and tls.key,
//   kubernetes.io/dockerconfigjson needs a JSON .dockerconfigjson,
//   kubernetes.io/dockercfg a JSON .dockercfg, kubernetes.io/ssh-auth
//   ssh-privatekey, kubernetes.io/basic-auth at least one of username or
//   password; type is immutable; with `immutable: true` data and immutable
//   can no longer change.
// - ConfigMap: data (strings) and binaryData (base64) with the same key rules,
//   no key in both, 1 MiB in total, and the same `immutable` rule.
// - Namespace: the name is a DNS-1123 label; status.phase is Active.
// Strict decoding of unknown fields is api/admission.h unknownFields (the
// schema knows these kinds). Pure functions over JSON; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace knap::api {

// The namespaces that always exist (created at start) and cannot be deleted.
inline constexpr const char* kSystemNamespaces[] = {"default", "kube-system", "kube-public"};
bool isSystemNamespace(const std::string& name);

// Secret types with special rules.
inline constexpr const char* kSecretTypeOpaque = "Opaque";
inline constexpr const char* kSecretTypeDockerConfigJson = "kubernetes.io/dockerconfigjson";
inline constexpr const char* kSecretTypeTls = "kubernetes.io/tls";

// Whether `kind` is one of the core kinds above.
bool isCoreKind(const std::string& kind);

// Applies the defaults in place (idempotent). kInvalidArgument with field
// errors when a stringData/data value cannot be merged (not a string).
Status setCoreDefaults(const std::string& kind, nlohmann::json& obj);

// Validates a defaulted object; `old` is the stored object on update. Returns
// kInvalidArgument with one FieldError per problem.
Status validateCore(const std::string& kind, const nlohmann::json& obj, const nlohmann::json* old);

// Kubernetes' IsConfigMapKey: "" when valid, else the problem.
std::string configKeyError(const std::string& key);

}  // namespace knap::api
