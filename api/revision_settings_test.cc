#include "api/revision_settings.h"

#include <gtest/gtest.h>

#include <map>

namespace knap::api {
namespace {

using nlohmann::json;
using std::chrono::seconds;

json revision(json annotations, json spec = json::object()) {
  return {{"metadata", {{"name", "r"}, {"namespace", "default"}, {"annotations", std::move(annotations)}}},
          {"spec", std::move(spec)}};
}

std::map<std::string, EffectiveValue> byKey(const std::vector<EffectiveValue>& v) {
  std::map<std::string, EffectiveValue> m;
  for (const auto& e : v) m[e.key] = e;
  return m;
}

// §4.3 target merge, table-driven (these were scaler::computeTargets's cases).
struct TargetCase {
  const char* name;
  json annotations;
  int64_t cc;
  double config_utilization;  // config-autoscaler container-concurrency-target-percentage
  double target_value;
  double total_value;
};

class RevisionTargetTest : public ::testing::TestWithParam<TargetCase> {};

TEST_P(RevisionTargetTest, ComputesTargetAndTotal) {
  const TargetCase& c = GetParam();
  Config config = defaultConfig();
  config.autoscaler.container_concurrency_target_percentage = c.config_utilization;
  RevisionSettings s = revisionSettings(revision(c.annotations, {{"containerConcurrency", c.cc}}), config);
  ASSERT_TRUE(s.errors.empty()) << s.status().toString();
  EXPECT_NEAR(s.autoscaling.target_value, c.target_value, 1e-9);
  EXPECT_NEAR(s.autoscaling.total_value, c.total_value, 1e-9);
  EXPECT_EQ(s.container_concurrency, c.cc);
}

const json kRps = {{"autoscaling.knative.dev/metric", "rps"}};

INSTANTIATE_TEST_SUITE_P(
    Targets, RevisionTargetTest,
    ::testing::Values(
        TargetCase{"cc0_targets_70", json::object(), 0, 70, 70, 100},
        TargetCase{"cc10_targets_7", json::object(), 10, 70, 7, 10},
        TargetCase{"cc1_targets_0_7", json::object(), 1, 70, 0.7, 1},
        TargetCase{"rps_default_200_at_0_7", kRps, 0, 70, 140, 200},
        TargetCase{
            "annotation_target_replaces_default", {{"autoscaling.knative.dev/target", "50"}}, 0, 70, 35, 50},
        TargetCase{
            "annotation_target_capped_by_cc", {{"autoscaling.knative.dev/target", "50"}}, 10, 70, 7, 10},
        TargetCase{
            "annotation_target_below_cc_wins", {{"autoscaling.knative.dev/target", "4"}}, 10, 70, 2.8, 4},
        TargetCase{"rps_annotation_not_capped_by_cc",
                   {{"autoscaling.knative.dev/metric", "rps"}, {"autoscaling.knative.dev/target", "50"}},
                   10,
                   70,
                   35,
                   50},
        TargetCase{"utilization_annotation_100",
                   {{"autoscaling.knative.dev/target-utilization-percentage", "100"}},
                   0,
                   70,
                   100,
                   100},
        TargetCase{"rps_utilization_annotation",
                   {{"autoscaling.knative.dev/metric", "rps"},
                    {"autoscaling.knative.dev/target-utilization-percentage", "50"}},
                   0,
                   70,
                   100,
                   200},
        TargetCase{"config_fraction_below_one", json::object(), 0, 0.5, 50, 100},
        TargetCase{"target_floor_0_01", {{"autoscaling.knative.dev/target", "0.01"}}, 0, 70, 0.01, 0.01}),
    [](const ::testing::TestParamInfo<TargetCase>& info) { return std::string(info.param.name); });

TEST(RevisionSettingsTest, InitialScaleHonoursTheLegacyAlias) {
  RevisionSettings s =
      revisionSettings(revision({{"autoscaling.knative.dev/initialScale", "3"}}), defaultConfig());
  EXPECT_TRUE(s.errors.empty());
  EXPECT_EQ(s.autoscaling.initial_scale, 3);
  auto rows = byKey(s.rows);
  EXPECT_EQ(rows["initial-scale"].value, "3");
  EXPECT_EQ(rows["initial-scale"].source, "annotation");
  // The kebab-case key wins over the alias.
  s = revisionSettings(revision({{"autoscaling.knative.dev/initialScale", "3"},
                                 {"autoscaling.knative.dev/initial-scale", "2"}}),
                       defaultConfig());
  EXPECT_EQ(s.autoscaling.initial_scale, 2);
}

TEST(RevisionSettingsTest, ProgressDeadlineFromAnnotationElseConfig) {
  Config config = defaultConfig();
  config.deployment.progress_deadline = seconds(120);
  RevisionSettings s = revisionSettings(revision(json::object()), config);
  EXPECT_EQ(s.progress_deadline, seconds(120));
  EXPECT_EQ(byKey(s.rows)["progress-deadline"].source, "config");
  EXPECT_EQ(byKey(s.rows)["progress-deadline"].value, "2m0s");

  s = revisionSettings(revision({{"serving.knative.dev/progress-deadline", "45s"}}), config);
  EXPECT_TRUE(s.errors.empty());
  EXPECT_EQ(s.progress_deadline, seconds(45));
  EXPECT_EQ(byKey(s.rows)["progress-deadline"].source, "annotation");
  EXPECT_EQ(byKey(s.rows)["progress-deadline"].value, "45s");

  // 0 means "not set": the configured deadline applies.
  s = revisionSettings(revision({{"serving.knative.dev/progress-deadline", "0s"}}), config);
  EXPECT_TRUE(s.errors.empty());
  EXPECT_EQ(s.progress_deadline, seconds(120));

  s = revisionSettings(revision({{"serving.knative.dev/progress-deadline", "soon"}}), config);
  EXPECT_EQ(s.progress_deadline, seconds(120));
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_NE(s.errors[0].find("serving.knative.dev/progress-deadline"), std::string::npos) << s.errors[0];
}

TEST(RevisionSettingsTest, TimeoutsAndConcurrencyFromSpecElseConfig) {
  Config config = defaultConfig();
  config.defaults.revision_timeout_seconds = 200;
  config.defaults.container_concurrency = 4;
  RevisionSettings s = revisionSettings(revision(json::object()), config);
  EXPECT_TRUE(s.errors.empty());
  EXPECT_EQ(s.timeout, seconds(200));
  EXPECT_EQ(s.response_start_timeout, seconds(0));
  EXPECT_EQ(s.idle_timeout, seconds(0));
  EXPECT_EQ(s.container_concurrency, 4);
  auto rows = byKey(s.rows);
  EXPECT_EQ(rows["timeoutSeconds"].source, "config");
  EXPECT_EQ(rows["idleTimeoutSeconds"].source, "default");

  s = revisionSettings(revision(json::object(), {{"timeoutSeconds", 30},
                                                 {"responseStartTimeoutSeconds", 10},
                                                 {"idleTimeoutSeconds", 5},
                                                 {"containerConcurrency", 2}}),
                       config);
  EXPECT_TRUE(s.errors.empty());
  EXPECT_EQ(s.timeout, seconds(30));
  EXPECT_EQ(s.response_start_timeout, seconds(10));
  EXPECT_EQ(s.idle_timeout, seconds(5));
  EXPECT_EQ(s.container_concurrency, 2);
  EXPECT_EQ(s.autoscaling.container_concurrency, 2);
  rows = byKey(s.rows);
  EXPECT_EQ(rows["timeoutSeconds"].value, "30");
  EXPECT_EQ(rows["timeoutSeconds"].source, "spec");
}

TEST(RevisionSettingsTest, RowsAreAutoscalingThenRuntime) {
  RevisionSettings s = revisionSettings(revision(json::object()), defaultConfig());
  ASSERT_EQ(s.autoscaling_rows, 19u);
  ASSERT_EQ(s.rows.size(), 24u);
  EXPECT_EQ(s.rows[0].key, "class");
  EXPECT_EQ(s.rows[18].key, "metric-aggregation-algorithm");
  EXPECT_EQ(s.rows[19].key, "containerConcurrency");
  EXPECT_EQ(s.rows[23].key, "progress-deadline");
}

TEST(RevisionSettingsTest, RefusedValuesKeepTheirFallbackAndAreNamed) {
  RevisionSettings s = revisionSettings(revision({{"autoscaling.knative.dev/minScale", "-1"},
                                                  {"autoscaling.knative.dev/window", "5s"},
                                                  {"autoscaling.knative.dev/max-scale", "4"}}),
                                        defaultConfig());
  ASSERT_EQ(s.errors.size(), 2u);
  EXPECT_NE(s.errors[0].find("autoscaling.knative.dev/minScale"), std::string::npos) << s.errors[0];
  EXPECT_NE(s.errors[1].find("autoscaling.knative.dev/window"), std::string::npos) << s.errors[1];
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(s.autoscaling.min_scale, 0);                // config
  EXPECT_EQ(s.autoscaling.stable_window, seconds(60));  // config
  EXPECT_EQ(s.autoscaling.max_scale, 4);                // the valid ones still count
  EXPECT_EQ(byKey(s.rows)["min-scale"].value, "-1");    // shown as written
}

// A Revision written straight into the store is not trusted to have
// admission's shape: whatever it holds, parsing neither throws nor crashes.
TEST(RevisionSettingsTest, MalformedObjectsFallBackWithoutThrowing) {
  const json shapes[] = {
      json(),
      json("a string"),
      json(42),
      json::array({1, 2}),
      json{{"metadata", "x"}, {"spec", 7}},
      json{{"metadata", {{"annotations", 5}}}, {"spec", "a string"}},
      json{{"metadata", {{"annotations", {{"autoscaling.knative.dev/min-scale", 3}}}}}},
      json{{"metadata", {{"annotations", json::array()}}}, {"spec", json::array()}},
  };
  for (const json& j : shapes) {
    SCOPED_TRACE(j.dump());
    RevisionSettings s;
    ASSERT_NO_THROW(s = revisionSettings(j, defaultConfig()));
    EXPECT_EQ(s.autoscaling.min_scale, 0);
    EXPECT_EQ(s.timeout, seconds(300));
    EXPECT_EQ(s.rows.size(), 24u);
  }
  RevisionSettings s = revisionSettings(
      revision(json::object(),
               {{"timeoutSeconds", "300"}, {"containerConcurrency", -1}, {"idleTimeoutSeconds", 1e300}}),
      defaultConfig());
  ASSERT_EQ(s.errors.size(), 3u);
  EXPECT_NE(s.errors[0].find("spec.containerConcurrency"), std::string::npos) << s.errors[0];
  EXPECT_NE(s.errors[1].find("spec.timeoutSeconds"), std::string::npos) << s.errors[1];
  EXPECT_NE(s.errors[1].find("got a string"), std::string::npos) << s.errors[1];
  EXPECT_NE(s.errors[2].find("spec.idleTimeoutSeconds"), std::string::npos) << s.errors[2];
  EXPECT_EQ(s.timeout, seconds(300));
  EXPECT_EQ(s.container_concurrency, 0);
  EXPECT_EQ(s.idle_timeout, seconds(0));
}

// knap.dev/warm-pool and knap.dev/warm-pool-mode: parsed here for the pod
// runner; absent means "the runner's configured size and mode".
TEST(RevisionSettingsTest, WarmPoolAnnotations) {
  RevisionSettings none = revisionSettings(revision(json::object()), defaultConfig());
  EXPECT_FALSE(none.warm_pool.size.has_value());
  EXPECT_FALSE(none.warm_pool.mode.has_value());
  EXPECT_TRUE(none.errors.empty());
  EXPECT_TRUE(none.warm_pool.errors.empty());

  for (const auto& [value, want] :
       std::vector<std::pair<std::string, int32_t>>{{"0", 0}, {"3", 3}, {"100", 100}, {"007", 7}}) {
    SCOPED_TRACE(value);
    RevisionSettings s = revisionSettings(revision({{kWarmPoolAnnotation, value}}), defaultConfig());
    ASSERT_TRUE(s.warm_pool.errors.empty()) << s.warm_pool.errors[0];
    EXPECT_EQ(s.warm_pool.size, want);
  }
  for (const std::string mode : {"created", "frozen"}) {
    RevisionSettings s = revisionSettings(revision({{kWarmPoolModeAnnotation, mode}}), defaultConfig());
    ASSERT_TRUE(s.warm_pool.errors.empty()) << s.warm_pool.errors[0];
    EXPECT_EQ(s.warm_pool.mode, mode);
  }
  // Both at once, with the autoscaling annotations untouched.
  RevisionSettings both = revisionSettings(revision({{kWarmPoolAnnotation, "2"},
                                                     {kWarmPoolModeAnnotation, "created"},
                                                     {"autoscaling.knative.dev/min-scale", "0"}}),
                                           defaultConfig());
  EXPECT_EQ(both.warm_pool.size, 2);
  EXPECT_EQ(both.warm_pool.mode, "created");
  EXPECT_EQ(both.rows.size(), 24u);  // no display rows of their own
}

TEST(RevisionSettingsTest, BadWarmPoolValuesAreRefusedNamingTheAnnotation) {
  for (const std::string value : {"-2", "lots", "", "101", "1000", "+3", " 3", "3 ", "1.5", "99999999999"}) {
    SCOPED_TRACE(value);
    RevisionSettings s = revisionSettings(revision({{kWarmPoolAnnotation, value}}), defaultConfig());
    EXPECT_FALSE(s.warm_pool.size.has_value());  // the runner's configured size applies
    ASSERT_EQ(s.warm_pool.errors.size(), 1u);
    EXPECT_EQ(s.warm_pool.errors[0],
              "annotation knap.dev/warm-pool=\"" + value + "\": must be an integer from 0 to 100");
    // Not a refused scaler/router setting: the revision still goes to the scaler.
    EXPECT_TRUE(s.errors.empty());
    EXPECT_TRUE(s.status().isOk());
  }
  for (const std::string value : {"lukewarm", "", "Frozen", "created "}) {
    SCOPED_TRACE(value);
    RevisionSettings s = revisionSettings(revision({{kWarmPoolModeAnnotation, value}}), defaultConfig());
    EXPECT_FALSE(s.warm_pool.mode.has_value());
    ASSERT_EQ(s.warm_pool.errors.size(), 1u);
    EXPECT_EQ(s.warm_pool.errors[0],
              "annotation knap.dev/warm-pool-mode=\"" + value + "\": must be \"created\" or \"frozen\"");
  }
  // A value that is not a string is no annotation value at all (as for autoscaling.knative.dev/*).
  RevisionSettings s = revisionSettings(revision({{kWarmPoolAnnotation, 3}, {kWarmPoolModeAnnotation, true}}),
                                        defaultConfig());
  EXPECT_TRUE(s.warm_pool.errors.empty());
  EXPECT_FALSE(s.warm_pool.size.has_value());
  EXPECT_FALSE(s.warm_pool.mode.has_value());
  // One bad, one good: the good one still counts.
  RevisionSettings mixed = revisionSettings(
      revision({{kWarmPoolAnnotation, "x"}, {kWarmPoolModeAnnotation, "created"}}), defaultConfig());
  EXPECT_EQ(mixed.warm_pool.errors.size(), 1u);
  EXPECT_EQ(mixed.warm_pool.mode, "created");
}

}  // namespace
}  // namespace knap::api
