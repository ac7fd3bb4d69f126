#include "runtime/runner/fake_pod_driver.h"

namespace knap::runner {

StatusOr<PodHandle> FakePodDriver::create(const PodRequest& request) {
  std::lock_guard<std::mutex> l(mu_);
  ++creates_;
  calls_.push_back("create " + request.pod_id);
  if (missing_.count(request.image)) {
    return notFound("image " + request.image + " not found: import it with `knap image import FILE`");
  }
  FakePod p;
  p.objects = request.objects;
  p.volumes = request.objects.volumes;
  p.handle.pod_id = request.pod_id;
  p.handle.ns = request.ns;
  p.handle.revision_name = request.revision_name;
  p.handle.ip = "10.0.0." + std::to_string(next_ip_++);
  p.handle.port = 0;
  p.handle.image_digest = request.image.substr(0, request.image.rfind(':')) + "@sha256:abc";
  p.image = request.image;
  p.images = request.images;
  pods_[request.pod_id] = p;
  order_.push_back(request.pod_id);
  return p.handle;
}

StatusOr<uint32_t> FakePodDriver::start(const PodHandle& pod) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pods_.find(pod.pod_id);
  if (it == pods_.end()) return notFound("no pod " + pod.pod_id);
  calls_.push_back("start " + pod.pod_id);
  it->second.started = true;
  it->second.handle.pid = next_pid_++;
  return it->second.handle.pid;
}

StatusOr<PodExit> FakePodDriver::wait(const PodHandle& pod) {
  std::unique_lock<std::mutex> l(mu_);
  if (!pods_.count(pod.pod_id)) return notFound("no task " + pod.pod_id);
  cv_.wait(l, [&] { return pods_[pod.pod_id].exited || pods_[pod.pod_id].cancelled; });
  FakePod& p = pods_[pod.pod_id];
  if (p.exited) return p.exit;
  p.cancelled = false;
  return unavailable("wait cancelled");
}

void FakePodDriver::cancelWait(const PodHandle& pod) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pods_.find(pod.pod_id);
  if (it == pods_.end()) return;
  it->second.cancelled = true;
  cv_.notify_all();
}

Status FakePodDriver::stop(const PodHandle& pod, Duration) {
  std::lock_guard<std::mutex> l(mu_);
  ++stops_;
  calls_.push_back("stop " + pod.pod_id);
  auto it = pods_.find(pod.pod_id);
  if (it == pods_.end()) return Status::ok();
  if (!it->second.exited) {
    it->second.exited = true;
    it->second.exit.exit_code = 143;
  }
  cv_.notify_all();
  return Status::ok();
}

Status FakePodDriver::destroy(const PodHandle& pod) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pods_.find(pod.pod_id);
  calls_.push_back("destroy " + pod.pod_id);
  if (it != pods_.end()) it->second.destroyed = true;
  destroyed_.push_back(pod.pod_id);
  return Status::ok();
}

runtime::ProbeResult FakePodDriver::probe(const PodHandle& pod, const runtime::ProbeSpec& spec) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pods_.find(pod.pod_id);
  if (it == pods_.end()) return {false, "no pod"};
  ++it->second.probes;
  if (it->second.paused) return {false, "frozen (paused task)"};
  bool ok = probe_fn_ ? probe_fn_(it->second, spec) : true;
  return {ok, ok ? "connected" : "connection refused"};
}

Status FakePodDriver::pause(const PodHandle& pod) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pods_.find(pod.pod_id);
  if (it == pods_.end() || it->second.destroyed) return notFound("no task " + pod.pod_id);
  calls_.push_back("pause " + pod.pod_id);
  if (pause_fails_) return internalError("pause failed (test)");
  it->second.paused = true;
  ++it->second.pauses;
  return Status::ok();
}

Status FakePodDriver::resume(const PodHandle& pod) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pods_.find(pod.pod_id);
  if (it == pods_.end() || it->second.destroyed) return notFound("no task " + pod.pod_id);
  calls_.push_back("resume " + pod.pod_id);
  if (pause_fails_) return internalError("resume failed (test)");
  it->second.paused = false;
  ++it->second.resumes;
  return Status::ok();
}

StatusOr<int64_t> FakePodDriver::memoryBytes(const PodHandle& pod) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pods_.find(pod.pod_id);
  if (it == pods_.end() || it->second.destroyed) return notFound("no cgroup for " + pod.pod_id);
  return it->second.started ? memory_started_ : memory_created_;
}

StatusOr<std::vector<AdoptedPod>> FakePodDriver::listExisting() {
  std::lock_guard<std::mutex> l(mu_);
  return existing_;
}

void FakePodDriver::setExisting(std::vector<AdoptedPod> pods) {
  std::lock_guard<std::mutex> l(mu_);
  existing_ = pods;
  for (const auto& a : pods) {
    FakePod p;
    p.handle = a.handle;
    p.started = a.running;
    p.paused = a.paused;
    p.exited = !a.running;
    pods_[a.handle.pod_id] = p;
    order_.push_back(a.handle.pod_id);
  }
}

Status FakePodDriver::cleanupOrphans(const std::set<std::string>& live_pod_ids) {
  std::lock_guard<std::mutex> l(mu_);
  cleanup_live_ = live_pod_ids;
  return Status::ok();
}

void FakePodDriver::exitPod(const std::string& pod_id, PodExit exit) {
  std::lock_guard<std::mutex> l(mu_);
  FakePod& p = pods_.at(pod_id);
  p.exited = true;
  p.exit = exit;
  cv_.notify_all();
}

std::vector<std::string> FakePodDriver::livePods() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> out;
  for (const auto& id : order_) {
    if (!pods_[id].destroyed) out.push_back(id);
  }
  return out;
}

std::vector<std::string> FakePodDriver::createdPods() {
  std::lock_guard<std::mutex> l(mu_);
  return order_;
}

Status FakePodDriver::updateVolumes(const PodHandle& pod,
                                    const std::map<std::string, std::vector<runtime::VolumeFile>>& volumes) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pods_.find(pod.pod_id);
  if (it == pods_.end()) return notFound("no pod " + pod.pod_id);
  if (it->second.volumes != volumes) {
    calls_.push_back("updateVolumes " + pod.pod_id);
    it->second.volumes = volumes;
  }
  return Status::ok();
}

}  // namespace knap::runner
