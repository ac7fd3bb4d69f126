#include "scaler/autoscaler.h"

#include <gtest/gtest.h>

#include <functional>

namespace knap::scaler {
namespace {

const MonoTime kT0 = MonoTime{} + std::chrono::hours(1);
MonoTime at(int seconds) {
  return kT0 + std::chrono::seconds(seconds);
}

// One call to decide() and what it must return.
struct Step {
  int t;          // seconds after kT0
  double stable;  // stable window average
  double panic;   // panic window average
  int ready;
  int want;  // desired pods
  bool want_panic;
};

struct DecideCase {
  std::string name;
  std::function<void(ScalerSettings&)> tweak;  // applied to settings with target 10, total 10
  int ready_at_start;
  std::vector<Step> steps;
};

ScalerSettings tenPerPod() {
  ScalerSettings s;
  s.target_value = 10;
  s.total_value = 10;
  return s;
}

class DecideTest : public ::testing::TestWithParam<DecideCase> {};

TEST_P(DecideTest, Scenario) {
  const DecideCase& c = GetParam();
  ScalerSettings s = tenPerPod();
  if (c.tweak) c.tweak(s);
  Autoscaler a(s, c.ready_at_start, at(0));
  for (const Step& step : c.steps) {
    SCOPED_TRACE("t=" + std::to_string(step.t));
    ScaleDecision d = a.decide(MetricSnapshot{true, step.stable, step.panic}, step.ready, at(step.t));
    EXPECT_TRUE(d.valid);
    EXPECT_EQ(d.desired_pods, step.want);
    EXPECT_EQ(d.panicking, step.want_panic);
  }
}

auto noTweak = [](ScalerSettings&) {};

std::vector<DecideCase> decideCases() {
  return {
      {"stable_average_divided_by_target_rounds_up", noTweak, 0, {{0, 25, 25, 3, 3, false}}},
      {"exact_multiple_of_target", noTweak, 0, {{0, 30, 30, 3, 3, false}}},
      {"idle_scales_down_by_max_scale_down_rate", noTweak, 0, {{0, 0, 0, 10, 5, false}}},
      {"idle_single_pod_may_go_to_zero", noTweak, 0, {{0, 0, 0, 1, 0, false}}},
      {"zero_ready_counts_as_one_for_rates", noTweak, 0, {{0, 15, 15, 0, 2, true}}},
      {"max_scale_up_rate_caps_growth",
       [](ScalerSettings& s) { s.max_scale_up_rate = 2; },
       0,
       {{0, 100, 100, 2, 4, true}}},
      // Knative's comment: MSUR=1.1, 2 ready, target 1, load 3 => ceil(2.2)=3, not 2.
      {"max_scale_up_rate_ceil_allows_one_more_pod",
       [](ScalerSettings& s) {
         s.max_scale_up_rate = 1.1;
         s.target_value = 1;
       },
       0,
       {{0, 3, 3, 2, 3, false}}},
      {"max_scale_down_rate_custom",
       [](ScalerSettings& s) { s.max_scale_down_rate = 4; },
       0,
       {{0, 0, 0, 9, 2, false}}},
      {"unreachable_has_no_scale_down_limit",
       [](ScalerSettings& s) { s.reachable = false; },
       0,
       {{0, 0, 0, 10, 0, false}}},
      {"activation_scale_lifts_a_small_wish",
       [](ScalerSettings& s) { s.activation_scale = 3; },
       0,
       {{0, 5, 5, 1, 3, false}}},
      {"activation_scale_keeps_zero_at_zero",
       [](ScalerSettings& s) { s.activation_scale = 3; },
       0,
       {{0, 0, 0, 1, 0, false}}},
      {"activation_scale_below_wish_is_ignored",
       [](ScalerSettings& s) { s.activation_scale = 2; },
       0,
       {{0, 50, 50, 5, 5, false}}},
      {"panic_starts_at_exactly_the_threshold", noTweak, 0, {{0, 10, 40, 2, 4, true}}},
      {"below_panic_threshold_stays_stable", noTweak, 0, {{0, 10, 30, 2, 1, false}}},
      {"panic_uses_the_larger_of_stable_and_panic", noTweak, 0, {{0, 80, 50, 2, 8, true}}},
      {"panic_never_scales_down_then_exits_after_stable_window",
       noTweak,
       0,
       {
           {0, 10, 50, 2, 5, true},  // dppc 5 over 2 ready: panic, want 5
           {2, 10, 10, 5, 5, true},  // load gone from the panic window: hold 5
           {30, 0, 0, 5, 5, true},   // still holding within the stable window
           {60, 0, 0, 5, 5, true},   // panic time + 60 s is not yet *before* now
           {62, 0, 0, 5, 2, false},  // un-panic: stable wish, floor(5/2)=2
       }},
      {"panic_extends_while_over_threshold",
       noTweak,
       0,
       {
           {0, 10, 50, 2, 5, true},
           {30, 10, 110, 5, 11, true},  // 11/5 >= 2: extends panic to t=30 and grows
           {62, 0, 0, 11, 11, true},    // would have exited at 62 without the extension
           {92, 0, 0, 11, 5, false},    // 30 + 60 < 92: exit, floor(11/2)=5
       }},
      {"panic_max_keeps_growing_not_shrinking",
       noTweak,
       0,
       {
           {0, 10, 40, 2, 4, true},
           {2, 10, 80, 4, 8, true},
           {4, 10, 60, 8, 8, true},
       }},
      {"created_with_more_than_one_ready_starts_in_panic",
       noTweak,
       4,
       {
           {0, 0, 0, 4, 4, true},  // no history after a restart: keep 4
           {61, 0, 0, 4, 2, false},
       }},
      {"created_with_one_ready_does_not_panic", noTweak, 1, {{0, 0, 0, 1, 0, false}}},
      {"scale_down_delay_holds_the_max_of_the_window",
       [](ScalerSettings& s) { s.scale_down_delay = 10s; },
       0,
       {
           {0, 50, 50, 5, 5, false},
           {2, 0, 0, 5, 5, false},  // wish 2, held at 5
           {8, 0, 0, 5, 5, false},
           {10, 0, 0, 5, 2, false},  // the t=0 decision left the 10-s window
           {12, 0, 0, 2, 2, false},  // wish 1, but 2 was recorded at t=10
           {20, 0, 0, 2, 1, false},
       }},
      {"scale_down_delay_does_not_delay_scale_up",
       [](ScalerSettings& s) { s.scale_down_delay = 60s; },
       0,
       {
           {0, 10, 10, 1, 1, false},
           {2, 20, 10, 1, 2, false},
       }},
      {"scale_down_delay_ignored_when_unreachable",
       [](ScalerSettings& s) {
         s.scale_down_delay = 60s;
         s.reachable = false;
       },
       0,
       {
           {0, 50, 50, 5, 5, false},
           {2, 0, 0, 5, 0, false},
       }},
  };
}

INSTANTIATE_TEST_SUITE_P(Decide, DecideTest, ::testing::ValuesIn(decideCases()),
                         [](const auto& info) { return info.param.name; });

TEST(AutoscalerTest, NoDataGivesUnknownAndKeepsState) {
  Autoscaler a(tenPerPod(), 3, at(0));
  ScaleDecision d = a.decide(MetricSnapshot{}, 3, at(0));
  EXPECT_FALSE(d.valid);
  EXPECT_EQ(d.desired_pods, -1);
  EXPECT_TRUE(a.panicking());
  EXPECT_EQ(a.maxPanicPods(), 3);
}

struct EbcCase {
  std::string name;
  double tbc;
  double total;
  int ready;
  double panic;
  int want;
};

class EbcTest : public ::testing::TestWithParam<EbcCase> {};

TEST_P(EbcTest, ExcessBurstCapacity) {
  const EbcCase& c = GetParam();
  EXPECT_EQ(excessBurstCapacity(c.tbc, c.total, c.ready, c.panic), c.want);
  // decide() reports the same number.
  ScalerSettings s;
  s.target_burst_capacity = c.tbc;
  s.total_value = c.total;
  Autoscaler a(s, 0, at(0));
  EXPECT_EQ(a.decide(MetricSnapshot{true, c.panic, c.panic}, c.ready, at(0)).excess_burst_capacity, c.want);
}

INSTANTIATE_TEST_SUITE_P(Ebc, EbcTest,
                         ::testing::ValuesIn(std::vector<EbcCase>{
                             // §4.5 default example: cc=0, TotalValue 100, TBC 211.
                             {"default_one_pod_negative", 211, 100, 1, 0, -111},
                             {"default_two_pods_negative", 211, 100, 2, 0, -11},
                             {"default_three_pods_panic_89_non_negative", 211, 100, 3, 89, 0},
                             {"default_three_pods_idle_positive", 211, 100, 3, 0, 89},
                             {"default_three_pods_panic_90_negative", 211, 100, 3, 90, -1},
                             {"zero_pods_negative", 211, 100, 0, 0, -211},
                             {"tbc_zero_is_zero", 0, 100, 0, 500, 0},
                             {"tbc_minus_one_is_minus_one", -1, 100, 10, 0, -1},
                             {"fractional_floors", 10, 7, 2, 0.5, 3},  // 14 - 10 - 0.5 = 3.5
                         }),
                         [](const auto& info) { return info.param.name; });

TEST(MaxTimeWindowTest, KeepsTheMaximumOfTheWindow) {
  MaxTimeWindow w(6s, 2s);  // three 2-s steps
  EXPECT_EQ(w.current(), 0);
  w.record(at(0), 5);
  w.record(at(2), 3);
  w.record(at(4), 4);
  EXPECT_EQ(w.current(), 5);
  w.record(at(6), 1);  // t=0 leaves the window
  EXPECT_EQ(w.current(), 4);
  w.record(at(7), 2);  // same 2-s step as t=6: the larger of 1 and 2 stays
  w.record(at(10), 0);
  EXPECT_EQ(w.current(), 2);
  w.record(at(14), 0);
  EXPECT_EQ(w.current(), 0);
}

}  // namespace
}  // namespace knap::scaler
