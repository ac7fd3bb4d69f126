// ImageSource: what a consumer of images asks of the machine's image store,
// without blocking: the state of the image a requester (one container of a
// Revision) needs, and from then on change notifications. It is how
// runtime/runner (the ImageGate) sees images: it never names the concrete
// PrePuller (pre_puller.h), which daemon/ wires in.
//
// Thread safety: every method may be called from any thread. status() never
// calls out (no callback, no I/O); the change callback is called with no lock
// of the source held, must not block and may call status().
#pragma once

#include <functional>
#include <set>
#include <string>

#include "common/clock.h"

namespace knap::images {

enum class ImagePhase { kPending, kReady, kFailed };

struct ImageStatus {
  ImagePhase phase = ImagePhase::kPending;
  std::string ref;         // the name to create pods from ("" until resolved)
  std::string digest_ref;  // "repo@sha256:.." pinned; "" until resolved, and for skip-list images
  std::string
      reason;  // Pending: "ResolvingDigest"/"PullingImage"; Failed: pullFailureReason() or "ContainerMissing"
  std::string message;  // what is going on / what a person can do
  WallTime ready_at{};  // Ready: when the image became present in containerd
  bool operator==(const ImageStatus&) const = default;
};

class ImageSource {
 public:
  virtual ~ImageSource() = default;
  // The state of `image` for `requester`; starts what is missing. `pinned`
  // is the digest ref resolved earlier (or ""). Never blocks.
  virtual ImageStatus status(const std::string& requester, const std::string& image,
                             const std::string& pinned) = 0;
  // The requester is gone: forget it; images nobody else needs are no longer
  // kept present or retried. Idempotent.
  virtual void release(const std::string& requester) = 0;
  // Called with a requester whose status() may have changed.
  virtual void setOnChange(std::function<void(const std::string& requester)> fn) = 0;
  // Image names and digest refs that requesters (and the source's own
  // keep-list) need: what image GC must keep.
  virtual std::set<std::string> imagesInUse() = 0;
};

}  // namespace knap::images
