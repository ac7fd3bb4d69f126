// Waiting in tests for something to happen, never for a fixed time.
//
// eventually(): polls a condition that the code under test makes true (an
// exit delivered, a request queued, a connection closed) until it holds or a
// generous real-time limit passes, so a loaded machine only makes the test
// slower, never wrong. Latch: a test-controlled gate for test backends and
// fake pods: a handler that must "not answer yet" waits on it (bounded, so a
// failed test never hangs) instead of sleeping longer than the timeout it
// provokes, and a handler can tell the test that it has been reached.
//
// Header-only, test code only. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace knap::testing {

// True as soon as `cond()` holds; false if it still does not after `limit`
// of real time. `cond` is called from this thread only, about every `every`.
inline bool eventually(const std::function<bool()>& cond,
                       std::chrono::milliseconds limit = std::chrono::seconds(30),
                       std::chrono::milliseconds every = std::chrono::milliseconds(1)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(every);
  }
  return cond();
}

// A one-way gate. Copies share one state, so a handler may capture a copy by
// value and outlive the test's own. open() is idempotent; an OpenOnExit
// opens it when its scope ends (declare it after the backend whose handler
// waits, so the handler is released before the backend joins it).
class Latch {
 public:
  Latch() : s_(std::make_shared<State>()) {}

  void open() const {
    {
      std::lock_guard<std::mutex> l(s_->mu);
      s_->open = true;
    }
    s_->cv.notify_all();
  }
  bool isOpen() const {
    std::lock_guard<std::mutex> l(s_->mu);
    return s_->open;
  }
  // True once open(); false if `limit` of real time passes first.
  bool wait(std::chrono::milliseconds limit = std::chrono::seconds(30)) const {
    std::unique_lock<std::mutex> l(s_->mu);
    return s_->cv.wait_for(l, limit, [this] { return s_->open; });
  }

  class OpenOnExit;

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
  };
  std::shared_ptr<State> s_;
};

class Latch::OpenOnExit {
 public:
  explicit OpenOnExit(Latch latch) : latch_(std::move(latch)) {}
  ~OpenOnExit() { latch_.open(); }
  OpenOnExit(const OpenOnExit&) = delete;
  OpenOnExit& operator=(const OpenOnExit&) = delete;

 private:
  Latch latch_;
};

}  // namespace knap::testing
