#include "common/clock.h"

#include <cstdio>
#include <ctime>

namespace knap {

RealTimeSource& RealTimeSource::instance() {
  static RealTimeSource source;
  return source;
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

void SimulatedTimeSource::advance(Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  wall_ += std::chrono::duration_cast<std::chrono::system_clock::duration>(d);
  mono_ += d;
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
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6) {
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
