// ImageStore: what a registry pull needs from the local image store
// (containerd's content store and snapshotter). ContainerdImageStore
// (runtime/containerd/containerd_image_store.h) is the real one; unit tests
// use a fake.
//
// A Session spans one pull: objects written or found through it are kept
// alive (containerd: under the session's lease) until the session is
// destroyed, by which time the image record and GC labels hold them.
// Thread safety: an ImageStore and its Sessions are safe to call from any
// thread. Every method returns the store's error; a store that is down or
// loses an object reports kFailedPrecondition (never kUnavailable/kNotFound,
// which puller.h reserves for the registry), content that does not unpack to
// its diff_id kDataLoss.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "oci/oci_layout.h"

namespace knap::images {

using BlobLabels = std::map<std::string, std::string>;

class ImageStore {
 public:
  class Session {
   public:
    virtual ~Session() = default;
    // True if the blob is present with this digest and size (and from now on
    // protected for the session).
    virtual StatusOr<bool> hasBlob(const oci::Descriptor& desc) = 0;
    // Commits a blob from a local file whose content was already verified
    // against desc.digest and desc.size.
    virtual Status putBlobFile(const oci::Descriptor& desc, const std::string& path) = 0;
    // Commits a small blob (manifest, index) with labels (GC references).
    virtual Status putBlob(const oci::Descriptor& desc, const std::string& data,
                           const BlobLabels& labels) = 0;
    // A present blob's content (configs); kNotFound if absent.
    virtual StatusOr<std::string> readBlob(const std::string& digest) = 0;
    // Unpacks layers (present in the store) into the snapshotter.
    virtual Status unpack(const std::vector<oci::Descriptor>& layers,
                          const std::vector<std::string>& diff_ids, const std::string& config_digest) = 0;
    // Creates or updates the image record `name` -> target.
    virtual Status putImage(const std::string& name, const oci::Descriptor& target) = 0;
  };
  virtual ~ImageStore() = default;
  virtual StatusOr<std::unique_ptr<Session>> begin(const std::string& image) = 0;
};

}  // namespace knap::images
