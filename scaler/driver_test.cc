#include "scaler/driver.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <thread>

#include "tests/fakes/fake_event_recorder.h"

namespace knap::scaler {
namespace {

constexpr const char* kRev = "default/hello-00001";

// The router's side: real RequestStats per revision, fed at simulated times.
class FakeRouter : public MetricsSource {
 public:
  explicit FakeRouter(const TimeSource& time) : time_(time) {}
  void requestIn(const std::string& rev) { stats(rev).requestIn(time_.monotonic()); }
  void requestOut(const std::string& rev) { stats(rev).requestOut(time_.monotonic()); }
  RequestStatsReport collect(const std::string& rev, MonoTime now) override {
    ++collects;
    return stats(rev).report(now);
  }
  std::atomic<int> collects{0};

 private:
  RequestStats& stats(const std::string& rev) {
    auto it = stats_.find(rev);
    if (it == stats_.end()) it = stats_.emplace(rev, std::make_unique<RequestStats>(time_.monotonic())).first;
    return *it->second;
  }
  const TimeSource& time_;
  std::map<std::string, std::unique_ptr<RequestStats>> stats_;
};

// The runtime's side. With `instant`, pods become ready as soon as asked for.
class FakeRuntime : public PodCounter, public ScaleTarget {
 public:
  int readyPods(const std::string& rev) override { return ready[rev]; }
  void setDesiredScale(const std::string& rev, int pods) override {
    desired[rev] = pods;
    calls.push_back({rev, pods});
    if (instant) ready[rev] = pods;
  }
  void scaleStatusChanged(const std::string& rev, const ScaleOutcome& outcome) override {
    statuses.push_back(outcome);
  }
  bool instant = true;
  std::map<std::string, int> ready;
  std::map<std::string, int> desired;
  std::vector<std::pair<std::string, int>> calls;
  std::vector<ScaleOutcome> statuses;
};

class DriverTest : public ::testing::Test {
 protected:
  DriverTest() : router_(clock_), driver_(router_, runtime_, runtime_, clock_) {}

  // Advances the clock one second at a time, ticking like the ScalerTicker.
  void run(int seconds) {
    for (int i = 0; i < seconds; ++i) {
      clock_.advance(1s);
      driver_.tick();
    }
  }
  // Seconds until the desired scale of kRev becomes `pods` (or -1 after `limit`).
  int secondsUntil(int pods, int limit) {
    for (int i = 1; i <= limit; ++i) {
      run(1);
      if (runtime_.desired[kRev] == pods) return i;
    }
    return -1;
  }

  SimulatedTimeSource clock_;
  FakeRouter router_;
  FakeRuntime runtime_;
  ScalerDriver driver_;
};

TEST_F(DriverTest, NewRevisionAsksForInitialScaleAtOnce) {
  ScalerSettings s;
  s.initial_scale = 2;
  ASSERT_TRUE(driver_.addRevision(kRev, s).isOk());
  ASSERT_EQ(runtime_.calls.size(), 1u);
  EXPECT_EQ(runtime_.calls[0].second, 2);
  auto st = driver_.status(kRev);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->outcome.active.isActivating());
}

TEST_F(DriverTest, RefusesInvalidSettings) {
  ScalerSettings s;
  s.target_value = 0;
  EXPECT_EQ(driver_.addRevision(kRev, s).code(), Code::kInvalidArgument);
  EXPECT_FALSE(driver_.status(kRev).has_value());
  EXPECT_TRUE(runtime_.calls.empty());
}

TEST_F(DriverTest, IdleRevisionScalesToZeroAfterAboutAStableWindow) {
  ASSERT_TRUE(driver_.addRevision(kRev, ScalerSettings{}).isOk());
  run(2);  // pod ready, first decision: Active
  ASSERT_TRUE(driver_.status(kRev)->outcome.active.isActive());
  int secs = secondsUntil(0, 200);
  // Active for a whole stable window (60 s) first; with default TBC the
  // revision was always "proxied", so zero follows within a decision or two.
  EXPECT_GE(secs, 58);
  EXPECT_LE(secs, 64);
  EXPECT_EQ(driver_.status(kRev)->outcome.active.reason, kReasonNoTraffic);
}

TEST(DriverEventsTest, ScaleChangesAreEventsOnTheRevision) {
  SimulatedTimeSource clock;
  FakeRouter router(clock);
  FakeRuntime runtime;
  testing::FakeEventRecorder events;
  ScalerDriver driver(router, runtime, runtime, clock, events);
  ASSERT_TRUE(driver.addRevision(kRev, ScalerSettings{}).isOk());
  for (int i = 0; i < 90 && runtime.desired[kRev] != 0; ++i) {
    clock.advance(1s);
    driver.tick();
  }
  ASSERT_EQ(runtime.desired[kRev], 0);
  auto all = events.all();
  ASSERT_FALSE(all.empty());
  const auto& last = all.back();
  EXPECT_EQ(last.object.kind, "Revision");
  EXPECT_EQ(last.object.ns + "/" + last.object.name, kRev);
  EXPECT_EQ(last.type, EventType::kNormal);
  EXPECT_EQ(last.reason, "ScaledToZero");
  EXPECT_NE(last.message.find("Scaled from 1 to 0 pods"), std::string::npos) << last.message;
  EXPECT_EQ(last.component, "knap-autoscaler");
}

TEST_F(DriverTest, WithoutBurstCapacityIdleRevisionAlsoWaitsTheGracePeriod) {
  ScalerSettings s;
  s.target_burst_capacity = 0;  // Knative would serve directly: the grace period applies
  ASSERT_TRUE(driver_.addRevision(kRev, s).isOk());
  run(2);
  int secs = secondsUntil(0, 200);
  // 60 s stable window + 30 s scale-to-zero grace period.
  EXPECT_GE(secs, 88);
  EXPECT_LE(secs, 92);
}

TEST_F(DriverTest, LoadThenIdleThenColdStart) {
  ASSERT_TRUE(driver_.addRevision(kRev, ScalerSettings{}).isOk());
  run(2);
  // 200 concurrent requests for 30 s: with target 70 => ceil(200 / 70) = 3 pods.
  for (int i = 0; i < 200; ++i) router_.requestIn(kRev);
  run(30);
  EXPECT_EQ(runtime_.desired[kRev], 3);
  for (int i = 0; i < 200; ++i) router_.requestOut(kRev);
  // The load leaves the stable window over 60 s, then the idle revision goes to zero.
  int secs = secondsUntil(0, 400);
  EXPECT_GT(secs, 60) << secs;
  EXPECT_LT(secs, 200);
  EXPECT_EQ(runtime_.ready[kRev], 0);
  // Cold start: one request at zero.
  router_.requestIn(kRev);
  driver_.poke(kRev);
  EXPECT_EQ(runtime_.desired[kRev], 1);
}

TEST_F(DriverTest, PokeFromZeroScalesUpImmediately) {
  ASSERT_TRUE(driver_.addRevision(kRev, ScalerSettings{}).isOk());
  ASSERT_GT(secondsUntil(0, 200), 0);
  runtime_.instant = false;
  size_t calls_before = runtime_.calls.size();
  clock_.advance(300ms);
  router_.requestIn(kRev);
  driver_.poke(kRev);  // no tick in between
  ASSERT_EQ(runtime_.calls.size(), calls_before + 1);
  EXPECT_GE(runtime_.calls.back().second, 1);
  auto st = driver_.status(kRev);
  EXPECT_EQ(st->outcome.active.status, ConditionStatus::kUnknown);
  EXPECT_EQ(st->outcome.active.reason, kReasonQueued);
  // A second poke while the pod starts asks for nothing more.
  driver_.poke(kRev);
  EXPECT_EQ(runtime_.calls.size(), calls_before + 1);
  // The pod becomes ready: the runtime says so and the revision is Active at once.
  runtime_.ready[kRev] = 1;
  driver_.podsChanged(kRev);
  EXPECT_TRUE(driver_.status(kRev)->outcome.active.isActive());
}

TEST_F(DriverTest, PokeOfFirstRequestIsNotCountedTwice) {
  ScalerSettings s;
  s.initial_scale = 0;
  s.metric = ScalingMetric::kRps;
  ASSERT_TRUE(driver_.addRevision(kRev, s).isOk());
  runtime_.instant = false;
  router_.requestIn(kRev);
  driver_.poke(kRev);
  EXPECT_DOUBLE_EQ(driver_.status(kRev)->metrics.stable_average, 1);  // the poke's report
  EXPECT_EQ(runtime_.desired[kRev], 1);
  run(2);  // the collects see the same request again; it must not count twice
  // Buckets t0={1 req}, t1=nothing recorded (adjusted to zero), t2={0 req}.
  EXPECT_NEAR(driver_.status(kRev)->metrics.stable_average, 1.0 / 3, 1e-6);
}

TEST_F(DriverTest, LoadScalesUpThroughPanic) {
  ScalerSettings s;
  s.target_value = 7;  // containerConcurrency 10 at 70 % (api/revision_settings_test.cc)
  s.total_value = 10;
  ASSERT_TRUE(driver_.addRevision(kRev, s).isOk());
  run(2);
  for (int i = 0; i < 50; ++i) router_.requestIn(kRev);  // 50 concurrent from now on
  run(2);
  auto st = driver_.status(kRev);
  EXPECT_TRUE(st->decision.panicking);
  // Decision at t=3: panic buckets t=1,2,3 hold 0, 0, 50 => ceil(16.67 / 7) = 3 pods,
  // 3 over 1 ready pod is past the 200% threshold.
  EXPECT_EQ(runtime_.desired[kRev], 3);
  run(10);
  // Panic window full of 50: ceil(50 / 7) = 8.
  EXPECT_EQ(runtime_.desired[kRev], 8);
  EXPECT_DOUBLE_EQ(driver_.status(kRev)->metrics.panic_average, 50);
}

TEST_F(DriverTest, DecidesEveryTwoSecondsAndCollectsEverySecond) {
  ASSERT_TRUE(driver_.addRevision(kRev, ScalerSettings{}).isOk());
  EXPECT_FALSE(driver_.status(kRev)->decided_at.has_value());
  run(1);
  const MonoTime t1 = clock_.monotonic();
  EXPECT_EQ(router_.collects, 1);
  EXPECT_EQ(driver_.status(kRev)->decided_at, t1);
  run(1);
  EXPECT_EQ(router_.collects, 2);
  EXPECT_EQ(driver_.status(kRev)->decided_at, t1);  // only a second old: no decision
  run(1);
  EXPECT_EQ(router_.collects, 3);
  EXPECT_EQ(driver_.status(kRev)->decided_at, t1 + 2s);
  run(2);
  EXPECT_EQ(driver_.status(kRev)->decided_at, t1 + 4s);
}

TEST_F(DriverTest, RemovedRevisionIsForgotten) {
  ASSERT_TRUE(driver_.addRevision(kRev, ScalerSettings{}).isOk());
  driver_.removeRevision(kRev);
  size_t calls = runtime_.calls.size();
  run(100);
  driver_.poke(kRev);
  EXPECT_EQ(runtime_.calls.size(), calls);
  EXPECT_EQ(router_.collects, 0);
  EXPECT_FALSE(driver_.status(kRev).has_value());
}

TEST_F(DriverTest, SettingsUpdateKeepsState) {
  ScalerSettings s;
  ASSERT_TRUE(driver_.addRevision(kRev, s).isOk());
  run(4);
  s.min_scale = 3;
  ASSERT_TRUE(driver_.addRevision(kRev, s).isOk());
  run(2);
  EXPECT_EQ(runtime_.desired[kRev], 3);
  EXPECT_EQ(driver_.status(kRev)->settings.min_scale, 3);
}

TEST_F(DriverTest, StatusChangesAreReported) {
  ASSERT_TRUE(driver_.addRevision(kRev, ScalerSettings{}).isOk());
  run(2);
  ASSERT_FALSE(runtime_.statuses.empty());
  EXPECT_TRUE(runtime_.statuses.back().active.isActive());
  EXPECT_TRUE(runtime_.statuses.back().scale_target_initialized);
}

TEST(ScalerTickerTest, TicksOnceASecondUntilStopped) {
  SimulatedTimeSource clock;
  FakeRouter router(clock);
  FakeRuntime runtime;
  ScalerDriver driver(router, runtime, runtime, clock);
  ASSERT_TRUE(driver.addRevision(kRev, ScalerSettings{}).isOk());
  MonoTime start = clock.monotonic();
  ScalerTicker ticker(driver, clock);
  ticker.start();
  // Steps simulated time a second at a time once the ticker waits on it; the
  // polls are bounded real waits for the ticker thread, not timing checks.
  auto waitFor = [](const std::function<bool()>& cond) {
    for (int i = 0; i < 10000 && !cond(); ++i) std::this_thread::sleep_for(1ms);
    return cond();
  };
  int slept = 0;
  for (; slept < 20; ++slept) {
    ASSERT_TRUE(waitFor([&] { return clock.waiters() == 1; }));
    clock.advance(1s);
    ASSERT_TRUE(waitFor([&] { return router.collects >= slept + 1; })) << slept;
  }
  ASSERT_TRUE(waitFor([&] { return clock.waiters() == 1; }));
  ticker.stop();
  // One collect per simulated second.
  auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(clock.monotonic() - start).count();
  EXPECT_GE(router.collects, slept - 1);
  EXPECT_LE(router.collects, slept);
  EXPECT_EQ(elapsed, slept);
  // Stopped: no more ticks.
  int collects = router.collects;
  clock.advance(10s);
  EXPECT_EQ(router.collects, collects);
}

}  // namespace
}  // namespace knap::scaler

namespace knap::scaler {
namespace {

// Router threads poke and query status while the ticker thread ticks; run
// under -fsanitize=thread to check the locking.
TEST(ScalerDriverConcurrencyTest, PokeStatusAndTickFromSeveralThreads) {
  SimulatedTimeSource clock;
  FakeRouter router(clock);
  FakeRuntime runtime;
  runtime.instant = false;
  ScalerDriver driver(router, runtime, runtime, clock);
  ScalerSettings s;
  s.initial_scale = 0;
  ASSERT_TRUE(driver.addRevision(kRev, s).isOk());
  driver.poke(kRev);
  ASSERT_EQ(runtime.desired[kRev], 1);
  std::atomic<bool> done{false};
  std::thread ticker([&] {
    for (int i = 0; i < 500; ++i) {
      clock.advance(1s);
      driver.tick();
    }
    done = true;
  });
  std::thread poker([&] {
    while (!done) {
      driver.poke(kRev);
      (void)driver.status(kRev);
    }
  });
  ticker.join();
  poker.join();
  // No pod ever became ready, but 500 s is within the 630-s activation timeout.
  auto st = driver.status(kRev);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->decision.valid);
  EXPECT_EQ(st->outcome.active.reason, kReasonQueued);
}

}  // namespace
}  // namespace knap::scaler
