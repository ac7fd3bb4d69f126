// PullCredentials: registry credentials that Revisions bring with their
// spec.imagePullSecrets (kubernetes.io/dockerconfigjson Secrets), for the
// RegistryClient's challenges (RegistryOptions::extra_credentials).
//
// Each requester ("ns/name" of a Revision) sets the credentials its Secrets
// give (host -> user/password) while it needs its image, and releases them
// when it is gone. A lookup for a host answers the credential of the first
// requester (by key) that has one for that host. Pulls are shared per image
// (images/pre_puller.h), so, as with the kubelet's node-wide image store, an
// image one Revision pulled with its Secret is present for others too.
//
// Thread safety: every method may be called from any thread (one mutex).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "images/registry_client.h"

namespace knap::images {

class PullCredentials {
 public:
  // Replaces what `requester` supplies; an empty config is a release.
  void set(const std::string& requester, AuthConfig auth);
  void release(const std::string& requester);
  std::optional<Credential> lookup(const std::string& host) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, AuthConfig> by_requester_;
};

}  // namespace knap::images
