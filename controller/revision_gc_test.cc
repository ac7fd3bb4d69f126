#include "controller/revision_gc.h"

#include <gtest/gtest.h>

namespace knap::controller {
namespace {

using std::chrono::hours;

const WallTime kNow = WallTime(std::chrono::seconds(1800000000));

// name, age since creation, idle since last active, active?
GcCandidate rev(const std::string& name, hours age, hours idle, bool active = false) {
  return GcCandidate{name, kNow - age, kNow - idle, active};
}

GcConfig gc(std::optional<hours> create, std::optional<hours> last_active, int64_t min,
            std::optional<int64_t> max) {
  GcConfig c;
  c.retain_since_create_time = create ? std::optional<Seconds>(*create) : std::nullopt;
  c.retain_since_last_active_time = last_active ? std::optional<Seconds>(*last_active) : std::nullopt;
  c.min_non_active_revisions = min;
  c.max_non_active_revisions = max;
  return c;
}

struct GcCase {
  const char* name;
  GcConfig config;
  std::vector<GcCandidate> revisions;
  std::vector<std::string> want;
};

class RevisionGcTest : public ::testing::TestWithParam<GcCase> {};

TEST_P(RevisionGcTest, Collects) {
  EXPECT_EQ(revisionsToCollect(GetParam().config, GetParam().revisions, kNow), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    Policy, RevisionGcTest,
    ::testing::Values(GcCase{"AllDisabledKeepsEverything",
                             gc(std::nullopt, std::nullopt, 0, std::nullopt),
                             {rev("a", hours(100), hours(100)), rev("b", hours(100), hours(100))},
                             {}},
                      GcCase{"QuickCollectDeletesEveryNonActive",
                             gc(std::nullopt, std::nullopt, 0, 0),
                             {rev("a", hours(3), hours(3)), rev("b", hours(2), hours(1)),
                              rev("c", hours(1), hours(1), true)},
                             {"a", "b"}},
                      GcCase{"DefaultsKeepYoungRevisions",
                             gc(hours(48), hours(15), 20, 1000),
                             {rev("a", hours(100), hours(100)), rev("b", hours(1), hours(1))},
                             {}},
                      GcCase{"AtOrBelowMinKeepsAll",
                             gc(hours(0), hours(0), 2, 1000),
                             {rev("a", hours(100), hours(100)), rev("b", hours(100), hours(100))},
                             {}},
                      GcCase{"ActiveOnesDoNotCountTowardsCollection",
                             gc(hours(0), hours(0), 1, 1000),
                             {rev("a", hours(100), hours(100)), rev("b", hours(100), hours(90), true),
                              rev("c", hours(100), hours(80), true)},
                             {}},
                      GcCase{"StaleDeletedOldestFirstDownToMin",
                             gc(hours(10), hours(5), 1, std::nullopt),
                             {rev("new", hours(20), hours(6)), rev("old", hours(30), hours(20)),
                              rev("mid", hours(25), hours(10))},
                             {"old", "mid"}},
                      GcCase{"StaleNeedsBothChecks",
                             gc(hours(10), hours(5), 0, std::nullopt),
                             // young by creation / recently active / stale
                             {rev("young", hours(2), hours(50)), rev("recent", hours(50), hours(1)),
                              rev("stale", hours(50), hours(50))},
                             {"stale"}},
                      GcCase{"DisabledCreateCheckCountsAsSatisfied",
                             gc(std::nullopt, hours(5), 0, std::nullopt),
                             {rev("a", hours(1), hours(6)), rev("b", hours(1), hours(1))},
                             {"a"}},
                      GcCase{"MaxTrimsNonStaleOldestFirst",
                             gc(hours(1000), hours(1000), 0, 2),
                             {rev("r1", hours(5), hours(5)), rev("r2", hours(4), hours(4)),
                              rev("r3", hours(3), hours(3)), rev("r4", hours(2), hours(2))},
                             {"r1", "r2"}},
                      GcCase{"StaleFirstThenMax",
                             gc(hours(10), hours(10), 1, 2),
                             {rev("s1", hours(50), hours(50)), rev("s2", hours(40), hours(40)),
                              rev("n1", hours(5), hours(5)), rev("n2", hours(4), hours(4)),
                              rev("n3", hours(3), hours(3))},
                             {"s1", "s2", "n1"}},
                      GcCase{"MinStopsStaleDeletion",
                             gc(hours(1), hours(1), 2, std::nullopt),
                             {rev("a", hours(50), hours(50)), rev("b", hours(40), hours(40)),
                              rev("c", hours(30), hours(30))},
                             {"a"}}),
    [](const ::testing::TestParamInfo<GcCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace knap::controller
