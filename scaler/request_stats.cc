#include "scaler/request_stats.h"

namespace knap::scaler {

void RequestStats::advanceLocked(MonoTime now) {
  if (now <= last_change_) return;
  const double secs = std::chrono::duration<double>(now - last_change_).count();
  concurrency_seconds_ += in_flight_ * secs;
  interval_seconds_ += secs;
  last_change_ = now;
}

void RequestStats::requestIn(MonoTime now) {
  std::lock_guard<std::mutex> lock(mu_);
  advanceLocked(now);
  ++in_flight_;
  ++requests_;
}

void RequestStats::requestOut(MonoTime now) {
  std::lock_guard<std::mutex> lock(mu_);
  advanceLocked(now);
  if (in_flight_ > 0) --in_flight_;
}

RequestStatsReport RequestStats::report(MonoTime now) {
  std::lock_guard<std::mutex> lock(mu_);
  advanceLocked(now);
  RequestStatsReport out;
  out.request_count = requests_;
  out.average_concurrency = interval_seconds_ > 0 ? concurrency_seconds_ / interval_seconds_ : in_flight_;
  concurrency_seconds_ = 0;
  interval_seconds_ = 0;
  requests_ = 0;
  return out;
}

int RequestStats::inFlight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

}  // namespace knap::scaler
