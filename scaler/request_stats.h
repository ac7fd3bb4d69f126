// RequestStats: per-revision time-weighted concurrency and request counting
// for the router (Knative's networking pkg/http/stats RequestStats). The router
// calls requestIn()/requestOut() around every request it holds for a revision
// — including requests waiting in the activator queue, which count as
// concurrency exactly as they do in Knative's activator — and its
// MetricsSource::collect() returns report(now) once a second.
//
// Thread safety: all methods are thread-safe (one mutex; O(1) work under it).
// Times are passed in; no clock is read here.
#pragma once

#include <mutex>

#include "common/clock.h"

namespace knap::scaler {

struct RequestStatsReport {
  double average_concurrency = 0;  // time-weighted in-flight requests over the interval
  double request_count = 0;        // requests that arrived in the interval
};

class RequestStats {
 public:
  explicit RequestStats(MonoTime now) : last_change_(now) {}

  void requestIn(MonoTime now);
  void requestOut(MonoTime now);
  // Closes the interval that started at the previous report (or construction)
  // and starts the next. An interval of zero length reports the in-flight count.
  RequestStatsReport report(MonoTime now);
  int inFlight() const;

 private:
  void advanceLocked(MonoTime now);

  mutable std::mutex mu_;
  int in_flight_ = 0;
  MonoTime last_change_;
  double concurrency_seconds_ = 0;  // integral of in-flight over the interval
  double interval_seconds_ = 0;
  double requests_ = 0;
};

}  // namespace knap::scaler
