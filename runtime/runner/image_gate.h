// ImageGate: a RevisionBackend that keeps a Revision away from its pods
// until its image is present, wrapping the real backend (the PodRunner).
//
// ensure(rev) asks the ImageSource (images/image_source.h; in knapd the
// PrePuller) for the Revision's images, one per container
// (resolving each tag once and pinning the digest, then pulling it; requester
// "<ns>/<name>" for containers[0], "<ns>/<name>#<i>" for containers[i]); the
// Revision waits for all of them (the first failure, else the first pending
// one, is what health() reports). While the image is not
// present the gate answers health() itself:
//   image Pending -> ResourcesAvailable and ContainerHealthy Unknown,
//                    reason "PullingImage"/"ResolvingDigest", message with
//                    the pull's progress ("pulling IMAGE: 12.3 of 40.1 MB");
//   image Failed  -> ContainerHealthy False with pullFailureReason()
//                    ("Unauthorized", "ManifestUnknown", "RegistryUnreachable",
//                    "DigestMismatch", "InvalidImageName", "ImagePullFailed")
//                    or "ContainerMissing", ResourcesAvailable Unknown with the
//                    same reason; the source retries with back-off;
// so Ready stays Unknown/False until the image is present. Once it is, the
// gate calls inner.ensure() with a copy of the Revision whose
// containers[i].image are the pinned digest refs and whose annotation
// knap.dev/image-ready-at (kImageReadyAtAnnotation, pod_runner.h) is the
// RFC 3339 (nanoseconds) wall time the image
// became present, and from then on reports the inner backend's health.
// health().image_digest is the pinned digest ref as soon as it is resolved
// (so status.containerStatuses[0].imageDigest is pinned on first resolution),
// and health().image_digests every container's once all are resolved;
// a Revision whose status already carries an imageDigest is not resolved
// again (that digest is used), and one that was Ready before a restart is
// handed to the inner backend at once, so its running pods are adopted
// without a status flap while the image's presence is checked (and without
// image-ready-at: the image was there before).
//
// The gate takes over the inner backend's and the ImageSource's change
// callbacks. Thread safety: every method may be called from any thread; the
// change callback is called without the gate's locks held.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/event_recorder.h"
#include "controller/revision_backend.h"
#include "images/image_source.h"

namespace knap::runner {

// "2026-11-30T09:37:20.123456789Z" (Go's RFC3339Nano: trailing zeros trimmed).
std::string formatRfc3339Nano(WallTime t);

class ImageGate final : public controller::RevisionBackend {
 public:
  // All three must outlive the gate. `events` gets the Revision's image
  // Events: Pulling, Pulled, Failed (Warning).
  ImageGate(controller::RevisionBackend& inner, images::ImageSource& images,
            EventRecorder& events = nullEventRecorder());

  void ensure(const nlohmann::json& revision) override;
  void remove(const std::string& ns, const std::string& name) override;
  controller::RevisionHealth health(const std::string& ns, const std::string& name) override;
  void setOnChange(std::function<void(const std::string& ns, const std::string& name)> fn) override;
  // Called with the Revision's key ("ns/name") and object before its image is
  // asked for (ensure), and with nullptr once it is removed: where the
  // runtime registers the Revision's imagePullSecrets credentials
  // (images/pull_credentials.h). Set before the first ensure().
  void setRequesterHook(std::function<void(const std::string& key, const nlohmann::json* revision)> fn);

  // Image names and digest refs of every live Revision (as written, pinned,
  // and as handed to the pods) plus the ImageSource's own keep-list: what
  // image GC must keep.
  std::set<std::string> imagesInUse();
  // Whether the Revision has been handed to the inner backend (tests).
  bool forwarded(const std::string& ns, const std::string& name);

 private:
  struct Rev {
    std::string ns, name;
    nlohmann::json object;            // as the controller ensured it
    std::string image;                // containers[0].image as written
    std::vector<std::string> images;  // every container's image as written, in order
    std::vector<std::string> pinned;  // per container: digest ref from status or from the ImageSource
    bool ungated = false;             // no image to gate on: the inner backend reports
    bool early = false;               // was Ready before a restart: forward before the image check
    bool forwarded = false;
    nlohmann::json last_forwarded;
    std::string event_phase;  // the image phase last reported as an Event
    bool pulling_seen = false;
  };

  void sync(const std::string& key);
  // The combined image status of every container of `r` (the first failed,
  // else the first pending, else Ready); *which: the container it is about;
  // *refs: each container's ref to run ("" until resolved).
  images::ImageStatus statusOf(const std::string& key, const Rev& r, size_t* which,
                               std::vector<std::string>* refs);
  void onImageChange(const std::string& key);
  void notify(const std::string& ns, const std::string& name);

  controller::RevisionBackend& inner_;
  images::ImageSource& images_;
  std::function<void(const std::string& key, const nlohmann::json* revision)> requester_hook_;
  EventRecorder& events_;

  std::mutex forward_mu_;  // serializes forwarding decisions; taken before mu_
  std::mutex mu_;
  std::map<std::string, Rev> revs_;  // by "ns/name"
  std::mutex cb_mu_;
  std::function<void(const std::string&, const std::string&)> on_change_;
};

}  // namespace knap::runner
