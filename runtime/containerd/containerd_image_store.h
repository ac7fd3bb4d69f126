// ContainerdImageStore: the images::ImageStore (images/image_store.h) over
// containerd (content store, snapshotter, image records), reusing the pod
// runner's ingest and unpack code (image_import.h). Each Session holds a
// containerd lease (deleted when the session ends) so nothing written during
// a pull can be garbage-collected before the image record and GC labels
// reference it. knapd and `knap image pull` hand it to
// images::makeRegistryPuller (images/registry_puller.h).
//
// Errors: containerd being down or losing an object is kFailedPrecondition
// naming containerd (never a registry error); a layer that does not unpack
// to its diff_id is kDataLoss.
// Thread safety: safe from any thread (ContainerdClient is).
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
#include "images/image_store.h"
#include "runtime/containerd/containerd_client.h"

namespace knap::containerd {

class ContainerdImageStore : public images::ImageStore {
 public:
  explicit ContainerdImageStore(ContainerdClient client, Duration lease_expiry = std::chrono::hours(1));
  // Creates the session's lease; the containerd error if it cannot.
  StatusOr<std::unique_ptr<Session>> begin(const std::string& image) override;

 private:
  ContainerdClient client_;
  Duration lease_expiry_;
};

}  // namespace knap::containerd
