// RevisionScaler: turns the decider's wish into the pod count a revision runs
// and into its Active condition (KNATIVE-CONTRACT §4.7 bounds, §4.8 the
// scale-to-zero gate; Knative's kpa/scaler.go and kpa.go computeActiveCondition).
// It is the PodAutoscaler's status, held in memory: Active (True / Unknown /
// False) with its transition time, ScaleTargetInitialized, the applied scale,
// and the time the revision would have been in "proxy" mode in Knative.
//
// Decision table of reconcile() (want = scale after bounds and gate; -1 = unknown;
// threshold = max(min, initial-scale) before initialization, max(min, 1) after):
//
//   | want | ready       | state before | Active after                        |
//   |------|-------------|--------------|-------------------------------------|
//   | 0    | any         | activating   | False TimedOut (only if threshold>0)|
//   | 0    | any         | other        | False NoTraffic                     |
//   | any  | any         | threshold==0 | False NoTraffic                     |
//   | >0   | < threshold | any          | Unknown Queued                      |
//   | -1   | < threshold | inactive     | False NoTraffic                     |
//   | -1   | < threshold | other        | Unknown Queued                      |
//   | >0   | >= thresh.  | any          | True                                |
//   | -1   | >= thresh.  | inactive     | stays False                         |
//   | -1   | >= thresh.  | other        | True                                |
//
// The scale-to-zero gate, asked only when the bounded wish is 0:
//   enable-scale-to-zero false          -> 1
//   Activating (Unknown)                -> 0 once activating longer than
//                                          progress-deadline + 30 s, else wait (-1)
//   Active (True)                       -> hold 1 until active for a stable
//                                          window, then want 0 (marks Inactive)
//   Inactive (False)                    -> 0 once inactive >= max(grace, retention);
//                                          wait while retention not elapsed; 0 once
//                                          "proxying" for >= grace period.
//
// knap has no activator to program: the router is always in the path. The
// "proxy" clock is kept only so the timing matches Knative: a revision counts
// as proxied unless want > 0 and excess burst capacity >= 0 (Knative's SKS
// Serve mode). With defaults (TBC 211) a 1-2 pod revision is always "proxied",
// so it scales to zero one stable window after its last request; with TBC 0 it
// waits the extra grace period.
//
// Thread safety: not thread-safe; owned by the ScalerDriver. No I/O, no clock.
#pragma once

#include <optional>
#include <string>

#include "common/clock.h"
#include "scaler/autoscaler.h"
#include "scaler/settings.h"

namespace knap::scaler {

enum class ConditionStatus { kUnknown, kTrue, kFalse };
const char* conditionStatusName(ConditionStatus status);  // "Unknown" | "True" | "False"

inline constexpr const char* kReasonQueued = "Queued";
inline constexpr const char* kReasonNoTraffic = "NoTraffic";
inline constexpr const char* kReasonTimedOut = "TimedOut";

// The PodAutoscaler Active condition (Knative's PA "Active").
struct ActiveCondition {
  ConditionStatus status = ConditionStatus::kUnknown;
  std::string reason;  // "", Queued, NoTraffic, TimedOut
  std::string message;
  MonoTime last_transition{};

  bool isActive() const { return status == ConditionStatus::kTrue; }
  bool isActivating() const { return status == ConditionStatus::kUnknown; }
  bool isInactive() const { return status == ConditionStatus::kFalse; }
};

// State to adopt when knapd restarts with pods already running.
struct RevisionScaleState {
  int current_scale = -1;  // replicas already requested; -1 = new revision
  bool scale_target_initialized = false;
  std::optional<ConditionStatus> active;  // last known Active status; its clock restarts now
};

struct ScaleOutcome {
  int want = -1;         // PA desiredScale after bounds and gate; -1 unknown
  int desired_pods = 0;  // pods the revision should run (the applied scale)
  bool scale_changed = false;
  ActiveCondition active;
  bool condition_changed = false;
  bool scale_target_initialized = false;
  bool proxied = true;  // Knative's SKS mode would be Proxy (informational)
};

class RevisionScaler {
 public:
  // A new revision starts Activating with initial_scale pods requested.
  RevisionScaler(const ScalerSettings& settings, MonoTime now,
                 const RevisionScaleState& adopt = RevisionScaleState{});

  void updateSettings(const ScalerSettings& settings) { settings_ = settings; }
  const ScalerSettings& settings() const { return settings_; }

  // One reconcile. `decision` is the decider's latest valid decision (or an
  // invalid one if it never had data); `ready_pods` the pods passing readiness.
  ScaleOutcome reconcile(const ScaleDecision& decision, int ready_pods, MonoTime now);

  int desiredPods() const { return applied_scale_; }
  const ActiveCondition& active() const { return active_; }
  bool scaleTargetInitialized() const { return initialized_; }

 private:
  struct GateResult {
    int scale;
    bool apply;
  };
  int minScale() const { return settings_.reachable ? settings_.min_scale : 0; }
  int activeThreshold() const;
  GateResult scaleToZeroGate(int desired, MonoTime now) const;
  Duration inStatusFor(ConditionStatus status, MonoTime now) const;  // -1ns if not in it
  bool mark(ConditionStatus status, const std::string& reason, const std::string& message, MonoTime now);
  bool computeActiveCondition(int want, int ready_pods, MonoTime now);

  ScalerSettings settings_;
  ActiveCondition active_;
  bool initialized_ = false;
  int applied_scale_ = 0;
  std::optional<MonoTime> proxy_since_;  // set while Knative would be in Proxy mode
};

}  // namespace knap::scaler
