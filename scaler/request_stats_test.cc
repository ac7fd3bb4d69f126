#include "scaler/request_stats.h"

#include <gtest/gtest.h>

namespace knap::scaler {
namespace {

const MonoTime kT0 = MonoTime{} + std::chrono::hours(1);
MonoTime at(double seconds) {
  return kT0 + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds));
}

TEST(RequestStatsTest, OneRequestForTheWholeInterval) {
  RequestStats s(at(0));
  s.requestIn(at(0));
  RequestStatsReport r = s.report(at(1));
  EXPECT_DOUBLE_EQ(r.average_concurrency, 1);
  EXPECT_DOUBLE_EQ(r.request_count, 1);
}

TEST(RequestStatsTest, TimeWeightedAverage) {
  RequestStats s(at(0));
  s.requestIn(at(0));      // 1 in flight for 0.5 s
  s.requestIn(at(0.5));    // 2 in flight for 0.25 s
  s.requestOut(at(0.75));  // 1 in flight for 0.25 s
  RequestStatsReport r = s.report(at(1));
  EXPECT_DOUBLE_EQ(r.average_concurrency, 0.5 + 0.5 + 0.25);
  EXPECT_DOUBLE_EQ(r.request_count, 2);
}

TEST(RequestStatsTest, ReportStartsANewIntervalAndKeepsInFlight) {
  RequestStats s(at(0));
  s.requestIn(at(0.5));
  EXPECT_DOUBLE_EQ(s.report(at(1)).average_concurrency, 0.5);
  RequestStatsReport r = s.report(at(2));
  EXPECT_DOUBLE_EQ(r.average_concurrency, 1);  // still in flight
  EXPECT_DOUBLE_EQ(r.request_count, 0);        // but it arrived in the previous interval
  EXPECT_EQ(s.inFlight(), 1);
  s.requestOut(at(2));
  EXPECT_DOUBLE_EQ(s.report(at(3)).average_concurrency, 0);
}

TEST(RequestStatsTest, EmptyIntervalReportsInFlight) {
  RequestStats s(at(0));
  s.requestIn(at(0));
  s.requestIn(at(0));
  EXPECT_DOUBLE_EQ(s.report(at(0)).average_concurrency, 2);
}

TEST(RequestStatsTest, UnbalancedOutDoesNotGoNegative) {
  RequestStats s(at(0));
  s.requestOut(at(0));
  EXPECT_EQ(s.inFlight(), 0);
  EXPECT_DOUBLE_EQ(s.report(at(1)).average_concurrency, 0);
}

}  // namespace
}  // namespace knap::scaler
