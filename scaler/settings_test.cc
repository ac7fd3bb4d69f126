#include "scaler/settings.h"

#include <gtest/gtest.h>

namespace knap::scaler {
namespace {

struct TargetCase {
  std::string name;
  TargetInputs in;
  double want_target;
  double want_total;
};

TargetInputs concurrency(int64_t cc) {
  TargetInputs in;
  in.container_concurrency = cc;
  return in;
}

class TargetsTest : public ::testing::TestWithParam<TargetCase> {};

TEST_P(TargetsTest, ComputesTargetAndTotal) {
  const TargetCase& c = GetParam();
  Targets t = computeTargets(c.in);
  EXPECT_NEAR(t.target_value, c.want_target, 1e-9);
  EXPECT_NEAR(t.total_value, c.want_total, 1e-9);
}

std::vector<TargetCase> targetCases() {
  std::vector<TargetCase> cases;
  // The contract's worked defaults (§4.3).
  cases.push_back({"cc0_targets_70", concurrency(0), 70, 100});
  cases.push_back({"cc10_targets_7", concurrency(10), 7, 10});
  cases.push_back({"cc1_targets_0_7", concurrency(1), 0.7, 1});
  {
    TargetInputs in;
    in.metric = ScalingMetric::kRps;
    cases.push_back({"rps_default_200_at_0_7", in, 140, 200});
  }
  {
    TargetInputs in = concurrency(0);
    in.target_annotation = 50;
    cases.push_back({"annotation_target_replaces_default", in, 35, 50});
  }
  {
    TargetInputs in = concurrency(10);
    in.target_annotation = 50;
    cases.push_back({"annotation_target_capped_by_cc", in, 7, 10});
  }
  {
    TargetInputs in = concurrency(10);
    in.target_annotation = 4;
    cases.push_back({"annotation_target_below_cc_wins", in, 2.8, 4});
  }
  {
    TargetInputs in;
    in.metric = ScalingMetric::kRps;
    in.container_concurrency = 10;
    in.target_annotation = 50;
    cases.push_back({"rps_annotation_not_capped_by_cc", in, 35, 50});
  }
  {
    TargetInputs in = concurrency(0);
    in.utilization_annotation = 100;
    cases.push_back({"utilization_annotation_100", in, 100, 100});
  }
  {
    TargetInputs in;
    in.metric = ScalingMetric::kRps;
    in.utilization_annotation = 50;
    cases.push_back({"rps_utilization_annotation", in, 100, 200});
  }
  {
    TargetInputs in = concurrency(0);
    in.container_concurrency_target_percentage = 0.5;  // already a fraction
    cases.push_back({"config_fraction_below_one", in, 50, 100});
  }
  {
    TargetInputs in = concurrency(0);
    in.target_annotation = 0.01;
    cases.push_back({"target_floor_0_01", in, 0.01, 0.01});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Targets, TargetsTest, ::testing::ValuesIn(targetCases()),
                         [](const auto& info) { return info.param.name; });

TEST(SettingsTest, PanicWindowIsTenPercentRounded) {
  ScalerSettings s;
  EXPECT_EQ(s.panicWindow(), 6s);
  s.stable_window = 6s;
  EXPECT_EQ(s.panicWindow(), 1s);  // 0.6 s rounds to 1 s
  s.panic_window_percentage = 1;
  EXPECT_EQ(s.panicWindow(), 1s);  // never below one bucket
  s.stable_window = 25s;
  s.panic_window_percentage = 10;
  EXPECT_EQ(s.panicWindow(), 3s);  // 2.5 s rounds half away from zero
}

TEST(SettingsTest, ActivationTimeoutIsProgressDeadlinePlus30s) {
  ScalerSettings s;
  EXPECT_EQ(s.activationTimeout(), 630s);
  s.progress_deadline = 10s;
  EXPECT_EQ(s.activationTimeout(), 40s);
}

TEST(SettingsTest, RetentionIgnoredWhenUnreachable) {
  ScalerSettings s;
  s.pod_retention_period = 120s;
  EXPECT_EQ(s.effectiveRetention(), 120s);
  s.reachable = false;
  EXPECT_EQ(s.effectiveRetention(), 0s);
}

TEST(SettingsTest, ResolveInitialScale) {
  EXPECT_EQ(resolveInitialScale(1, std::nullopt, false), 1);
  EXPECT_EQ(resolveInitialScale(1, 3, false), 3);
  EXPECT_EQ(resolveInitialScale(1, 0, false), 1);  // zero needs allow-zero-initial-scale
  EXPECT_EQ(resolveInitialScale(1, 0, true), 0);
}

TEST(SettingsTest, ValidateRefusesUnusableSettings) {
  EXPECT_TRUE(validateSettings(ScalerSettings{}).isOk());
  ScalerSettings s;
  s.target_value = 0;
  Status st = validateSettings(s);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("target_value"), std::string::npos);
  s = {};
  s.max_scale_down_rate = 1;
  EXPECT_FALSE(validateSettings(s).isOk());
  s = {};
  s.min_scale = 5;
  s.max_scale = 3;
  EXPECT_FALSE(validateSettings(s).isOk());
  s = {};
  s.target_burst_capacity = -2;
  EXPECT_FALSE(validateSettings(s).isOk());
  s.target_burst_capacity = -1;
  EXPECT_TRUE(validateSettings(s).isOk());
}

TEST(SettingsTest, ParsesMetricAndAggregation) {
  EXPECT_EQ(parseScalingMetric("rps"), ScalingMetric::kRps);
  EXPECT_EQ(parseScalingMetric("concurrency"), ScalingMetric::kConcurrency);
  EXPECT_FALSE(parseScalingMetric("cpu").has_value());
  EXPECT_EQ(parseAggregation("weightedExponential"), Aggregation::kWeightedExponential);
  EXPECT_EQ(parseAggregation("weighted-exponential"), Aggregation::kWeightedExponential);
  EXPECT_EQ(parseAggregation("linear"), Aggregation::kLinear);
  EXPECT_FALSE(parseAggregation("max").has_value());
}

}  // namespace
}  // namespace knap::scaler
