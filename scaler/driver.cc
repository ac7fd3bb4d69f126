#include "scaler/driver.h"

#include <algorithm>
#include <cstdio>

#include "common/guard.h"
#include "common/log.h"

namespace knap::scaler {

ScalerDriver::ScalerDriver(MetricsSource& metrics, PodCounter& pods, ScaleTarget& target,
                           const TimeSource& time, EventRecorder& events)
    : metrics_(metrics), pods_(pods), target_(target), time_(time), events_(events) {}

Status ScalerDriver::addRevision(const std::string& key, const ScalerSettings& settings,
                                 const RevisionScaleState& adopt) {
  KNAP_RETURN_IF_ERROR(validateSettings(settings).annotate("revision " + key));
  std::lock_guard<std::mutex> lock(mu_);
  const MonoTime now = time_.monotonic();
  auto it = revisions_.find(key);
  if (it != revisions_.end()) {
    Revision& rev = *it->second;
    if (rev.window.stableWindow() != settings.stable_window ||
        rev.window.panicWindow() != settings.panicWindow() ||
        rev.window.aggregation() != settings.aggregation) {
      rev.window = MetricWindow(settings);  // history of the old window shapes is dropped
    }
    rev.autoscaler.updateSettings(settings);
    rev.scaler.updateSettings(settings);
    return Status::ok();
  }
  const int ready = pods_.readyPods(key);
  auto rev = std::make_unique<Revision>(settings, ready, now, adopt);
  const int pods = rev->scaler.desiredPods();
  rev->last_outcome.desired_pods = pods;
  rev->last_outcome.active = rev->scaler.active();
  rev->last_outcome.scale_target_initialized = rev->scaler.scaleTargetInitialized();
  revisions_.emplace(key, std::move(rev));
  LOG(INFO) << "scaler: revision " << key << " added with " << pods << " pods";
  target_.setDesiredScale(key, pods);
  return Status::ok();
}

void ScalerDriver::removeRevision(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  revisions_.erase(key);
}

void ScalerDriver::tick() {
  std::lock_guard<std::mutex> lock(mu_);
  const MonoTime now = time_.monotonic();
  for (auto& [key, rev_ptr] : revisions_) {
    Revision& rev = *rev_ptr;
    RequestStatsReport report = metrics_.collect(key, now);
    const int ready = pods_.readyPods(key);
    if (rev.first_request_adjust > 0) {
      // poke() already recorded the first request; do not count it twice.
      report.average_concurrency = std::max(0.0, report.average_concurrency - rev.first_request_adjust);
      report.request_count = std::max(0.0, report.request_count - rev.first_request_adjust);
      rev.first_request_adjust = 0;
    }
    // Like Knative's scraper: record while pods exist (zeros included, so idle
    // seconds dilute the average) or while requests are held at zero scale.
    if (ready > 0 || report.average_concurrency > 0 || report.request_count > 0) {
      rev.window.record(now, report.average_concurrency, report.request_count);
    }
    // Half a bucket of slack so a slightly early 1-s tick still decides every 2 s.
    if (!rev.last_decision || now - *rev.last_decision >= kTickInterval - kBucketSize / 2) {
      decideLocked(key, rev, ready, now);
    }
  }
}

void ScalerDriver::poke(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = revisions_.find(key);
  if (it == revisions_.end()) return;
  Revision& rev = *it->second;
  if (rev.latest.valid && rev.latest.desired_pods > 0) return;  // pods already wanted
  const MonoTime now = time_.monotonic();
  const int ready = pods_.readyPods(key);
  if (rev.first_request_adjust == 0) {
    rev.window.record(now, 1.0, 1.0);
    rev.first_request_adjust = 1.0;
  }
  LOG(INFO) << "scaler: poke for " << key << " with " << ready << " ready";
  decideLocked(key, rev, ready, now);
}

void ScalerDriver::podsChanged(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = revisions_.find(key);
  if (it == revisions_.end()) return;
  reconcileLocked(key, *it->second, pods_.readyPods(key), time_.monotonic());
}

void ScalerDriver::decideLocked(const std::string& key, Revision& rev, int ready, MonoTime now) {
  rev.last_decision = now;
  rev.last_metrics = rev.window.snapshot(now, rev.autoscaler.settings().metric);
  const bool was_panicking = rev.autoscaler.panicking();
  ScaleDecision decision = rev.autoscaler.decide(rev.last_metrics, ready, now);
  if (decision.valid && decision.panicking != was_panicking) {
    LOG(INFO) << "scaler: " << key << (decision.panicking ? " panicking" : " leaves panic")
              << ": panic average " << rev.last_metrics.panic_average << ", " << ready << " ready";
  }
  if (decision.valid) rev.latest = decision;  // an invalid result keeps the last valid one
  reconcileLocked(key, rev, ready, now);
}

void ScalerDriver::reconcileLocked(const std::string& key, Revision& rev, int ready, MonoTime now) {
  const bool was_initialized = rev.last_outcome.scale_target_initialized;
  const int old_scale = rev.scaler.desiredPods();
  ScaleOutcome outcome = rev.scaler.reconcile(rev.latest, ready, now);
  rev.last_outcome = outcome;
  if (outcome.scale_changed) {
    LOG(INFO) << "scaler: " << key << " scale " << old_scale << " -> " << outcome.desired_pods << " (wish "
              << rev.latest.desired_pods << ", stable average " << rev.last_metrics.stable_average
              << ", panic average " << rev.last_metrics.panic_average << ", " << ready << " ready)";
    target_.setDesiredScale(key, outcome.desired_pods);
    size_t slash = key.find('/');
    ObjectRef ref{"serving.knative.dev/v1", "Revision", key.substr(0, slash),
                  slash == std::string::npos ? key : key.substr(slash + 1), ""};
    char averages[96];
    std::snprintf(averages, sizeof averages, "stable average concurrency %.2f, panic average %.2f",
                  rev.last_metrics.stable_average, rev.last_metrics.panic_average);
    std::string why = outcome.desired_pods == 0
                          ? "no requests within the stable window and the scale-to-zero grace"
                      : rev.latest.panicking ? std::string("panic mode: ") + averages
                                             : averages;
    events_.record(ref, EventType::kNormal, outcome.desired_pods == 0 ? "ScaledToZero" : "SuccessfulRescale",
                   "Scaled from " + std::to_string(old_scale) + " to " +
                       std::to_string(outcome.desired_pods) + " pods (" + why + ", " + std::to_string(ready) +
                       " ready)",
                   "knap-autoscaler");
  }
  if (outcome.condition_changed || outcome.scale_target_initialized != was_initialized) {
    LOG(INFO) << "scaler: revision " << key << " Active=" << conditionStatusName(outcome.active.status) << " "
              << outcome.active.reason;
    target_.scaleStatusChanged(key, outcome);
  }
}

std::optional<RevisionScaleStatus> ScalerDriver::status(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = revisions_.find(key);
  if (it == revisions_.end()) return std::nullopt;
  const Revision& rev = *it->second;
  return RevisionScaleStatus{rev.autoscaler.settings(), rev.last_metrics, rev.latest, rev.last_outcome,
                             rev.last_decision};
}

ScalerTicker::ScalerTicker(ScalerDriver& driver, const TimeSource& time)
    : driver_(driver), loop_(time, "scaler ticker") {}

ScalerTicker::~ScalerTicker() {
  stop();
}

void ScalerTicker::start() {
  loop_.startPeriodic(kBucketSize, [this] { driver_.tick(); });
}

void ScalerTicker::stop() {
  loop_.stop();
}

}  // namespace knap::scaler
