// Importing OCI image layout archives into containerd and reading images
// back (CONTAINERD-CLIENT.md §2).
//
// Thread safety: free functions; safe to call concurrently for different
// images (containerd serialises per blob/snapshot; a concurrent import of the
// same image sees ALREADY_EXISTS paths and still succeeds).
// All work happens under a temporary containerd lease that is deleted at the
// end, so garbage collection cannot take half-imported objects; afterwards the
// image record and the GC labels keep blobs and snapshots alive.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "oci/oci_layout.h"
#include "runtime/containerd/containerd_client.h"

namespace knap::containerd {

// What a pod runner needs to know about an image in containerd.
struct ImageInfo {
  std::string name;  // "registry/repo:tag"
  std::string manifest_digest;
  std::string config_digest;
  std::vector<std::string> chain_ids;  // bottom first; back() is the rootfs parent
  std::string chain_id;                // chain_ids.back(): the snapshot to Prepare a rootfs from
  bool unpacked = false;               // chain_id exists in the client's snapshotter
  oci::ImageConfig config;             // Entrypoint, Cmd, Env, User, WorkingDir, ExposedPorts, json
};

struct ImportOptions {
  oci::Platform platform;                         // which manifest of an index to import (linux/amd64)
  std::string name;                               // overrides the archive's name annotation
  Duration lease_expiry = std::chrono::hours(1);  // safety net if knapd dies mid-import
};

// Imports the archive at `tar_path` (an uncompressed OCI image layout tar):
// writes config, layers and manifest (with GC labels), creates or updates the
// image record, unpacks the layers into the client's snapshotter and labels
// the config with the top chain ID. Idempotent. Errors: kNotFound (no such
// file, or no manifest for the platform), kInvalidArgument (malformed archive
// or no image name), kFailedPrecondition (layer content does not match its
// diff_id), or the containerd error of the failing step.
StatusOr<ImageInfo> importImageArchive(const ContainerdClient& client, const std::string& tar_path,
                                       const ImportOptions& options = {});

// Unpacks layers whose blobs are already in the content store (shared with
// the registry pull path). `client` should carry a lease. Returns the chain
// IDs; kFailedPrecondition if an applied layer's digest differs from its
// diff_id.
StatusOr<std::vector<std::string>> unpackLayers(const ContainerdClient& client,
                                                const std::vector<oci::Descriptor>& layers,
                                                const std::vector<std::string>& diff_ids,
                                                const std::string& config_digest);

// Reads an image back from containerd: image record -> manifest (choosing
// `platform` if the record points at an index) -> config; `unpacked` from
// Snapshots.Stat of the top chain ID. kNotFound if the image is unknown.
StatusOr<ImageInfo> getImage(const ContainerdClient& client, const std::string& name,
                             const oci::Platform& platform = {});

}  // namespace knap::containerd
