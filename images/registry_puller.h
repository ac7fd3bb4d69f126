// RegistryPuller: the Puller (puller.h) that fetches from registries with a
// RegistryClient into an ImageStore.
//
// A pull: resolve the reference (index -> this platform's manifest), then
// fetch config and layers in parallel (Options::parallelism), each streamed
// into a scratch file while it is hashed and counted, checked against its
// digest and size and only then committed to the store; a broken transfer is
// resumed with an HTTP Range request from the bytes already received
// (Options::attempts tries with doubling back-off, then kUnavailable). Blobs
// already in the store are not fetched. The manifest is stored with
// containerd GC labels for its config and layers, the layers are unpacked and
// the image record is named with the requested reference and the digest ref.
//
// Sharing: concurrent pull() calls of one image share one pull (every caller
// gets the result and progress); a blob needed by two concurrent pulls is
// fetched once (the second waits for the first).
//
// Thread safety: safe from any thread; the client and store must outlive the
// puller. Progress callbacks run on the puller's worker threads, one at a time.
// Errors: see puller.h.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/clock.h"
#include "common/config.h"
#include "images/image_store.h"
#include "images/pull_credentials.h"
#include "images/puller.h"
#include "images/registry_client.h"

namespace knap::images {

class RegistryPuller : public Puller {
 public:
  struct Options {
    Platform platform;        // the manifest chosen from an index
    int parallelism = 4;      // blobs fetched at once per pull
    std::string scratch_dir;  // partial downloads: <scratch_dir>/<hex>.<pid>-<n>.partial (created)
    int attempts = 4;         // per blob, before kUnavailable
    Duration backoff = std::chrono::milliseconds(500);  // doubles after each failed attempt
    // How the puller waits between attempts; null = a real sleep.
    std::function<void(Duration)> sleep;
  };

  RegistryPuller(RegistryClient& client, ImageStore& store, Options options);
  ~RegistryPuller() override;

  StatusOr<std::string> resolve(const std::string& image) override;
  StatusOr<PullResult> pull(const std::string& image, const ProgressFn& progress = {}) override;

 private:
  struct PullFlight;
  struct BlobFlight;
  struct PullState;
  StatusOr<PullResult> doPull(const std::string& image, PullFlight& flight);
  // Makes one blob present through `session` (fetching it unless present or
  // being fetched by another pull). Adds the bytes downloaded to *fetched.
  Status ensureBlob(const Reference& ref, const Descriptor& desc, ImageStore::Session& session,
                    PullState& st);
  Status downloadBlob(const Reference& ref, const Descriptor& desc, ImageStore::Session& session,
                      PullState& st);

  RegistryClient& client_;
  ImageStore& store_;
  Options options_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<PullFlight>> pulls_;  // by image as requested
  std::map<std::string, std::shared_ptr<BlobFlight>> blobs_;  // by digest
};

// A RegistryPuller (owning its RegistryClient and `store`) from config.knap:
// platform, registry_auth_file, registry_ca_file, insecure_registries,
// pull_parallelism, data_dir (<data_dir>/pulls holds partial downloads).
// kInvalidArgument for a bad platform or an unreadable auth/CA file.
// `pull_credentials` (optional, must outlive the puller): the Revisions'
// imagePullSecrets, asked for hosts the auth file has no entry for. knapd and
// `knap image pull` pass containerd's store
// (runtime/containerd/containerd_image_store.h).
StatusOr<std::unique_ptr<Puller>> makeRegistryPuller(const Config& config, std::unique_ptr<ImageStore> store,
                                                     TimeSource& time,
                                                     const PullCredentials* pull_credentials = nullptr);

}  // namespace knap::images
