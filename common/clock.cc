#include "common/clock.h"

#include <cstdio>
#include <ctime>

namespace knap {

RealTimeSource& RealTimeSource::instance() {
  static RealTimeSource source;
  return source;
}

void TimeSource::sleepUntil(MonoTime deadline) const {
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock<std::mutex> lock(mu);
  (void)waitUntil(lock, cv, deadline, [] { return false; });
}

bool RealTimeSource::waitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                               MonoTime deadline, const std::function<bool()>& woken) const {
  if (deadline == MonoTime::max()) {
    cv.wait(lock, woken);
    return true;
  }
  return cv.wait_until(lock, deadline, woken);
}

SimulatedTimeSource::SimulatedTimeSource()
    : wall_(std::chrono::system_clock::from_time_t(1767225600)),  // 2026-01-01T00:00:00Z
      mono_(MonoTime{} + std::chrono::hours(1)) {}

WallTime SimulatedTimeSource::now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wall_;
}

MonoTime SimulatedTimeSource::monotonic() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mono_;
}

bool SimulatedTimeSource::waitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                                    MonoTime deadline, const std::function<bool()>& woken) const {
  decltype(waiting_)::iterator me;
  {
    std::lock_guard<std::mutex> l(mu_);
    me = waiting_.emplace(deadline, &cv);
  }
  bool result = true;
  for (;;) {
    if (woken()) break;
    if (monotonic() >= deadline) {
      result = false;
      break;
    }
    // advance() notifies cv once the deadline has come; kRecheck covers an
    // advance() that notified between the check above and this wait.
    cv.wait_for(lock, kRecheck);
  }
  std::lock_guard<std::mutex> l(mu_);
  waiting_.erase(me);
  return result;
}

void SimulatedTimeSource::advance(Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  wall_ += std::chrono::duration_cast<std::chrono::system_clock::duration>(d);
  mono_ += d;
  // notify_all needs no lock of the waiter's; the waiter re-checks the time.
  for (auto it = waiting_.begin(); it != waiting_.end() && it->first <= mono_; ++it) it->second->notify_all();
}

int SimulatedTimeSource::waiters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(waiting_.size());
}

std::string formatRfc3339(WallTime t) {
  std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool parseRfc3339(const std::string& s, WallTime* out) {
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &consumed) != 6) {
    return false;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  size_t pos = static_cast<size_t>(consumed);
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
  }
  if (pos >= s.size() || s[pos] != 'Z' || pos + 1 != s.size()) return false;
  *out = std::chrono::system_clock::from_time_t(timegm(&tm));
  return true;
}

}  // namespace knap
