// PodRunner: runs every Revision's pods through a PodDriver and reports
// their health to the controllers (RevisionBackend), their readiness to the
// autoscaler (PodCounter) and takes the desired pod count from it
// (ScaleTarget).
//
// Model: each revision has a desired pod count (initial scale from the
// annotations/config until setDesiredScale() says otherwise) and a set of
// pods, each in one state:
//   Creating -> Starting (probing readiness) -> Ready -> (exit) Crashed
//   any -> Stopping -> gone
// Warm pool: a revision that can scale to zero (effective min-scale 0,
// scale to zero enabled) also keeps N warm pods, N = its annotation
// knap.dev/warm-pool, else options.warm_pool_size (mode: knap.dev/warm-pool-mode,
// else options.warm_pool_mode), capped so that serving +
// warm pods <= max-scale (when max-scale > 0). A warm pod is
//   created mode: netns, container and task created, process not started;
//   frozen mode:  started, passed readiness, then paused (cgroup freezer);
// and sits in state Warm. Warm pods are no endpoints and no ready pods. When
// the desired scale asks for more pods, Warm pods are promoted first (created:
// start() and probe as usual; frozen: resume() and Ready at once), then pods
// still warming up, and only then are new pods created. The pool refills once
// no serving pod is starting. A revision going from 0 ready pods to >= 1
// records how its first ready pod came to be (WakeReport: "warm", "frozen",
// "cached" or "adopted"). Warm pods found at adoption (frozen or CREATED
// tasks) are destroyed; the pool then refills.
// Restart (restart()): a rolling replacement of a revision's serving pods,
// as a Deployment's rollout: every serving pod at the time of the call is
// marked "replaced"; new pods are created up to the desired count, at most
// one pod more than desired at a time (surge 1, none unavailable), and each
// time a new pod is Ready one replaced pod leaves the endpoints and is
// stopped options.restart_drain later (requests already routed to it
// finish). Replaced pods stay while new ones fail to start. Warm pods are
// stopped at once (they serve nothing; the pool refills with new ones).
// A crashed pod is destroyed and replaced after an exponential back-off
// (options.backoff_initial doubling up to backoff_max; reset once a pod has
// been ready for backoff_reset). A failing liveness probe stops the pod, which
// then counts as a crash. Pods are probed with runtime::ProbeState (the
// readiness default is Knative's aggressive TCP probe on the serving port).
//
// Threads: one control thread (runOnce() in a loop) decides; blocking driver
// calls run on an executor (a pool of options.workers threads, or the
// caller-supplied one; tests pass an inline executor and call runOnce()
// themselves); each pod's wait() runs on a dedicated thread.
//
// Thread safety: every public method may be called from any thread. The
// change / endpoints callbacks are called without the runner's lock held, from
// the control thread or an executor thread; they must not block and may call
// back into health()/readyEndpoints().
//
// Revision keys for PodCounter/ScaleTarget/readyEndpoints are "<ns>/<name>".
#pragma once

#include <atomic>
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
#include <utility>
#include <vector>

#include "api/revision_settings.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/event_recorder.h"
#include "common/loop.h"
#include "controller/revision_backend.h"
#include "runtime/pod/probe.h"
#include "runtime/runner/pod_driver.h"
#include "scaler/driver.h"

namespace knap::runner {

enum class WarmPoolMode { kCreated, kFrozen };
const char* warmPoolModeName(WarmPoolMode m);  // "created" / "frozen"

// Why a pod's Secrets/ConfigMaps could not be resolved (kubelet reasons:
// CreateContainerConfigError for env, FailedMount for volumes).
struct PodObjectsFailure {
  std::string reason;
  std::string message;  // names the object and key
};
// Resolves what a Revision's pods read from Secrets and ConfigMaps; nullopt
// (and *failure filled) when a non-optional object or key is missing.
using PodObjectsResolver = std::function<std::optional<PodObjectValues>(
    const nlohmann::json& revision, const std::string& ns, PodObjectsFailure* failure)>;

struct PodRunnerOptions {
  Duration backoff_initial = std::chrono::seconds(1);
  Duration backoff_max = std::chrono::minutes(5);
  Duration backoff_reset = std::chrono::minutes(1);        // ready this long: back-off starts over
  Duration max_stop_grace = std::chrono::seconds(30);      // cap on timeoutSeconds as grace
  Duration loop_interval = std::chrono::milliseconds(20);  // control loop idle wake-up
  // The defaults under each Revision's settings (api/revision_settings.h):
  // config-autoscaler (initial/min/max scale, enable-scale-to-zero: false
  // means no warm pools), config-deployment (progress deadline),
  // config-defaults (timeoutSeconds, the stop grace up to max_stop_grace).
  Config config;
  int warm_pool_size = 0;  // knap.warm-pool-size (optionsFromConfig); 0 = no pools by default
  WarmPoolMode warm_pool_mode = WarmPoolMode::kFrozen;
  Duration warm_memory_interval = std::chrono::seconds(10);  // how often warm pods' memory is read
  int workers = 8;  // stop() holds a worker for up to the grace period
  // Runs blocking work; nullptr = the runner's own pool. Tests: [](auto f) { f(); }.
  std::function<void(std::function<void()>)> executor;
  // Where pod starts, crashes, OOM kills and probe failures are reported
  // (Events on the Revision); nullptr = nowhere. Borrowed.
  EventRecorder* events = nullptr;
  // Secrets/ConfigMaps for env and volumes (daemon: api/pod_objects.h over
  // the store), called on an executor thread before each pod create; a
  // failure leaves the revision ContainerHealthy False with the resolver's
  // reason and message and retries after at most objects_retry_max.
  // nullptr = pods read none.
  PodObjectsResolver resolve_objects;
  Duration objects_retry_max = std::chrono::seconds(5);
  // How often running pods' secret/configMap/projected volumes are refreshed
  // from the current objects (the kubelet's sync period is about a minute).
  Duration objects_refresh_interval = std::chrono::seconds(2);
  // Restart: how long a replaced pod is out of the endpoints before its stop
  // (SIGTERM) is sent, so that requests the router routed to it just before
  // are not refused at connect.
  Duration restart_drain = std::chrono::seconds(1);
};

// PodRunnerOptions from knapd's config (the settings defaults, warm pool size
// and mode).
PodRunnerOptions optionsFromConfig(const Config& config);

struct Endpoint {
  std::string pod_id;
  std::string ip;
  int port = 0;
  bool operator==(const Endpoint&) const = default;
};

enum class PodState { kCreating, kStarting, kReady, kWarm, kCrashed, kStopping };
const char* podStateName(PodState s);

// A snapshot of one pod, for tests and status pages.
struct PodInfo {
  std::string pod_id;
  PodState state = PodState::kCreating;
  std::string ip;
  uint32_t pid = 0;
  bool adopted = false;
  bool warm = false;          // in the warm pool (warming up or Warm), not serving
  bool paused = false;        // task frozen
  std::string origin;         // "cached", "warm", "frozen" or "adopted": how it came to serve
  int64_t memory_bytes = -1;  // last reading for Warm pods (-1: none yet)
  bool replaced = false;      // restart(): replaced once a new pod is Ready
};

// What restart() did.
struct RestartResult {
  std::vector<std::string> pods;  // serving pods being replaced, sorted (empty: none running)
  int warm_pods = 0;              // warm pods stopped (the pool refills)
};

// How a revision's first ready pod came to be the last time it went from 0
// ready pods to >= 1: "warm" (a created warm pod was started), "frozen" (a
// paused warm pod was thawed), "cached" (created from scratch; the image was
// present), "adopted" (found running at a knapd restart); "" before the first.
struct WakeReport {
  std::string path;
  // The Revision's knap.dev/image-ready-at (set by the image gate): when its
  // image became present. A later time than the waking request means "pulled".
  std::optional<WallTime> image_ready_at;
  bool operator==(const WakeReport&) const = default;
};

// The warm pool of one revision.
struct WarmPoolStatus {
  std::string mode;          // "created" / "frozen"
  int target = 0;            // pods the pool should hold now (after the max-scale cap)
  int pods = 0;              // Warm pods (ready to promote)
  int warming = 0;           // pods on their way to Warm
  int64_t memory_bytes = 0;  // sum of the Warm pods' last memory readings
  bool operator==(const WarmPoolStatus&) const = default;
};

// Parsed in api/revision_settings.h (RevisionSettings::warm_pool).
using api::kWarmPoolAnnotation;
using api::kWarmPoolModeAnnotation;
inline constexpr char kImageReadyAtAnnotation[] = "knap.dev/image-ready-at";

class PodRunner final : public controller::RevisionBackend,
                        public scaler::PodCounter,
                        public scaler::ScaleTarget {
 public:
  PodRunner(PodDriver& driver, const TimeSource& time, PodRunnerOptions options = {});
  ~PodRunner() override;  // stop()s

  // Adopts running pods of revisions in `live_revisions` ("ns/name" keys;
  // they keep running and are probed again once ensure() brings their
  // Revision), destroys the other pods the driver lists and cleans up
  // orphans. Call once before the first ensure(); blocks on the driver.
  Status adoptExisting(const std::set<std::string>& live_revisions);
  // Starts the control thread (and the pool). Not needed in tests that call runOnce().
  void start();
  // Stops the threads. Pods keep running (they are adopted on the next start).
  void stop();
  // Stops and destroys every pod of every revision, then stop(). For tests.
  void shutdownAndDestroyAll();

  // --- RevisionBackend ---
  void ensure(const nlohmann::json& revision) override;
  void remove(const std::string& ns, const std::string& name) override;
  controller::RevisionHealth health(const std::string& ns, const std::string& name) override;
  void setOnChange(std::function<void(const std::string& ns, const std::string& name)> fn) override;

  // --- PodCounter / ScaleTarget ---
  int readyPods(const std::string& revision) override;
  void setDesiredScale(const std::string& revision, int pods) override;
  void scaleStatusChanged(const std::string& revision, const scaler::ScaleOutcome& outcome) override;
  // The frozen-pool wake without hand-offs: when `revision` wants more
  // serving pods than it has and a frozen warm pod is idle, promote and thaw
  // it on the calling thread and report the endpoints from there, before
  // returning (the control loop would do the same one thread hop and one
  // executor hop later). Only with a driver whose resume() is fast; otherwise
  // (or with nothing to thaw) nothing happens and the loop does the work.
  void wakeNow(const std::string& revision) override;

  // Ready pods' addresses (sorted by pod id); empty for unknown revisions.
  // With `wake`: also how the revision last woke from zero, read under the
  // same lock (so the pair is consistent). With `version`: a number that
  // grows with every call, taken under that lock, so a list with a higher
  // version is never older; receivers drop updates older than the newest
  // they applied (callbacks for one revision may race on several threads).
  std::vector<Endpoint> readyEndpoints(const std::string& revision, WakeReport* wake = nullptr,
                                       uint64_t* version = nullptr);
  // The revision's warm pool; a zero status for unknown revisions.
  WarmPoolStatus warmPool(const std::string& revision);
  // Called with the revision key whenever its WarmPoolStatus changes.
  void setOnWarmPoolChanged(std::function<void(const std::string& revision)> fn);
  // Called with the revision key whenever its ready endpoints change.
  void setOnEndpointsChanged(std::function<void(const std::string& revision)> fn);

  // One pass of the control loop: applies finished work, starts due work
  // (creates, probes, restarts, stops). With an inline executor the work is
  // done before it returns.
  void runOnce();
  // The earliest time something is due (for tests driving a simulated clock).
  std::optional<MonoTime> nextDue();
  std::vector<PodInfo> pods(const std::string& revision);
  // Rolling restart of the revision's pods (see the model above). Returns at
  // once; the replacement goes on in the control loop. A revision with no
  // serving pod (scaled to zero, or unknown to the runner) has nothing to
  // restart: an empty result. Restarting again while a restart is under way
  // also replaces the new pods created so far.
  RestartResult restart(const std::string& revision);
  // Exits delivered by wait() threads so far (tests wait for this to grow).
  int exitsReceived() const { return exits_received_.load(); }
  // Pods whose wait() thread is still running.
  int waitersRunning();

  static std::string key(const std::string& ns, const std::string& name) { return ns + "/" + name; }

 private:
  struct Pod {
    PodHandle handle;
    PodState state = PodState::kCreating;
    bool busy = false;  // a driver call is in flight
    bool adopted = false;
    bool started = false;  // start() succeeded (or adopted running)
    bool waiter = false;   // wait() thread spawned
    bool stop_requested = false;
    bool stopped = false;  // stop() returned
    bool exited = false;   // wait() returned
    MonoTime retry_destroy_at{};
    bool counts_as_crash = false;  // stopping because liveness failed
    bool warm = false;             // belongs to the warm pool
    bool paused = false;           // pause() succeeded (frozen)
    bool pause_pending = false;    // frozen mode: readiness passed, pause() due
    bool resume_pending = false;   // promoted while paused: resume() due
    bool replaced = false;         // restart(): stopped once a new pod is Ready
    MonoTime stop_after{};         // a replaced pod's stop waits for the drain
    std::string origin = "cached";
    int64_t memory_bytes = -1;
    MonoTime next_memory{};
    MonoTime started_at{};
    MonoTime ready_since{};
    std::optional<runtime::ProbeState> readiness;
    std::optional<runtime::ProbeState> liveness;
    MonoTime next_probe{};
  };
  struct Revision {
    std::string ns, name;
    nlohmann::json object;  // null until ensure() (adopted pods wait for it)
    bool removed = false;
    int desired = 0;
    bool scaler_set = false;
    std::optional<scaler::ScaleOutcome> scale_outcome;
    MonoTime created_at{};
    Duration progress_deadline{};
    runtime::ProbeSpec readiness_spec;
    std::optional<runtime::ProbeSpec> liveness_spec;
    int port = 8080;
    int initial_scale = 1;  // already at least min-scale
    int min_scale = 0;
    int max_scale = 0;  // 0 = no limit
    int warm_size = 0;  // pool size before the max-scale cap (0 when min-scale > 0)
    WarmPoolMode warm_mode = WarmPoolMode::kFrozen;
    std::string settings_error;  // the refused settings already logged ("; "-joined)
    std::optional<WallTime> image_ready_at;
    WakeReport last_wake;
    WarmPoolStatus last_warm;
    Duration stop_grace{};
    std::map<std::string, Pod> pods;  // by pod id
    int creates_in_flight = 0;
    bool ever_ready = false;
    int consecutive_crashes = 0;
    MonoTime next_create{};  // back-off
    std::string image_digest;
    std::vector<std::string> image_digests;  // multi-container pods: every container's, in spec order
    std::optional<controller::ConditionState> failure;  // ContainerHealthy False reason
    std::string spec_error;                             // probe parse / config problem
    std::string probe_failure;       // last failed readiness attempt of a starting pod ("" once one is ready)
    MonoTime probe_failing_since{};  // reported in conditions after kProbeFailureGrace (no churn at start-up)
    std::string probe_failure_logged;  // logged once per distinct message
    controller::RevisionHealth last_reported;
    bool reported_once = false;
    std::vector<Endpoint> last_endpoints;
  };

  using Notes = std::vector<std::function<void()>>;
  void configureLocked(Revision& rev, const nlohmann::json& object);
  void attachAdoptedLocked(Revision& rev, MonoTime now);
  using Work = std::vector<std::function<void()>>;  // driver calls, run after the lock is released
  // One step of a revision: scale (serving pods, then the warm pool), then
  // each idle pod's next driver call (start, pause, resume, memory read,
  // probe, stop, destroy).
  void stepRevisionLocked(Revision& rev, MonoTime now, Work* work);
  void scaleLocked(Revision& rev, MonoTime now, Work* work, Work* creates);
  int retireReplacedLocked(Revision& rev, const std::vector<Pod*>& serving, std::vector<Pod*>& replaced,
                           MonoTime now, Work* work);
  int scaleServingLocked(Revision& rev, std::vector<Pod*>& serving, std::vector<Pod*>& warm, int surge_room,
                         bool can_create, MonoTime now, Work* work, Work* creates);
  void sizeWarmPoolLocked(Revision& rev, const std::vector<Pod*>& serving, std::vector<Pod*>& warm,
                          int created, bool can_create, MonoTime now, Work* work, Work* creates);
  void stepPodLocked(Revision& rev, const std::string& k, const std::string& pid, Pod& pod, MonoTime now,
                     Work* work);
  void queueStartLocked(const std::string& k, const std::string& pid, Pod& pod, Work* work);
  void queuePauseLocked(const std::string& k, const std::string& pid, Pod& pod, Work* work);
  void queueResumeLocked(const std::string& k, const std::string& pid, Pod& pod, Work* work);
  void queueMemoryLocked(const std::string& k, const std::string& pid, Pod& pod, Work* work);
  void queueProbeLocked(const std::string& k, const std::string& pid, Pod& pod, MonoTime now, Work* work);
  void queueStopLocked(const Revision& rev, const std::string& k, const std::string& pid, Pod& pod,
                       Work* work);
  void queueDestroyLocked(const std::string& k, const std::string& pid, Pod& pod, Work* work);
  void spawnWaiterLocked(Revision& rev, Pod& pod);
  std::pair<Revision*, Pod*> findPodLocked(const std::string& revision, const std::string& pod_id);
  void finishDriverCall(const std::string& rev_key, const std::string& pod_id,
                        const std::function<void(Revision&, Pod&, MonoTime)>& apply);
  void onExit(const std::string& rev_key, const std::string& pod_id, StatusOr<PodExit> exit);
  void handleCrashLocked(Revision& rev, Pod& pod, const PodExit& exit, MonoTime now);
  void requestStopLocked(Revision& rev, Pod& pod, std::vector<std::function<void()>>* work);
  void refreshVolumesLocked(std::vector<std::function<void()>>* work);
  void createPodLocked(Revision& rev, bool warm, MonoTime now, std::vector<std::function<void()>>* work);
  void promoteLocked(Revision& rev, Pod& pod, MonoTime now);
  // The end of a resume() of a promoted frozen pod: Ready, or replaced.
  void finishResume(const std::string& rev_key, const std::string& pod_id, const Status& result);
  void markReadyLocked(Revision& rev, Pod& pod, MonoTime now);
  void eventLocked(const Revision& rev, EventType type, const std::string& reason,
                   const std::string& message);
  WarmPoolStatus warmStatusLocked(const Revision& rev) const;
  int warmTargetLocked(const Revision& rev, int serving) const;
  controller::RevisionHealth computeHealthLocked(const Revision& rev, MonoTime now) const;
  std::vector<Endpoint> endpointsLocked(const Revision& rev) const;
  void collectNotesLocked(Notes* notes);
  void notifyAll(Notes notes);
  void post(std::function<void()> fn);
  void wake();
  std::string newPodId(const Revision& rev);

  PodDriver& driver_;
  const TimeSource& time_;
  PodRunnerOptions options_;

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Revision>> revisions_;  // by key
  std::function<void(const std::string&, const std::string&)> on_change_;
  std::function<void(const std::string&)> on_endpoints_;
  std::function<void(const std::string&)> on_warm_;
  uint64_t pod_counter_ = 0;
  uint64_t endpoints_version_ = 0;  // under mu_: readyEndpoints() reads, in order
  std::atomic<int> exits_received_{0};
  bool shutting_down_ = false;
  MonoTime next_objects_refresh_{};
  std::map<std::string, int>
      pending_scale_;  // setDesiredScale() before ensure()  // stop(): waits are being abandoned

  // Wait threads, by pod id; finished ones are joined by runOnce().
  std::map<std::string, std::thread> waiters_;
  std::set<std::string> finished_waiters_;

  // Control loop and pool (common/loop.h); the loop is stopped first.
  WorkerPool pool_;
  Loop loop_;
};

}  // namespace knap::runner
