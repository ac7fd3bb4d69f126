#include "daemon/data_plane.h"

#include <gtest/gtest.h>

namespace knap::daemon {
namespace {

using nlohmann::json;
using std::chrono::seconds;

// The scaler's settings of a Revision with these annotations and spec.
scaler::ScalerSettings scalerSettings(json annotations, json spec, const Config& config, bool reachable = true) {
  json rev = {{"metadata", {{"annotations", std::move(annotations)}}}, {"spec", std::move(spec)}};
  return toScalerSettings(api::revisionSettings(rev, config), reachable);
}

// The scaler's activation timeout is the Revision's progress deadline + 30 s,
// the same deadline the pod runner applies (it used to take config only).
TEST(ToScalerSettingsTest, ActivationTimeoutFollowsTheProgressDeadlineAnnotation) {
  Config config = defaultConfig();
  config.deployment.progress_deadline = seconds(120);
  auto s = scalerSettings(json::object(), json::object(), config);
  EXPECT_EQ(s.activationTimeout(), seconds(150));
  s = scalerSettings({{"serving.knative.dev/progress-deadline", "45s"}}, json::object(), config);
  EXPECT_EQ(s.progress_deadline, seconds(45));
  EXPECT_EQ(s.activationTimeout(), seconds(75));
}

TEST(ToScalerSettingsTest, MapsEveryKnob) {
  json ann = {{"autoscaling.knative.dev/initialScale", "3"},
              {"autoscaling.knative.dev/min-scale", "1"},
              {"autoscaling.knative.dev/max-scale", "9"},
              {"autoscaling.knative.dev/metric", "rps"},
              {"autoscaling.knative.dev/metric-aggregation-algorithm", "weightedExponential"},
              {"autoscaling.knative.dev/window", "20s"},
              {"autoscaling.knative.dev/scale-to-zero-pod-retention-period", "1m"}};
  auto s = scalerSettings(ann, {{"containerConcurrency", 5}}, defaultConfig(), /*reachable=*/false);
  EXPECT_EQ(s.initial_scale, 3);  // the legacy alias
  EXPECT_EQ(s.min_scale, 1);
  EXPECT_EQ(s.max_scale, 9);
  EXPECT_EQ(s.metric, scaler::ScalingMetric::kRps);
  EXPECT_EQ(s.aggregation, scaler::Aggregation::kWeightedExponential);
  EXPECT_EQ(s.stable_window, seconds(20));
  EXPECT_EQ(s.pod_retention_period, seconds(60));
  EXPECT_DOUBLE_EQ(s.target_value, 140);
  EXPECT_FALSE(s.reachable);
  EXPECT_TRUE(scaler::validateSettings(s).isOk());
}

}  // namespace
}  // namespace knap::daemon
