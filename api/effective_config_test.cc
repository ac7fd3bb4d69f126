#include "api/effective_config.h"

#include <gtest/gtest.h>

#include <map>

namespace knap::api {
namespace {

using nlohmann::json;
using std::chrono::seconds;

std::map<std::string, EffectiveValue> byKey(const std::vector<EffectiveValue>& v) {
  std::map<std::string, EffectiveValue> m;
  for (const auto& e : v) m[e.key] = e;
  return m;
}

TEST(EffectiveConfigTest, DefaultsComeFromConfig) {
  auto rows = effectiveAutoscaling(json(), defaultConfig());
  ASSERT_EQ(rows.size(), 19u);
  EXPECT_EQ(rows.front().key, "class");
  auto m = byKey(rows);
  EXPECT_EQ(m["class"].value, "kpa.autoscaling.knative.dev");
  EXPECT_EQ(m["class"].source, "config");
  EXPECT_EQ(m["metric"].value, "concurrency");
  EXPECT_EQ(m["metric"].source, "default");
  EXPECT_EQ(m["target"].value, "100");
  EXPECT_EQ(m["target-utilization-percentage"].value, "70");
  EXPECT_EQ(m["target-burst-capacity"].value, "211");
  EXPECT_EQ(m["min-scale"].value, "0");
  EXPECT_EQ(m["max-scale"].value, "0");
  EXPECT_EQ(m["initial-scale"].value, "1");
  EXPECT_EQ(m["activation-scale"].value, "1");
  EXPECT_EQ(m["activation-scale"].source, "default");
  EXPECT_EQ(m["window"].value, "1m0s");
  EXPECT_EQ(m["panic-window-percentage"].value, "10");
  EXPECT_EQ(m["panic-threshold-percentage"].value, "200");
  EXPECT_EQ(m["scale-down-delay"].value, "0s");
  EXPECT_EQ(m["scale-to-zero-pod-retention-period"].value, "0s");
  EXPECT_EQ(m["enable-scale-to-zero"].value, "true");
  EXPECT_EQ(m["scale-to-zero-grace-period"].value, "30s");
  EXPECT_EQ(m["max-scale-up-rate"].value, "1000");
  EXPECT_EQ(m["max-scale-down-rate"].value, "2");
  EXPECT_EQ(m["metric-aggregation-algorithm"].value, "linear");
}

TEST(EffectiveConfigTest, AnnotationsOverrideConfig) {
  json ann = {{"autoscaling.knative.dev/target", "10"},
              {"autoscaling.knative.dev/min-scale", "1"},
              {"autoscaling.knative.dev/maxScale", "5"},
              {"autoscaling.knative.dev/window", "2m"},
              {"unrelated/annotation", "x"}};
  auto m = byKey(effectiveAutoscaling(ann, defaultConfig()));
  EXPECT_EQ(m["target"].value, "10");
  EXPECT_EQ(m["target"].source, "annotation");
  EXPECT_EQ(m["min-scale"].value, "1");
  EXPECT_EQ(m["max-scale"].value, "5");  // legacy alias honoured
  EXPECT_EQ(m["max-scale"].source, "annotation");
  EXPECT_EQ(m["window"].value, "2m");
  EXPECT_EQ(m["initial-scale"].source, "config");
}

TEST(EffectiveConfigTest, KebabCaseWinsOverLegacyAlias) {
  json ann = {{"autoscaling.knative.dev/minScale", "7"}, {"autoscaling.knative.dev/min-scale", "2"}};
  auto a = autoscalingAnnotation(ann, "min-scale");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->value, "2");
  EXPECT_EQ(a->key, "autoscaling.knative.dev/min-scale");
  EXPECT_FALSE(autoscalingAnnotation(ann, "max-scale").has_value());
  EXPECT_FALSE(autoscalingAnnotation(json(), "min-scale").has_value());
  // "window" has no legacy alias.
  EXPECT_FALSE(autoscalingAnnotation(json{{"autoscaling.knative.dev/Window", "1m"}}, "window").has_value());
}

TEST(EffectiveConfigTest, RpsMetricUsesRpsDefaults) {
  auto m = byKey(effectiveAutoscaling(json{{"autoscaling.knative.dev/metric", "rps"}}, defaultConfig()));
  EXPECT_EQ(m["target"].value, "200");
  EXPECT_EQ(m["target-utilization-percentage"].value, "70");
  EXPECT_EQ(m["target-utilization-percentage"].source, "default");
}

TEST(EffectiveConfigTest, ConfigValuesShowUp) {
  Config c = defaultConfig();
  c.autoscaler.stable_window = seconds(90);
  c.autoscaler.container_concurrency_target_percentage = 0.8;
  c.autoscaler.enable_scale_to_zero = false;
  auto m = byKey(effectiveAutoscaling(json::object(), c));
  EXPECT_EQ(m["window"].value, "1m30s");
  EXPECT_EQ(m["target-utilization-percentage"].value, "80");
  EXPECT_EQ(m["enable-scale-to-zero"].value, "false");
}

// §4.3 targets, table-driven.
struct TargetCase {
  const char* name;
  json annotations;
  int64_t cc;
  double target_value;
  double total_value;
};

class TargetTest : public ::testing::TestWithParam<TargetCase> {};

TEST_P(TargetTest, ComputesTargetAndTotal) {
  const auto& c = GetParam();
  auto s = autoscalingSettings(c.annotations, defaultConfig(), c.cc);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  EXPECT_NEAR(s->target_value, c.target_value, 1e-9);
  EXPECT_NEAR(s->total_value, c.total_value, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(
    Targets, TargetTest,
    ::testing::Values(
        TargetCase{"DefaultConcurrency", json::object(), 0, 70, 100},
        TargetCase{"ContainerConcurrency10", json::object(), 10, 7, 10},
        TargetCase{"ContainerConcurrency1", json::object(), 1, 0.7, 1},
        TargetCase{"AnnotationTarget", json{{"autoscaling.knative.dev/target", "10"}}, 0, 7, 10},
        TargetCase{"AnnotationTargetCappedByCc", json{{"autoscaling.knative.dev/target", "50"}}, 20, 14, 20},
        TargetCase{"Utilization", json{{"autoscaling.knative.dev/target-utilization-percentage", "50"}}, 0,
                   50, 100},
        TargetCase{"LegacyUtilization", json{{"autoscaling.knative.dev/targetUtilizationPercentage", "100"}},
                   10, 10, 10},
        TargetCase{"Rps", json{{"autoscaling.knative.dev/metric", "rps"}}, 0, 140, 200},
        TargetCase{"RpsTargetNotCappedByCc",
                   json{{"autoscaling.knative.dev/metric", "rps"}, {"autoscaling.knative.dev/target", "50"}},
                   10, 35, 50},
        TargetCase{"TinyTargetFloored", json{{"autoscaling.knative.dev/target", "0.01"}}, 0, 0.01, 0.01}),
    [](const ::testing::TestParamInfo<TargetCase>& info) { return std::string(info.param.name); });

TEST(AutoscalingSettingsTest, DefaultsFromConfig) {
  auto s = autoscalingSettings(json(), defaultConfig(), 0);
  ASSERT_TRUE(s.isOk());
  EXPECT_EQ(s->autoscaler_class, kKpaClass);
  EXPECT_EQ(s->metric, "concurrency");
  EXPECT_EQ(s->stable_window, seconds(60));
  EXPECT_EQ(s->panic_window, seconds(6));
  EXPECT_EQ(s->initial_scale, 1);
  EXPECT_EQ(s->min_scale, 0);
  EXPECT_EQ(s->max_scale, 0);
  EXPECT_EQ(s->target_burst_capacity, 211);
  EXPECT_EQ(s->scale_to_zero_grace_period, seconds(30));
  EXPECT_TRUE(s->enable_scale_to_zero);
}

TEST(AutoscalingSettingsTest, ParsesEveryAnnotation) {
  json ann = {{"autoscaling.knative.dev/min-scale", "2"},
              {"autoscaling.knative.dev/max-scale", "8"},
              {"autoscaling.knative.dev/initial-scale", "3"},
              {"autoscaling.knative.dev/activation-scale", "2"},
              {"autoscaling.knative.dev/window", "20s"},
              {"autoscaling.knative.dev/panic-window-percentage", "12"},
              {"autoscaling.knative.dev/panic-threshold-percentage", "150"},
              {"autoscaling.knative.dev/target-burst-capacity", "-1"},
              {"autoscaling.knative.dev/scale-down-delay", "15m"},
              {"autoscaling.knative.dev/scaleToZeroPodRetentionPeriod", "1m30s"},
              {"autoscaling.knative.dev/metric-aggregation-algorithm", "weighted-exponential"}};
  auto s = autoscalingSettings(ann, defaultConfig(), 0);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  EXPECT_EQ(s->min_scale, 2);
  EXPECT_EQ(s->max_scale, 8);
  EXPECT_EQ(s->initial_scale, 3);
  EXPECT_EQ(s->activation_scale, 2);
  EXPECT_EQ(s->stable_window, seconds(20));
  EXPECT_EQ(s->panic_window, seconds(2));  // round(20s * 12%) = 2.4s -> 2s
  EXPECT_EQ(s->panic_threshold_percentage, 150);
  EXPECT_EQ(s->target_burst_capacity, -1);
  EXPECT_EQ(s->scale_down_delay, seconds(900));
  EXPECT_EQ(s->scale_to_zero_pod_retention_period, seconds(90));
  EXPECT_EQ(s->metric_aggregation_algorithm, "weighted-exponential");
}

TEST(AutoscalingSettingsTest, PanicWindowAtLeastOneSecond) {
  auto s = autoscalingSettings(json{{"autoscaling.knative.dev/window", "6s"},
                                    {"autoscaling.knative.dev/panic-window-percentage", "1"}},
                               defaultConfig(), 0);
  ASSERT_TRUE(s.isOk());
  EXPECT_EQ(s->panic_window, seconds(1));
}

TEST(AutoscalingSettingsTest, ZeroInitialScaleNeedsConfig) {
  json ann = {{"autoscaling.knative.dev/initial-scale", "0"}};
  auto s = autoscalingSettings(ann, defaultConfig(), 0);
  ASSERT_TRUE(s.isOk());
  EXPECT_EQ(s->initial_scale, 1);  // ignored without allow-zero-initial-scale
  Config c = defaultConfig();
  c.autoscaler.allow_zero_initial_scale = true;
  s = autoscalingSettings(ann, c, 0);
  ASSERT_TRUE(s.isOk());
  EXPECT_EQ(s->initial_scale, 0);
}

TEST(AutoscalingSettingsTest, InvalidValuesAreErrors) {
  for (const auto& [k, v] :
       std::vector<std::pair<std::string, std::string>>{{"min-scale", "-1"},
                                                        {"max-scale", "x"},
                                                        {"window", "5s"},
                                                        {"target", "0"},
                                                        {"metric", "cpu"},
                                                        {"panic-threshold-percentage", "50"},
                                                        {"target-burst-capacity", "-5"},
                                                        {"scale-down-delay", "2h"}}) {
    auto s = autoscalingSettings(json{{"autoscaling.knative.dev/" + k, v}}, defaultConfig(), 0);
    EXPECT_FALSE(s.isOk()) << k << "=" << v;
    if (!s.isOk()) {
      EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
    }
  }
  auto s = autoscalingSettings(
      json{{"autoscaling.knative.dev/min-scale", "5"}, {"autoscaling.knative.dev/max-scale", "2"}},
      defaultConfig(), 0);
  EXPECT_FALSE(s.isOk());
}

}  // namespace
}  // namespace knap::api
