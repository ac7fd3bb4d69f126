// TimeSource waits and common/loop.h on a SimulatedTimeSource: waiters wake
// when advance() reaches their deadline, never on their own, and a wake-up
// is never reported as a deadline. Polls are bounded (generous) real waits
// for another thread to get there, not timing assertions.
#include "common/loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>

namespace knap {
namespace {

using namespace std::chrono_literals;

// Polls `cond` for up to 10 s of real time.
bool eventually(const std::function<bool()>& cond) {
  for (int i = 0; i < 10000; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return cond();
}

TEST(SimulatedWait, WakesOnlyWhenAdvancePassesTheDeadline) {
  SimulatedTimeSource clock;
  std::mutex mu;
  std::condition_variable cv;
  const MonoTime deadline = clock.monotonic() + 5s;
  auto result = std::async(std::launch::async, [&] {
    std::unique_lock<std::mutex> l(mu);
    return clock.waitUntil(l, cv, deadline, [] { return false; });
  });
  ASSERT_TRUE(eventually([&] { return clock.waiters() == 1; }));
  clock.advance(4s);
  EXPECT_EQ(result.wait_for(50ms), std::future_status::timeout) << "woke before its deadline";
  clock.advance(1s);
  ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
  EXPECT_FALSE(result.get()) << "the deadline is not a wake-up";
  EXPECT_EQ(clock.waiters(), 0);
}

TEST(SimulatedWait, AWakeUpIsNotADeadline) {
  SimulatedTimeSource clock;
  std::mutex mu;
  std::condition_variable cv;
  bool woken = false;
  auto result = std::async(std::launch::async, [&] {
    std::unique_lock<std::mutex> l(mu);
    return clock.waitUntil(l, cv, clock.monotonic() + 1h, [&] { return woken; });
  });
  ASSERT_TRUE(eventually([&] { return clock.waiters() == 1; }));
  {
    std::lock_guard<std::mutex> l(mu);
    woken = true;
  }
  cv.notify_all();
  ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(result.get());
  // Woken before the call, even with the deadline already past: still a wake-up.
  std::unique_lock<std::mutex> l(mu);
  EXPECT_TRUE(clock.waitUntil(l, cv, clock.monotonic() - 1s, [&] { return woken; }));
}

TEST(SimulatedWait, SleepUntilReturnsOnAdvance) {
  SimulatedTimeSource clock;
  auto slept = std::async(std::launch::async, [&] { clock.sleepFor(3s); });
  ASSERT_TRUE(eventually([&] { return clock.waiters() == 1; }));
  clock.advance(3s);
  EXPECT_EQ(slept.wait_for(10s), std::future_status::ready);
}

TEST(RealWait, WakeUpAndDeadline) {
  const TimeSource& clock = RealTimeSource::instance();
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock<std::mutex> l(mu);
  EXPECT_FALSE(clock.waitUntil(l, cv, clock.monotonic() + 1ms, [] { return false; }));
  EXPECT_TRUE(clock.waitUntil(l, cv, MonoTime::max(), [] { return true; }));
  const MonoTime before = clock.monotonic();
  clock.sleepFor(2ms);
  EXPECT_GE(clock.monotonic() - before, 2ms);
}

TEST(LoopTest, StepRunsAtStartWhenDueAndWhenWoken) {
  SimulatedTimeSource clock;
  std::atomic<int> steps{0};
  Loop loop(clock);
  loop.start([&] {
    ++steps;
    return clock.monotonic() + 10s;
  });
  ASSERT_TRUE(eventually([&] { return steps == 1 && clock.waiters() == 1; }));
  clock.advance(9s);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(steps, 1) << "ran before it was due";
  clock.advance(1s);
  ASSERT_TRUE(eventually([&] { return steps == 2 && clock.waiters() == 1; }));
  loop.wake();
  ASSERT_TRUE(eventually([&] { return steps == 3; }));
  loop.stop();
  EXPECT_FALSE(loop.running());
  clock.advance(1h);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(steps, 3) << "stopped";
}

TEST(LoopTest, AWakeDuringTheStepIsNotLost) {
  SimulatedTimeSource clock;
  std::atomic<int> steps{0};
  Loop loop(clock);
  loop.start([&] {
    if (++steps == 1) loop.wake();  // arrives while the step runs
    return MonoTime::max();
  });
  ASSERT_TRUE(eventually([&] { return steps == 2; }));
}

TEST(LoopTest, PeriodicTicksOncePerPeriodAndNotOnWake) {
  SimulatedTimeSource clock;
  std::atomic<int> ticks{0};
  Loop loop(clock);
  loop.startPeriodic(1s, [&] { ++ticks; });
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(eventually([&] { return clock.waiters() == 1; }));
    clock.advance(1s);
    ASSERT_TRUE(eventually([&] { return ticks == i; })) << i;
  }
  loop.wake();
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(ticks, 5) << "a wake-up is not a tick";
  // Behind by ten periods: one tick, then one per period again.
  ASSERT_TRUE(eventually([&] { return clock.waiters() == 1; }));
  clock.advance(10s);
  ASSERT_TRUE(eventually([&] { return ticks == 6; }));
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(ticks, 6) << "no burst after falling behind";
}

TEST(WorkerPoolTest, DrainRunsQueuedJobsDropDiscardsThem) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(nullptr, WorkerPool::OnStop::kDrain);
    pool.post([&] { ++ran; });  // no worker yet: runs here
    EXPECT_EQ(ran, 1);
    pool.start(2);
    for (int i = 0; i < 10; ++i) pool.post([&] { ++ran; });
    pool.stop();
    EXPECT_EQ(ran, 11);
  }
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  WorkerPool drop(nullptr, WorkerPool::OnStop::kDrop);
  drop.start(1);
  std::atomic<int> started{0};
  drop.post([&] {
    ++started;
    gate.wait();
  });
  ASSERT_TRUE(eventually([&] { return started == 1; }));
  for (int i = 0; i < 5; ++i) drop.post([&] { ++ran; });
  auto stopped = std::async(std::launch::async, [&] { drop.stop(); });
  std::this_thread::sleep_for(20ms);
  release.set_value();
  stopped.get();
  EXPECT_EQ(ran, 11) << "queued jobs of a kDrop pool do not run after stop()";
}

TEST(WorkerPoolTest, ExecutorGetsEveryJob) {
  std::vector<std::function<void()>> queued;
  WorkerPool pool([&](std::function<void()> job) { queued.push_back(std::move(job)); });
  pool.start(4);
  int ran = 0;
  pool.post([&] { ++ran; });
  ASSERT_EQ(queued.size(), 1u);
  EXPECT_EQ(ran, 0);
  queued[0]();
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace knap
