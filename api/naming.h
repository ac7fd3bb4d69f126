// Kubernetes / Knative naming rules: revision names (kmeta.ChildName), the
// DNS-1035 / DNS-1123 / qualified-name syntax checks, and generateName suffixes.
// Pure functions; thread-safe (generateNameSuffix uses the caller's generator).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>

namespace knap::api {

inline constexpr size_t kMaxNameLength = 63;

// Knative's kmeta.ChildName(parent, suffix): parent+suffix when that fits in
// 63 characters, otherwise the parent is cut and the md5 hex of the whole
// parent inserted so that distinct long parents give distinct children.
std::string childName(const std::string& parent, const std::string& suffix);

// The name the Configuration controller gives generation `generation` of
// `config_name`: "hello-00001" (ChildName(config, "-%05d")).
std::string revisionName(const std::string& config_name, int64_t generation);

// Lower-case hex MD5 of `data` (32 characters).
std::string md5Hex(std::string_view data);

// DNS-1035 label: 1-63 chars of [a-z0-9-], starts with a letter, ends alphanumeric.
bool isDns1035Label(std::string_view s);
// DNS-1123 label: 1-63 chars of [a-z0-9-], starts and ends alphanumeric.
bool isDns1123Label(std::string_view s);
// DNS-1123 subdomain: <= 253 chars, dot-separated DNS-1123 labels.
bool isDns1123Subdomain(std::string_view s);
// Kubernetes qualified name ("name" or "prefix/name"): name is 1-63 chars of
// [A-Za-z0-9-_.] starting and ending alphanumeric; prefix a DNS-1123 subdomain.
bool isQualifiedName(std::string_view s);
// generateName prefix (Kubernetes NameIsDNS1035Label(prefix=true)): a DNS-1035
// label where a trailing '-' is allowed, e.g. "hello-".
bool isDns1035Prefix(std::string_view s);

// Kubernetes' SimpleNameGenerator: the prefix (cut to 58 chars) plus 5 random
// characters from "bcdfghjklmnpqrstvwxz2456789".
std::string generateNameSuffix(std::string prefix, std::mt19937& rng);

}  // namespace knap::api

namespace knap::api {

// Whether `ref` parses as a container image reference
// ([registry[:port]/]repo/path[:tag][@sha256:<64 hex>]), as go-containerregistry's
// name.ParseReference(WeakValidation) accepts it. On failure `why` (if given)
// says what is wrong.
bool isValidImageReference(std::string_view ref, std::string* why = nullptr);

}  // namespace knap::api
