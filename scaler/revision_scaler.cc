#include "scaler/revision_scaler.h"

#include <algorithm>

namespace knap::scaler {
namespace {

constexpr const char* kQueuedMessage =
    "Requests to the target are being buffered as resources are provisioned.";
constexpr const char* kNoTrafficMessage = "The target is not receiving traffic.";
constexpr const char* kTimedOutMessage = "The target could not be activated.";

int applyBounds(int min, int max, int x) {
  if (x < min) return min;
  if (max != 0 && x > max) return max;
  return x;
}

}  // namespace

const char* conditionStatusName(ConditionStatus status) {
  switch (status) {
    case ConditionStatus::kTrue:
      return "True";
    case ConditionStatus::kFalse:
      return "False";
    case ConditionStatus::kUnknown:
      break;
  }
  return "Unknown";
}

RevisionScaler::RevisionScaler(const ScalerSettings& settings, MonoTime now, const RevisionScaleState& adopt)
    : settings_(settings), initialized_(adopt.scale_target_initialized), proxy_since_(now) {
  active_.last_transition = now;
  if (adopt.active) active_.status = *adopt.active;
  applied_scale_ = adopt.current_scale >= 0 ? adopt.current_scale : settings_.initial_scale;
}

int RevisionScaler::activeThreshold() const {
  if (!initialized_) return std::max(minScale(), settings_.initial_scale);
  return std::max(minScale(), 1);
}

Duration RevisionScaler::inStatusFor(ConditionStatus status, MonoTime now) const {
  if (active_.status != status) return Duration(-1);
  return now - active_.last_transition;
}

bool RevisionScaler::mark(ConditionStatus status, const std::string& reason, const std::string& message,
                          MonoTime now) {
  if (active_.status == status && active_.reason == reason && active_.message == message) {
    return false;
  }
  active_.status = status;
  active_.reason = reason;
  active_.message = message;
  active_.last_transition = now;
  return true;
}

RevisionScaler::GateResult RevisionScaler::scaleToZeroGate(int desired, MonoTime now) const {
  if (desired != 0) return {desired, true};
  if (!settings_.enable_scale_to_zero) return {1, true};

  if (active_.isActivating()) {
    // Stuck activating past the progress deadline: presume it cannot succeed.
    if (inStatusFor(ConditionStatus::kUnknown, now) > settings_.activationTimeout()) {
      return {0, true};
    }
    return {-1, false};
  }
  if (active_.isActive()) {
    // Want 0 but do not apply it: the caller marks the revision Inactive first.
    if (inStatusFor(ConditionStatus::kTrue, now) >= settings_.stable_window) return {0, false};
    return {1, true};  // hold one pod for the rest of the stable window
  }
  // Inactive.
  const Duration retention = settings_.effectiveRetention();
  const Duration inactive_for = inStatusFor(ConditionStatus::kFalse, now);
  if (inactive_for >= std::max(settings_.scale_to_zero_grace_period, retention)) return {0, true};
  if (retention > Duration(0) && inactive_for < retention) return {0, false};
  const Duration proxy_for = proxy_since_ ? now - *proxy_since_ : Duration(0);
  if (settings_.scale_to_zero_grace_period - proxy_for <= Duration(0)) return {0, true};
  return {0, false};
}

bool RevisionScaler::computeActiveCondition(int want, int ready_pods, MonoTime now) {
  const int threshold = activeThreshold();
  if (ready_pods >= threshold) initialized_ = true;

  if (want == 0 || threshold == 0) {
    if (active_.isActivating() && threshold > 0) {
      // Only a failed activation scales to zero while activating.
      return mark(ConditionStatus::kFalse, kReasonTimedOut, kTimedOutMessage, now);
    }
    return mark(ConditionStatus::kFalse, kReasonNoTraffic, kNoTrafficMessage, now);
  }
  if (ready_pods < threshold) {
    if (want > 0 || !active_.isInactive()) {
      return mark(ConditionStatus::kUnknown, kReasonQueued, kQueuedMessage, now);
    }
    return mark(ConditionStatus::kFalse, kReasonNoTraffic, kNoTrafficMessage, now);
  }
  if (want > 0 || !active_.isInactive()) return mark(ConditionStatus::kTrue, "", "", now);
  return false;
}

ScaleOutcome RevisionScaler::reconcile(const ScaleDecision& decision, int ready_pods, MonoTime now) {
  ScaleOutcome out;
  const int desired = decision.valid ? decision.desired_pods : -1;
  int want = desired;

  // §4.7: with no metrics, only an activating revision is bounded (to min-scale).
  if (!(desired < 0 && !active_.isActivating())) {
    int min = minScale();
    if (settings_.initial_scale > 1 && !initialized_ && settings_.reachable) {
      min = std::max(min, settings_.initial_scale);
    }
    const int bounded = applyBounds(min, settings_.max_scale, desired);
    const GateResult gate = scaleToZeroGate(bounded, now);
    want = gate.scale;
    if (gate.apply && gate.scale != applied_scale_) {
      applied_scale_ = gate.scale;
      out.scale_changed = true;
    }
  }

  // Knative's SKS mode (Serve iff want > 0 and EBC >= 0), kept only as the
  // "proxied since" clock of the gate.
  const bool serve = want > 0 && decision.valid && decision.excess_burst_capacity >= 0;
  if (serve) {
    proxy_since_.reset();
  } else if (!proxy_since_) {
    proxy_since_ = now;
  }

  out.condition_changed = computeActiveCondition(want, ready_pods, now);
  out.want = want;
  out.desired_pods = applied_scale_;
  out.active = active_;
  out.scale_target_initialized = initialized_;
  out.proxied = !serve;
  return out;
}

}  // namespace knap::scaler
