// PodRunner logic over FakePodDriver with a SimulatedTimeSource and an inline
// executor: every runOnce() does its driver work before returning, so the
// tests are deterministic. Only pod exits cross threads (wait() threads):
// the tests wait for the runner to have received them (eventually(), a
// bounded poll of exitsReceived() and the like), never for a fixed time.
#include "runtime/runner/pod_runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "runtime/runner/fake_pod_driver.h"
#include "tests/fakes/fake_event_recorder.h"
#include "tests/fakes/wait.h"

namespace knap::runner {
namespace {

using knap::testing::eventually;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

json makeRevision(const std::string& name, json annotations = json::object(),
                  json container_extra = json::object()) {
  json c = {{"name", "user-container"}, {"image", "dev.local/app:v1"}};
  for (auto& [k, v] : container_extra.items()) c[k] = v;
  return {{"apiVersion", "serving.knative.dev/v1"},
          {"kind", "Revision"},
          {"metadata", {{"name", name}, {"namespace", "default"}, {"annotations", annotations}}},
          {"spec", {{"containers", json::array({c})}, {"timeoutSeconds", 300}}}};
}

class PodRunnerTest : public ::testing::Test {
 protected:
  PodRunnerOptions options() {
    PodRunnerOptions o;
    o.executor = [](std::function<void()> f) { f(); };
    o.backoff_initial = seconds(1);
    o.backoff_max = seconds(8);
    o.backoff_reset = seconds(60);
    o.config.deployment.progress_deadline = seconds(60);
    return o;
  }
  void make(PodRunnerOptions o) {
    runner_ = std::make_unique<PodRunner>(driver_, time_, o);
    runner_->setOnChange([this](const std::string& ns, const std::string& name) {
      std::lock_guard<std::mutex> l(mu_);
      changes_.push_back(ns + "/" + name);
    });
    runner_->setOnEndpointsChanged([this](const std::string& k) {
      std::lock_guard<std::mutex> l(mu_);
      endpoint_changes_.push_back(k);
    });
  }
  void SetUp() override { make(options()); }

  void settle() {
    for (int i = 0; i < 10; ++i) runner_->runOnce();
  }
  void advance(Duration d) {
    time_.advance(d);
    settle();
  }
  void exitPod(const std::string& id, int code, bool oom = false, std::string tail = "") {
    int before = runner_->exitsReceived();
    driver_.exitPod(id, PodExit{code, oom, tail});
    eventually([&] { return runner_->exitsReceived() > before; });
    ASSERT_GT(runner_->exitsReceived(), before) << "exit of " << id << " never reached the runner";
    settle();
  }
  // Pod stops complete asynchronously (the fake's wait() returns on its own
  // thread): run the loop until `done` holds (or, failing, 30 s pass).
  bool settleUntil(const std::function<bool()>& done) {
    return eventually([&] {
      runner_->runOnce();
      return done();
    });
  }
  controller::RevisionHealth health(const std::string& name = "r1") {
    return runner_->health("default", name);
  }
  int changeCount() {
    std::lock_guard<std::mutex> l(mu_);
    return static_cast<int>(changes_.size());
  }

  SimulatedTimeSource time_;
  FakePodDriver driver_;
  std::unique_ptr<PodRunner> runner_;  // after driver_: destroyed first
  std::mutex mu_;
  std::vector<std::string> changes_;
  std::vector<std::string> endpoint_changes_;
};

TEST_F(PodRunnerTest, UnknownRevisionIsDeploying) {
  auto h = health("nope");
  EXPECT_EQ(h.resources_available.status, "Unknown");
  EXPECT_EQ(h.container_healthy.reason, "Deploying");
  EXPECT_EQ(runner_->readyPods("default/nope"), 0);
}

TEST_F(PodRunnerTest, NewRevisionStartsOnePodAndBecomesReady) {
  runner_->ensure(makeRevision("r1"));
  auto h0 = health();
  EXPECT_EQ(h0.resources_available.status, "Unknown");
  EXPECT_EQ(h0.desired_replicas, 1);
  settle();
  ASSERT_EQ(driver_.createdPods().size(), 1u);
  std::string id = driver_.createdPods()[0];
  EXPECT_TRUE(driver_.pod(id).started);
  EXPECT_GE(driver_.pod(id).probes, 1);
  auto h = health();
  EXPECT_EQ(h.resources_available.status, "True");
  EXPECT_EQ(h.container_healthy.status, "True");
  EXPECT_EQ(h.active.status, "True");
  EXPECT_EQ(h.actual_replicas, 1);
  EXPECT_EQ(h.desired_replicas, 1);
  EXPECT_EQ(h.image_digest, "dev.local/app@sha256:abc");
  EXPECT_EQ(runner_->readyPods("default/r1"), 1);
  auto eps = runner_->readyEndpoints("default/r1");
  ASSERT_EQ(eps.size(), 1u);
  EXPECT_EQ(eps[0].ip, driver_.pod(id).handle.ip);
  EXPECT_EQ(eps[0].port, 8080);
  EXPECT_GE(changeCount(), 1);
  EXPECT_EQ(endpoint_changes_.size(), 1u);
  // ensure() again is idempotent.
  runner_->ensure(makeRevision("r1"));
  settle();
  EXPECT_EQ(driver_.createCount(), 1);
}

// Endpoint callbacks race on several threads; the version read with the list
// (under the runner lock) orders them: a later read has a higher version.
TEST_F(PodRunnerTest, ReadyEndpointsVersionGrowsWithEveryRead) {
  runner_->ensure(makeRevision("r1"));
  settle();
  uint64_t v1 = 0, v2 = 0, v3 = 0;
  EXPECT_EQ(runner_->readyEndpoints("default/r1", nullptr, &v1).size(), 1u);
  runner_->readyEndpoints("default/r1", nullptr, &v2);
  runner_->readyEndpoints("default/unknown", nullptr, &v3);
  EXPECT_GT(v1, 0u);
  EXPECT_GT(v2, v1);
  EXPECT_GT(v3, v2);
}

TEST_F(PodRunnerTest, ContainerPortIsTheServingPort) {
  runner_->ensure(makeRevision("r1", json::object(), {{"ports", json::array({{{"containerPort", 8801}}})}}));
  settle();
  auto eps = runner_->readyEndpoints("default/r1");
  ASSERT_EQ(eps.size(), 1u);
  EXPECT_EQ(eps[0].port, 8801);
}

struct InitialScaleCase {
  const char* name;
  json annotations;
  bool allow_zero;
  int config_initial;
  int want_pods;
};

TEST_F(PodRunnerTest, InitialScaleTable) {
  const InitialScaleCase cases[] = {
      {"default", json::object(), false, 1, 1},
      {"annotation3", {{"autoscaling.knative.dev/initial-scale", "3"}}, false, 1, 3},
      {"config2", json::object(), false, 2, 2},
      {"minscale", {{"autoscaling.knative.dev/min-scale", "2"}}, false, 1, 2},
      {"min-over-initial",
       {{"autoscaling.knative.dev/min-scale", "3"}, {"autoscaling.knative.dev/initial-scale", "2"}},
       false,
       1,
       3},
      {"zero-not-allowed", {{"autoscaling.knative.dev/initial-scale", "0"}}, false, 1, 1},
      {"zero-allowed", {{"autoscaling.knative.dev/initial-scale", "0"}}, true, 1, 0},
      // The legacy alias counts as the kebab-case key (it was ignored here once).
      {"legacy-initialScale", {{"autoscaling.knative.dev/initialScale", "3"}}, false, 1, 3},
      {"kebab-wins-over-legacy",
       {{"autoscaling.knative.dev/initial-scale", "2"}, {"autoscaling.knative.dev/initialScale", "3"}},
       false,
       1,
       2},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    PodRunnerOptions o = options();
    o.config.autoscaler.allow_zero_initial_scale = c.allow_zero;
    o.config.autoscaler.initial_scale = c.config_initial;
    FakePodDriver driver;
    PodRunner runner(driver, time_, o);
    runner.ensure(makeRevision("r1", c.annotations));
    for (int i = 0; i < 10; ++i) runner.runOnce();
    EXPECT_EQ(driver.createCount(), c.want_pods);
    EXPECT_EQ(runner.readyPods("default/r1"), c.want_pods);
    auto h = runner.health("default", "r1");
    EXPECT_EQ(h.desired_replicas, c.want_pods);
    EXPECT_EQ(h.resources_available.status, "True");
    EXPECT_EQ(h.container_healthy.status, "True");
    EXPECT_EQ(h.active.status, c.want_pods == 0 ? "False" : "True");
  }
}

TEST_F(PodRunnerTest, CrashBeforeReadyReportsExitCodeAndBacksOffExponentially) {
  driver_.setProbe([](const FakePodDriver::FakePod&, const runtime::ProbeSpec&) { return false; });
  runner_->ensure(makeRevision("r1"));
  settle();
  ASSERT_EQ(driver_.createCount(), 1);
  std::string id = driver_.createdPods().back();
  exitPod(id, 1, false, "starting\nboom: no config\n");
  auto h = health();
  EXPECT_EQ(h.container_healthy.status, "False");
  EXPECT_EQ(h.container_healthy.reason, "ExitCode1");
  EXPECT_EQ(h.container_healthy.message, "Container failed with: starting\nboom: no config");
  EXPECT_EQ(h.resources_available.status, "Unknown");
  EXPECT_TRUE(driver_.pod(id).destroyed);
  EXPECT_EQ(h.actual_replicas, 0);

  // Back-off: 1 s, 2 s, 4 s, 8 s, 8 s (capped).
  const int expect_delays_ms[] = {1000, 2000, 4000, 8000, 8000};
  for (int delay : expect_delays_ms) {
    SCOPED_TRACE(delay);
    int creates = driver_.createCount();
    advance(milliseconds(delay - 1));
    EXPECT_EQ(driver_.createCount(), creates) << "restarted too early";
    advance(milliseconds(1));
    ASSERT_EQ(driver_.createCount(), creates + 1) << "not restarted after the back-off";
    exitPod(driver_.createdPods().back(), 2, false, "again");
    EXPECT_EQ(health().container_healthy.reason, "ExitCode2");
  }
  EXPECT_EQ(driver_.livePods().size(), 0u);
}

TEST_F(PodRunnerTest, OomKilledReason) {
  driver_.setProbe([](const FakePodDriver::FakePod&, const runtime::ProbeSpec&) { return false; });
  runner_->ensure(makeRevision("r1"));
  settle();
  exitPod(driver_.createdPods().back(), 137, true, "allocating 512 MiB");
  auto h = health();
  EXPECT_EQ(h.container_healthy.status, "False");
  EXPECT_EQ(h.container_healthy.reason, "OOMKilled");
  EXPECT_NE(h.container_healthy.message.find("Container failed with: OOMKilled"), std::string::npos);
  EXPECT_NE(h.container_healthy.message.find("allocating 512 MiB"), std::string::npos);
}

TEST_F(PodRunnerTest, StartsCrashesAndOomKillsAreEventsOnTheRevision) {
  testing::FakeEventRecorder events;
  PodRunnerOptions o = options();
  o.events = &events;
  make(o);
  runner_->ensure(makeRevision("r1"));
  settle();
  auto started = events.byReason("Started");
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].type, EventType::kNormal);
  EXPECT_EQ(started[0].object.kind, "Revision");
  EXPECT_EQ(started[0].object.name, "r1");
  EXPECT_EQ(started[0].object.ns, "default");
  EXPECT_EQ(started[0].component, "knap-runtime");
  exitPod(driver_.createdPods().back(), 3, false, "bye");
  auto crash = events.byReason("BackOff");
  ASSERT_EQ(crash.size(), 1u);
  EXPECT_EQ(crash[0].type, EventType::kWarning);
  EXPECT_NE(crash[0].message.find("exited with code 3"), std::string::npos) << crash[0].message;
  EXPECT_NE(crash[0].message.find("Back-off restarting failed container"), std::string::npos)
      << crash[0].message;
  // No pod id and no back-off duration: a crash loop repeats one Event instead of storing one per crash.
  EXPECT_EQ(crash[0].message.find(driver_.createdPods().back()), std::string::npos) << crash[0].message;
  EXPECT_EQ(crash[0].message.find("1s"), std::string::npos) << crash[0].message;
  EXPECT_NE(crash[0].message.find("bye"), std::string::npos) << crash[0].message;
  advance(seconds(1));
  ASSERT_EQ(events.byReason("Started").size(), 2u);
  exitPod(driver_.createdPods().back(), 137, true, "");
  auto oom = events.byReason("OOMKilled");
  ASSERT_EQ(oom.size(), 1u);
  EXPECT_EQ(oom[0].type, EventType::kWarning);
  EXPECT_NE(oom[0].message.find("OOM killed"), std::string::npos) << oom[0].message;
}

// Multi-container Revisions: the container with ports serves (its image,
// port and probes); every container's image goes to the driver; a sidecar's
// exit is the pod's crash, reported with the sidecar's name.
TEST_F(PodRunnerTest, SidecarsAndTheServingContainer) {
  testing::FakeEventRecorder events;
  PodRunnerOptions o = options();
  o.events = &events;
  make(o);
  json rev = makeRevision("r1");
  rev["spec"]["containers"].push_back(
      {{"name", "main"}, {"image", "dev.local/main:v1"}, {"ports", {{{"containerPort", 8881}}}}});
  runner_->ensure(rev);
  settle();
  ASSERT_EQ(driver_.createCount(), 1);
  std::string id = driver_.createdPods().back();
  EXPECT_EQ(driver_.pod(id).image, "dev.local/main:v1");
  EXPECT_EQ(driver_.pod(id).images, std::vector<std::string>({"dev.local/app:v1", "dev.local/main:v1"}));
  auto eps = runner_->readyEndpoints("default/r1");
  ASSERT_EQ(eps.size(), 1u);
  EXPECT_EQ(eps[0].port, 8881);
  int before = runner_->exitsReceived();
  driver_.exitPod(id, PodExit{2, false, "sidecar boom", "user-container"});
  EXPECT_TRUE(eventually([&] { return runner_->exitsReceived() > before; }));
  settle();
  auto h = health();
  EXPECT_EQ(h.container_healthy.status, "False");
  EXPECT_EQ(h.container_healthy.reason, "ExitCode2");
  EXPECT_EQ(h.container_healthy.message,
            "Container user-container (sidecar) failed: Container failed with: sidecar boom");
  auto crash = events.byReason("BackOff");
  ASSERT_EQ(crash.size(), 1u);
  EXPECT_NE(crash[0].message.find("(container user-container) exited with code 2"), std::string::npos)
      << crash[0].message;
  advance(seconds(1));
  EXPECT_EQ(driver_.createCount(), 2) << "the pod is replaced after the back-off";
}

TEST_F(PodRunnerTest, MissingImageIsContainerMissingUntilImported) {
  driver_.setMissingImage("dev.local/app:v1");
  runner_->ensure(makeRevision("r1"));
  settle();
  auto h = health();
  EXPECT_EQ(h.container_healthy.status, "False");
  EXPECT_EQ(h.container_healthy.reason, "ContainerMissing");
  EXPECT_NE(h.container_healthy.message.find("knap image import"), std::string::npos);
  EXPECT_EQ(driver_.livePods().size(), 0u);
  // Retried with back-off; once the image exists the revision becomes ready.
  driver_.clearMissingImage("dev.local/app:v1");
  advance(seconds(1));
  h = health();
  EXPECT_EQ(h.container_healthy.status, "True");
  EXPECT_EQ(h.resources_available.status, "True");
  EXPECT_EQ(driver_.createCount(), 2);
}

// Secrets/ConfigMaps: resolved before each create; a missing one is
// ContainerHealthy False with the resolver's reason and message (an Event
// too), retried within objects_retry_max; running pods' volumes follow changes.
TEST_F(PodRunnerTest, PodObjectsAreResolvedBeforeCreateAndVolumesFollowChanges) {
  std::mutex m;
  bool present = false;
  std::string file = "v1";
  int resolves = 0;
  testing::FakeEventRecorder events;
  PodRunnerOptions o = options();
  o.events = &events;
  o.backoff_max = seconds(60);
  o.objects_retry_max = seconds(2);
  o.objects_refresh_interval = seconds(1);
  o.resolve_objects = [&](const json& rev, const std::string& ns,
                          PodObjectsFailure* failure) -> std::optional<PodObjectValues> {
    std::lock_guard<std::mutex> l(m);
    ++resolves;
    EXPECT_EQ(ns, "default");
    EXPECT_EQ(rev["metadata"]["name"], "r1");
    if (!present) {
      failure->reason = "CreateContainerConfigError";
      failure->message = "couldn't find key password in Secret default/db";
      return std::nullopt;
    }
    PodObjectValues v;
    v.env_refs = {{"PW", "s3cr3t"}};
    v.volumes["conf"] = {{"app.yaml", file, 0644}};
    return v;
  };
  make(o);
  json rev = makeRevision("r1");
  rev["spec"]["volumes"] = json::array({{{"name", "conf"}, {"configMap", {{"name", "app"}}}}});
  runner_->ensure(rev);
  settle();
  auto h = health();
  EXPECT_EQ(h.container_healthy.status, "False");
  EXPECT_EQ(h.container_healthy.reason, "CreateContainerConfigError");
  EXPECT_EQ(h.container_healthy.message, "couldn't find key password in Secret default/db");
  EXPECT_EQ(driver_.createCount(), 0);
  // Repeated failures back off, but never longer than objects_retry_max.
  for (int i = 0; i < 6; ++i) advance(seconds(2));
  EXPECT_EQ(driver_.createCount(), 0);
  EXPECT_EQ(health().container_healthy.reason, "CreateContainerConfigError");
  {
    std::lock_guard<std::mutex> l(m);
    EXPECT_GE(resolves, 5);
    present = true;
  }
  advance(seconds(2));
  h = health();
  EXPECT_EQ(h.container_healthy.status, "True")
      << h.container_healthy.reason << ": " << h.container_healthy.message;
  ASSERT_EQ(driver_.livePods().size(), 1u);
  std::string id = driver_.livePods()[0];
  EXPECT_EQ(driver_.pod(id).objects.env_refs.at("PW"), "s3cr3t");
  bool warned = false;
  for (const auto& e : events.byReason("Failed"))
    warned |= e.message.find("key password") != std::string::npos;
  EXPECT_TRUE(warned);
  // A change reaches the running pod's volume; no change, no update.
  advance(seconds(1));
  auto calls = driver_.calls();
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "updateVolumes " + id), 0);
  {
    std::lock_guard<std::mutex> l(m);
    file = "v2";
  }
  advance(seconds(1));
  calls = driver_.calls();
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "updateVolumes " + id), 1);
  EXPECT_EQ(driver_.pod(id).volumes.at("conf")[0].data, "v2");
  runner_.reset();  // before the locals its resolver and recorder use
}

TEST_F(PodRunnerTest, ProgressDeadlineExceededWithoutReadyPod) {
  driver_.setProbe([](const FakePodDriver::FakePod&, const runtime::ProbeSpec&) { return false; });
  runner_->ensure(makeRevision("r1"));
  runner_->ensure(makeRevision("r2", {{"serving.knative.dev/progress-deadline", "10s"}}));
  settle();
  advance(seconds(9));
  EXPECT_EQ(health("r2").resources_available.status, "Unknown");
  int changes = changeCount();
  advance(seconds(1));
  EXPECT_EQ(health("r2").resources_available.status, "False");
  EXPECT_EQ(health("r2").resources_available.reason, "ProgressDeadlineExceeded");
  EXPECT_GT(changeCount(), changes) << "deadline must fire the change callback";
  EXPECT_EQ(health("r1").resources_available.status, "Unknown");
  advance(seconds(50));
  EXPECT_EQ(health("r1").resources_available.reason, "ProgressDeadlineExceeded");
  EXPECT_NE(health("r1").resources_available.message.find("60s"), std::string::npos);
}

TEST_F(PodRunnerTest, ReadinessProbedAggressivelyUntilReady) {
  int calls = 0;
  driver_.setProbe(
      [&calls](const FakePodDriver::FakePod&, const runtime::ProbeSpec&) { return ++calls >= 4; });
  runner_->ensure(makeRevision("r1"));
  settle();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(runner_->readyPods("default/r1"), 0);
  advance(milliseconds(49));
  EXPECT_EQ(calls, 1);
  advance(milliseconds(1));
  EXPECT_EQ(calls, 2);
  advance(milliseconds(50));
  advance(milliseconds(50));
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(runner_->readyPods("default/r1"), 1);
}

TEST_F(PodRunnerTest, ScaleUpAndDownToDesired) {
  runner_->ensure(makeRevision("r1"));
  settle();
  runner_->setDesiredScale("default/r1", 3);
  settle();
  EXPECT_EQ(runner_->readyPods("default/r1"), 3);
  EXPECT_EQ(runner_->readyEndpoints("default/r1").size(), 3u);
  EXPECT_EQ(health().actual_replicas, 3);
  EXPECT_EQ(health().desired_replicas, 3);
  runner_->setDesiredScale("default/r1", 1);
  settle();
  EXPECT_EQ(runner_->readyPods("default/r1"), 1);
  EXPECT_TRUE(settleUntil([&] { return driver_.livePods().size() == 1u; }));
  EXPECT_EQ(driver_.livePods().size(), 1u);
  EXPECT_EQ(driver_.stopCount(), 2);
  runner_->setDesiredScale("default/r1", 0);
  EXPECT_TRUE(settleUntil([&] { return driver_.livePods().empty(); }));
  auto h = health();
  EXPECT_EQ(h.resources_available.status, "True");  // was ready once: stays Ready at zero
  EXPECT_EQ(h.container_healthy.status, "True");
  EXPECT_EQ(h.active.status, "False");
  EXPECT_EQ(h.active.reason, "NoTraffic");
  EXPECT_TRUE(runner_->readyEndpoints("default/r1").empty());
  EXPECT_GE(endpoint_changes_.size(), 4u);
}

TEST_F(PodRunnerTest, ScaleStatusFromTheScalerDrivesActive) {
  runner_->ensure(makeRevision("r1"));
  settle();
  scaler::ScaleOutcome out;
  out.active.status = scaler::ConditionStatus::kUnknown;
  out.active.reason = "Queued";
  out.active.message = "buffering";
  runner_->scaleStatusChanged("default/r1", out);
  EXPECT_EQ(health().active.status, "Unknown");
  EXPECT_EQ(health().active.reason, "Queued");
}

TEST_F(PodRunnerTest, CrashOfTheLastReadyPodIsReportedUntilARestartIsReady) {
  runner_->ensure(makeRevision("r1"));
  settle();
  std::string first = driver_.createdPods().back();
  advance(seconds(5));
  exitPod(first, 137, true, "allocating");
  auto h = health();
  EXPECT_EQ(h.resources_available.status, "True");
  EXPECT_EQ(h.container_healthy.status, "False");
  EXPECT_EQ(h.container_healthy.reason, "OOMKilled");
  EXPECT_EQ(h.actual_replicas, 0);
  advance(seconds(1));
  EXPECT_EQ(driver_.createCount(), 2);
  EXPECT_EQ(runner_->readyPods("default/r1"), 1);
  EXPECT_EQ(health().container_healthy.status, "True");
}

TEST_F(PodRunnerTest, CrashWhileOtherPodsServeKeepsTheRevisionHealthy) {
  runner_->ensure(makeRevision("r1", {{"autoscaling.knative.dev/initial-scale", "2"}}));
  settle();
  ASSERT_EQ(runner_->readyPods("default/r1"), 2);
  exitPod(driver_.createdPods().front(), 3, false, "exiting");
  auto h = health();
  EXPECT_EQ(h.container_healthy.status, "True");
  EXPECT_EQ(h.actual_replicas, 1);
  advance(seconds(1));
  EXPECT_EQ(runner_->readyPods("default/r1"), 2);
}

TEST_F(PodRunnerTest, LivenessFailureRestartsThePod) {
  json live = {{"httpGet", {{"path", "/healthz"}}}, {"periodSeconds", 1}, {"failureThreshold", 2}};
  bool alive = true;
  driver_.setProbe([&alive](const FakePodDriver::FakePod&, const runtime::ProbeSpec& s) {
    return s.path == "/healthz" ? alive : true;
  });
  runner_->ensure(makeRevision("r1", json::object(), {{"livenessProbe", live}}));
  settle();
  std::string first = driver_.createdPods().back();
  EXPECT_EQ(runner_->readyPods("default/r1"), 1);
  advance(seconds(1));
  advance(seconds(1));
  EXPECT_EQ(driver_.stopCount(), 0);
  alive = false;
  advance(seconds(1));
  EXPECT_EQ(driver_.stopCount(), 0);  // one failure of two
  advance(seconds(1));
  // stop() made the fake exit; wait until the runner saw it.
  EXPECT_TRUE(settleUntil([&] { return driver_.pod(first).destroyed; }));
  EXPECT_EQ(driver_.stopCount(), 1);
  EXPECT_TRUE(driver_.pod(first).destroyed);
  alive = true;
  advance(seconds(1));
  EXPECT_EQ(driver_.createCount(), 2);
  EXPECT_EQ(runner_->readyPods("default/r1"), 1);
}

TEST_F(PodRunnerTest, FailingReadinessProbeIsReportedAfterAGraceSecond) {
  bool ready = false;
  driver_.setProbe([&ready](const FakePodDriver::FakePod&, const runtime::ProbeSpec&) { return ready; });
  runner_->ensure(makeRevision("r1", json::object(),
                               {{"readinessProbe", {{"exec", {{"command", {"test", "-f", "/ready"}}}}}}}));
  settle();
  EXPECT_EQ(health().container_healthy.message, "");  // start-up: no message yet
  advance(milliseconds(600));
  advance(milliseconds(600));
  auto h = health();
  EXPECT_EQ(h.container_healthy.status, "Unknown");
  EXPECT_EQ(h.container_healthy.reason, "Deploying");
  EXPECT_EQ(h.container_healthy.message, "Readiness probe failed: connection refused");
  ready = true;
  advance(milliseconds(300));
  h = health();
  EXPECT_EQ(h.container_healthy.status, "True");
  EXPECT_EQ(h.container_healthy.message, "");
  EXPECT_EQ(runner_->readyPods("default/r1"), 1);
}

TEST_F(PodRunnerTest, RemoveStopsAndDestroysAllPods) {
  runner_->ensure(makeRevision("r1", {{"autoscaling.knative.dev/initial-scale", "2"}}));
  settle();
  ASSERT_EQ(driver_.livePods().size(), 2u);
  runner_->remove("default", "r1");
  EXPECT_TRUE(settleUntil([&] { return driver_.livePods().empty(); }));
  EXPECT_TRUE(driver_.livePods().empty());
  EXPECT_EQ(driver_.stopCount(), 2);
  settle();
  EXPECT_EQ(health().resources_available.reason, "Deploying");  // forgotten
  EXPECT_TRUE(runner_->readyEndpoints("default/r1").empty());
  runner_->remove("default", "r1");  // idempotent
}

TEST_F(PodRunnerTest, AdoptsRunningPodsOfLiveRevisionsAndDestroysTheRest) {
  auto pod = [](const std::string& id, const std::string& rev, bool running, uint32_t pid) {
    AdoptedPod a;
    a.handle.pod_id = id;
    a.handle.ns = "default";
    a.handle.revision_name = rev;
    a.handle.ip = "10.0.9." + std::to_string(pid);
    a.handle.pid = pid;
    a.handle.image_digest = "dev.local/app@sha256:old";
    a.running = running;
    return a;
  };
  driver_.setExisting(
      {pod("r1-aaaa", "r1", true, 11), pod("r1-dead", "r1", false, 12), pod("gone-bbbb", "gone", true, 13)});
  ASSERT_TRUE(runner_->adoptExisting({"default/r1"}).isOk());
  auto destroyed = driver_.destroyed();
  std::sort(destroyed.begin(), destroyed.end());
  EXPECT_EQ(destroyed, (std::vector<std::string>{"gone-bbbb", "r1-dead"}));
  EXPECT_EQ(driver_.lastCleanupLive(), (std::set<std::string>{"r1-aaaa"}));
  // Not probed before its Revision is known.
  settle();
  EXPECT_EQ(driver_.pod("r1-aaaa").probes, 0);
  runner_->ensure(makeRevision("r1"));
  settle();
  EXPECT_EQ(driver_.createCount(), 0) << "an adopted pod must not be replaced";
  EXPECT_EQ(runner_->readyPods("default/r1"), 1);
  auto pods = runner_->pods("default/r1");
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_EQ(pods[0].pid, 11u);
  EXPECT_TRUE(pods[0].adopted);
  EXPECT_EQ(health().image_digest, "dev.local/app@sha256:old");
  EXPECT_EQ(health().resources_available.status, "True");
  // Its wait() was re-issued: an exit is noticed.
  exitPod("r1-aaaa", 1, false, "bye");
  EXPECT_TRUE(driver_.pod("r1-aaaa").destroyed);
}

TEST_F(PodRunnerTest, AdoptionAfterEnsureStillKeepsThePod) {
  AdoptedPod a;
  a.handle = PodHandle{"r1-cccc", "default", "r1", "10.0.9.9", 8080, 9, "dev.local/app@sha256:old"};
  a.running = true;
  driver_.setExisting({a});
  runner_->ensure(makeRevision("r1"));  // the controller was first
  ASSERT_TRUE(runner_->adoptExisting({"default/r1"}).isOk());
  settle();
  EXPECT_EQ(driver_.createCount(), 0);
  EXPECT_EQ(runner_->readyPods("default/r1"), 1);
}

TEST_F(PodRunnerTest, ScaleSetBeforeEnsureIsApplied) {
  runner_->setDesiredScale("default/r1", 2);
  runner_->ensure(makeRevision("r1"));
  settle();
  EXPECT_EQ(driver_.createCount(), 2);
  EXPECT_EQ(health().desired_replicas, 2);
}

TEST_F(PodRunnerTest, StopLeavesPodsRunningForAdoption) {
  runner_->ensure(makeRevision("r1"));
  settle();
  EXPECT_EQ(runner_->waitersRunning(), 1);
  runner_->stop();
  EXPECT_EQ(driver_.livePods().size(), 1u);
  EXPECT_EQ(driver_.stopCount(), 0);
}

TEST_F(PodRunnerTest, ThreadedModeConvergesWithRealPool) {
  // The production wiring: own pool + control thread, simulated clock.
  PodRunnerOptions o = options();
  o.executor = nullptr;
  o.workers = 2;
  FakePodDriver driver;
  PodRunner runner(driver, time_, o);
  runner.start();
  runner.ensure(makeRevision("r1", {{"autoscaling.knative.dev/initial-scale", "3"}}));
  EXPECT_TRUE(eventually([&] { return runner.readyPods("default/r1") >= 3; }));
  EXPECT_EQ(runner.readyPods("default/r1"), 3);
  runner.shutdownAndDestroyAll();
  EXPECT_TRUE(driver.livePods().empty());
}

// ------------------------------------------------------------------ warm pool

class WarmPoolTest : public PodRunnerTest {
 protected:
  void SetUp() override {}
  void makeWarm(WarmPoolMode mode, int size = 1) {
    PodRunnerOptions o = options();
    o.warm_pool_size = size;
    o.warm_pool_mode = mode;
    o.warm_memory_interval = seconds(10);
    make(o);
    runner_->setOnWarmPoolChanged([this](const std::string& k) {
      std::lock_guard<std::mutex> l(mu_);
      warm_changes_.push_back(k);
    });
  }
  // Deploys r1 at zero (the scaler said 0 before ensure()).
  void deployAtZero(json annotations = json::object()) {
    runner_->setDesiredScale("default/r1", 0);
    runner_->ensure(makeRevision("r1", annotations));
    settle();
  }
  std::vector<PodInfo> warmPods(const std::string& rev = "default/r1") {
    std::vector<PodInfo> out;
    for (auto& p : runner_->pods(rev)) {
      if (p.warm) out.push_back(p);
    }
    return out;
  }
  std::vector<PodInfo> podsIn(PodState s, const std::string& rev = "default/r1") {
    std::vector<PodInfo> out;
    for (auto& p : runner_->pods(rev)) {
      if (p.state == s) out.push_back(p);
    }
    return out;
  }
  // Index of the first driver call equal to `call`, or -1.
  int callIndex(const std::string& call) {
    auto c = driver_.calls();
    auto it = std::find(c.begin(), c.end(), call);
    return it == c.end() ? -1 : static_cast<int>(it - c.begin());
  }
  // Runs the loop until every pod the runner no longer lists is destroyed.
  bool settleDestroyed(size_t live) {
    return settleUntil([&] { return driver_.livePods().size() == live; });
  }
  std::vector<std::string> warm_changes_;
};

TEST_F(WarmPoolTest, FrozenPoolFillsAtZeroAndIsNoEndpoint) {
  makeWarm(WarmPoolMode::kFrozen);
  deployAtZero();
  auto warm = podsIn(PodState::kWarm);
  ASSERT_EQ(warm.size(), 1u);
  EXPECT_TRUE(warm[0].warm);
  EXPECT_TRUE(warm[0].paused);
  auto fake = driver_.pod(warm[0].pod_id);
  EXPECT_TRUE(fake.started) << "frozen mode starts the process";
  EXPECT_GE(fake.probes, 1) << "frozen mode waits for readiness before it freezes";
  EXPECT_TRUE(fake.paused);
  EXPECT_LT(callIndex("start " + warm[0].pod_id), callIndex("pause " + warm[0].pod_id));
  // Not an endpoint, not a ready pod for the autoscaler.
  EXPECT_EQ(runner_->readyPods("default/r1"), 0);
  EXPECT_TRUE(runner_->readyEndpoints("default/r1").empty());
  EXPECT_EQ(health().actual_replicas, 0);
  // The memory it holds is counted.
  WarmPoolStatus st = runner_->warmPool("default/r1");
  EXPECT_EQ(st.mode, "frozen");
  EXPECT_EQ(st.target, 1);
  EXPECT_EQ(st.pods, 1);
  EXPECT_EQ(st.warming, 0);
  EXPECT_EQ(st.memory_bytes, 8 << 20);
  EXPECT_EQ(runner_->pods("default/r1")[0].memory_bytes, 8 << 20);
  EXPECT_FALSE(warm_changes_.empty());
  // A frozen pod is not probed while it sleeps, and memory is re-read.
  int probes = driver_.pod(warm[0].pod_id).probes;
  driver_.setMemory(1 << 20, 9 << 20);
  advance(seconds(11));
  EXPECT_EQ(driver_.pod(warm[0].pod_id).probes, probes);
  EXPECT_EQ(runner_->warmPool("default/r1").memory_bytes, 9 << 20);
  EXPECT_EQ(driver_.createCount(), 1) << "one pool pod, nothing else";
}

TEST_F(WarmPoolTest, CreatedPoolPodIsNotStarted) {
  makeWarm(WarmPoolMode::kCreated);
  deployAtZero();
  auto warm = podsIn(PodState::kWarm);
  ASSERT_EQ(warm.size(), 1u);
  EXPECT_FALSE(warm[0].paused);
  auto fake = driver_.pod(warm[0].pod_id);
  EXPECT_FALSE(fake.started) << "created mode keeps the task created, not started";
  EXPECT_EQ(fake.probes, 0);
  WarmPoolStatus st = runner_->warmPool("default/r1");
  EXPECT_EQ(st.mode, "created");
  EXPECT_EQ(st.pods, 1);
  EXPECT_EQ(st.memory_bytes, 1 << 20);
  EXPECT_EQ(runner_->readyPods("default/r1"), 0);
}

TEST_F(WarmPoolTest, ModeAnnotationOverridesTheConfig) {
  makeWarm(WarmPoolMode::kFrozen);
  deployAtZero({{kWarmPoolModeAnnotation, "created"}});
  auto warm = podsIn(PodState::kWarm);
  ASSERT_EQ(warm.size(), 1u);
  EXPECT_FALSE(driver_.pod(warm[0].pod_id).started);
  EXPECT_EQ(runner_->warmPool("default/r1").mode, "created");
  // A bad value: the configured mode.
  runner_->ensure(makeRevision("r1", {{kWarmPoolModeAnnotation, "lukewarm"}}));
  settle();
  EXPECT_EQ(runner_->warmPool("default/r1").mode, "frozen");
}

TEST_F(WarmPoolTest, WakeThawsTheFrozenPodFirstThenRefills) {
  makeWarm(WarmPoolMode::kFrozen);
  deployAtZero({{kImageReadyAtAnnotation, "2026-11-30T09:00:00.123456789Z"}});
  std::string warm_id = podsIn(PodState::kWarm).at(0).pod_id;
  int creates = driver_.createCount();
  size_t before = driver_.calls().size();
  runner_->setDesiredScale("default/r1", 1);
  settle();
  // Promoted: resumed, Ready, the endpoint; no fresh pod for the request.
  EXPECT_FALSE(driver_.pod(warm_id).paused);
  EXPECT_EQ(driver_.pod(warm_id).resumes, 1);
  auto eps = runner_->readyEndpoints("default/r1");
  ASSERT_EQ(eps.size(), 1u);
  EXPECT_EQ(eps[0].pod_id, warm_id);
  WakeReport wake;
  runner_->readyEndpoints("default/r1", &wake);
  EXPECT_EQ(wake.path, "frozen");
  ASSERT_TRUE(wake.image_ready_at.has_value());
  EXPECT_EQ(formatRfc3339(*wake.image_ready_at).substr(0, 19), "2026-11-30T09:00:00");
  // The promotion happened before any new pod was created; then the pool refilled.
  int resume_at = callIndex("resume " + warm_id);
  ASSERT_GE(resume_at, 0);
  auto calls = driver_.calls();
  for (int i = static_cast<int>(before); i < resume_at; ++i)
    EXPECT_NE(calls[i].rfind("create ", 0), 0u) << "at " << i << ": " << calls[i];
  EXPECT_EQ(driver_.createCount(), creates + 1) << "exactly one refill";
  auto warm = podsIn(PodState::kWarm);
  ASSERT_EQ(warm.size(), 1u);
  EXPECT_NE(warm[0].pod_id, warm_id);
  EXPECT_GT(callIndex("create " + warm[0].pod_id), resume_at);
  EXPECT_EQ(runner_->readyPods("default/r1"), 1);
  auto info = runner_->pods("default/r1");
  for (auto& p : info) {
    if (p.pod_id == warm_id) {
      EXPECT_EQ(p.origin, "frozen");
      EXPECT_FALSE(p.warm);
      EXPECT_EQ(p.state, PodState::kReady);
    }
  }
}

// knapd's router calls wakeNow() right after poking the scaler: the frozen
// pod is thawed and the endpoint reported before the call returns, with no
// run of the control loop in between.
TEST_F(WarmPoolTest, WakeNowThawsOnTheCallersThread) {
  makeWarm(WarmPoolMode::kFrozen);
  deployAtZero();
  std::string warm_id = podsIn(PodState::kWarm).at(0).pod_id;
  runner_->wakeNow("default/r1");  // no pod wanted yet: nothing to do
  EXPECT_TRUE(driver_.pod(warm_id).paused);
  EXPECT_EQ(driver_.pod(warm_id).resumes, 0);
  {
    std::lock_guard<std::mutex> l(mu_);
    endpoint_changes_.clear();
  }
  runner_->setDesiredScale("default/r1", 1);
  runner_->wakeNow("default/r1");
  EXPECT_FALSE(driver_.pod(warm_id).paused);
  EXPECT_EQ(driver_.pod(warm_id).resumes, 1);
  WakeReport wake;
  auto eps = runner_->readyEndpoints("default/r1", &wake);
  ASSERT_EQ(eps.size(), 1u);
  EXPECT_EQ(eps[0].pod_id, warm_id);
  EXPECT_EQ(wake.path, "frozen");
  {
    std::lock_guard<std::mutex> l(mu_);
    EXPECT_EQ(std::count(endpoint_changes_.begin(), endpoint_changes_.end(), "default/r1"), 1)
        << "the endpoints were reported from wakeNow()";
  }
  // Serving already: a second call (the next queued request) thaws nothing.
  runner_->wakeNow("default/r1");
  settle();
  EXPECT_EQ(driver_.pod(warm_id).resumes, 1);
  EXPECT_EQ(runner_->readyPods("default/r1"), 1);
  EXPECT_EQ(podsIn(PodState::kWarm).size(), 1u) << "the loop refilled the pool";
}

TEST_F(WarmPoolTest, WakeStartsTheCreatedPodAndReportsWarm) {
  makeWarm(WarmPoolMode::kCreated);
  deployAtZero();
  std::string warm_id = podsIn(PodState::kWarm).at(0).pod_id;
  runner_->setDesiredScale("default/r1", 1);
  settle();
  EXPECT_TRUE(driver_.pod(warm_id).started);
  EXPECT_GE(driver_.pod(warm_id).probes, 1) << "a started created pod is probed like any other";
  auto eps = runner_->readyEndpoints("default/r1");
  ASSERT_EQ(eps.size(), 1u);
  EXPECT_EQ(eps[0].pod_id, warm_id);
  WakeReport wake;
  runner_->readyEndpoints("default/r1", &wake);
  EXPECT_EQ(wake.path, "warm");
  EXPECT_FALSE(wake.image_ready_at.has_value());
  EXPECT_EQ(podsIn(PodState::kWarm).size(), 1u) << "refilled";
  EXPECT_EQ(driver_.createCount(), 2);
}

TEST_F(WarmPoolTest, WakeWithoutPoolIsCached) {
  makeWarm(WarmPoolMode::kFrozen, 0);
  deployAtZero();
  EXPECT_TRUE(runner_->pods("default/r1").empty());
  runner_->setDesiredScale("default/r1", 1);
  settle();
  WakeReport wake;
  ASSERT_EQ(runner_->readyEndpoints("default/r1", &wake).size(), 1u);
  EXPECT_EQ(wake.path, "cached");
  EXPECT_EQ(runner_->warmPool("default/r1").target, 0);
}

TEST_F(WarmPoolTest, AnnotationSizesThePoolAndBadValuesFallBack) {
  makeWarm(WarmPoolMode::kFrozen, 1);
  deployAtZero({{kWarmPoolAnnotation, "3"}});
  EXPECT_EQ(podsIn(PodState::kWarm).size(), 3u);
  EXPECT_EQ(runner_->warmPool("default/r1").memory_bytes, 3 * (8 << 20));
  // A bad value: the configured size (1); the extra two are stopped and destroyed.
  runner_->ensure(makeRevision("r1", {{kWarmPoolAnnotation, "-2"}}));
  ASSERT_TRUE(settleDestroyed(1));
  EXPECT_EQ(podsIn(PodState::kWarm).size(), 1u);
  runner_->ensure(makeRevision("r1", {{kWarmPoolAnnotation, "lots"}}));
  settle();
  EXPECT_EQ(runner_->warmPool("default/r1").target, 1);
  runner_->ensure(makeRevision("r1", {{kWarmPoolAnnotation, "0"}}));
  ASSERT_TRUE(settleDestroyed(0));
  EXPECT_TRUE(runner_->pods("default/r1").empty());
}

TEST_F(WarmPoolTest, PromotionOrderWarmFirstThenNewPods) {
  makeWarm(WarmPoolMode::kFrozen);
  deployAtZero({{kWarmPoolAnnotation, "2"}});
  auto warm = podsIn(PodState::kWarm);
  ASSERT_EQ(warm.size(), 2u);
  int creates = driver_.createCount();
  size_t before = driver_.calls().size();
  runner_->setDesiredScale("default/r1", 3);
  runner_->runOnce();  // one pass: two promotions, then one fresh create
  auto calls = driver_.calls();
  int r0 = callIndex("resume " + warm[0].pod_id), r1 = callIndex("resume " + warm[1].pod_id);
  ASSERT_GE(r0, static_cast<int>(before));
  ASSERT_GE(r1, static_cast<int>(before));
  EXPECT_EQ(driver_.createCount(), creates + 1);
  int fresh = -1;
  for (size_t i = before; i < calls.size() && fresh < 0; ++i) {
    if (calls[i].rfind("create ", 0) == 0) fresh = static_cast<int>(i);
  }
  EXPECT_GT(fresh, std::max(r0, r1)) << "the warm pods' work is issued before the new pod's";
  settle();
  EXPECT_EQ(runner_->readyPods("default/r1"), 3);
  std::map<std::string, int> origins;
  for (auto& p : runner_->pods("default/r1")) {
    if (!p.warm) ++origins[p.origin];
  }
  EXPECT_EQ(origins["frozen"], 2);
  EXPECT_EQ(origins["cached"], 1);
  // The pool refilled to 2 after the wake.
  EXPECT_EQ(podsIn(PodState::kWarm).size(), 2u);
}

TEST_F(WarmPoolTest, WarmPodBeforeWarmingPod) {
  makeWarm(WarmPoolMode::kFrozen);
  deployAtZero({{kWarmPoolAnnotation, "1"}});
  std::string frozen = podsIn(PodState::kWarm).at(0).pod_id;
  // A second pool pod that cannot pass readiness stays warming.
  driver_.setProbe(
      [&](const FakePodDriver::FakePod& p, const runtime::ProbeSpec&) { return p.handle.pod_id == frozen; });
  runner_->ensure(makeRevision("r1", {{kWarmPoolAnnotation, "2"}}));
  settle();
  auto warm = warmPods();
  ASSERT_EQ(warm.size(), 2u);
  std::string warming = warm[0].pod_id == frozen ? warm[1].pod_id : warm[0].pod_id;
  EXPECT_EQ(runner_->warmPool("default/r1").warming, 1);
  runner_->setDesiredScale("default/r1", 1);
  settle();
  EXPECT_EQ(driver_.pod(frozen).resumes, 1);
  auto eps = runner_->readyEndpoints("default/r1");
  ASSERT_EQ(eps.size(), 1u);
  EXPECT_EQ(eps[0].pod_id, frozen);
  for (auto& p : runner_->pods("default/r1")) {
    if (p.pod_id == warming) {
      EXPECT_TRUE(p.warm) << "the warming pod stays in the pool";
    }
  }
}

TEST_F(WarmPoolTest, PoolRespectsMaxScale) {
  makeWarm(WarmPoolMode::kFrozen);
  json a = {{kWarmPoolAnnotation, "3"}, {"autoscaling.knative.dev/max-scale", "2"}};
  deployAtZero(a);
  EXPECT_EQ(podsIn(PodState::kWarm).size(), 2u) << "serving + warm <= max-scale";
  EXPECT_EQ(runner_->warmPool("default/r1").target, 2);
  runner_->setDesiredScale("default/r1", 1);
  settle();
  EXPECT_EQ(runner_->readyPods("default/r1"), 1);
  EXPECT_EQ(podsIn(PodState::kWarm).size(), 1u);
  EXPECT_EQ(driver_.createCount(), 2) << "no refill beyond max-scale";
  runner_->setDesiredScale("default/r1", 2);
  settle();
  EXPECT_EQ(runner_->readyPods("default/r1"), 2);
  EXPECT_TRUE(warmPods().empty());
  EXPECT_EQ(driver_.createCount(), 2);
  EXPECT_EQ(runner_->warmPool("default/r1").target, 0);
  // Back to zero: the pool comes back to its cap.
  runner_->setDesiredScale("default/r1", 0);
  ASSERT_TRUE(settleUntil(
      [&] { return podsIn(PodState::kWarm).size() == 2 && runner_->readyPods("default/r1") == 0; }));
  // The legacy camelCase key is honoured too.
  runner_->ensure(
      makeRevision("r1", {{kWarmPoolAnnotation, "3"}, {"autoscaling.knative.dev/maxScale", "1"}}));
  ASSERT_TRUE(settleUntil([&] { return podsIn(PodState::kWarm).size() == 1; }));
}

TEST_F(WarmPoolTest, RemoveDestroysWarmPodsThawingFrozenOnes) {
  makeWarm(WarmPoolMode::kFrozen);
  deployAtZero({{kWarmPoolAnnotation, "2"}});
  auto warm = podsIn(PodState::kWarm);
  ASSERT_EQ(warm.size(), 2u);
  runner_->remove("default", "r1");
  ASSERT_TRUE(settleDestroyed(0));
  for (auto& w : warm) {
    EXPECT_TRUE(driver_.pod(w.pod_id).destroyed);
    int resume = callIndex("resume " + w.pod_id), stop = callIndex("stop " + w.pod_id);
    EXPECT_GE(resume, 0) << "a frozen pod is thawed so the signal lands";
    EXPECT_LT(resume, stop);
  }
  ASSERT_TRUE(settleUntil([&] { return runner_->pods("default/r1").empty(); }));
  EXPECT_EQ(runner_->warmPool("default/r1").pods, 0);
}

TEST_F(WarmPoolTest, MinScaleAboveZeroEmptiesThePool) {
  makeWarm(WarmPoolMode::kCreated);
  deployAtZero({{kWarmPoolAnnotation, "2"}});
  ASSERT_EQ(podsIn(PodState::kWarm).size(), 2u);
  runner_->setDesiredScale("default/r1", 1);
  runner_->ensure(
      makeRevision("r1", {{kWarmPoolAnnotation, "2"}, {"autoscaling.knative.dev/min-scale", "1"}}));
  ASSERT_TRUE(settleUntil([&] { return warmPods().empty() && driver_.livePods().size() == 1; }));
  EXPECT_EQ(runner_->warmPool("default/r1").target, 0);
  EXPECT_EQ(runner_->readyPods("default/r1"), 1);
  // Scale to zero disabled in config: no pool either.
  PodRunnerOptions o = options();
  o.warm_pool_size = 1;
  o.config.autoscaler.enable_scale_to_zero = false;
  PodRunner other(driver_, time_, o);
  other.setDesiredScale("default/r2", 0);
  other.ensure(makeRevision("r2"));
  for (int i = 0; i < 10; ++i) other.runOnce();
  EXPECT_TRUE(other.pods("default/r2").empty());
  other.shutdownAndDestroyAll();
}

TEST_F(WarmPoolTest, RestartDestroysWarmPodsAndRefills) {
  makeWarm(WarmPoolMode::kFrozen);
  auto pod = [](const std::string& id, bool running, bool paused, uint32_t pid) {
    AdoptedPod a;
    a.handle.pod_id = id;
    a.handle.ns = "default";
    a.handle.revision_name = "r1";
    a.handle.ip = "10.0.9." + std::to_string(pid);
    a.handle.pid = pid;
    a.running = running;
    a.paused = paused;
    return a;
  };
  // A serving pod, a frozen warm pod (PAUSED) and a created warm pod (CREATED).
  driver_.setExisting({pod("r1-serving", true, false, 11), pod("r1-frozen", true, true, 12),
                       pod("r1-created", false, false, 13)});
  ASSERT_TRUE(runner_->adoptExisting({"default/r1"}).isOk());
  auto destroyed = driver_.destroyed();
  std::sort(destroyed.begin(), destroyed.end());
  EXPECT_EQ(destroyed, (std::vector<std::string>{"r1-created", "r1-frozen"}));
  EXPECT_GE(callIndex("resume r1-frozen"), 0);
  EXPECT_LT(callIndex("resume r1-frozen"), callIndex("destroy r1-frozen"));
  EXPECT_EQ(driver_.lastCleanupLive(), (std::set<std::string>{"r1-serving"}));
  runner_->ensure(makeRevision("r1"));
  settle();
  EXPECT_EQ(runner_->readyPods("default/r1"), 1);
  EXPECT_EQ(podsIn(PodState::kWarm).size(), 1u) << "the pool refills after the restart";
  EXPECT_EQ(driver_.createCount(), 1);
  // The adopted pod serves; scale to zero and wake: the frozen pod is used.
  runner_->setDesiredScale("default/r1", 0);
  ASSERT_TRUE(settleUntil([&] { return runner_->readyPods("default/r1") == 0; }));
  runner_->setDesiredScale("default/r1", 1);
  settle();
  WakeReport wake;
  ASSERT_EQ(runner_->readyEndpoints("default/r1", &wake).size(), 1u);
  EXPECT_EQ(wake.path, "frozen");
}

TEST_F(WarmPoolTest, FailedPauseReplacesTheWarmPod) {
  makeWarm(WarmPoolMode::kFrozen);
  driver_.setPauseFails(true);
  deployAtZero();
  EXPECT_TRUE(podsIn(PodState::kWarm).empty());
  ASSERT_TRUE(settleUntil([&] { return driver_.destroyed().size() >= 1; }));
  driver_.setPauseFails(false);
  ASSERT_TRUE(settleUntil([&] { return podsIn(PodState::kWarm).size() == 1; }));
  EXPECT_EQ(runner_->readyPods("default/r1"), 0);
}

TEST_F(WarmPoolTest, CrashOfAFrozenCandidateIsReplaced) {
  makeWarm(WarmPoolMode::kCreated);
  deployAtZero();
  std::string id = podsIn(PodState::kWarm).at(0).pod_id;
  exitPod(id, 1, false, "boom");
  EXPECT_TRUE(driver_.pod(id).destroyed);
  advance(seconds(2));  // back-off
  EXPECT_EQ(podsIn(PodState::kWarm).size(), 1u);
  EXPECT_NE(podsIn(PodState::kWarm).at(0).pod_id, id);
}

// --- restart(): a rolling replacement, never fewer ready pods than desired ---

// Ready endpoints of r1, as pod ids.
std::set<std::string> endpointIds(PodRunner& runner) {
  std::set<std::string> out;
  for (const Endpoint& e : runner.readyEndpoints("default/r1")) out.insert(e.pod_id);
  return out;
}

TEST_F(PodRunnerTest, RestartReplacesPodsOneByOneKeepingTheDesiredReadyCount) {
  testing::FakeEventRecorder events;
  PodRunnerOptions o = options();
  o.events = &events;
  o.restart_drain = seconds(1);
  make(o);
  runner_->ensure(makeRevision("r1", {{"autoscaling.knative.dev/min-scale", "2"}}));
  settle();
  ASSERT_EQ(runner_->readyPods("default/r1"), 2);
  std::set<std::string> old = endpointIds(*runner_);
  ASSERT_EQ(old.size(), 2u);
  // New pods pass readiness only when the test says so.
  std::atomic<bool> new_ready{false};
  driver_.setProbe([&](const FakePodDriver::FakePod& p, const runtime::ProbeSpec&) {
    return old.count(p.handle.pod_id) > 0 || new_ready.load();
  });

  RestartResult r = runner_->restart("default/r1");
  EXPECT_EQ(std::set<std::string>(r.pods.begin(), r.pods.end()), old);
  EXPECT_EQ(r.warm_pods, 0);
  ASSERT_EQ(events.byReason("Restarting").size(), 1u);
  EXPECT_NE(events.byReason("Restarting")[0].message.find("Restarting 2 pods"), std::string::npos);
  advance(seconds(2));
  // Surge 1: one new pod, not ready yet; both old pods still serve.
  EXPECT_EQ(driver_.createCount(), 3);
  EXPECT_EQ(endpointIds(*runner_), old);
  EXPECT_EQ(driver_.stopCount(), 0);
  int replaced = 0;
  for (const PodInfo& p : runner_->pods("default/r1")) replaced += p.replaced ? 1 : 0;
  EXPECT_EQ(replaced, 2);

  // New pods become ready: the rest of the roll, checked at every step of
  // simulated time: never fewer than 2 ready endpoints, never more than 3 pods
  // besides those stopping.
  new_ready = true;
  bool done = false;
  for (int step = 0; step < 400 && !done; ++step) {
    time_.advance(milliseconds(100));
    runner_->runOnce();
    std::set<std::string> eps = endpointIds(*runner_);
    ASSERT_GE(eps.size(), 2u) << "step " << step;
    int running = 0;  // pods not on their way out (a drained pod may still be stopping)
    for (const PodInfo& p : runner_->pods("default/r1")) running += p.state != PodState::kStopping ? 1 : 0;
    ASSERT_LE(running, 3) << "step " << step;
    bool any_old = false;
    for (const std::string& id : driver_.livePods()) any_old = any_old || old.count(id) > 0;
    done = !any_old && eps.size() == 2u;
    // The fake's wait() threads deliver the stops' exits: every one issued so
    // far has reached the runner before time moves on.
    ASSERT_TRUE(eventually([&] { return runner_->exitsReceived() >= driver_.stopCount(); }))
        << "step " << step;
  }
  ASSERT_TRUE(done) << "the old pods were not all replaced";
  EXPECT_EQ(driver_.createCount(), 4);
  EXPECT_EQ(driver_.stopCount(), 2);
  for (const std::string& id : endpointIds(*runner_)) EXPECT_EQ(old.count(id), 0u) << id;
  EXPECT_EQ(health().actual_replicas, 2);
  EXPECT_EQ(health().container_healthy.status, "True");
}

TEST_F(PodRunnerTest, RestartedPodLeavesTheEndpointsBeforeItIsStopped) {
  PodRunnerOptions o = options();
  o.restart_drain = seconds(1);
  make(o);
  runner_->ensure(makeRevision("r1"));
  settle();
  std::string old = driver_.createdPods().at(0);
  runner_->restart("default/r1");
  settle();  // the new pod is created, started and ready at once (probes pass)
  ASSERT_EQ(driver_.createCount(), 2);
  std::set<std::string> eps = endpointIds(*runner_);
  ASSERT_EQ(eps.size(), 1u);
  EXPECT_EQ(eps.count(old), 0u) << "the replaced pod left the endpoints";
  EXPECT_EQ(driver_.stopCount(), 0) << "but is not stopped before the drain";
  advance(milliseconds(500));
  EXPECT_EQ(driver_.stopCount(), 0);
  advance(milliseconds(600));
  EXPECT_EQ(driver_.stopCount(), 1);
  EXPECT_TRUE(settleUntil([&] { return driver_.livePods().size() == 1u; }));
  EXPECT_NE(driver_.livePods().at(0), old);
}

TEST_F(PodRunnerTest, RestartKeepsTheOldPodWhileNewPodsFailToStart) {
  runner_->ensure(makeRevision("r1"));
  settle();
  std::string old = driver_.createdPods().at(0);
  driver_.setProbe(
      [&](const FakePodDriver::FakePod& p, const runtime::ProbeSpec&) { return p.handle.pod_id == old; });
  runner_->restart("default/r1");
  for (int i = 0; i < 30; ++i) advance(seconds(1));
  EXPECT_EQ(endpointIds(*runner_), std::set<std::string>{old});
  EXPECT_EQ(driver_.stopCount(), 0);
  EXPECT_EQ(driver_.createCount(), 2) << "one surge pod, not a pile of them";
}

TEST_F(PodRunnerTest, RestartOfARevisionAtZeroHasNothingToDo) {
  runner_->ensure(makeRevision("r1"));
  settle();
  runner_->setDesiredScale("default/r1", 0);
  ASSERT_TRUE(settleUntil([&] { return driver_.livePods().empty(); }));
  int creates = driver_.createCount();
  RestartResult r = runner_->restart("default/r1");
  EXPECT_TRUE(r.pods.empty());
  EXPECT_EQ(r.warm_pods, 0);
  settle();
  EXPECT_EQ(driver_.createCount(), creates);
  EXPECT_TRUE(runner_->restart("default/unknown").pods.empty());
}

TEST_F(PodRunnerTest, ScaleToZeroDuringARestartStopsTheReplacedPods) {
  runner_->ensure(makeRevision("r1"));
  settle();
  std::string old = driver_.createdPods().at(0);
  driver_.setProbe(
      [&](const FakePodDriver::FakePod& p, const runtime::ProbeSpec&) { return p.handle.pod_id == old; });
  runner_->restart("default/r1");
  settle();
  runner_->setDesiredScale("default/r1", 0);
  EXPECT_TRUE(settleUntil([&] {
    time_.advance(milliseconds(100));
    return driver_.livePods().empty();
  }));
}

TEST_F(WarmPoolTest, RestartAtZeroReplacesOnlyTheWarmPods) {
  makeWarm(WarmPoolMode::kFrozen);
  deployAtZero();
  auto warm = podsIn(PodState::kWarm);
  ASSERT_EQ(warm.size(), 1u);
  RestartResult r = runner_->restart("default/r1");
  EXPECT_TRUE(r.pods.empty()) << "no serving pod at zero";
  EXPECT_EQ(r.warm_pods, 1);
  EXPECT_TRUE(settleUntil([&] {
    auto now = podsIn(PodState::kWarm);
    return now.size() == 1u && now[0].pod_id != warm[0].pod_id;
  })) << "the pool refills with a new pod";
}

}  // namespace
}  // namespace knap::runner
