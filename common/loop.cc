#include "common/loop.h"

#include <algorithm>
#include <memory>

#include "common/guard.h"

namespace knap {

// ------------------------------------------------------------------ Loop

void Loop::start(Step step) {
  std::lock_guard<std::mutex> l(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  // The exception policy (common/guard.h): a step that throws is logged and
  // the loop goes on after a pause; knapd stays up.
  thread_ = std::thread([this, step = std::move(step)] { runRestarting(name_, [&] { run(step); }); });
}

void Loop::startPeriodic(Duration period, std::function<void()> tick) {
  auto next = std::make_shared<MonoTime>(time_.monotonic() + period);
  start([this, period, next, tick = std::move(tick)] {
    const MonoTime now = time_.monotonic();
    if (now >= *next) {
      tick();
      *next += period;
      if (*next <= now) *next = now + period;  // fell behind: skip, do not burst
    }
    return *next;
  });
}

void Loop::run(Step step) {
  MonoTime next = MonoTime::max();
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      woken_ = false;  // this step sees whatever the wake-up was for
    }
    next = step();
    std::unique_lock<std::mutex> l(mu_);
    time_.waitUntil(l, cv_, next, [this] { return woken_ || stopping_; });
  }
}

void Loop::wake() {
  {
    std::lock_guard<std::mutex> l(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

bool Loop::waitForWake(MonoTime deadline) {
  std::unique_lock<std::mutex> l(mu_);
  bool woken = time_.waitUntil(l, cv_, deadline, [this] { return woken_ || stopping_; });
  woken_ = false;
  return woken;
}

void Loop::stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    t = std::move(thread_);
  }
  cv_.notify_all();
  if (t.joinable()) t.join();
}

bool Loop::running() const {
  std::lock_guard<std::mutex> l(mu_);
  return thread_.joinable() && !stopping_;
}

// ------------------------------------------------------------ WorkerPool

void WorkerPool::start(int workers) {
  if (executor_) return;
  std::lock_guard<std::mutex> l(mu_);
  if (!threads_.empty()) return;
  stopping_ = false;
  for (int i = 0; i < std::max(1, workers); ++i) {
    threads_.emplace_back([this] {
      for (;;) {
        std::function<void()> job;
        {
          std::unique_lock<std::mutex> ql(mu_);
          cv_.wait(ql, [this] { return stopping_ || !queue_.empty(); });
          if (stopping_ && (queue_.empty() || on_stop_ == OnStop::kDrop)) return;
          job = std::move(queue_.front());
          queue_.pop_front();
        }
        runGuarded(name_, job);  // a throwing job fails alone
      }
    });
  }
}

void WorkerPool::post(std::function<void()> job) {
  if (executor_) {
    executor_(std::move(job));
    return;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if ((!threads_.empty() && !stopping_) || on_stop_ == OnStop::kDrop) {
      queue_.push_back(std::move(job));
      cv_.notify_one();
      return;
    }
  }
  job();  // kDrain with no worker running: do it here
}

void WorkerPool::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    threads = std::move(threads_);
    threads_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads) t.join();
  std::lock_guard<std::mutex> l(mu_);
  if (on_stop_ == OnStop::kDrop) queue_.clear();
}

}  // namespace knap
