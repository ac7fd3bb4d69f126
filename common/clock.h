// TimeSource: the only way knap code reads the clock (STYLE.md rule 3).
//
// Production code is handed a RealTimeSource; tests hand a SimulatedTimeSource
// whose time moves only when the test calls advance(). Both are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace knap {

using WallTime = std::chrono::system_clock::time_point;
using MonoTime = std::chrono::steady_clock::time_point;
using Duration = std::chrono::nanoseconds;

class TimeSource {
 public:
  virtual ~TimeSource() = default;
  virtual WallTime now() const = 0;          // wall clock, for timestamps users see
  virtual MonoTime monotonic() const = 0;    // for intervals and deadlines
};

class RealTimeSource final : public TimeSource {
 public:
  WallTime now() const override { return std::chrono::system_clock::now(); }
  MonoTime monotonic() const override { return std::chrono::steady_clock::now(); }
  static RealTimeSource& instance();
};

class SimulatedTimeSource final : public TimeSource {
 public:
  // Starts at 2026-01-01T00:00:00Z wall time unless told otherwise.
  SimulatedTimeSource();
  WallTime now() const override;
  MonoTime monotonic() const override;
  void advance(Duration d);

 private:
  mutable std::mutex mu_;
  WallTime wall_;
  MonoTime mono_;
};

// RFC 3339 UTC with second precision: 2026-11-30T06:17:57Z.
std::string formatRfc3339(WallTime t);
// Parses the form formatRfc3339 writes (and fractional seconds); false on bad input.
bool parseRfc3339(const std::string& s, WallTime* out);

}  // namespace knap
