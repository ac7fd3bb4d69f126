#include "scaler/metric_window.h"

#include <gtest/gtest.h>

namespace knap::scaler {
namespace {

const MonoTime kT0 = MonoTime{} + std::chrono::hours(1);
MonoTime at(double seconds) {
  return kT0 + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds));
}

TEST(BucketWindowTest, AveragesOverBucketsSinceFirstSample) {
  BucketWindow w(60s, Aggregation::kLinear);
  w.record(at(0), 10);
  EXPECT_DOUBLE_EQ(w.average(at(0)), 10);
  w.record(at(1), 20);
  EXPECT_DOUBLE_EQ(w.average(at(1)), 15);  // two buckets, not sixty
}

TEST(BucketWindowTest, SamplesInOneSecondAddUp) {
  BucketWindow w(60s, Aggregation::kLinear);
  w.record(at(0.1), 3);
  w.record(at(0.9), 4);
  EXPECT_DOUBLE_EQ(w.average(at(0.9)), 7);
}

TEST(BucketWindowTest, AverageIsCappedByTheWindow) {
  BucketWindow w(6s, Aggregation::kLinear);
  for (int s = 0; s < 10; ++s) w.record(at(s), s < 4 ? 100 : 6);
  // Buckets 4..9 only: the first four fell out of the 6-s window.
  EXPECT_DOUBLE_EQ(w.average(at(9)), 6);
}

TEST(BucketWindowTest, WrappedBucketsAreCleared) {
  BucketWindow w(3s, Aggregation::kLinear);
  w.record(at(0), 5);
  w.record(at(1), 1);
  w.record(at(2), 1);
  w.record(at(3), 1);  // reuses bucket of t=0
  EXPECT_DOUBLE_EQ(w.average(at(3)), 1);
}

TEST(BucketWindowTest, SecondsWithoutRecordsDoNotDiluteButAgeOut) {
  BucketWindow w(10s, Aggregation::kLinear);
  w.record(at(0), 10);
  w.record(at(1), 30);
  // No records since t=1: the average stays over the two written buckets.
  EXPECT_DOUBLE_EQ(w.average(at(5)), 20);
  // At t=10 the bucket of t=0 is a whole window old and leaves the sum.
  EXPECT_DOUBLE_EQ(w.average(at(10)), 30);
}

TEST(BucketWindowTest, NothingForAWholeWindowIsEmptyAndZero) {
  BucketWindow w(10s, Aggregation::kLinear);
  EXPECT_TRUE(w.isEmpty(at(0)));
  EXPECT_DOUBLE_EQ(w.average(at(0)), 0);
  w.record(at(0), 10);
  EXPECT_FALSE(w.isEmpty(at(10)));
  EXPECT_DOUBLE_EQ(w.average(at(10)), 0);
  EXPECT_TRUE(w.isEmpty(at(11)));
  EXPECT_DOUBLE_EQ(w.average(at(11)), 0);
}

TEST(BucketWindowTest, RecordAfterLongSilenceStartsOver) {
  BucketWindow w(10s, Aggregation::kLinear);
  w.record(at(0), 100);
  w.record(at(30), 4);
  EXPECT_DOUBLE_EQ(w.average(at(30)), 4);  // one bucket, the old one is gone
}

TEST(BucketWindowTest, TooOldSampleIsDropped) {
  BucketWindow w(5s, Aggregation::kLinear);
  w.record(at(10), 2);
  w.record(at(4), 1000);  // more than a window behind the newest write
  EXPECT_DOUBLE_EQ(w.average(at(10)), 2);
  w.record(at(9), 4);  // late but inside the window: lands in its bucket
  EXPECT_DOUBLE_EQ(w.average(at(10)), 3);
}

TEST(BucketWindowTest, WeightedExponentialFavoursRecentBuckets) {
  BucketWindow early(10s, Aggregation::kWeightedExponential);
  BucketWindow late(10s, Aggregation::kWeightedExponential);
  for (int s = 0; s < 10; ++s) {
    early.record(at(s), s < 5 ? 10 : 0);
    late.record(at(s), s < 5 ? 0 : 10);
  }
  EXPECT_GT(late.average(at(9)), early.average(at(9)));
  // The linear mean of both is 5; the weighted one of `late` is above it.
  EXPECT_GT(late.average(at(9)), 5);
}

TEST(BucketWindowTest, WeightedExponentialOfConstantIsThatConstant) {
  BucketWindow w(60s, Aggregation::kWeightedExponential);
  for (int s = 0; s < 60; ++s) w.record(at(s), 10);
  EXPECT_NEAR(w.average(at(59)), 10, 0.01);
  EXPECT_DOUBLE_EQ(w.average(at(200)), 0);
}

TEST(MetricWindowTest, StableAndPanicWindows) {
  MetricWindow w(60s, 6s, Aggregation::kLinear);
  for (int s = 0; s < 54; ++s) w.record(at(s), 0, 0);
  for (int s = 54; s < 60; ++s) w.record(at(s), 12, 30);
  MetricSnapshot c = w.snapshot(at(59), ScalingMetric::kConcurrency);
  EXPECT_TRUE(c.has_data);
  EXPECT_DOUBLE_EQ(c.stable_average, 12.0 * 6 / 60);
  EXPECT_DOUBLE_EQ(c.panic_average, 12);
  MetricSnapshot r = w.snapshot(at(59), ScalingMetric::kRps);
  EXPECT_DOUBLE_EQ(r.stable_average, 3);
  EXPECT_DOUBLE_EQ(r.panic_average, 30);
}

TEST(MetricWindowTest, NoDataBeforeFirstRecordAndAfterAWholeStableWindow) {
  ScalerSettings s;
  MetricWindow w(s);
  EXPECT_EQ(w.panicWindow(), 6s);
  EXPECT_FALSE(w.snapshot(at(0), ScalingMetric::kConcurrency).has_data);
  w.record(at(0), 1, 1);
  EXPECT_TRUE(w.snapshot(at(30), ScalingMetric::kConcurrency).has_data);
  // The panic window is empty long before the stable one: panic average 0.
  EXPECT_DOUBLE_EQ(w.snapshot(at(30), ScalingMetric::kConcurrency).panic_average, 0);
  EXPECT_FALSE(w.snapshot(at(61), ScalingMetric::kConcurrency).has_data);
}

}  // namespace
}  // namespace knap::scaler
