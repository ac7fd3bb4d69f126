#include "runtime/runner/pod_runner.h"

#include <algorithm>
#include <random>
#include <sstream>

#include "api/revision_settings.h"
#include "common/duration.h"
#include "common/guard.h"
#include "common/json_path.h"
#include "common/log.h"
#include "runtime/pod/oci_spec.h"

namespace knap::runner {

using nlohmann::json;
using std::chrono::duration_cast;
using std::chrono::seconds;

namespace {

// A starting pod's failing readiness probe shows in ContainerHealthy's message
// once it has failed for this long (not for the refused connects of every
// normal start-up).
constexpr Duration kProbeFailureGrace = std::chrono::seconds(1);

std::optional<std::string> annotation(const json& obj, const char* key) {
  const json* md = obj.contains("metadata") && obj["metadata"].is_object() ? &obj["metadata"] : nullptr;
  if (!md || !md->contains("annotations") || !(*md)["annotations"].is_object()) return std::nullopt;
  const json& a = (*md)["annotations"];
  auto it = a.find(key);
  if (it == a.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

const json& firstContainer(const json& rev) {
  static const json kEmpty = json::object();
  if (!rev.contains("spec") || !rev["spec"].is_object()) return kEmpty;
  const json& spec = rev["spec"];
  if (!spec.contains("containers") || !spec["containers"].is_array() || spec["containers"].empty())
    return kEmpty;
  // The serving container (the one with ports when there are several).
  return spec["containers"][runtime::servingContainerIndex(spec["containers"])];
}

// Whether the Revision mounts a secret, configMap or projected volume.
bool hasObjectVolumes(const json& rev) {
  if (!rev.contains("spec") || !rev["spec"].is_object()) return false;
  const json& spec = rev["spec"];
  if (!spec.contains("volumes") || !spec["volumes"].is_array()) return false;
  for (const json& v : spec["volumes"]) {
    if (v.is_object() && (v.contains("secret") || v.contains("configMap") || v.contains("projected")))
      return true;
  }
  return false;
}

// The serving port: the first containerPort, else 8080.
int servingPort(const json& container) {
  if (container.contains("ports") && container["ports"].is_array()) {
    for (const auto& p : container["ports"]) {
      if (p.is_object() && p.contains("containerPort") && p["containerPort"].is_number_integer()) {
        return p["containerPort"].get<int>();
      }
    }
  }
  return 8080;
}

std::string trimTail(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

bool sameCondition(const controller::ConditionState& a, const controller::ConditionState& b) {
  return a.status == b.status && a.reason == b.reason && a.message == b.message;
}

bool sameHealth(const controller::RevisionHealth& a, const controller::RevisionHealth& b) {
  return sameCondition(a.resources_available, b.resources_available) &&
         sameCondition(a.container_healthy, b.container_healthy) && sameCondition(a.active, b.active) &&
         a.actual_replicas == b.actual_replicas && a.desired_replicas == b.desired_replicas &&
         a.image_digest == b.image_digest && a.image_digests == b.image_digests;
}

std::string formatSeconds(Duration d) {
  return std::to_string(duration_cast<seconds>(d).count()) + "s";
}

}  // namespace

const char* podStateName(PodState s) {
  switch (s) {
    case PodState::kCreating:
      return "Creating";
    case PodState::kStarting:
      return "Starting";
    case PodState::kReady:
      return "Ready";
    case PodState::kWarm:
      return "Warm";
    case PodState::kCrashed:
      return "Crashed";
    case PodState::kStopping:
      return "Stopping";
  }
  return "?";
}

const char* warmPoolModeName(WarmPoolMode m) {
  return m == WarmPoolMode::kCreated ? "created" : "frozen";
}

PodRunnerOptions optionsFromConfig(const Config& config) {
  PodRunnerOptions o;
  o.config = config;
  o.warm_pool_size = static_cast<int>(std::max<int64_t>(0, config.knap.warm_pool_size));
  o.warm_pool_mode = config.knap.warm_pool_mode == "created" ? WarmPoolMode::kCreated : WarmPoolMode::kFrozen;
  return o;
}

PodRunner::PodRunner(PodDriver& driver, const TimeSource& time, PodRunnerOptions options)
    : driver_(driver),
      time_(time),
      options_(std::move(options)),
      pool_(options_.executor, WorkerPool::OnStop::kDrain, "pod runner: work item"),
      loop_(time_, "pod runner loop") {}

PodRunner::~PodRunner() {
  stop();
}

// ------------------------------------------------------------------ threads

void PodRunner::start() {
  pool_.start(options_.workers);
  // The only place the runner waits on its own: an idle wake-up every
  // loop_interval on time_, cut short by wake(). Deadlines come from time_.
  loop_.start([this] {
    runOnce();
    return time_.monotonic() + options_.loop_interval;
  });
}

void PodRunner::wake() {
  loop_.wake();
}

void PodRunner::post(std::function<void()> fn) {
  pool_.post(std::move(fn));
}

void PodRunner::stop() {
  loop_.stop();
  pool_.stop();  // runs what is queued first
  // Abandon the waits (pods keep running; they are adopted next time).
  std::map<std::string, std::thread> waiters;
  {
    std::lock_guard<std::mutex> l(mu_);
    shutting_down_ = true;
    for (auto& [k, rev] : revisions_) {
      for (auto& [id, pod] : rev->pods) {
        if (pod.waiter && !pod.exited) driver_.cancelWait(pod.handle);
      }
    }
    waiters = std::move(waiters_);
    finished_waiters_.clear();
  }
  for (auto& [id, t] : waiters) {
    if (t.joinable()) t.join();
  }
}

void PodRunner::shutdownAndDestroyAll() {
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [k, rev] : revisions_) rev->removed = true;
  }
  // Drive the loop here until every pod is gone (bounded by the pods' stop
  // grace): the loop thread stops first so that the wake-ups come here.
  loop_.stop();
  for (;;) {
    runOnce();
    {
      std::lock_guard<std::mutex> l(mu_);
      if (revisions_.empty()) break;
    }
    loop_.waitForWake(time_.monotonic() + options_.loop_interval);
  }
  stop();
}

int PodRunner::waitersRunning() {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(waiters_.size() - finished_waiters_.size());
}

// ------------------------------------------------------------------ adoption

Status PodRunner::adoptExisting(const std::set<std::string>& live_revisions) {
  auto existing = driver_.listExisting();
  if (!existing.isOk()) return existing.status();
  std::set<std::string> live_pods;
  std::vector<AdoptedPod> doomed;
  {
    std::lock_guard<std::mutex> l(mu_);
    MonoTime now = time_.monotonic();
    for (const AdoptedPod& a : *existing) {
      std::string k = key(a.handle.ns, a.handle.revision_name);
      if (!a.running || a.paused || !live_revisions.count(k)) {
        doomed.push_back(a);
        continue;
      }
      auto& slot = revisions_[k];
      if (!slot) {
        slot = std::make_unique<Revision>();
        slot->ns = a.handle.ns;
        slot->name = a.handle.revision_name;
        slot->created_at = now;
      }
      Pod pod;
      pod.handle = a.handle;
      pod.state = PodState::kStarting;
      pod.adopted = true;
      pod.origin = "adopted";
      pod.started = true;
      pod.started_at = now;
      if (slot->image_digest.empty()) slot->image_digest = a.handle.image_digest;
      if (slot->image_digests.empty()) slot->image_digests = a.handle.image_digests;
      auto [it, inserted] = slot->pods.emplace(a.handle.pod_id, std::move(pod));
      if (inserted) spawnWaiterLocked(*slot, it->second);
      if (!slot->object.is_null()) attachAdoptedLocked(*slot, now);  // ensure() came first
      live_pods.insert(a.handle.pod_id);
      LOG(INFO) << "pod runner: adopted pod " << a.handle.pod_id << " of " << k << " (pid " << a.handle.pid
                << ", ip " << a.handle.ip << ")";
    }
  }
  Status first = Status::ok();
  for (const AdoptedPod& a : doomed) {
    LOG(INFO) << "pod runner: removing leftover pod " << a.handle.pod_id << " of " << a.handle.ns << "/"
              << a.handle.revision_name
              << (a.paused    ? " (frozen warm pod)"
                  : a.running ? " (revision gone)"
                              : " (not running)");
    if (a.paused) {
      // A warm pod serves nobody: thaw it so the kill lands, no grace needed.
      Status s = driver_.resume(a.handle);
      if (!s.isOk()) LOG(WARNING) << "pod runner: resume " << a.handle.pod_id << ": " << s.toString();
    } else if (a.running) {
      Status s = driver_.stop(a.handle, std::chrono::seconds(2));
      if (!s.isOk()) LOG(WARNING) << "pod runner: stop " << a.handle.pod_id << ": " << s.toString();
    }
    Status s = driver_.destroy(a.handle);
    if (!s.isOk()) {
      LOG(WARNING) << "pod runner: destroy " << a.handle.pod_id << ": " << s.toString();
      if (first.isOk()) first = s;
    }
  }
  Status s = driver_.cleanupOrphans(live_pods);
  if (!s.isOk()) {
    LOG(WARNING) << "pod runner: orphan cleanup: " << s.toString();
    if (first.isOk()) first = s;
  }
  wake();
  return first;
}

void PodRunner::spawnWaiterLocked(Revision& rev, Pod& pod) {
  pod.waiter = true;
  std::string k = key(rev.ns, rev.name);
  std::string id = pod.handle.pod_id;
  PodHandle h = pod.handle;
  auto old = waiters_.find(id);
  if (old != waiters_.end()) {
    // A pod id is never reused; a stale entry would be a bug. Detach safely.
    if (old->second.joinable()) old->second.detach();
    waiters_.erase(old);
    finished_waiters_.erase(id);
  }
  waiters_[id] = std::thread([this, k, id, h] {
    runGuarded("pod runner: wait for " + id, [&] {
      StatusOr<PodExit> r = driver_.wait(h);
      onExit(k, id, std::move(r));
    });
  });
}

// ------------------------------------------------------------------ public API

void PodRunner::configureLocked(Revision& rev, const json& object) {
  rev.object = object;
  const json& c = firstContainer(object);
  rev.port = servingPort(c);
  rev.spec_error.clear();
  rev.readiness_spec = runtime::defaultReadinessProbe();
  if (c.contains("readinessProbe") && c["readinessProbe"].is_object()) {
    auto p = runtime::parseProbeSpec(c["readinessProbe"], runtime::ProbeKind::kReadiness);
    if (p.isOk()) {
      rev.readiness_spec = *p;
    } else {
      rev.spec_error = "readinessProbe: " + p.status().message();
    }
  }
  rev.liveness_spec.reset();
  if (c.contains("livenessProbe") && c["livenessProbe"].is_object()) {
    auto p = runtime::parseProbeSpec(c["livenessProbe"], runtime::ProbeKind::kLiveness);
    if (p.isOk()) {
      rev.liveness_spec = *p;
    } else {
      rev.spec_error = "livenessProbe: " + p.status().message();
    }
  }
  const api::RevisionSettings settings = api::revisionSettings(object, options_.config);
  std::vector<std::string> refused = settings.errors;
  refused.insert(refused.end(), settings.warm_pool.errors.begin(), settings.warm_pool.errors.end());
  std::string errors;  // every refused setting, each logged once per change
  for (const std::string& e : refused) errors += (errors.empty() ? "" : "; ") + e;
  if (!errors.empty() && rev.settings_error != errors) {
    for (const std::string& e : refused) {
      LOG(WARNING) << "pod runner: " << key(rev.ns, rev.name) << ": " << e << " (the default is used)";
    }
  }
  rev.settings_error = errors;
  rev.stop_grace = std::min<Duration>(settings.timeout, options_.max_stop_grace);
  rev.progress_deadline = settings.progress_deadline;
  rev.min_scale = settings.autoscaling.min_scale;
  rev.max_scale = settings.autoscaling.max_scale;
  // Initial scale (api/revision_settings.h), at least min-scale.
  rev.initial_scale = std::max(settings.autoscaling.initial_scale, rev.min_scale);
  // The warm pool annotations (api/revision_settings.h), else the configured size and mode.
  const int size = settings.warm_pool.size.value_or(options_.warm_pool_size);
  rev.warm_mode = options_.warm_pool_mode;
  if (settings.warm_pool.mode) {
    rev.warm_mode = *settings.warm_pool.mode == "created" ? WarmPoolMode::kCreated : WarmPoolMode::kFrozen;
  }
  // Only revisions that can scale to zero keep a pool.
  rev.warm_size = rev.min_scale == 0 && settings.autoscaling.enable_scale_to_zero ? size : 0;
  rev.image_ready_at.reset();
  if (auto t = annotation(object, kImageReadyAtAnnotation)) {
    WallTime w{};
    if (parseRfc3339(*t, &w)) rev.image_ready_at = w;
  }
}

void PodRunner::ensure(const json& revision) {
  std::string ns = stringAt(revision, {"metadata", "namespace"});
  std::string name = stringAt(revision, {"metadata", "name"});
  if (name.empty()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    std::string k = key(ns, name);
    auto& slot = revisions_[k];
    MonoTime now = time_.monotonic();
    if (!slot) {
      slot = std::make_unique<Revision>();
      slot->ns = ns;
      slot->name = name;
      slot->created_at = now;
    }
    Revision& rev = *slot;
    bool first = rev.object.is_null() || rev.removed;
    rev.removed = false;
    configureLocked(rev, revision);
    if (first) {
      if (auto p = pending_scale_.find(k); p != pending_scale_.end()) {
        rev.desired = p->second;
        rev.scaler_set = true;
        pending_scale_.erase(p);
      }
      if (!rev.scaler_set) rev.desired = rev.initial_scale;
      attachAdoptedLocked(rev, now);
    }
  }
  wake();
}

void PodRunner::attachAdoptedLocked(Revision& rev, MonoTime now) {
  // Adopted pods get their probes once the spec is known, and count towards
  // the desired scale so they are not replaced or stopped.
  int adopted = 0;
  for (auto& [id, pod] : rev.pods) {
    if (!pod.adopted || pod.stop_requested) continue;
    ++adopted;
    if (!pod.readiness) {
      pod.handle.port = rev.port;
      pod.readiness.emplace(rev.readiness_spec, runtime::ProbeKind::kReadiness, now);
      if (rev.liveness_spec) pod.liveness.emplace(*rev.liveness_spec, runtime::ProbeKind::kLiveness, now);
      pod.next_probe = now;
    }
  }
  if (!rev.scaler_set) rev.desired = std::max(rev.desired, adopted);
}

void PodRunner::remove(const std::string& ns, const std::string& name) {
  {
    std::lock_guard<std::mutex> l(mu_);
    pending_scale_.erase(key(ns, name));
    auto it = revisions_.find(key(ns, name));
    if (it == revisions_.end()) return;
    it->second->removed = true;
  }
  wake();
}

controller::RevisionHealth PodRunner::health(const std::string& ns, const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = revisions_.find(key(ns, name));
  if (it == revisions_.end() || it->second->object.is_null()) {
    controller::RevisionHealth h;
    h.resources_available = {"Unknown", "Deploying", ""};
    h.container_healthy = {"Unknown", "Deploying", ""};
    h.active = {"Unknown", "Deploying", ""};
    return h;
  }
  return computeHealthLocked(*it->second, time_.monotonic());
}

void PodRunner::setOnChange(std::function<void(const std::string&, const std::string&)> fn) {
  std::lock_guard<std::mutex> l(mu_);
  on_change_ = std::move(fn);
}

void PodRunner::setOnEndpointsChanged(std::function<void(const std::string&)> fn) {
  std::lock_guard<std::mutex> l(mu_);
  on_endpoints_ = std::move(fn);
}

int PodRunner::readyPods(const std::string& revision) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = revisions_.find(revision);
  if (it == revisions_.end()) return 0;
  int n = 0;
  for (auto& [id, pod] : it->second->pods) {
    if (pod.state == PodState::kReady) ++n;
  }
  return n;
}

void PodRunner::setDesiredScale(const std::string& revision, int pods) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = revisions_.find(revision);
    if (it == revisions_.end() || it->second->object.is_null()) {
      pending_scale_[revision] = std::max(0, pods);  // applied by ensure()
      return;
    }
    it->second->desired = std::max(0, pods);
    it->second->scaler_set = true;
  }
  wake();
}

void PodRunner::scaleStatusChanged(const std::string& revision, const scaler::ScaleOutcome& outcome) {
  Notes notes;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = revisions_.find(revision);
    if (it == revisions_.end()) return;
    it->second->scale_outcome = outcome;
    collectNotesLocked(&notes);
  }
  notifyAll(std::move(notes));
}

std::vector<Endpoint> PodRunner::readyEndpoints(const std::string& revision, WakeReport* wake,
                                                uint64_t* version) {
  std::lock_guard<std::mutex> l(mu_);
  if (version) *version = ++endpoints_version_;
  auto it = revisions_.find(revision);
  if (it == revisions_.end()) {
    if (wake) *wake = WakeReport{};
    return {};
  }
  if (wake) *wake = it->second->last_wake;
  return endpointsLocked(*it->second);
}

WarmPoolStatus PodRunner::warmPool(const std::string& revision) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = revisions_.find(revision);
  if (it == revisions_.end()) return WarmPoolStatus{warmPoolModeName(options_.warm_pool_mode)};
  return warmStatusLocked(*it->second);
}

void PodRunner::setOnWarmPoolChanged(std::function<void(const std::string&)> fn) {
  std::lock_guard<std::mutex> l(mu_);
  on_warm_ = std::move(fn);
}

std::vector<PodInfo> PodRunner::pods(const std::string& revision) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<PodInfo> out;
  auto it = revisions_.find(revision);
  if (it == revisions_.end()) return out;
  for (auto& [id, pod] : it->second->pods) {
    PodInfo info{id, pod.state, pod.handle.ip, pod.handle.pid, pod.adopted};
    info.warm = pod.warm;
    info.paused = pod.paused;
    info.origin = pod.origin;
    info.memory_bytes = pod.memory_bytes;
    info.replaced = pod.replaced;
    out.push_back(std::move(info));
  }
  return out;
}

RestartResult PodRunner::restart(const std::string& revision) {
  RestartResult out;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = revisions_.find(revision);
    if (it == revisions_.end() || it->second->object.is_null() || it->second->removed) return out;
    Revision& rev = *it->second;
    for (auto& [id, pod] : rev.pods) {
      if (pod.state == PodState::kStopping || pod.state == PodState::kCrashed || pod.stop_requested) continue;
      if (pod.warm) {
        requestStopLocked(rev, pod, nullptr);
        ++out.warm_pods;
      } else {
        pod.replaced = true;
        out.pods.push_back(id);
      }
    }
    if (out.pods.empty() && out.warm_pods == 0) return out;
    std::string what = std::to_string(out.pods.size()) + " pod" + (out.pods.size() == 1 ? "" : "s");
    LOG(INFO) << "pod runner: restarting " << revision << ": replacing " << what << " one by one"
              << (out.warm_pods > 0 ? ", and " + std::to_string(out.warm_pods) + " warm pod(s)" : "");
    if (!out.pods.empty()) {
      eventLocked(rev, EventType::kNormal, "Restarting",
                  "Restarting " + what + ": each is stopped once a new pod is ready");
    }
  }
  wake();
  return out;  // std::map order: sorted
}

std::optional<MonoTime> PodRunner::nextDue() {
  std::lock_guard<std::mutex> l(mu_);
  std::optional<MonoTime> best;
  auto consider = [&](MonoTime t) {
    if (!best || t < *best) best = t;
  };
  for (auto& [k, rev] : revisions_) {
    if (rev->object.is_null()) continue;
    if (!rev->ever_ready && !rev->removed) consider(rev->created_at + rev->progress_deadline);
    int active = rev->creates_in_flight;
    int warm = 0;
    for (auto& [id, pod] : rev->pods) {
      if ((pod.state == PodState::kStarting || pod.state == PodState::kReady) && !pod.busy &&
          !pod.stop_requested && !pod.paused && !pod.pause_pending && !pod.resume_pending) {
        consider(pod.next_probe);
      }
      if (pod.state == PodState::kWarm && !pod.busy && !pod.stop_requested) consider(pod.next_memory);
      if (pod.state == PodState::kStopping && !pod.busy && !pod.stopped && pod.stop_after != MonoTime{})
        consider(pod.stop_after);
      if (pod.state != PodState::kStopping && pod.state != PodState::kCrashed && !pod.stop_requested) {
        ++(pod.warm ? warm : active);
      }
    }
    if (!rev->removed && (active < rev->desired || warm < warmTargetLocked(*rev, active)))
      consider(rev->next_create);
  }
  return best;
}

std::string PodRunner::newPodId(const Revision& rev) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::ostringstream os;
  os << rev.name << "-" << std::hex << (rng() & 0xffffffffULL);
  std::string id = os.str();
  (void)pod_counter_;
  return id;
}

// ------------------------------------------------------------------ control

void PodRunner::runOnce() {
  std::vector<std::function<void()>> work;
  std::vector<std::thread> done;
  Notes notes;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const std::string& id : finished_waiters_) {
      auto it = waiters_.find(id);
      if (it != waiters_.end()) {
        done.push_back(std::move(it->second));
        waiters_.erase(it);
      }
    }
    finished_waiters_.clear();
    MonoTime now = time_.monotonic();
    if (options_.resolve_objects && now >= next_objects_refresh_) {
      next_objects_refresh_ = now + options_.objects_refresh_interval;
      refreshVolumesLocked(&work);
    }
    for (auto it = revisions_.begin(); it != revisions_.end();) {
      Revision& rev = *it->second;
      stepRevisionLocked(rev, now, &work);
      if (rev.removed && rev.pods.empty() && rev.creates_in_flight == 0) {
        if (!rev.last_endpoints.empty() && on_endpoints_) {
          auto fn = on_endpoints_;
          std::string k = it->first;
          notes.push_back([fn, k] { fn(k); });
        }
        it = revisions_.erase(it);
      } else {
        ++it;
      }
    }
    collectNotesLocked(&notes);
  }
  for (auto& t : done) {
    if (t.joinable()) t.join();
  }
  notifyAll(std::move(notes));
  for (auto& w : work) post(std::move(w));
}

// Running pods see updated Secrets/ConfigMaps in their volumes: resolve again,
// and let the driver swap the volumes whose files changed. A failed resolve
// (the object was deleted) keeps the last files, as the kubelet does.
void PodRunner::refreshVolumesLocked(std::vector<std::function<void()>>* work) {
  for (auto& [k, rev_ptr] : revisions_) {
    Revision& rev = *rev_ptr;
    if (rev.removed || rev.object.is_null() || !hasObjectVolumes(rev.object)) continue;
    std::vector<PodHandle> pods;
    for (auto& [id, pod] : rev.pods) {
      if (pod.started && !pod.stop_requested && !pod.exited) pods.push_back(pod.handle);
    }
    if (pods.empty()) continue;
    json object = rev.object;
    std::string ns = rev.ns;
    work->push_back([this, object, ns, pods] {
      PodObjectsFailure failure;
      auto values = options_.resolve_objects(object, ns, &failure);
      if (!values) return;
      for (const PodHandle& h : pods) {
        Status s = driver_.updateVolumes(h, values->volumes);
        if (!s.isOk())
          LOG(WARNING) << "pod runner: updating the volumes of " << h.pod_id << ": " << s.toString();
      }
    });
  }
}

void PodRunner::requestStopLocked(Revision& rev, Pod& pod, std::vector<std::function<void()>>* work) {
  (void)work;
  (void)rev;
  if (pod.stop_requested) return;
  pod.stop_requested = true;
  if (pod.state != PodState::kCrashed) pod.state = PodState::kStopping;
}

// The revision and pod a finished driver call was for, or {nullptr, nullptr}
// when either was removed while the call ran. Requires mu_.
std::pair<PodRunner::Revision*, PodRunner::Pod*> PodRunner::findPodLocked(const std::string& revision,
                                                                          const std::string& pod_id) {
  auto rit = revisions_.find(revision);
  if (rit == revisions_.end()) return {nullptr, nullptr};
  auto pit = rit->second->pods.find(pod_id);
  if (pit == rit->second->pods.end()) return {nullptr, nullptr};
  return {rit->second.get(), &pit->second};
}

void PodRunner::createPodLocked(Revision& rev, bool warm, MonoTime now,
                                std::vector<std::function<void()>>* work) {
  std::string k = key(rev.ns, rev.name);
  Pod pod;
  pod.handle.pod_id = newPodId(rev);
  pod.handle.ns = rev.ns;
  pod.handle.revision_name = rev.name;
  pod.handle.port = rev.port;
  pod.busy = true;
  pod.started_at = now;
  pod.warm = warm;
  PodRequest req;
  req.revision = rev.object;
  req.ns = rev.ns;
  req.revision_name = rev.name;
  if (firstContainer(rev.object).contains("image") && firstContainer(rev.object)["image"].is_string()) {
    req.image = firstContainer(rev.object)["image"].get<std::string>();
  }
  if (rev.object.contains("spec") && rev.object["spec"].is_object() &&
      rev.object["spec"].contains("containers") && rev.object["spec"]["containers"].is_array()) {
    for (const auto& c : rev.object["spec"]["containers"]) {
      req.images.push_back(c.is_object() && c.contains("image") && c["image"].is_string()
                               ? c["image"].get<std::string>()
                               : std::string());
    }
  }
  req.pod_id = pod.handle.pod_id;
  std::string id = pod.handle.pod_id;
  rev.pods.emplace(id, std::move(pod));
  work->push_back([this, k, id, req] {
    // Secrets and ConfigMaps are read just before the create, so a pod
    // created after a fix sees it; a missing one fails like the kubelet.
    PodRequest request = req;
    PodObjectsFailure objects_failure;
    StatusOr<PodHandle> r = failedPrecondition("not created");
    bool resolved = true;
    if (options_.resolve_objects) {
      auto values = options_.resolve_objects(req.revision, req.ns, &objects_failure);
      if (values) {
        request.objects = std::move(*values);
      } else {
        resolved = false;
        r = failedPrecondition(objects_failure.message);
      }
    }
    if (resolved) r = driver_.create(request);
    Notes notes;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto [found_rev, found_pod] = findPodLocked(k, id);
      if (!found_pod) return;  // revision or pod gone meanwhile
      Revision& rv = *found_rev;
      Pod& p = *found_pod;
      p.busy = false;
      MonoTime t = time_.monotonic();
      if (!r.isOk()) {
        LOG(WARNING) << "pod runner: create " << id << " of " << k << ": " << r.status().toString();
        controller::ConditionState f;
        f.status = "False";
        if (!resolved) {
          f.reason = objects_failure.reason.empty() ? "CreateContainerConfigError" : objects_failure.reason;
        } else if (r.status().code() == Code::kNotFound) {
          f.reason = "ContainerMissing";
        } else if (r.status().code() == Code::kInvalidArgument) {
          f.reason = "InvalidSpec";
        } else {
          f.reason = "CreateContainerError";
        }
        f.message = r.status().message();
        if (!rv.ever_ready || f.reason == "ContainerMissing" || !resolved) {
          if (!resolved && (!rv.failure || rv.failure->message != f.message))
            eventLocked(rv, EventType::kWarning, "Failed", "Error: " + f.message);
          rv.failure = f;
        }
        rv.pods.erase(id);
        ++rv.consecutive_crashes;
        Duration d = options_.backoff_initial;
        for (int i = 1; i < rv.consecutive_crashes && d < options_.backoff_max; ++i) d *= 2;
        // A missing Secret/ConfigMap is retried soon: creating it should not wait minutes.
        Duration cap =
            resolved ? options_.backoff_max : std::min(options_.backoff_max, options_.objects_retry_max);
        rv.next_create = t + std::min(d, cap);
      } else {
        PodHandle h = *r;
        h.pod_id = id;
        h.ns = rv.ns;
        h.revision_name = rv.name;
        if (h.port == 0) h.port = rv.port;
        p.handle = h;
        if (!h.image_digest.empty()) rv.image_digest = h.image_digest;
        if (!h.image_digests.empty()) rv.image_digests = h.image_digests;
        if (rv.failure &&
            (rv.failure->reason == "ContainerMissing" || rv.failure->reason == "CreateContainerConfigError" ||
             rv.failure->reason == "FailedMount"))
          rv.failure.reset();
        if (!shutting_down_) spawnWaiterLocked(rv, p);
        if (p.warm && rv.warm_mode == WarmPoolMode::kCreated && p.state == PodState::kCreating) {
          p.state = PodState::kWarm;  // created, not started: one start() from serving
          p.next_memory = t;
        }
      }
      collectNotesLocked(&notes);
    }
    notifyAll(std::move(notes));
    wake();
  });
}

int PodRunner::warmTargetLocked(const Revision& rev, int serving) const {
  if (rev.removed || rev.object.is_null()) return 0;
  int target = rev.warm_size;
  if (rev.max_scale > 0) target = std::min(target, rev.max_scale - serving);
  return std::max(0, target);
}

void PodRunner::markReadyLocked(Revision& rev, Pod& pod, MonoTime now) {
  pod.state = PodState::kReady;
  pod.ready_since = now;
  rev.ever_ready = true;
  rev.failure.reset();
  rev.probe_failure.clear();
  rev.probe_failure_logged.clear();
  LOG(INFO) << "pod runner: pod " << pod.handle.pod_id << " of " << key(rev.ns, rev.name) << " is ready at "
            << pod.handle.ip << ":" << pod.handle.port << " (" << pod.origin << ")";
  eventLocked(rev, EventType::kNormal, "Started",
              "Started pod " + pod.handle.pod_id + " (" + pod.origin + "), ready at " + pod.handle.ip + ":" +
                  std::to_string(pod.handle.port));
}

void PodRunner::eventLocked(const Revision& rev, EventType type, const std::string& reason,
                            const std::string& message) {
  if (!options_.events) return;
  ObjectRef ref = objectRefOf(rev.object);
  if (ref.name.empty()) ref = {"serving.knative.dev/v1", "Revision", rev.ns, rev.name, ""};
  options_.events->record(ref, type, reason, message, "knap-runtime");
}

void PodRunner::promoteLocked(Revision& rev, Pod& pod, MonoTime now) {
  pod.warm = false;
  if (pod.state == PodState::kWarm) {
    if (pod.paused) {
      pod.origin = "frozen";
      pod.resume_pending = true;  // thaw, then Ready at once
      pod.state = PodState::kStarting;
    } else {
      pod.origin = "warm";
      pod.state = PodState::kCreating;  // the start path picks it up
    }
    pod.started_at = now;
  } else if (pod.pause_pending && !pod.busy) {
    markReadyLocked(rev, pod, now);  // passed readiness just now, not frozen yet
  }
  // Otherwise still warming: it goes on to Ready as an ordinary pod (a pause
  // in flight is undone when it returns).
  LOG(INFO) << "pod runner: promoted warm pod " << pod.handle.pod_id << " of " << key(rev.ns, rev.name)
            << " (" << pod.origin << ")";
}

void PodRunner::finishResume(const std::string& k, const std::string& pid, const Status& r) {
  finishDriverCall(k, pid, [&](Revision& rv, Pod& p, MonoTime t) {
    p.resume_pending = false;
    if (!r.isOk()) {
      LOG(WARNING) << "pod runner: resume " << pid << " of " << k << ": " << r.toString() << "; replacing it";
      requestStopLocked(rv, p, nullptr);
    } else {
      p.paused = false;
      if (!p.stop_requested) {
        markReadyLocked(rv, p, t);
        if (p.readiness) {
          p.next_probe = p.readiness->nextProbeAt();
          if (p.liveness) p.next_probe = std::min(p.next_probe, p.liveness->nextProbeAt());
        }
      }
    }
  });
}

void PodRunner::wakeNow(const std::string& revision) {
  if (!driver_.fastResume()) return;
  PodHandle h;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = revisions_.find(revision);
    if (it == revisions_.end()) return;
    Revision& rev = *it->second;
    if (rev.removed || rev.object.is_null()) return;
    int serving = 0;
    Pod* frozen = nullptr;
    for (auto& [id, pod] : rev.pods) {
      if (pod.state == PodState::kStopping || pod.state == PodState::kCrashed || pod.stop_requested) continue;
      if (!pod.warm) {
        ++serving;
      } else if (pod.state == PodState::kWarm && pod.paused && !pod.busy && frozen == nullptr) {
        frozen = &pod;
      }
    }
    if (frozen == nullptr || serving >= rev.desired) return;  // nothing to thaw, or the loop has it
    promoteLocked(rev, *frozen, time_.monotonic());           // -> resume_pending; done right here
    frozen->busy = true;
    h = frozen->handle;
  }
  finishResume(revision, h.pod_id, driver_.resume(h));
}

WarmPoolStatus PodRunner::warmStatusLocked(const Revision& rev) const {
  WarmPoolStatus st;
  st.mode = warmPoolModeName(rev.warm_mode);
  int serving = 0;
  for (const auto& [id, pod] : rev.pods) {
    if (pod.state == PodState::kStopping || pod.state == PodState::kCrashed || pod.stop_requested) continue;
    if (!pod.warm) {
      ++serving;
    } else if (pod.state == PodState::kWarm) {
      ++st.pods;
      if (pod.memory_bytes > 0) st.memory_bytes += pod.memory_bytes;
    } else {
      ++st.warming;
    }
  }
  st.target = warmTargetLocked(rev, serving);
  return st;
}

// The end of every per-pod driver call: under the lock, finds the pod (gone
// meanwhile: nothing to do), marks it not busy, lets `apply` record the
// result at time `t`, then reports changes and wakes the control loop.
void PodRunner::finishDriverCall(const std::string& rev_key, const std::string& pod_id,
                                 const std::function<void(Revision&, Pod&, MonoTime)>& apply) {
  Notes notes;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto [rev, pod] = findPodLocked(rev_key, pod_id);
    if (!pod) return;  // revision or pod gone meanwhile
    pod->busy = false;
    apply(*rev, *pod, time_.monotonic());
    collectNotesLocked(&notes);
  }
  notifyAll(std::move(notes));
  wake();
}

void PodRunner::stepRevisionLocked(Revision& rev, MonoTime now, Work* work) {
  if (rev.object.is_null() && !rev.removed) return;  // adopted pods wait for ensure()
  // Creates are queued after the per-pod work, so a promoted warm pod's
  // start/resume goes to the executor before any new pod's create.
  Work creates;
  if (!rev.removed) {
    scaleLocked(rev, now, work, &creates);
  } else {
    for (auto& [id, pod] : rev.pods) requestStopLocked(rev, pod, work);
  }
  const std::string k = key(rev.ns, rev.name);
  for (auto& [id, pod] : rev.pods) {
    if (!pod.busy) stepPodLocked(rev, k, id, pod, now, work);
  }
  for (auto& c : creates) work->push_back(std::move(c));
}

// 1. Scale: count the pods that are (or will be) serving, and the pool.
void PodRunner::scaleLocked(Revision& rev, MonoTime now, Work* work, Work* creates) {
  std::vector<Pod*> serving, warm, replaced;
  for (auto& [id, pod] : rev.pods) {
    if (pod.state == PodState::kStopping || pod.state == PodState::kCrashed || pod.stop_requested) continue;
    (pod.replaced ? replaced : pod.warm ? warm : serving).push_back(&pod);
  }
  const bool can_create = now >= rev.next_create && rev.spec_error.empty();
  const int surge_room = retireReplacedLocked(rev, serving, replaced, now, work);
  const int created = scaleServingLocked(rev, serving, warm, surge_room, can_create, now, work, creates);
  sizeWarmPoolLocked(rev, serving, warm, created, can_create, now, work, creates);
}

// A restart under way (restart()): keeps as many replaced pods as the desired
// count lacks ready new pods and stops the rest, the least useful first (not
// ready, then the oldest), after the drain. Returns how many serving pods
// may run: while replaced pods run, at most one pod more than desired.
int PodRunner::retireReplacedLocked(Revision& rev, const std::vector<Pod*>& serving,
                                    std::vector<Pod*>& replaced, MonoTime now, Work* work) {
  if (replaced.empty()) return rev.desired;
  const int ready_new = static_cast<int>(std::count_if(
      serving.begin(), serving.end(), [](const Pod* p) { return p->state == PodState::kReady; }));
  const int keep = std::max(0, rev.desired - ready_new);
  std::sort(replaced.begin(), replaced.end(), [](const Pod* a, const Pod* b) {
    bool ra = a->state == PodState::kReady, rb = b->state == PodState::kReady;
    if (ra != rb) return !ra;
    return a->started_at < b->started_at;
  });
  while (static_cast<int>(replaced.size()) > keep) {
    Pod* p = replaced.front();
    replaced.erase(replaced.begin());
    requestStopLocked(rev, *p, work);
    p->stop_after = now + options_.restart_drain;
    LOG(INFO) << "pod runner: restart of " << key(rev.ns, rev.name) << ": stopping replaced pod "
              << p->handle.pod_id << " (" << ready_new << " new pod(s) ready)";
  }
  return std::max(0, rev.desired + 1 - static_cast<int>(replaced.size()));
}

// Stops surplus serving pods, or promotes warm pods and creates new ones up
// to rev.desired. Returns how many pods it created.
int PodRunner::scaleServingLocked(Revision& rev, std::vector<Pod*>& serving, std::vector<Pod*>& warm,
                                  int surge_room, bool can_create, MonoTime now, Work* work, Work* creates) {
  const int have = static_cast<int>(serving.size());
  if (have > rev.desired) {
    // Stop the least useful first: not ready before ready, newest first.
    std::sort(serving.begin(), serving.end(), [](const Pod* a, const Pod* b) {
      bool ra = a->state == PodState::kReady, rb = b->state == PodState::kReady;
      if (ra != rb) return !ra;
      return a->started_at > b->started_at;
    });
    for (int i = 0; i < have - rev.desired; ++i) requestStopLocked(rev, *serving[i], work);
    serving.erase(serving.begin(), serving.begin() + (have - rev.desired));
    return 0;
  }
  if (have == rev.desired) return 0;
  // Warm pods first (Warm, then the furthest along), then new pods.
  auto rank = [](const Pod* p) {
    if (p->state == PodState::kWarm) return 0;
    if (p->pause_pending) return 1;
    if (p->state == PodState::kStarting) return 2;
    return 3;
  };
  std::stable_sort(warm.begin(), warm.end(), [&](const Pod* a, const Pod* b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return a->started_at < b->started_at;
  });
  int need = rev.desired - have;
  size_t promoted = 0;
  for (; promoted < warm.size() && need > 0; ++promoted, --need) {
    promoteLocked(rev, *warm[promoted], now);
    serving.push_back(warm[promoted]);
  }
  warm.erase(warm.begin(), warm.begin() + static_cast<std::ptrdiff_t>(promoted));
  need = std::min(need, std::max(0, surge_room - static_cast<int>(serving.size())));
  if (need <= 0 || !can_create) return 0;
  for (int i = 0; i < need; ++i) createPodLocked(rev, false, now, creates);
  return need;
}

// The pool: fill up to its target once no serving pod is on its way (a wake
// gets the machine to itself), trim it when the target drops.
void PodRunner::sizeWarmPoolLocked(Revision& rev, const std::vector<Pod*>& serving, std::vector<Pod*>& warm,
                                   int created, bool can_create, MonoTime now, Work* work, Work* creates) {
  const int target = warmTargetLocked(rev, static_cast<int>(serving.size()) + created);
  const int have_warm = static_cast<int>(warm.size());
  if (have_warm > target) {
    // Least advanced first, newest first.
    std::sort(warm.begin(), warm.end(), [](const Pod* a, const Pod* b) {
      if (a->state != b->state) return a->state < b->state;  // Creating < Starting < Warm
      return a->started_at > b->started_at;
    });
    for (int i = 0; i < have_warm - target; ++i) requestStopLocked(rev, *warm[i], work);
  } else if (have_warm < target && can_create) {
    bool starting = created > 0;
    for (const Pod* p : serving) starting = starting || p->state != PodState::kReady;
    if (!starting) {
      for (int i = have_warm; i < target; ++i) createPodLocked(rev, true, now, creates);
    }
  }
}

// 2. Per-pod work: the one driver call a pod that is not busy needs next.
void PodRunner::stepPodLocked(Revision& rev, const std::string& k, const std::string& pid, Pod& pod,
                              MonoTime now, Work* work) {
  const bool stopping = pod.stop_requested;
  if (pod.state == PodState::kCreating && !pod.started && !stopping)
    return queueStartLocked(k, pid, pod, work);
  // Frozen mode: the warm pod passed readiness; freeze it.
  if (pod.pause_pending && !stopping) return queuePauseLocked(k, pid, pod, work);
  // A promoted frozen pod: thaw it; it passed readiness before it froze.
  if (pod.resume_pending && !stopping) return queueResumeLocked(k, pid, pod, work);
  if (pod.state == PodState::kWarm && !stopping && now >= pod.next_memory)
    return queueMemoryLocked(k, pid, pod, work);
  if ((pod.state == PodState::kStarting || pod.state == PodState::kReady) && !stopping && !pod.paused &&
      pod.readiness && now >= pod.next_probe) {
    return queueProbeLocked(k, pid, pod, now, work);
  }
  if (pod.state == PodState::kStopping && !pod.stopped && pod.waiter && !pod.exited &&
      now >= pod.stop_after) {
    return queueStopLocked(rev, k, pid, pod, work);
  }
  // Destroy once the process is known to be gone (or never ran).
  const bool gone = pod.exited || !pod.waiter;
  if ((pod.state == PodState::kCrashed || pod.state == PodState::kStopping) && gone &&
      now >= pod.retry_destroy_at) {
    queueDestroyLocked(k, pid, pod, work);
  }
}

void PodRunner::queueStartLocked(const std::string& k, const std::string& pid, Pod& pod, Work* work) {
  pod.busy = true;
  PodHandle h = pod.handle;
  work->push_back([this, k, pid, h] {
    StatusOr<uint32_t> r = driver_.start(h);
    finishDriverCall(k, pid, [&](Revision& rv, Pod& p, MonoTime t) {
      if (!r.isOk()) {
        LOG(WARNING) << "pod runner: start " << pid << " of " << k << ": " << r.status().toString();
        if (!rv.ever_ready)
          rv.failure = controller::ConditionState{"False", "StartError", r.status().message()};
        p.counts_as_crash = true;
        p.stop_requested = true;
        p.state = PodState::kStopping;
      } else if (p.state == PodState::kCreating) {
        LOG(INFO) << "pod runner: started " << pid << " of " << k << " (pid " << *r << ")";
        p.started = true;
        p.handle.pid = *r;
        p.state = PodState::kStarting;
        p.started_at = t;
        p.readiness.emplace(rv.readiness_spec, runtime::ProbeKind::kReadiness, t);
        if (rv.liveness_spec) p.liveness.emplace(*rv.liveness_spec, runtime::ProbeKind::kLiveness, t);
        p.next_probe = p.readiness->nextProbeAt();
        if (p.liveness) p.next_probe = std::min(p.next_probe, p.liveness->nextProbeAt());
      }
    });
  });
}

void PodRunner::queuePauseLocked(const std::string& k, const std::string& pid, Pod& pod, Work* work) {
  pod.busy = true;
  PodHandle h = pod.handle;
  work->push_back([this, k, pid, h] {
    Status r = driver_.pause(h);
    finishDriverCall(k, pid, [&](Revision& rv, Pod& p, MonoTime t) {
      p.pause_pending = false;
      if (!r.isOk()) {
        LOG(WARNING) << "pod runner: pause " << pid << " of " << k << ": " << r.toString()
                     << "; replacing the warm pod";
        requestStopLocked(rv, p, nullptr);
      } else {
        p.paused = true;
        if (p.stop_requested) {
          // stopped meanwhile: the stop path thaws it
        } else if (p.warm) {
          p.state = PodState::kWarm;
          p.next_memory = t;
        } else {
          p.origin = "frozen";  // promoted while the pause was in flight
          p.resume_pending = true;
        }
      }
    });
  });
}

void PodRunner::queueResumeLocked(const std::string& k, const std::string& pid, Pod& pod, Work* work) {
  pod.busy = true;
  PodHandle h = pod.handle;
  work->push_back([this, k, pid, h] { finishResume(k, pid, driver_.resume(h)); });
}

void PodRunner::queueMemoryLocked(const std::string& k, const std::string& pid, Pod& pod, Work* work) {
  pod.busy = true;
  PodHandle h = pod.handle;
  work->push_back([this, k, pid, h] {
    StatusOr<int64_t> r = driver_.memoryBytes(h);
    finishDriverCall(k, pid, [&](Revision& rv, Pod& p, MonoTime t) {
      p.next_memory = time_.monotonic() + options_.warm_memory_interval;
      if (r.isOk()) {
        p.memory_bytes = *r;
      } else {
        LOG(WARNING) << "pod runner: memory of warm pod " << pid << ": " << r.status().toString();
      }
    });
  });
}

void PodRunner::queueProbeLocked(const std::string& k, const std::string& pid, Pod& pod, MonoTime now,
                                 Work* work) {
  bool liveness =
      pod.liveness && pod.liveness->nextProbeAt() <= now &&
      (pod.readiness->nextProbeAt() > now || pod.liveness->nextProbeAt() < pod.readiness->nextProbeAt());
  runtime::ProbeSpec spec = liveness ? pod.liveness->spec() : pod.readiness->spec();
  pod.busy = true;
  PodHandle h = pod.handle;
  work->push_back([this, k, pid, h, spec, liveness] {
    MonoTime started = time_.monotonic();
    runtime::ProbeResult r = driver_.probe(h, spec);
    finishDriverCall(k, pid, [&](Revision& rv, Pod& p, MonoTime t) {
      if (p.stop_requested || !p.readiness) {
        // stopping or crashed meanwhile: ignore the result
      } else if (liveness && p.liveness) {
        p.liveness->record(r.success, started, t);
        if (!p.liveness->healthy()) {
          LOG(WARNING) << "pod runner: liveness probe of " << pid << " failed (" << r.message
                       << "): restarting";
          eventLocked(rv, EventType::kWarning, "Unhealthy",
                      "Liveness probe of pod " + pid + " failed: " + r.message + "; restarting it");
          p.counts_as_crash = true;
          p.stop_requested = true;
          p.state = PodState::kStopping;
        }
      } else {
        p.readiness->record(r.success, started, t);
        if (!r.success && p.state == PodState::kStarting && !rv.ever_ready) {
          if (rv.probe_failure.empty()) rv.probe_failing_since = t;
          rv.probe_failure = r.message;
          if (t - rv.probe_failing_since >= kProbeFailureGrace && rv.probe_failure_logged != r.message) {
            LOG(WARNING) << "pod runner: readiness probe of " << pid << " failed: " << r.message;
            rv.probe_failure_logged = r.message;
          }
        }
        if (p.readiness->healthy() && p.state == PodState::kStarting && p.warm) {
          p.pause_pending = true;  // frozen mode: ready to serve; freeze it until promoted
          rv.failure.reset();
        } else if (p.readiness->healthy() && p.state == PodState::kStarting) {
          markReadyLocked(rv, p, t);
        } else if (!p.readiness->healthy() && p.state == PodState::kReady) {
          p.state = PodState::kStarting;
          eventLocked(rv, EventType::kWarning, "Unhealthy",
                      "Readiness probe of pod " + pid + " failed: " + r.message + "; it gets no requests");
        }
      }
      if (p.readiness) {
        p.next_probe = p.readiness->nextProbeAt();
        if (p.liveness) p.next_probe = std::min(p.next_probe, p.liveness->nextProbeAt());
      }
    });
  });
}

void PodRunner::queueStopLocked(const Revision& rev, const std::string& k, const std::string& pid, Pod& pod,
                                Work* work) {
  pod.busy = true;
  PodHandle h = pod.handle;
  // A warm pod serves nobody: no grace period. A frozen one is thawed
  // first, or the signal would wait for the thaw.
  Duration grace = pod.warm ? Duration::zero() : rev.stop_grace;
  bool thaw = pod.paused;
  work->push_back([this, k, pid, h, grace, thaw] {
    if (thaw) {
      Status r = driver_.resume(h);
      if (!r.isOk()) LOG(WARNING) << "pod runner: resume " << pid << " before stop: " << r.toString();
    }
    Status s = driver_.stop(h, grace);
    std::lock_guard<std::mutex> l(mu_);
    Pod* found = findPodLocked(k, pid).second;
    if (found == nullptr) return;
    Pod& p = *found;
    p.busy = false;
    p.stopped = true;
    p.paused = false;
    if (!s.isOk()) {
      LOG(WARNING) << "pod runner: stop " << pid << ": " << s.toString() << "; destroying anyway";
      if (p.waiter && !p.exited) driver_.cancelWait(p.handle);
    }
    wake();
  });
}

void PodRunner::queueDestroyLocked(const std::string& k, const std::string& pid, Pod& pod, Work* work) {
  pod.busy = true;
  PodHandle h = pod.handle;
  work->push_back([this, k, pid, h] {
    Status s = driver_.destroy(h);
    Notes notes;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto [rv, p] = findPodLocked(k, pid);
      if (p == nullptr) return;
      if (!s.isOk()) {
        LOG(WARNING) << "pod runner: destroy " << pid << ": " << s.toString() << " (retrying)";
        p->busy = false;
        p->retry_destroy_at = time_.monotonic() + std::chrono::seconds(1);
      } else {
        rv->pods.erase(pid);
      }
      collectNotesLocked(&notes);
    }
    notifyAll(std::move(notes));
    wake();
  });
}

void PodRunner::onExit(const std::string& rev_key, const std::string& pod_id, StatusOr<PodExit> exit) {
  Notes notes;
  {
    std::lock_guard<std::mutex> l(mu_);
    finished_waiters_.insert(pod_id);
    ++exits_received_;
    if (shutting_down_) return;
    auto rit = revisions_.find(rev_key);
    if (rit == revisions_.end()) return;
    Revision& rev = *rit->second;
    auto pit = rev.pods.find(pod_id);
    if (pit == rev.pods.end()) return;
    Pod& pod = pit->second;
    pod.exited = true;
    PodExit info;
    if (exit.isOk()) {
      info = *exit;
    } else {
      info.exit_code = -1;
      info.log_tail = exit.status().message();
    }
    if (!pod.stop_requested || pod.counts_as_crash) {
      handleCrashLocked(rev, pod, info, time_.monotonic());
    }
    collectNotesLocked(&notes);
  }
  notifyAll(std::move(notes));
  wake();
}

void PodRunner::handleCrashLocked(Revision& rev, Pod& pod, const PodExit& exit, MonoTime now) {
  bool was_ready = pod.state == PodState::kReady || pod.ready_since != MonoTime{};
  LOG(WARNING) << "pod runner: pod " << pod.handle.pod_id << " of " << key(rev.ns, rev.name)
               << " exited with " << exit.exit_code << (exit.oom_killed ? " (OOM killed)" : "");
  pod.state = PodState::kCrashed;
  pod.stop_requested = true;
  int ready = 0;
  for (const auto& [id, p] : rev.pods) {
    if (p.state == PodState::kReady) ++ready;
  }
  // Like Knative's last-termination report: before the revision was ever
  // ready, or when no ready pod is left, the crash is the revision's health.
  if (!rev.ever_ready || ready == 0) {
    controller::ConditionState f;
    f.status = "False";
    std::string tail = trimTail(exit.log_tail);
    if (exit.oom_killed) {
      f.reason = "OOMKilled";
      f.message = "Container failed with: OOMKilled: the container exceeded its memory limit" +
                  (tail.empty() ? std::string() : "\n" + tail);
    } else {
      f.reason = "ExitCode" + std::to_string(exit.exit_code);
      f.message =
          "Container failed with: " + (tail.empty() ? "exit code " + std::to_string(exit.exit_code) : tail);
    }
    if (!exit.container.empty())
      f.message = "Container " + exit.container + " (sidecar) failed: " + f.message;
    if (pod.counts_as_crash && pod.liveness && !pod.liveness->healthy()) {
      f.message += " (liveness probe failed)";
    }
    rev.failure = f;
  }
  if (was_ready && now - pod.ready_since >= options_.backoff_reset) rev.consecutive_crashes = 0;
  ++rev.consecutive_crashes;
  Duration d = options_.backoff_initial;
  for (int i = 1; i < rev.consecutive_crashes && d < options_.backoff_max; ++i) d *= 2;
  rev.next_create = now + std::min(d, options_.backoff_max);
  std::string tail = trimTail(exit.log_tail);
  std::string what = exit.oom_killed ? "was OOM killed (it exceeded its memory limit)"
                                     : "exited with code " + std::to_string(exit.exit_code);
  if (!exit.container.empty()) what = "(container " + exit.container + ") " + what;
  if (pod.counts_as_crash && pod.liveness && !pod.liveness->healthy())
    what += " after its liveness probe failed";
  LOG(WARNING) << "pod runner: pod " << pod.handle.pod_id << " of " << key(rev.ns, rev.name) << " " << what
               << "; back-off " << formatSeconds(std::min(d, options_.backoff_max)) << " before the next pod";
  // The message names no pod and no back-off, so that a crash loop repeats one
  // Event (its count grows) instead of storing a new one per crash.
  eventLocked(
      rev, EventType::kWarning, exit.oom_killed ? "OOMKilled" : "BackOff",
      "Back-off restarting failed container: it " + what + (tail.empty() ? std::string() : ": " + tail));
}

// ------------------------------------------------------------------ health

controller::RevisionHealth PodRunner::computeHealthLocked(const Revision& rev, MonoTime now) const {
  controller::RevisionHealth h;
  int ready = 0;
  for (const auto& [id, pod] : rev.pods) {
    if (pod.state == PodState::kReady) ++ready;
  }
  h.actual_replicas = ready;
  h.desired_replicas = rev.desired;
  h.image_digest = rev.image_digest;
  h.image_digests = rev.image_digests;
  if (!rev.spec_error.empty()) {
    h.container_healthy = {"False", "InvalidSpec", rev.spec_error};
  } else if (rev.failure) {
    h.container_healthy = *rev.failure;
  } else if (rev.ever_ready) {
    h.container_healthy = {"True", "", ""};
  } else if (!rev.probe_failure.empty() && now - rev.probe_failing_since >= kProbeFailureGrace) {
    // Still deploying, but say why the pod is not ready yet (a failing exec
    // probe's exit code and output, a refused port, an HTTP status).
    h.container_healthy = {"Unknown", "Deploying", "Readiness probe failed: " + rev.probe_failure};
  } else {
    h.container_healthy = {"Unknown", "Deploying", ""};
  }
  if (rev.ever_ready) {
    h.resources_available = {"True", "", ""};
  } else if (now - rev.created_at >= rev.progress_deadline) {
    h.resources_available = {"False", "ProgressDeadlineExceeded",
                             "Revision \"" + rev.name +
                                 "\" did not become ready within the progress deadline (" +
                                 formatSeconds(rev.progress_deadline) + "): " +
                                 (rev.failure ? rev.failure->message
                                  : rev.probe_failure.empty()
                                      ? std::string("no pod passed readiness")
                                      : "no pod passed readiness (last probe: " + rev.probe_failure + ")")};
  } else if (rev.desired == 0 && !rev.failure &&
             std::all_of(rev.pods.begin(), rev.pods.end(), [](const auto& e) { return e.second.warm; })) {
    // Initial scale 0 (allowed by config): nothing to validate.
    h.resources_available = {"True", "", ""};
    if (h.container_healthy.status == "Unknown") h.container_healthy = {"True", "", ""};
  } else {
    h.resources_available = {"Unknown", "Deploying", ""};
  }
  if (rev.scale_outcome) {
    const auto& a = rev.scale_outcome->active;
    h.active = {scaler::conditionStatusName(a.status), a.reason, a.message};
  } else if (rev.desired == 0) {
    h.active = {"False", scaler::kReasonNoTraffic, "The target is not receiving traffic."};
  } else if (ready >= rev.desired) {
    h.active = {"True", "", ""};
  } else {
    h.active = {"Unknown", scaler::kReasonQueued,
                "Requests to the target are being buffered as resources are provisioned."};
  }
  return h;
}

std::vector<Endpoint> PodRunner::endpointsLocked(const Revision& rev) const {
  std::vector<Endpoint> out;
  for (const auto& [id, pod] : rev.pods) {
    if (pod.state == PodState::kReady && !pod.handle.ip.empty()) {
      out.push_back(Endpoint{id, pod.handle.ip, pod.handle.port});
    }
  }
  return out;  // std::map order = sorted by pod id
}

void PodRunner::collectNotesLocked(Notes* notes) {
  MonoTime now = time_.monotonic();
  for (auto& [k, rev] : revisions_) {
    if (rev->object.is_null()) continue;
    controller::RevisionHealth h = computeHealthLocked(*rev, now);
    if (!sameHealth(h, rev->last_reported) || !rev->reported_once) {
      rev->last_reported = h;
      rev->reported_once = true;
      if (on_change_) {
        auto fn = on_change_;
        std::string ns = rev->ns, name = rev->name;
        notes->push_back([fn, ns, name] { fn(ns, name); });
      }
    }
    std::vector<Endpoint> eps = endpointsLocked(*rev);
    if (eps != rev->last_endpoints) {
      if (rev->last_endpoints.empty() && !eps.empty()) {
        // Woke from zero: how did the first ready pod come to be?
        const Pod* first = nullptr;
        for (const Endpoint& e : eps) {
          const Pod& p = rev->pods.at(e.pod_id);
          if (!first || p.ready_since < first->ready_since) first = &p;
        }
        rev->last_wake = WakeReport{first->origin, rev->image_ready_at};
        LOG(INFO) << "pod runner: " << k << " has a ready pod again (" << first->origin << ": "
                  << first->handle.pod_id << ")";
      }
      rev->last_endpoints = eps;
      if (on_endpoints_) {
        auto fn = on_endpoints_;
        std::string key = k;
        notes->push_back([fn, key] { fn(key); });
      }
    }
    WarmPoolStatus warm = warmStatusLocked(*rev);
    if (warm != rev->last_warm) {
      rev->last_warm = warm;
      if (on_warm_) {
        auto fn = on_warm_;
        std::string key = k;
        notes->push_back([fn, key] { fn(key); });
      }
    }
  }
}

void PodRunner::notifyAll(Notes notes) {
  for (auto& n : notes) n();
}

}  // namespace knap::runner
