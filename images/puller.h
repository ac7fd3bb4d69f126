// Puller: fetches an image from its registry into the local image store
// (containerd's content store + snapshots), resolving tags to digests.
//
// The interface is what the rest of knap uses (the pre-puller, the CLI, the
// pod runner's image gate); RegistryPuller (registry_puller.h) implements it
// with the libcurl registry client, tests use fakes.
//
// Errors (Status codes) and the Revision condition reasons they become
// (pullFailureReason()):
//   kUnauthenticated  -> "Unauthorized"        401/403, or no usable credentials
//   kNotFound         -> "ManifestUnknown"     no such repository/tag/digest, or no
//                                              manifest for this machine's platform
//   kUnavailable,
//   kDeadlineExceeded -> "RegistryUnreachable" connection refused/reset, TLS failure,
//                                              5xx, transfer broken after retries
//   kDataLoss         -> "DigestMismatch"      content does not match its digest/size
//   kInvalidArgument  -> "InvalidImageName"    the reference cannot be parsed
//   others            -> "ImagePullFailed"
// Messages name the image and what a person can do.
//
// Thread safety: implementations are safe to call from any thread; concurrent
// pull() calls for the same image share one transfer (every caller gets the
// result), and blobs already in the store are not fetched again.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"

namespace knap::images {

struct PullProgress {
  std::string image;        // as requested
  std::string phase;        // "resolving", "fetching", "unpacking", "done"
  int64_t bytes_done = 0;   // blob bytes written so far (already present counts as done)
  int64_t bytes_total = 0;  // sum of the sizes of the blobs to fetch (0 until the manifest is known)
  int blobs_done = 0;
  int blobs_total = 0;
};
using ProgressFn = std::function<void(const PullProgress&)>;

struct PullResult {
  std::string image;            // as requested, e.g. "localhost:5000/app:v1"
  std::string digest_ref;       // "localhost:5000/app@sha256:<manifest digest>": the name pods use
  std::string manifest_digest;  // of the platform manifest (not of an index)
  std::string index_digest;     // of the index/manifest list the tag pointed at, if any
  int64_t bytes_fetched = 0;    // downloaded by this pull (0 when everything was present)
  int64_t bytes_total = 0;      // config + layers
};

class Puller {
 public:
  virtual ~Puller() = default;
  // Tag -> "repo@sha256:<digest>" (the digest the tag points at: an index's
  // when the tag names a multi-platform image, as Knative pins it). A
  // reference that already carries a digest is returned without a request.
  virtual StatusOr<std::string> resolve(const std::string& image) = 0;
  // Makes `image` present and unpacked, named both `image` and its digest
  // ref. Blocking; see the header comment for errors and sharing.
  virtual StatusOr<PullResult> pull(const std::string& image, const ProgressFn& progress = {}) = 0;
};

// The Revision condition reason for a failed resolve()/pull() (table above).
std::string pullFailureReason(const Status& status);

}  // namespace knap::images
