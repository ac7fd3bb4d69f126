// FakePuller: a registry and image store in memory for tests of the
// pre-puller and the image gate. Tags point at digest refs; pull() makes the
// image (and its digest ref) present; failures are injected per image; a hook
// runs in the middle of a pull (to observe or report progress).
//
// Thread safety: every member function locks `mu`; tests set the public
// fields while no pull is running.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "images/pre_puller.h"
#include "images/puller.h"

namespace knap::images {

class FakePuller : public Puller {
 public:
  StatusOr<std::string> resolve(const std::string& image) override {
    std::lock_guard<std::mutex> l(mu);
    ++resolves;
    if (auto it = resolve_error.find(image); it != resolve_error.end()) return it->second;
    if (hasDigest(image)) return image;
    auto it = tags.find(image);
    if (it == tags.end()) return notFound("manifest unknown: " + image);
    return it->second;
  }
  StatusOr<PullResult> pull(const std::string& image, const ProgressFn& progress) override {
    std::function<void(const ProgressFn&)> hook;
    std::optional<Status> err;
    {
      std::lock_guard<std::mutex> l(mu);
      ++pulls;
      pulled.push_back(image);
      hook = during_pull;
      if (auto it = pull_error.find(image); it != pull_error.end()) err = it->second;
    }
    if (hook) hook(progress);
    if (err) return *err;
    std::lock_guard<std::mutex> l(mu);
    PullResult r;
    r.image = image;
    r.digest_ref = hasDigest(image) ? image : tags[image];
    present[image] = now_fn();
    if (!r.digest_ref.empty()) present[r.digest_ref] = now_fn();
    return r;
  }
  StatusOr<WallTime> isPresent(const std::string& ref) {
    std::lock_guard<std::mutex> l(mu);
    ++presence_checks;
    auto it = present.find(ref);
    if (it == present.end()) return notFound("image " + ref + " not found");
    return it->second;
  }

  std::mutex mu;
  std::map<std::string, std::string> tags;
  std::map<std::string, Status> resolve_error, pull_error;
  std::map<std::string, WallTime> present;
  std::function<void(const ProgressFn&)> during_pull;
  std::function<WallTime()> now_fn;
  std::vector<std::string> pulled;
  int resolves = 0, pulls = 0, presence_checks = 0;
};

}  // namespace knap::images
