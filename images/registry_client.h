// RegistryClient: the OCI distribution protocol over libcurl (manifests,
// blobs, tag -> digest), with anonymous, Basic and Bearer-token auth driven by
// the registry's WWW-Authenticate challenge, credentials from a Docker-style
// config.json, TLS verification with the system CAs plus an optional extra CA,
// and plain HTTP only for hosts listed as insecure.
//
// Thread safety: a RegistryClient is safe to use from any number of threads
// (one curl easy handle per request; the token cache is locked). Errors (see
// puller.h for the reasons they become): 401/403 after auth ->
// kUnauthenticated, 404 / MANIFEST_UNKNOWN / NAME_UNKNOWN / BLOB_UNKNOWN ->
// kNotFound, connection/TLS/transfer failures and 5xx/429 -> kUnavailable
// (with the curl error text), content that does not match its digest ->
// kDataLoss, other 4xx -> kFailedPrecondition.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "oci/oci_layout.h"
#include "oci/reference.h"

namespace knap::images {

using oci::Descriptor;
using oci::kDockerHub;
using oci::parseReference;
using oci::Platform;
using oci::Reference;  // oci/reference.h
using oci::writtenRepository;

// ------------------------------------------------------------- pure helpers

struct Credential {
  std::string username;
  std::string password;
};
// Registry host[:port] -> credential.
using AuthConfig = std::map<std::string, Credential>;

// Parses a Docker config.json ({"auths":{"host":{"auth":"b64(user:pass)"} or
// {"username":..,"password":..}}}). Keys may carry a scheme and a path
// ("https://index.docker.io/v1/" is docker.io). kInvalidArgument on malformed
// JSON or an undecodable auth field.
StatusOr<AuthConfig> parseAuthConfig(const std::string& json);
// Reads and parses `path`; "" gives an empty config; kInvalidArgument if the
// file cannot be read.
StatusOr<AuthConfig> loadAuthConfig(const std::string& path);
// "https://Host:5000/v2/" -> "host:5000"; index.docker.io and
// registry-1.docker.io -> docker.io.
std::string normalizeRegistryHost(const std::string& key);

struct AuthChallenge {
  std::string scheme;                         // lower case: "bearer", "basic"
  std::map<std::string, std::string> params;  // realm, service, scope, error (keys lower case)
};
// Parses one or more challenges of a WWW-Authenticate header value.
std::vector<AuthChallenge> parseWwwAuthenticate(const std::string& value);

// This machine's platform (linux/amd64 on x86_64, linux/arm64/v8 on aarch64).
Platform hostPlatform();
// The platform from config ("" = hostPlatform()); kInvalidArgument if malformed.
StatusOr<Platform> platformFromConfig(const std::string& configured);

bool isIndexMediaType(const std::string& media_type);
bool isManifestMediaType(const std::string& media_type);
// Picks the manifest for `platform` from an index; kNotFound naming the
// platforms the index offers.
StatusOr<Descriptor> choosePlatform(const std::vector<oci::IndexEntry>& entries, const Platform& platform,
                                    const std::string& image);
// The media type of a manifest body when the server's Content-Type is missing
// or generic: its mediaType field, else index if it has "manifests".
std::string sniffManifestMediaType(const std::string& body);

// ------------------------------------------------------------------ client

struct RegistryOptions {
  std::string auth_file;                         // Docker config.json; "" = anonymous
  std::string ca_file;                           // extra PEM CA bundle; "" = system CAs only
  std::vector<std::string> insecure_registries;  // host[:port] reached over plain HTTP
  Duration connect_timeout = std::chrono::seconds(10);
  // A transfer slower than 1 byte/s for this long is aborted (kUnavailable).
  Duration stall_timeout = std::chrono::seconds(30);
  int64_t max_manifest_bytes = 4 << 20;
  std::string user_agent = "knap";
  // Credentials for a registry host ("host:port", normalizeRegistryHost form)
  // that the auth file lacks: the Revisions' imagePullSecrets
  // (images/pull_credentials.h). Called on a challenge; may be empty.
  std::function<std::optional<Credential>(const std::string& host)> extra_credentials;
};

struct FetchedManifest {
  std::string media_type;
  std::string digest;  // sha256 of body (verified against a requested digest)
  std::string body;
};

class RegistryClient {
 public:
  // Loads the auth file; kInvalidArgument if it cannot be read or parsed.
  static StatusOr<std::unique_ptr<RegistryClient>> create(RegistryOptions options, TimeSource& time);
  RegistryClient(RegistryOptions options, AuthConfig auth, TimeSource& time);
  ~RegistryClient();
  RegistryClient(const RegistryClient&) = delete;
  RegistryClient& operator=(const RegistryClient&) = delete;

  // HEAD /v2/<repo>/manifests/<reference>: the descriptor the tag/digest names
  // (from Docker-Content-Digest; falls back to GET + sha256 of the body).
  StatusOr<Descriptor> resolve(const Reference& ref);
  // GET /v2/<repo>/manifests/<reference> (tag or digest). When `reference` is
  // a digest the body is checked against it (kDataLoss naming both digests).
  StatusOr<FetchedManifest> getManifest(const Reference& ref, const std::string& reference);
  // Receives a blob chunk; `at` is its offset in the blob. Returning a
  // non-OK status aborts the transfer with that status.
  using BlobSink = std::function<Status(std::string_view chunk, int64_t at)>;
  // GET /v2/<repo>/blobs/<digest> from `offset` (a Range request when > 0;
  // if the server ignores the Range, chunks start again at 0). Nothing is
  // verified here; the caller hashes what the sink sees.
  Status fetchBlob(const Reference& ref, const std::string& digest, int64_t offset, const BlobSink& sink);
  // Small blobs (configs) into memory, verified against `digest`.
  StatusOr<std::string> getBlob(const Reference& ref, const std::string& digest,
                                int64_t max_bytes = 16 << 20);

  // "http" for insecure registries, else "https".
  std::string schemeFor(const std::string& host) const;
  const RegistryOptions& options() const { return options_; }

  // Internal request/response (public only for the curl callbacks).
  struct Request;
  struct Response;

 private:
  // One request with the auth dance: cached token/basic header, on 401 one
  // retry after answering the challenge.
  StatusOr<Response> perform(const Reference& ref, Request& req);
  StatusOr<Response> performOnce(const Request& req, const std::string& authorization);
  Status answerChallenge(const Reference& ref, const std::string& scope, const std::string& www_authenticate,
                         std::string* authorization);
  Status httpError(const Reference& ref, const Response& resp, const std::string& what) const;
  std::string credentialHint(const std::string& host) const;

  RegistryOptions options_;
  AuthConfig auth_;
  TimeSource& time_;
  std::mutex mu_;
  struct CachedAuth {
    std::string header;  // "Bearer x" / "Basic y"
    MonoTime expires{};
  };
  std::map<std::string, CachedAuth> auth_cache_;  // "host|scope"
};

}  // namespace knap::images
