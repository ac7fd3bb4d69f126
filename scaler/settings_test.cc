#include "scaler/settings.h"

#include <gtest/gtest.h>

namespace knap::scaler {
namespace {

// The target merge (§4.3) is the Revision settings model's: api/revision_settings_test.cc.

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
