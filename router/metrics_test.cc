#include "router/metrics.h"

#include <gtest/gtest.h>

namespace knap::router {
namespace {

TEST(MetricsTest, RendersPrometheusText) {
  RouterMetrics m;
  m.requests_total.with({"default/hello-00001", "200"})->inc();
  m.requests_total.with({"default/hello-00001", "200"})->inc();
  m.queued_requests.with({"default/hello-00001"})->set(3);
  m.cold_start.with({"default/hello-00001"})->observe(0.7);
  m.revision_pods.with({"default/hello-00001", "desired"})->set(2);
  const std::string out = m.render();
  EXPECT_NE(out.find("# TYPE knap_router_requests_total counter\n"), std::string::npos);
  EXPECT_NE(out.find("knap_router_requests_total{revision=\"default/hello-00001\",code=\"200\"} 2\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("knap_activator_queued_requests{revision=\"default/hello-00001\"} 3\n"),
            std::string::npos);
  EXPECT_NE(out.find("# TYPE knap_cold_start_seconds histogram\n"), std::string::npos);
  EXPECT_NE(out.find("knap_cold_start_seconds_bucket{revision=\"default/hello-00001\",le=\"0.5\"} 0\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("knap_cold_start_seconds_bucket{revision=\"default/hello-00001\",le=\"1\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("knap_cold_start_seconds_bucket{revision=\"default/hello-00001\",le=\"+Inf\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("knap_cold_start_seconds_count{revision=\"default/hello-00001\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("knap_revision_pods{revision=\"default/hello-00001\",state=\"desired\"} 2\n"),
            std::string::npos);
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  Histogram h({1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 3.0, 10.0}) h.observe(v);
  EXPECT_EQ(h.cumulative(0), 2u);
  EXPECT_EQ(h.cumulative(1), 3u);
  EXPECT_EQ(h.cumulative(2), 4u);
  EXPECT_EQ(h.count(), 5u);
  EXPECT_DOUBLE_EQ(h.sum(), 16.0);
}

TEST(MetricsTest, LabelValuesEscapedAndRemovedSeriesHidden) {
  RouterMetrics m;
  m.queued_requests.with({"a\"b\\c\nd"})->set(1);
  EXPECT_NE(m.render().find("revision=\"a\\\"b\\\\c\\nd\""), std::string::npos);
  std::shared_ptr<Gauge> g = m.queued_requests.with({"ns/gone"});
  g->set(5);
  m.removeRevision("ns/gone");
  g->set(6);  // still valid memory
  EXPECT_EQ(m.render().find("ns/gone"), std::string::npos);
}

TEST(MetricsTest, ARemovedRevisionsCellsAreFreedOnceNothingHoldsThem) {
  RouterMetrics m;
  std::weak_ptr<Histogram> duration = m.request_duration.with({"ns/r"});
  std::weak_ptr<Histogram> cold = m.cold_start.with({"ns/r", "warm"});
  std::weak_ptr<Gauge> pods = m.revision_pods.with({"ns/r", "ready"});
  std::weak_ptr<Gauge> warm = m.warm_pool_pods.with({"ns/r", "frozen"});
  std::shared_ptr<Gauge> held = m.queued_requests.with({"ns/r"});  // a request still queued
  m.removeRevision("ns/r");
  EXPECT_TRUE(duration.expired());
  EXPECT_TRUE(cold.expired());
  EXPECT_TRUE(pods.expired());
  EXPECT_TRUE(warm.expired());
  EXPECT_EQ(m.request_duration.size(), 0u);
  EXPECT_EQ(m.cold_start.size(), 0u);
  EXPECT_EQ(m.revision_pods.size(), 0u);
  EXPECT_EQ(m.warm_pool_pods.size(), 0u);
  EXPECT_EQ(m.queued_requests.size(), 0u);
  std::weak_ptr<Gauge> queued = held;
  held->add(-1);  // the request leaves: its cell goes with it
  held.reset();
  EXPECT_TRUE(queued.expired());
}

}  // namespace
}  // namespace knap::router
