// FakePodDriver: an in-memory PodDriver for PodRunner unit tests. Pods are
// records; wait() blocks until the test calls exitPod() (or stop() makes the
// pod exit with 143, or cancelWait()). Probe results come from a test hook.
//
// Thread safety: every method is thread-safe.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "runtime/runner/pod_driver.h"

namespace knap::runner {

class FakePodDriver final : public PodDriver {
 public:
  struct FakePod {
    PodHandle handle;
    std::string image;
    std::vector<std::string> images;  // PodRequest::images
    bool started = false;
    bool exited = false;
    bool cancelled = false;
    bool destroyed = false;
    bool paused = false;
    int pauses = 0, resumes = 0;
    PodExit exit;
    int probes = 0;
    PodObjectValues objects;                                          // as created
    std::map<std::string, std::vector<runtime::VolumeFile>> volumes;  // as last created/updated
  };

  StatusOr<PodHandle> create(const PodRequest& request) override;
  StatusOr<uint32_t> start(const PodHandle& pod) override;
  StatusOr<PodExit> wait(const PodHandle& pod) override;
  void cancelWait(const PodHandle& pod) override;
  Status stop(const PodHandle& pod, Duration grace) override;
  Status destroy(const PodHandle& pod) override;
  runtime::ProbeResult probe(const PodHandle& pod, const runtime::ProbeSpec& spec) override;
  Status pause(const PodHandle& pod) override;
  Status resume(const PodHandle& pod) override;
  bool fastResume() const override { return true; }
  StatusOr<int64_t> memoryBytes(const PodHandle& pod) override;
  StatusOr<std::vector<AdoptedPod>> listExisting() override;
  Status cleanupOrphans(const std::set<std::string>& live_pod_ids) override;
  Status updateVolumes(const PodHandle& pod,
                       const std::map<std::string, std::vector<runtime::VolumeFile>>& volumes) override;

  // --- test controls ---
  void setMissingImage(const std::string& image) {
    std::lock_guard<std::mutex> l(mu_);
    missing_.insert(image);
  }
  void clearMissingImage(const std::string& image) {
    std::lock_guard<std::mutex> l(mu_);
    missing_.erase(image);
  }
  // Probe outcome per pod (default: success).
  void setProbe(std::function<bool(const FakePod&, const runtime::ProbeSpec&)> fn) {
    std::lock_guard<std::mutex> l(mu_);
    probe_fn_ = std::move(fn);
  }
  void setExisting(std::vector<AdoptedPod> pods);
  // memoryBytes() of every pod: started pods report `started`, others `created`.
  void setMemory(int64_t created, int64_t started) {
    std::lock_guard<std::mutex> l(mu_);
    memory_created_ = created;
    memory_started_ = started;
  }
  // Makes the next pause()/resume() calls fail with kInternal.
  void setPauseFails(bool fail) {
    std::lock_guard<std::mutex> l(mu_);
    pause_fails_ = fail;
  }
  // Every driver call in order, as "<op> <pod id>" (create, start, pause, resume, stop, destroy).
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> l(mu_);
    return calls_;
  }
  // Makes the pod's process exit (its wait() returns).
  void exitPod(const std::string& pod_id, PodExit exit);
  // Pods created and not destroyed.
  std::vector<std::string> livePods();
  std::vector<std::string> createdPods();
  int createCount() {
    std::lock_guard<std::mutex> l(mu_);
    return creates_;
  }
  int stopCount() {
    std::lock_guard<std::mutex> l(mu_);
    return stops_;
  }
  std::set<std::string> lastCleanupLive() {
    std::lock_guard<std::mutex> l(mu_);
    return cleanup_live_;
  }
  std::vector<std::string> destroyed() {
    std::lock_guard<std::mutex> l(mu_);
    return destroyed_;
  }
  FakePod pod(const std::string& id) {
    std::lock_guard<std::mutex> l(mu_);
    return pods_.at(id);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, FakePod> pods_;
  std::vector<std::string> order_;
  std::set<std::string> missing_;
  std::function<bool(const FakePod&, const runtime::ProbeSpec&)> probe_fn_;
  std::vector<AdoptedPod> existing_;
  std::set<std::string> cleanup_live_;
  std::vector<std::string> destroyed_;
  std::vector<std::string> calls_;
  int64_t memory_created_ = 1 << 20;
  int64_t memory_started_ = 8 << 20;
  bool pause_fails_ = false;
  int creates_ = 0;
  int stops_ = 0;
  uint32_t next_pid_ = 100;
  int next_ip_ = 2;
};

}  // namespace knap::runner
