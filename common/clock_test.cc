#include "common/clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace knap {
namespace {

using namespace std::chrono_literals;

TEST(SimulatedTimeSource, StartsAtNewYear2026) {
  SimulatedTimeSource clock;
  EXPECT_EQ(formatRfc3339(clock.now()), "2026-01-01T00:00:00Z");
}

TEST(SimulatedTimeSource, TimeMovesOnlyWhenAdvanced) {
  SimulatedTimeSource clock;
  WallTime w0 = clock.now();
  MonoTime m0 = clock.monotonic();
  EXPECT_EQ(clock.now(), w0);
  EXPECT_EQ(clock.monotonic(), m0);
  clock.advance(90s);
  EXPECT_EQ(clock.now() - w0, 90s);
  EXPECT_EQ(clock.monotonic() - m0, 90s);
  EXPECT_EQ(formatRfc3339(clock.now()), "2026-01-01T00:01:30Z");
  clock.advance(1500ms);
  EXPECT_EQ(clock.monotonic() - m0, 91500ms);
}

TEST(SimulatedTimeSource, ConcurrentAdvancesAllCount) {
  SimulatedTimeSource clock;
  MonoTime m0 = clock.monotonic();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) clock.advance(1ms);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(clock.monotonic() - m0, 4000ms);
}

TEST(RealTimeSource, MonotonicDoesNotGoBackwards) {
  TimeSource& clock = RealTimeSource::instance();
  MonoTime a = clock.monotonic();
  MonoTime b = clock.monotonic();
  EXPECT_LE(a, b);
  // Wall time is plausible: after 2024-01-01.
  EXPECT_GT(clock.now(), std::chrono::system_clock::from_time_t(1704067200));
}

TEST(Rfc3339, FormatsUtcWithSecondPrecision) {
  WallTime t = std::chrono::system_clock::from_time_t(1796019477);  // 2026-11-30T06:17:57Z
  EXPECT_EQ(formatRfc3339(t), "2026-11-30T06:17:57Z");
  EXPECT_EQ(formatRfc3339(t + 999ms), "2026-11-30T06:17:57Z");  // truncated, not rounded
  EXPECT_EQ(formatRfc3339(std::chrono::system_clock::from_time_t(0)), "1970-01-01T00:00:00Z");
}

TEST(Rfc3339, ParsesWhatItFormats) {
  WallTime t = std::chrono::system_clock::from_time_t(1796019477);
  WallTime back;
  ASSERT_TRUE(parseRfc3339(formatRfc3339(t), &back));
  EXPECT_EQ(back, t);
  ASSERT_TRUE(parseRfc3339("2026-02-28T23:59:59Z", &back));
  EXPECT_EQ(formatRfc3339(back), "2026-02-28T23:59:59Z");
}

TEST(Rfc3339, AcceptsFractionalSeconds) {
  WallTime back;
  ASSERT_TRUE(parseRfc3339("2026-11-30T06:17:57.123456Z", &back));
  EXPECT_EQ(formatRfc3339(back), "2026-11-30T06:17:57Z");
}

TEST(Rfc3339, RejectsOtherForms) {
  WallTime back;
  for (const char* bad : {"", "2026-11-30", "2026-11-30T06:17:57", "2026-11-30T06:17:57+01:00",
                          "2026-11-30T06:17:57Zjunk", "2026-11-30 06:17:57Z", "yesterday"}) {
    EXPECT_FALSE(parseRfc3339(bad, &back)) << bad;
  }
}

}  // namespace
}  // namespace knap
