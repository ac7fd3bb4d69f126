#include "daemon/data_plane.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "controller/domain_mappings.h"
#include "controller/route_urls.h"
#include "store/sqlite_store.h"
#include "tests/fakes/faulty_store.h"

namespace knap::daemon {
namespace {

using nlohmann::json;
using std::chrono::seconds;

// The scaler's settings of a Revision with these annotations and spec.
scaler::ScalerSettings scalerSettings(json annotations, json spec, const Config& config,
                                      bool reachable = true) {
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

// The runtime's side, for a DataPlane without pods.
struct NoPods : scaler::PodCounter, scaler::ScaleTarget {
  int readyPods(const std::string&) override { return 0; }
  void setDesiredScale(const std::string&, int) override {}
  void scaleStatusChanged(const std::string&, const scaler::ScaleOutcome&) override {}
};

json routeWithTraffic(const std::string& revision) {
  return {{"apiVersion", "serving.knative.dev/v1"},
          {"kind", "Route"},
          {"metadata", {{"name", "hello"}, {"namespace", "default"}}},
          {"spec", {{"traffic", json::array({{{"revisionName", revision}, {"percent", 100}}})}}},
          {"status",
           {{"url", "http://hello.default.example.com"},
            {"traffic",
             json::array({{{"revisionName", revision}, {"percent", 100}, {"latestRevision", false}}})}}}};
}

// A Route's IngressReady waits for the router to serve its traffic: the
// data plane says which status (programFingerprint) its table was built
// from, and re-queues the Route (the callback) when that changes.
TEST(DataPlaneTest, ReportsEachRouteItServesAndCallsBackOnChange) {
  RealTimeSource clock;
  auto opened = store::SqliteStore::open(":memory:", clock);
  ASSERT_TRUE(opened.isOk()) << opened.status().message();
  auto store = std::move(opened).value();
  Config config = defaultConfig();
  config.domain.domains = {{"example.com", {}}};
  config.knap.router_listen = "127.0.0.1:0";
  NoPods pods;
  DataPlane dp(config, *store, clock, pods, pods, nullEventRecorder());
  std::mutex mu;
  std::vector<std::string> calls;
  dp.setOnProgrammed([&](const store::Key& key) {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back((key.kind == "Route" ? "" : key.kind + " ") + key.ns + "/" + key.name);
  });
  ASSERT_TRUE(dp.start().isOk());
  auto callsSoon = [&](size_t n) {  // the sync thread is asynchronous: a generous bound
    for (int i = 0; i < 1000; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (calls.size() >= n) return calls.size();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::lock_guard<std::mutex> lock(mu);
    return calls.size();
  };

  json v1 = routeWithTraffic("hello-00001");
  auto created = store->create(store::Key{"Route", "default", "hello"}, v1);
  ASSERT_TRUE(created.isOk()) << created.status().message();
  ASSERT_EQ(callsSoon(1), 1u);
  EXPECT_EQ(calls[0], "default/hello");
  EXPECT_TRUE(dp.programmed(store::Key{"Route", "default", "hello"}, controller::programFingerprint(v1)));
  EXPECT_FALSE(dp.programmed(store::Key{"Route", "default", "other"}, controller::programFingerprint(v1)));

  // A new split: the old status is no longer what the router serves.
  json v2 = routeWithTraffic("hello-00002");
  auto updated = store->update(store::Key{"Route", "default", "hello"}, v2, created->resource_version);
  ASSERT_TRUE(updated.isOk()) << updated.status().message();
  ASSERT_EQ(callsSoon(2), 2u);
  EXPECT_TRUE(dp.programmed(store::Key{"Route", "default", "hello"}, controller::programFingerprint(v2)));
  EXPECT_FALSE(dp.programmed(store::Key{"Route", "default", "hello"}, controller::programFingerprint(v1)));

  // A change outside url/traffic (a label) is served already: no call.
  json v3 = v2;
  v3["metadata"]["labels"] = {{"team", "a"}};
  ASSERT_TRUE(store->update(store::Key{"Route", "default", "hello"}, v3, updated->resource_version).isOk());
  json other = routeWithTraffic("x-00001");
  other["metadata"]["name"] = "x";
  other["status"]["url"] = "http://x.default.example.com";
  ASSERT_TRUE(store->create(store::Key{"Route", "default", "x"}, other).isOk());
  ASSERT_EQ(callsSoon(3), 3u);  // only the new Route
  EXPECT_EQ(calls[2], "default/x");

  // A Route whose stored status already says IngressReady (a restarted
  // knapd's Routes) is served but not re-queued.
  json ready = routeWithTraffic("y-00001");
  ready["metadata"]["name"] = "y";
  ready["status"]["url"] = "http://y.default.example.com";
  ready["status"]["conditions"] = json::array({{{"type", "IngressReady"}, {"status", "True"}}});
  ASSERT_TRUE(store->create(store::Key{"Route", "default", "y"}, ready).isOk());
  for (int i = 0;
       i < 1000 && !dp.programmed(store::Key{"Route", "default", "y"}, controller::programFingerprint(ready));
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(dp.programmed(store::Key{"Route", "default", "y"}, controller::programFingerprint(ready)));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(calls.size(), 3u);
  }

  // A DomainMapping is served once its status says claimed and resolved
  // (controller::domainTargets) and its Route has traffic.
  json dm = {
      {"apiVersion", "serving.knative.dev/v1beta1"},
      {"kind", "DomainMapping"},
      {"metadata", {{"name", "app.example.org"}, {"namespace", "default"}}},
      {"spec", {{"ref", {{"apiVersion", "serving.knative.dev/v1"}, {"kind", "Route"}, {"name", "x"}}}}},
      {"status",
       {{"conditions", json::array({{{"type", "DomainClaimed"}, {"status", "True"}},
                                    {{"type", "ReferenceResolved"}, {"status", "True"}}})}}}};
  const store::Key dm_key{"DomainMapping", "default", "app.example.org"};
  ASSERT_TRUE(store->create(dm_key, dm).isOk());
  ASSERT_EQ(callsSoon(4), 4u);
  EXPECT_EQ(calls[3], "DomainMapping default/app.example.org");
  EXPECT_TRUE(dp.programmed(dm_key, controller::domainFingerprint(dm)));
  EXPECT_FALSE(dp.programmed(dm_key, ""));
  EXPECT_FALSE(
      dp.programmed(store::Key{"Route", "default", "app.example.org"}, controller::domainFingerprint(dm)));
  dp.stop();
}

// Polls `pred` for up to 10 s (the sync thread is asynchronous).
template <typename Pred>
bool soon(Pred pred) {
  for (int i = 0; i < 1000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

// After the first sync, a change reads only the object that changed: no
// list, one read per change (it used to list and parse every Route and
// every Revision on each change, O(objects) per change).
TEST(DataPlaneTest, AChangeReadsOnlyTheChangedObject) {
  RealTimeSource clock;
  auto opened = store::SqliteStore::open(":memory:", clock);
  ASSERT_TRUE(opened.isOk()) << opened.status().message();
  auto store = std::move(opened).value();
  testing::FaultyStore seen(*store);  // what the data plane reads through
  Config config = defaultConfig();
  config.domain.domains = {{"example.com", {}}};
  config.knap.router_listen = "127.0.0.1:0";
  auto route = [](int i, const std::string& revision) {
    json r = routeWithTraffic(revision);
    r["metadata"]["name"] = "r" + std::to_string(i);
    r["status"]["url"] = "http://r" + std::to_string(i) + ".default.example.com";
    return r;
  };
  auto revision = [](const std::string& name) {
    return json{{"apiVersion", "serving.knative.dev/v1"},
                {"kind", "Revision"},
                {"metadata", {{"name", name}, {"namespace", "default"}}},
                {"spec", {{"containers", json::array({{{"image", "example.com/app"}}})}}}};
  };
  constexpr int kRoutes = 20;
  for (int i = 0; i < kRoutes; ++i) {
    const std::string rev = "r" + std::to_string(i) + "-00001";
    ASSERT_TRUE(store->create(store::Key{"Revision", "default", rev}, revision(rev)).isOk());
    ASSERT_TRUE(store->create(store::Key{"Route", "default", "r" + std::to_string(i)}, route(i, rev)).isOk());
  }
  NoPods pods;
  DataPlane dp(config, seen, clock, pods, pods, nullEventRecorder());
  ASSERT_TRUE(dp.start().isOk());
  // The first sync lists everything.
  ASSERT_TRUE(soon([&] {
    return dp.router().revisionCount() == kRoutes &&
           dp.programmed(store::Key{"Route", "default", "r19"},
                         controller::programFingerprint(route(19, "r19-00001")));
  }));
  seen.resetCounters();

  // One Route changes.
  auto r3 = store->get(store::Key{"Route", "default", "r3"});
  ASSERT_TRUE(r3.isOk());
  json v2 = route(3, "r3-00002");
  ASSERT_TRUE(store->update(r3->key, v2, r3->resource_version).isOk());
  ASSERT_TRUE(soon([&] {
    return dp.programmed(store::Key{"Route", "default", "r3"}, controller::programFingerprint(v2));
  }));
  // One Revision is added, one deleted, one Route deleted.
  ASSERT_TRUE(store->create(store::Key{"Revision", "default", "r3-00002"}, revision("r3-00002")).isOk());
  ASSERT_TRUE(soon([&] { return dp.router().revisionCount() == kRoutes + 1; }));
  ASSERT_TRUE(store->remove(store::Key{"Revision", "default", "r5-00001"}).isOk());
  ASSERT_TRUE(soon([&] { return dp.router().revisionCount() == kRoutes; }));
  ASSERT_TRUE(store->remove(store::Key{"Route", "default", "r7"}).isOk());
  ASSERT_TRUE(soon([&] {
    return !dp.programmed(store::Key{"Route", "default", "r7"},
                          controller::programFingerprint(route(7, "r7-00001")));
  }));
  // The other Routes are still served.
  EXPECT_TRUE(dp.programmed(store::Key{"Route", "default", "r19"},
                            controller::programFingerprint(route(19, "r19-00001"))));
  EXPECT_EQ(seen.lists, 0) << "a change must not list a kind";
  EXPECT_LE(seen.gets, 4) << "one read per changed object";
  dp.stop();
}

}  // namespace
}  // namespace knap::daemon
