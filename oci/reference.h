// Image references parsed the way Docker does: "nginx" is
// docker.io/library/nginx:latest, a first component with '.' or ':' or equal
// to "localhost" is a registry host, "@sha256:<hex>" pins a digest.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <string>

#include "common/status.h"

namespace knap::oci {

inline constexpr char kDockerHub[] = "docker.io";
inline constexpr char kDockerHubApiHost[] = "registry-1.docker.io";

struct Reference {
  std::string original;    // as the user wrote it
  std::string registry;    // "docker.io", "127.0.0.1:5000", "localhost"
  std::string repository;  // "library/nginx", "team/app"
  std::string tag;         // "latest" when neither a tag nor a digest was given
  std::string digest;      // "sha256:<hex>" or ""

  // The host:port the HTTP API lives on (registry-1.docker.io for docker.io).
  std::string apiHost() const;
  // "registry/repository".
  std::string name() const;
  // The normalized form: "docker.io/library/nginx:latest" or "...@sha256:..".
  std::string canonical() const;
  // "registry/repository@<digest>".
  std::string canonicalDigestRef(const std::string& digest) const;
  // What the manifests/<reference> URL takes: the digest if any, else the tag.
  std::string manifestReference() const { return digest.empty() ? tag : digest; }
};

// Parses `image`; kInvalidArgument with what is wrong (empty, upper-case
// repository, bad tag, bad digest, bad host).
StatusOr<Reference> parseReference(const std::string& image);

// The repository part of `image` exactly as written (tag and digest removed),
// as runtime/runner names images: "127.0.0.1:5000/app:v1" -> "127.0.0.1:5000/app".
std::string writtenRepository(const std::string& image);

// The registry part of an image reference as Docker reads it
// ("127.0.0.1:5000/app:v1" -> "127.0.0.1:5000", "nginx" -> "docker.io").
std::string registryOf(const std::string& image);
// True if the image names a digest ("...@sha256:...").
bool hasDigest(const std::string& image);

}  // namespace knap::oci
