// PrePuller: the ImageSource (image_source.h): non-blocking image state for
// many callers (one per Revision) over a blocking images::Puller.
//
// A caller (the "requester", e.g. "ns/name" of a Revision) asks status() for
// its image; that never blocks: it records what is needed and returns the
// current state, while resolution and pulls run on worker threads.
//
// Per requester (Knative's tag resolution, done once per Revision):
//   - an image that already carries a digest ("repo@sha256:..") is used as is;
//   - an image whose registry is in the skip list (config-deployment
//     registries-skipping-tag-resolving: kind.local, ko.local, dev.local) is
//     neither resolved nor pulled: it must already be in containerd
//     (`knap image import`), else Failed "ContainerMissing";
//   - any other image is resolved to a digest ref once per requester
//     (concurrent requesters of one tag share one resolve) and pinned; a
//     caller that already knows its pinned ref (from the Revision's
//     status.containerStatuses[0].imageDigest) passes it and nothing is
//     resolved again.
// Per ref to make present (the pinned digest ref, shared by every requester
// of it): presence check, then one pull however many requesters ask; failures
// are retried with exponential back-off (retry_initial doubling up to
// retry_max, measured on the TimeSource); Ready refs are re-checked every
// recheck_interval and pulled again in the background if they went missing
// (they stay Ready meanwhile). `pre_pull_images` are kept present from
// start() on, with no requester.
//
//   phase   | resolve                | ref
//   Pending | in flight, no failure  | checking / pulling (message has progress)
//   Failed  | last attempt failed    | last attempt failed (retry due later), or
//           | (retried by back-off)  | missing skip-list image ("ContainerMissing")
//   Ready   | -                      | present in containerd (ready_at: since when)
//
// Threads: one loop thread (start()) starts due work every loop_interval or
// when status() wakes it; blocking Puller/presence calls run on an executor
// (options.executor, or the PrePuller's own pool of `workers` threads).
// Tests pass a queueing executor and call runOnce() themselves.
//
// Thread safety: every public method may be called from any thread. status()
// never calls out (no callback, no I/O). The change callback is called with
// no lock held, from a worker or the loop thread; it must not block and may
// call status().
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/config.h"
#include "common/loop.h"
#include "common/status.h"
#include "images/image_source.h"
#include "images/puller.h"
#include "oci/reference.h"

namespace knap::images {

const char* imagePhaseName(ImagePhase p);

// Whether `ref` is present (and usable) in the local image store: OK with
// the time it became present (WallTime{} if unknown), kNotFound if absent,
// other errors (store down) as they come.
using PresenceFn = std::function<StatusOr<WallTime>(const std::string& ref)>;

struct PrePullerOptions {
  std::vector<std::string> skip_registries = {"kind.local", "ko.local", "dev.local"};
  std::vector<std::string> pre_pull_images;
  Duration retry_initial = std::chrono::seconds(1);
  Duration retry_max = std::chrono::seconds(300);
  // Cap for re-checking a missing skip-list image (a local look-up: an import is noticed quickly).
  Duration check_retry_max = std::chrono::seconds(10);
  Duration recheck_interval = std::chrono::seconds(60);
  Duration progress_interval = std::chrono::seconds(1);  // min gap between progress notifications of one ref
  Duration loop_interval = std::chrono::milliseconds(250);
  int workers = 4;
  // Runs blocking work; nullptr = the PrePuller's own pool.
  std::function<void(std::function<void()>)> executor;
};

// From knapd's config: deployment.registries_skipping_tag_resolving,
// knap.pre_pull_images, knap.pull_retry_max.
PrePullerOptions prePullerOptionsFromConfig(const Config& config);

using oci::hasDigest;  // oci/reference.h
using oci::registryOf;

// "pulling IMAGE: 12.3 of 40.1 MB" (or "resolving"/"unpacking" forms).
std::string progressMessage(const std::string& image, const PullProgress& p);

class PrePuller final : public ImageSource {
 public:
  PrePuller(Puller& puller, PresenceFn present, const TimeSource& time, PrePullerOptions options = {});
  ~PrePuller();  // stop()s

  PrePuller(const PrePuller&) = delete;
  PrePuller& operator=(const PrePuller&) = delete;

  // Starts the loop thread (and the pool); pre_pull_images are checked and
  // pulled right away.
  void start();
  // Stops the threads; waits for in-flight pulls to return.
  void stop();

  // The state of `image` for `requester`; starts what is missing. `pinned`
  // is the digest ref resolved earlier (or ""). Never blocks.
  ImageStatus status(const std::string& requester, const std::string& image,
                     const std::string& pinned = "") override;
  // The requester is gone (Revision deleted): forget it; refs nobody else
  // needs are no longer kept present or retried. Idempotent.
  void release(const std::string& requester) override;
  // Called with a requester whose status() may have changed.
  void setOnChange(std::function<void(const std::string& requester)> fn) override;

  // Image names and digest refs that requesters and pre_pull_images need (for image GC).
  std::set<std::string> imagesInUse() override;

  // One pass of the loop: starts due resolves, pulls and re-checks.
  void runOnce();
  // The earliest time something is due (tests on a simulated clock).
  std::optional<MonoTime> nextDue();
  // Calls to the Puller / presence function so far (tests).
  int pullsStarted() const;

 private:
  struct Requester {
    std::string image;
    std::string pinned;   // resolved or given digest ref
    bool direct = false;  // digest or skip-list image: the image is the ref
    bool check_only = false;
  };
  struct Resolve {                  // per image tag
    std::set<std::string> waiting;  // requesters without a pin yet
    bool in_flight = false;
    int failures = 0;
    MonoTime next_try{};
    std::optional<Status> error;
    std::string error_message;
  };
  struct Entry {              // per ref to make present
    bool check_only = false;  // skip-list image: never pulled
    bool keep = false;        // pre_pull_images
    std::set<std::string> users;
    bool in_flight = false;
    bool ready = false;
    WallTime ready_at{};
    int failures = 0;
    MonoTime next_try{};
    MonoTime next_recheck{};
    std::optional<Status> error;
    std::string error_reason, error_message;
    std::optional<PullProgress> progress;
    MonoTime last_progress_note{};
    std::set<std::string> aliases;  // digest refs a pull reported for this ref
  };
  using Notes = std::vector<std::string>;  // requesters to notify

  std::string refOfLocked(const Requester& r) const;
  Entry& entryLocked(const std::string& ref, bool check_only);
  ImageStatus statusLocked(const std::string& requester);
  void startDueLocked(MonoTime now, std::vector<std::function<void()>>* work);
  void resolveJob(const std::string& image);
  void refJob(const std::string& ref, bool recheck);
  void finishRef(const std::string& ref, bool recheck, StatusOr<WallTime> present,
                 std::optional<StatusOr<PullResult>> pulled);
  void onProgress(const std::string& ref, const PullProgress& p);
  Duration backoff(int failures, bool check_only = false) const;
  void notesForRefLocked(const std::string& ref, Notes* notes);
  void notify(const Notes& notes);
  void dispatch(std::vector<std::function<void()>> work);
  void post(std::function<void()> fn);
  void wake();

  Puller& puller_;
  PresenceFn present_;
  const TimeSource& time_;
  PrePullerOptions options_;

  mutable std::mutex mu_;
  std::map<std::string, Requester> requesters_;
  std::map<std::string, Resolve> resolves_;  // by image
  std::map<std::string, Entry> entries_;     // by ref
  std::function<void(const std::string&)> on_change_;
  int pulls_started_ = 0;

  WorkerPool pool_;  // common/loop.h; stopped after the loop
  Loop loop_;
};

}  // namespace knap::images
