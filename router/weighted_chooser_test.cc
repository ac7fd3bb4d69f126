#include "router/weighted_chooser.h"

#include <gtest/gtest.h>

#include <map>

namespace knap::router {
namespace {

std::vector<int> countPicks(const std::vector<TrafficSplit>& splits, int n, uint64_t first = 0) {
  int total = 0;
  for (const auto& s : splits) total += s.percent;
  std::vector<int> counts(splits.size(), 0);
  for (int i = 0; i < n; ++i) ++counts[chooseSplit(splits, total, first + i)];
  return counts;
}

TEST(WeightedChooserTest, FiftyFiftyWithinTolerance) {
  auto c = countPicks({{"ns/a", 50}, {"ns/b", 50}}, 1000);
  EXPECT_NEAR(c[0], 500, 10);
  EXPECT_NEAR(c[1], 500, 10);
}

TEST(WeightedChooserTest, UnevenSplitsFollowPercentages) {
  auto c = countPicks({{"ns/a", 90}, {"ns/b", 9}, {"ns/c", 1}}, 1000);
  EXPECT_NEAR(c[0], 900, 10);
  EXPECT_NEAR(c[1], 90, 5);
  EXPECT_NEAR(c[2], 10, 3);
}

TEST(WeightedChooserTest, AnyWindowIsBalanced) {
  // Consecutive requests alternate well: every window of 100 is close.
  for (uint64_t first : {0ull, 7ull, 12345ull, 1ull << 40}) {
    auto c = countPicks({{"ns/a", 50}, {"ns/b", 50}}, 100, first);
    EXPECT_NEAR(c[0], 50, 4) << "window starting at " << first;
  }
}

TEST(WeightedChooserTest, SingleSplitAlwaysChosen) {
  auto c = countPicks({{"ns/a", 100}}, 50);
  EXPECT_EQ(c[0], 50);
}

TEST(WeightedChooserTest, WeightsNeedNotSumToHundred) {
  auto c = countPicks({{"ns/a", 1}, {"ns/b", 3}}, 1000);
  EXPECT_NEAR(c[0], 250, 10);
  EXPECT_NEAR(c[1], 750, 10);
}

}  // namespace
}  // namespace knap::router
