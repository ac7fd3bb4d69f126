// TimeSource: the only way knap code reads the clock and waits on it
// (STYLE.md rule 3).
//
// Only daemon/ (and the other programs' mains) names RealTimeSource and hands
// it down; tests hand a SimulatedTimeSource whose time moves only when the
// test calls advance(): a thread waiting on it (waitUntil, sleepUntil) wakes
// when advance() passes its deadline, so tests step time instead of sleeping.
// Both are thread-safe. Loops and worker pools built on it: common/loop.h.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>

namespace knap {

using WallTime = std::chrono::system_clock::time_point;
using MonoTime = std::chrono::steady_clock::time_point;
using Duration = std::chrono::nanoseconds;

class TimeSource {
 public:
  virtual ~TimeSource() = default;
  virtual WallTime now() const = 0;        // wall clock, for timestamps users see
  virtual MonoTime monotonic() const = 0;  // for intervals and deadlines

  // Waits on `cv` (`lock` held on entry and on return, released while
  // waiting) until `woken()` is true or `deadline` on this clock has come.
  // Returns true when woken, false on the deadline. woken() is read under
  // the lock before any wait and again after every wake-up, so a wake-up
  // made before the call (or racing with the deadline) is reported as a
  // wake-up, never as the timer's expiry. Whoever makes woken() true does
  // so under lock's mutex and then notifies `cv`. MonoTime::max(): no deadline.
  virtual bool waitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, MonoTime deadline,
                         const std::function<bool()>& woken) const = 0;
  // Blocks the calling thread until `deadline` on this clock.
  void sleepUntil(MonoTime deadline) const;
  void sleepFor(Duration d) const { sleepUntil(monotonic() + d); }
};

class RealTimeSource final : public TimeSource {
 public:
  WallTime now() const override { return std::chrono::system_clock::now(); }
  MonoTime monotonic() const override { return std::chrono::steady_clock::now(); }
  bool waitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, MonoTime deadline,
                 const std::function<bool()>& woken) const override;
  static RealTimeSource& instance();
};

class SimulatedTimeSource final : public TimeSource {
 public:
  // Starts at 2026-01-01T00:00:00Z wall time unless told otherwise.
  SimulatedTimeSource();
  WallTime now() const override;
  MonoTime monotonic() const override;
  // Waiters are woken when advance() reaches their deadline. A notification
  // racing with the waiter's own check of the time is caught by a short real
  // re-check (kRecheck), so a waiter never sleeps through an advance().
  bool waitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, MonoTime deadline,
                 const std::function<bool()>& woken) const override;
  void advance(Duration d);
  // Threads waiting in waitUntil/sleepUntil right now (tests: "the loop is
  // idle, advance the clock").
  int waiters() const;

  static constexpr Duration kRecheck = std::chrono::milliseconds(2);

 private:
  mutable std::mutex mu_;
  WallTime wall_;
  MonoTime mono_;
  mutable std::multiset<std::pair<MonoTime, std::condition_variable*>> waiting_;
};

// RFC 3339 UTC with second precision: 2026-11-30T06:17:57Z.
std::string formatRfc3339(WallTime t);
// Parses the form formatRfc3339 writes (and fractional seconds); false on bad input.
bool parseRfc3339(const std::string& s, WallTime* out);

}  // namespace knap
