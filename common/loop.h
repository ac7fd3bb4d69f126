// Loop and WorkerPool: the one model of a background loop in knap.
//
// A Loop is one thread that runs a step, then waits on the TimeSource until
// the step's next deadline, a wake() or stop(); the PodRunner, PrePuller and
// image GC control loops and the scaler's once-a-second tick are Loops, and
// on a SimulatedTimeSource they run when the test advances the clock (no
// real sleeps). A wake() made while the step runs is not lost: the loop runs
// the step again at once. A wake-up is never taken for the deadline's expiry
// (periodic loops tick only when their time has come).
//
// A WorkerPool runs posted blocking work on N threads (or on an executor the
// tests pass, which queues it for them to run).
//
// Thread safety: every method may be called from any thread, except that
// start()/stop() must not be called from the loop's own step.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"

namespace knap {

class Loop {
 public:
  // A step returns when it wants to run next (MonoTime::max(): only on wake()).
  using Step = std::function<MonoTime()>;

  // `name` names the loop in the log when a step throws (common/guard.h).
  explicit Loop(const TimeSource& time, std::string name = "loop") : time_(time), name_(std::move(name)) {}
  ~Loop() { stop(); }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // Starts the thread: step() runs at once, then whenever it is due or woken.
  // Idempotent while running; a stopped Loop may be started again.
  void start(Step step);
  // Runs tick() every `period` on the TimeSource, the first one `period`
  // after start(); a tick that falls behind is skipped, not made up (no
  // burst), and wake() does not tick early.
  void startPeriodic(Duration period, std::function<void()> tick);
  // The step runs again as soon as the current one (if any) returns.
  void wake();
  // Ends the thread after the current step; joins it. Idempotent.
  void stop();
  bool running() const;

  // For a thread that drives the step itself (no start()): waits until
  // wake() or `deadline`; true when woken. Consumes the wake-up.
  bool waitForWake(MonoTime deadline);

 private:
  void run(Step step);

  const TimeSource& time_;
  const std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

class WorkerPool {
 public:
  // Runs a job somewhere else (tests: queue it and run it themselves).
  using Executor = std::function<void(std::function<void()>)>;
  // What stop() does with jobs posted but not started.
  enum class OnStop { kDrain, kDrop };

  // `executor` non-null: post() hands every job to it and start() starts no thread.
  // `name` names the pool in the log when a job throws (common/guard.h).
  explicit WorkerPool(Executor executor = nullptr, OnStop on_stop = OnStop::kDrain,
                      std::string name = "worker pool")
      : executor_(std::move(executor)), on_stop_(on_stop), name_(std::move(name)) {}
  ~WorkerPool() { stop(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Starts `workers` threads (at least one). Idempotent while running.
  void start(int workers);
  // Queues `job` for a worker; with no thread running (before start(), after
  // stop()) kDrain pools run it on the caller, kDrop pools queue it for start().
  void post(std::function<void()> job);
  // Joins the workers once they finish their current job (kDrain: and every
  // queued one; kDrop: queued jobs are discarded). Idempotent.
  void stop();

 private:
  Executor executor_;
  OnStop on_stop_;
  const std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace knap
