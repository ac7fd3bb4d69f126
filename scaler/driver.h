// ScalerDriver: the thin, stateful shell around the KPA's pure parts. Once a
// second (tick) it collects each revision's request stats from the router
// (MetricsSource) into that revision's MetricWindow; every 2 s it runs the
// decider (Autoscaler) and the bounds / scale-to-zero gate (RevisionScaler)
// and tells the pod runner (ScaleTarget) how many pods to run. poke() does
// the same at once when a request reaches a revision at zero, so cold starts
// do not wait for the next tick (the caller then calls ScaleTarget::wakeNow,
// outside the driver's lock).
//
// The interfaces below are defined here, by their user (STYLE.md rule 2); the
// router implements MetricsSource, the runtime implements PodCounter and
// ScaleTarget, the daemon wires them and drives tick() from a ScalerTicker
// (or its own control-loop timer).
//
// Thread safety: every public method is thread-safe. Operations are
// serialised by one mutex that is held while the driver calls MetricsSource,
// PodCounter and ScaleTarget, so (1) implementations must not call back into
// the driver, and (2) callers must not hold, while calling tick()/poke()/
// podsChanged()/addRevision(), a lock that those implementations take.
// The driver reads time only from the TimeSource it is given.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/event_recorder.h"
#include "common/loop.h"
#include "common/status.h"
#include "scaler/autoscaler.h"
#include "scaler/metric_window.h"
#include "scaler/request_stats.h"
#include "scaler/revision_scaler.h"
#include "scaler/settings.h"

namespace knap::scaler {

// Implemented by the router: per-revision request statistics.
class MetricsSource {
 public:
  virtual ~MetricsSource() = default;
  // The time-weighted average concurrency and the number of requests of
  // `revision` since the previous collect() for it; the source starts a new
  // interval (RequestStats::report does exactly this). Requests queued while
  // no pod is ready count as in flight. An unknown revision yields a zero
  // report. Must be cheap and non-blocking.
  virtual RequestStatsReport collect(const std::string& revision, MonoTime now) = 0;
};

// Implemented by the runtime.
class PodCounter {
 public:
  virtual ~PodCounter() = default;
  // Pods of `revision` that currently pass readiness; 0 if unknown or on error.
  virtual int readyPods(const std::string& revision) = 0;
};

// Implemented by the runtime.
class ScaleTarget {
 public:
  virtual ~ScaleTarget() = default;
  // Run `pods` pods for `revision` (0 = scale to zero). Called when a revision
  // is added and whenever the applied scale changes; the target retries pod
  // failures itself. Must not block for long.
  virtual void setDesiredScale(const std::string& revision, int pods) = 0;
  // The Active condition or ScaleTargetInitialized changed (for the
  // revision's status: Active, NoTraffic, TimedOut, ...).
  virtual void scaleStatusChanged(const std::string& revision, const ScaleOutcome& outcome) = 0;
  // A request waits for `revision` at zero and poke() has just raised its
  // scale: a target that can make a pod ready at once (a frozen warm pod:
  // one thaw) may do it here, on the caller's thread, rather than on its
  // own threads after a hand-off. Called WITHOUT the driver's lock (so the
  // target may report endpoints from here); must return quickly.
  virtual void wakeNow(const std::string& revision) { (void)revision; }
};

// What the driver knows about one revision, for status pages and tests.
struct RevisionScaleStatus {
  ScalerSettings settings;
  MetricSnapshot metrics;              // as seen by the latest decision
  ScaleDecision decision;              // latest valid decision (invalid if none yet)
  ScaleOutcome outcome;                // latest reconcile
  std::optional<MonoTime> decided_at;  // time of the latest decider run
};

class ScalerDriver {
 public:
  // `events` gets a scaling decision Event on the Revision whenever the
  // applied scale changes (SuccessfulRescale, or ScaledToZero for 0).
  ScalerDriver(MetricsSource& metrics, PodCounter& pods, ScaleTarget& target, const TimeSource& time,
               EventRecorder& events = nullEventRecorder());

  // Starts scaling `revision` (a new revision asks for initial_scale pods at
  // once), or updates the settings of one already known (`adopt` is then
  // ignored). Returns InvalidArgument for settings validateSettings() refuses.
  Status addRevision(const std::string& revision, const ScalerSettings& settings,
                     const RevisionScaleState& adopt = RevisionScaleState{});
  // Forgets the revision; no further calls are made for it.
  void removeRevision(const std::string& revision);

  // Call every kBucketSize (1 s): collects metrics for every revision and
  // decides for those whose last decision is kTickInterval (2 s) old.
  void tick();
  // A request arrived for `revision` while it has no pod wanted: records the
  // request (concurrency 1, one request — Knative's activator first-request
  // report) and decides and applies at once. No-op if pods are already wanted
  // or the revision is unknown.
  void poke(const std::string& revision);
  // Ready pods changed: re-evaluate the Active condition and bounds with the
  // latest decision (no new decision).
  void podsChanged(const std::string& revision);

  std::optional<RevisionScaleStatus> status(const std::string& revision) const;

 private:
  struct Revision {
    Revision(const ScalerSettings& s, int ready, MonoTime now, const RevisionScaleState& adopt)
        : window(s), autoscaler(s, ready, now), scaler(s, now, adopt) {}
    MetricWindow window;
    Autoscaler autoscaler;
    RevisionScaler scaler;
    ScaleDecision latest;  // latest valid decision
    MetricSnapshot last_metrics;
    ScaleOutcome last_outcome;
    std::optional<MonoTime> last_decision;
    double first_request_adjust = 0;  // already recorded by poke(); subtract at next collect
  };

  void decideLocked(const std::string& key, Revision& rev, int ready, MonoTime now);
  void reconcileLocked(const std::string& key, Revision& rev, int ready, MonoTime now);

  MetricsSource& metrics_;
  PodCounter& pods_;
  ScaleTarget& target_;
  const TimeSource& time_;
  EventRecorder& events_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Revision>> revisions_;
};

// Calls driver.tick() every kBucketSize on its own thread, on the TimeSource
// (common/loop.h's periodic Loop): on a SimulatedTimeSource it ticks when the
// test advances the clock. A tick that falls behind is skipped, not made up.
// stop() returns after the current tick.
class ScalerTicker {
 public:
  ScalerTicker(ScalerDriver& driver, const TimeSource& time);
  ~ScalerTicker();
  void start();
  void stop();

 private:
  ScalerDriver& driver_;
  Loop loop_;
};

}  // namespace knap::scaler
