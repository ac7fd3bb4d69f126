#include "common/config.h"

#include <gtest/gtest.h>

namespace knap {
namespace {

TEST(DefaultConfig, HasKnativeDefaultsAndLocalhostDomain) {
  Config c = defaultConfig();
  ASSERT_EQ(c.domain.domains.size(), 1u);
  EXPECT_EQ(c.domain.domains[0].domain, "localhost");
  EXPECT_TRUE(c.domain.domains[0].selector.empty());
  EXPECT_EQ(c.autoscaler.stable_window, Seconds(60));
  EXPECT_DOUBLE_EQ(c.autoscaler.targetUtilizationFraction(), 0.7);
  EXPECT_EQ(c.defaults.revision_timeout_seconds, 300);
  EXPECT_EQ(c.gc.retain_since_create_time, Seconds(48 * 3600));
}

}  // namespace
}  // namespace knap
