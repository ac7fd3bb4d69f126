// Who is calling the API and what they may do (issue 9), the Kubernetes way:
//  - Authentication: X.509 client certificates signed by knapd's CA
//    (CN = user name, O = groups; the TLS layer in api_server.cc verifies the
//    chain and hands the names here) and static bearer tokens from a token
//    file in kube-apiserver's --token-auth-file CSV format
//    `token,user,uid,"group1,group2"`. Requests on the root-only unix socket
//    carry no credential and are the admin.
//  - Authorization: three roles, bound per namespace or cluster-wide to users
//    and groups (knap.api-role-bindings); the group system:masters is admin
//    everywhere. authorize() is a pure function of (user, request attributes,
//    bindings).
//      view  get, list, watch every resource knapd serves (no writes)
//      edit  view + create, update, patch, delete, deletecollection of
//            serving.knative.dev objects (not their /status), and create
//            on knap.dev revisions/restart (restart a Revision's pods)
//      admin every verb on every resource, /status included
//    Any authenticated user may read discovery, OpenAPI and /version and ask
//    SelfSubjectAccessReview / SelfSubjectReview about themselves.
// Token lookup compares SHA-256 digests in constant time over every entry.
// Everything here is immutable after construction; thread-safe.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/server/service_account_token.h"
#include "common/config.h"
#include "common/status.h"

namespace knap::api {

inline constexpr const char* kMastersGroup = "system:masters";
inline constexpr const char* kAuthenticatedGroup = "system:authenticated";

struct UserInfo {
  std::string name;
  std::string uid;
  std::vector<std::string> groups;  // as authenticated; system:authenticated is added by authenticate
};

// The admin on the unix socket (and every caller when access control is off).
UserInfo localAdmin();

// What a request does, in Kubernetes' authorizer vocabulary.
struct RequestAttributes {
  bool resource_request = true;
  std::string verb;         // get list watch create update patch delete deletecollection
  std::string api_group;    // "" for core
  std::string resource;     // plural: "services"
  std::string subresource;  // "status" or ""
  std::string ns;           // "" = cluster scope
  std::string name;         // "" for collections
  std::string path;         // non-resource requests
};

// A parsed token file. One entry per line.
class TokenFile {
 public:
  // Parses kube-apiserver's token CSV. Blank lines and lines starting with '#'
  // are skipped. Every malformed line is an error "FILE line N: why" (all of
  // them, joined by "; "); the file is refused as a whole so that a typo never
  // silently drops or changes a credential. Bounded: at most 16 MiB and
  // 100000 lines.
  static StatusOr<TokenFile> parse(const std::string& text, const std::string& file_name);
  static StatusOr<TokenFile> load(const std::string& path);

  // The user a bearer token belongs to, or nullopt.
  std::optional<UserInfo> lookup(const std::string& token) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::array<unsigned char, 32> digest;
    UserInfo user;
  };
  std::vector<Entry> entries_;
};

// Access control of the TCP listener. Absent (nullptr in RequestPolicy) =
// every caller is localAdmin(), which knapd allows only for plain HTTP on
// loopback with knap.api-insecure-loopback.
struct AccessControl {
  std::optional<TokenFile> tokens;
  // Service account tokens knapd issued to pods (audience kApiAudience)
  // authenticate as system:serviceaccount:<ns>:<name>, groups
  // system:serviceaccounts and system:serviceaccounts:<ns>.
  std::shared_ptr<const ServiceAccountTokens> service_account_tokens;
  std::vector<ApiRoleBinding> bindings;
};

// The authorization decision. `reason` (may be null) gets why it was allowed.
bool authorize(const UserInfo& user, const RequestAttributes& attrs,
               const std::vector<ApiRoleBinding>& bindings, std::string* reason = nullptr);

// kube-apiserver's 403 message: `services.serving.knative.dev "hello" is forbidden:
// User "bob" cannot create resource "services" in API group "serving.knative.dev"
// in the namespace "default"`.
std::string forbiddenMessage(const UserInfo& user, const RequestAttributes& attrs);

// The attributes of a request, derived from its path the way kube-apiserver's
// RequestInfo does: /api/v1/... and /apis/GROUP/VERSION/... with optional
// namespaces/NS, then RESOURCE[/NAME[/SUBRESOURCE]]; everything else (/, /apis,
// /apis/G/V, /version, /openapi/...) is a non-resource request whose verb is
// the lower-case method. `segs` are the decoded path segments, `watch` the
// watch query parameter.
RequestAttributes requestAttributes(const std::string& method, const std::string& path,
                                    const std::vector<std::string>& segs, bool watch);

// Parses "CN=..,O=.." already extracted from a verified certificate.
UserInfo userFromCertificate(const std::string& common_name, const std::vector<std::string>& organizations);

}  // namespace knap::api
