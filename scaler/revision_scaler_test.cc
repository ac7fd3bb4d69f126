#include "scaler/revision_scaler.h"

#include <gtest/gtest.h>

#include <functional>

namespace knap::scaler {
namespace {

const MonoTime kT0 = MonoTime{} + std::chrono::hours(1);
MonoTime at(int seconds) {
  return kT0 + std::chrono::seconds(seconds);
}

constexpr int kUnknown = -1;  // decider had no data
constexpr ConditionStatus T = ConditionStatus::kTrue;
constexpr ConditionStatus U = ConditionStatus::kUnknown;
constexpr ConditionStatus F = ConditionStatus::kFalse;

struct Step {
  int t;
  int desired;  // decider output; kUnknown = invalid decision
  int ebc;      // decider's excess burst capacity
  int ready;
  int want_pods;
  ConditionStatus want_status;
  std::string want_reason;
};

struct GateCase {
  std::string name;
  std::function<void(ScalerSettings&)> tweak;
  std::vector<Step> steps;
};

class RevisionScalerTest : public ::testing::TestWithParam<GateCase> {};

TEST_P(RevisionScalerTest, Scenario) {
  const GateCase& c = GetParam();
  ScalerSettings s;
  if (c.tweak) c.tweak(s);
  RevisionScaler rs(s, at(0));
  for (const Step& step : c.steps) {
    SCOPED_TRACE("t=" + std::to_string(step.t));
    ScaleDecision d;
    if (step.desired != kUnknown) {
      d.valid = true;
      d.desired_pods = step.desired;
      d.excess_burst_capacity = step.ebc;
    }
    ScaleOutcome out = rs.reconcile(d, step.ready, at(step.t));
    EXPECT_EQ(out.desired_pods, step.want_pods);
    EXPECT_EQ(rs.desiredPods(), step.want_pods);
    EXPECT_EQ(conditionStatusName(out.active.status), std::string(conditionStatusName(step.want_status)));
    EXPECT_EQ(out.active.reason, step.want_reason);
  }
}

auto none = [](ScalerSettings&) {};

std::vector<GateCase> gateCases() {
  return {
      {"new_revision_activates_with_initial_scale",
       none,
       {
           {0, kUnknown, 0, 0, 1, U, "Queued"},
           {2, kUnknown, 0, 1, 1, T, ""},
       }},
      {"initial_scale_is_the_minimum_until_initialized",
       [](ScalerSettings& s) { s.initial_scale = 3; },
       {
           {0, kUnknown, 0, 0, 3, U, "Queued"},
           {2, 1, -1, 1, 3, U, "Queued"},  // wish 1 but not initialized: 3
           {4, 1, -1, 3, 3, T, ""},        // 3 ready: initialized, Active
           {6, 1, -1, 3, 1, T, ""},        // initial scale no longer applies
       }},
      {"initial_scale_ignored_when_unreachable",
       [](ScalerSettings& s) {
         s.initial_scale = 3;
         s.reachable = false;
       },
       {
           {0, 1, -1, 1, 1, U, "Queued"},  // threshold is still 3 for the condition
       }},
      {"min_and_max_scale_bound_the_wish",
       [](ScalerSettings& s) {
         s.min_scale = 2;
         s.max_scale = 5;
       },
       {
           {0, 0, -1, 2, 2, T, ""},
           {2, 9, -1, 2, 5, T, ""},
           {4, 3, -1, 5, 3, T, ""},
       }},
      {"min_scale_applies_without_metrics_while_activating",
       [](ScalerSettings& s) { s.min_scale = 2; },
       {
           {0, kUnknown, 0, 0, 2, U, "Queued"},
           {2, kUnknown, 0, 2, 2, T, ""},
       }},
      {"min_scale_ignored_when_unreachable",
       [](ScalerSettings& s) {
         s.min_scale = 3;
         s.reachable = false;
       },
       {
           {0, 2, -1, 2, 2, T, ""},
       }},
      {"active_holds_one_pod_for_the_stable_window",
       none,
       {
           {0, 1, -111, 1, 1, T, ""},
           {10, 0, -111, 1, 1, T, ""},  // active for 10 s < 60 s: hold 1
           {58, 0, -111, 1, 1, T, ""},
           {60, 0, -111, 1, 1, F, "NoTraffic"},  // want 0: Inactive, pods stay
       }},
      // Defaults (TBC 211): a one-pod revision never had excess burst capacity,
      // so it has been "proxied" all along and goes to zero right after Inactive.
      {"default_tbc_scales_to_zero_one_stable_window_after_active",
       none,
       {
           {0, 1, -111, 1, 1, T, ""},
           {70, 0, -111, 1, 1, F, "NoTraffic"},
           {72, 0, -111, 1, 0, F, "NoTraffic"},
       }},
      // TBC 0: EBC 0, the revision was "served directly" and must wait the grace period.
      {"tbc_zero_waits_the_grace_period_after_inactive",
       [](ScalerSettings& s) { s.target_burst_capacity = 0; },
       {
           {0, 1, 0, 1, 1, T, ""},
           {70, 0, 0, 1, 1, F, "NoTraffic"},
           {72, 0, 0, 1, 1, F, "NoTraffic"},
           {98, 0, 0, 1, 1, F, "NoTraffic"},
           {100, 0, 0, 1, 0, F, "NoTraffic"},  // inactive for 30 s >= grace
       }},
      {"grace_period_counts_from_proxy_start",
       [](ScalerSettings& s) { s.scale_to_zero_grace_period = 20s; },
       {
           {0, 2, 0, 2, 2, T, ""},     // served directly (EBC >= 0)
           {50, 1, -50, 2, 1, T, ""},  // EBC < 0: proxied from t=50
           {66, 0, -50, 1, 1, F, "NoTraffic"},
           {68, 0, -50, 1, 1, F, "NoTraffic"},  // proxied 18 s < 20 s
           {70, 0, -50, 1, 0, F, "NoTraffic"},  // proxied 20 s
       }},
      {"pod_retention_period_keeps_the_last_pod",
       [](ScalerSettings& s) { s.pod_retention_period = 120s; },
       {
           {0, 1, -111, 1, 1, T, ""},
           {70, 0, -111, 1, 1, F, "NoTraffic"},
           {72, 0, -111, 1, 1, F, "NoTraffic"},
           {188, 0, -111, 1, 1, F, "NoTraffic"},
           {190, 0, -111, 1, 0, F, "NoTraffic"},  // inactive 120 s
       }},
      {"pod_retention_ignored_when_unreachable",
       [](ScalerSettings& s) {
         s.pod_retention_period = 120s;
         s.reachable = false;
       },
       {
           {0, 1, -111, 1, 1, T, ""},
           {70, 0, -111, 1, 1, F, "NoTraffic"},
           {72, 0, -111, 1, 0, F, "NoTraffic"},
       }},
      {"unreachable_revision_with_min_scale_drops_to_zero",
       [](ScalerSettings& s) {
         s.min_scale = 3;
         s.reachable = false;
       },
       {
           {0, 3, -11, 3, 3, T, ""},
           {62, 0, -11, 3, 3, F, "NoTraffic"},
           {64, 0, -11, 3, 0, F, "NoTraffic"},
       }},
      {"reachable_revision_with_min_scale_stays",
       [](ScalerSettings& s) { s.min_scale = 3; },
       {
           {0, 3, -11, 3, 3, T, ""},
           {62, 0, -11, 3, 3, T, ""},
           {200, 0, -11, 3, 3, T, ""},
       }},
      {"enable_scale_to_zero_false_keeps_one",
       [](ScalerSettings& s) { s.enable_scale_to_zero = false; },
       {
           {0, 1, -111, 1, 1, T, ""},
           {100, 0, -111, 1, 1, T, ""},
           {1000, 0, -111, 1, 1, T, ""},
       }},
      {"request_at_zero_scales_from_zero",
       none,
       {
           {0, 1, -111, 1, 1, T, ""},
           {70, 0, -111, 1, 1, F, "NoTraffic"},
           {72, 0, -111, 0, 0, F, "NoTraffic"},
           {300, 1, -211, 0, 1, U, "Queued"},  // poke: wish 1, pod starting
           {302, 1, -211, 1, 1, T, ""},
       }},
      {"unknown_decision_while_inactive_changes_nothing",
       none,
       {
           {0, 1, -111, 1, 1, T, ""},
           {70, 0, -111, 1, 1, F, "NoTraffic"},
           {72, 0, -111, 1, 0, F, "NoTraffic"},
           {200, kUnknown, -111, 0, 0, F, "NoTraffic"},
       }},
      // Activation timeout = progress deadline (10 s here) + 30 s.
      {"activation_times_out_after_progress_deadline_plus_30s",
       [](ScalerSettings& s) { s.progress_deadline = 10s; },
       {
           {0, kUnknown, 0, 0, 1, U, "Queued"},
           {20, 0, -211, 0, 1, U, "Queued"},  // wish 0 while activating: wait
           {40, 0, -211, 0, 1, U, "Queued"},  // 40 s is not more than 40 s
           {42, 0, -211, 0, 0, F, "TimedOut"},
       }},
      {"activation_timeout_default_is_630s",
       none,
       {
           {0, 0, -211, 0, 1, U, "Queued"},
           {630, 0, -211, 0, 1, U, "Queued"},
           {632, 0, -211, 0, 0, F, "TimedOut"},
       }},
      {"zero_initial_scale_starts_inactive",
       [](ScalerSettings& s) { s.initial_scale = 0; },
       {
           {0, kUnknown, 0, 0, 0, F, "NoTraffic"},
           {2, kUnknown, 0, 0, 0, F, "NoTraffic"},
           {4, 1, -211, 0, 1, U, "Queued"},
           {6, 1, -111, 1, 1, T, ""},
       }},
  };
}

INSTANTIATE_TEST_SUITE_P(Gate, RevisionScalerTest, ::testing::ValuesIn(gateCases()),
                         [](const auto& info) { return info.param.name; });

TEST(RevisionScalerTest, TransitionTimeMovesOnlyOnChange) {
  ScalerSettings s;
  RevisionScaler rs(s, at(0));
  ScaleDecision one{true, 1, -111, false};
  rs.reconcile(one, 1, at(4));
  EXPECT_EQ(rs.active().last_transition, at(4));
  ScaleOutcome out = rs.reconcile(one, 1, at(8));
  EXPECT_FALSE(out.condition_changed);
  EXPECT_EQ(rs.active().last_transition, at(4));
  EXPECT_TRUE(rs.scaleTargetInitialized());
}

TEST(RevisionScalerTest, AdoptsStateAfterRestart) {
  ScalerSettings s;
  RevisionScaleState adopt;
  adopt.current_scale = 4;
  adopt.scale_target_initialized = true;
  adopt.active = ConditionStatus::kTrue;
  RevisionScaler rs(s, at(0), adopt);
  EXPECT_EQ(rs.desiredPods(), 4);
  // No metrics yet and Active: nothing changes.
  ScaleOutcome out = rs.reconcile(ScaleDecision{}, 4, at(2));
  EXPECT_EQ(out.want, -1);
  EXPECT_EQ(out.desired_pods, 4);
  EXPECT_FALSE(out.scale_changed);
  EXPECT_TRUE(out.active.isActive());
}

TEST(RevisionScalerTest, ProxiedFollowsKnativeServeRule) {
  ScalerSettings s;
  RevisionScaler rs(s, at(0));
  EXPECT_TRUE(rs.reconcile(ScaleDecision{}, 0, at(0)).proxied);  // unknown
  EXPECT_TRUE(rs.reconcile(ScaleDecision{true, 2, -11, false}, 2, at(2)).proxied);
  EXPECT_FALSE(rs.reconcile(ScaleDecision{true, 3, 0, false}, 3, at(4)).proxied);
}

}  // namespace
}  // namespace knap::scaler
