// ContainerdImageStore: the ImageStore over containerd (content store,
// snapshotter, image records), reusing the pod runner's ingest and unpack code
// (runtime/containerd/image_import.h). Each Session holds a containerd lease
// (deleted when the session ends) so nothing written during a pull can be
// garbage-collected before the image record and GC labels reference it.
//
// makeRegistryPuller() wires a RegistryPuller from knapd's config.
// Thread safety: safe from any thread (ContainerdClient is).
#pragma once

#include <memory>

#include "common/clock.h"
#include "common/config.h"
#include "images/image_store.h"
#include "images/pull_credentials.h"
#include "images/puller.h"
#include "runtime/containerd/containerd_client.h"

namespace knap::images {

class ContainerdImageStore : public ImageStore {
 public:
  explicit ContainerdImageStore(containerd::ContainerdClient client,
                                Duration lease_expiry = std::chrono::hours(1));
  // Creates the session's lease; the containerd error if it cannot.
  StatusOr<std::unique_ptr<Session>> begin(const std::string& image) override;

 private:
  containerd::ContainerdClient client_;
  Duration lease_expiry_;
};

// A RegistryPuller (owning its RegistryClient and ContainerdImageStore) from
// config.knap: platform, registry_auth_file, registry_ca_file,
// insecure_registries, pull_parallelism, data_dir (<data_dir>/pulls holds
// partial downloads). `client` should be in knap's containerd namespace.
// kInvalidArgument for a bad platform or an unreadable auth/CA file.
// `pull_credentials` (optional, must outlive the puller): the Revisions'
// imagePullSecrets, asked for hosts the auth file has no entry for.
StatusOr<std::unique_ptr<Puller>> makeRegistryPuller(const Config& config, const containerd::ContainerdClient& client,
                                                     TimeSource& time = RealTimeSource::instance(),
                                                     const PullCredentials* pull_credentials = nullptr);

}  // namespace knap::images
