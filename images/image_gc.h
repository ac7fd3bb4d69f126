// ImageGc: frees disk by deleting image records nobody uses.
//
// Every `interval` it lists the images, marks the ones in use (the in-use
// function: names and digest refs of every live Revision and of the
// pre-puller's pre-pull list, plus `keep`), and when the disk holding
// containerd's root is above `high_percent` full it deletes unused images,
// oldest first (by the later of created/updated time and the last time this
// GC saw the image in use), skipping any younger than `min_age`, until the
// disk is below `low_percent`. Deleting the image record lets containerd's
// own garbage collector free the content and snapshots (the inventory
// deletes synchronously, so the disk is measured again after each one).
//
// An image is in use when its name is in the in-use set, when its name's
// digest ("repo@sha256:X") has X in the set, or when it points at the same
// target digest as an in-use image.
//
// Threads: runOnce() does one pass on the caller's thread; start() runs a
// thread that calls it every `interval` (on the TimeSource). Thread safety:
// all public methods may be called from any thread; passes never overlap.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/config.h"
#include "common/loop.h"
#include "common/status.h"

namespace knap::images {

struct StoredImage {
  std::string name;           // the image record's name ("repo:tag", "repo@sha256:..")
  std::string target_digest;  // what it points at
  WallTime created_at{};
  WallTime updated_at{};
};

// The local image records (containerd's image service in knapd; a fake in tests).
class ImageInventory {
 public:
  virtual ~ImageInventory() = default;
  // Every image record; the store's error if it cannot list.
  virtual StatusOr<std::vector<StoredImage>> list() = 0;
  // Deletes the record and waits for the store to free what nothing else
  // references; kNotFound if already gone.
  virtual Status remove(const std::string& name) = 0;
};

struct DiskUsage {
  uint64_t total_bytes = 0;
  uint64_t used_bytes = 0;
  double percent() const {
    return total_bytes == 0 ? 0 : 100.0 * static_cast<double>(used_bytes) / total_bytes;
  }
};
using DiskUsageFn = std::function<StatusOr<DiskUsage>()>;
// statvfs(path): used = total - available to unprivileged users (as df shows).
// kNotFound / kInternal with errno text on failure.
StatusOr<DiskUsage> diskUsageOf(const std::string& path);

using InUseFn = std::function<std::set<std::string>()>;

struct ImageGcOptions {
  Duration interval = std::chrono::seconds(300);
  Duration min_age = std::chrono::seconds(3600);
  double high_percent = 85;
  double low_percent = 80;
  std::vector<std::string> keep;                     // never deleted (knap.pre_pull_images)
  Duration loop_interval = std::chrono::seconds(1);  // idle wake-up of start()'s thread
};
// From knap.image_gc_interval/min_age/high_percent/low_percent and pre_pull_images.
ImageGcOptions imageGcOptionsFromConfig(const Config& config);

// The digest of a "repo@sha256:..." reference, "" if it has none.
std::string digestOf(const std::string& ref);

// Pure decision: the unused images old enough to delete, oldest first.
// `last_used` maps names to the last time they were seen in use.
std::vector<StoredImage> gcCandidates(const std::vector<StoredImage>& images,
                                      const std::set<std::string>& in_use,
                                      const std::map<std::string, WallTime>& last_used, WallTime now,
                                      Duration min_age);

struct GcPass {
  double percent_before = 0;
  double percent_after = 0;
  std::vector<std::string> removed;
  bool collected = false;  // disk was above the high threshold
};

class ImageGc {
 public:
  ImageGc(ImageInventory& inventory, DiskUsageFn disk, InUseFn in_use, const TimeSource& time,
          ImageGcOptions options = {});
  ~ImageGc();  // stop()s

  // One pass now. Errors: the inventory's or disk function's (nothing is
  // deleted when the images cannot be listed); a failed delete is logged and
  // skipped.
  StatusOr<GcPass> runOnce();
  // Runs a pass when `interval` has passed since the last one (or never ran).
  void tick();
  void start();
  void stop();

 private:
  ImageInventory& inventory_;
  DiskUsageFn disk_;
  InUseFn in_use_;
  const TimeSource& time_;
  ImageGcOptions options_;

  std::mutex pass_mu_;  // one pass at a time
  std::map<std::string, WallTime> last_used_;
  bool ran_ = false;
  MonoTime last_pass_{};

  Loop loop_;  // common/loop.h
};

}  // namespace knap::images
