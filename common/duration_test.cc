#include "common/duration.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace knap {
namespace {

using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::nanoseconds;
using std::chrono::seconds;

struct ParseCase {
  const char* name;
  std::string text;
  nanoseconds want;
};

class ParseGoDurationOk : public testing::TestWithParam<ParseCase> {};

TEST_P(ParseGoDurationOk, Parses) {
  const ParseCase& c = GetParam();
  StatusOr<nanoseconds> got = parseGoDuration(c.text);
  ASSERT_TRUE(got.isOk()) << c.text << ": " << got.status().toString();
  EXPECT_EQ(got->count(), c.want.count()) << c.text;
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseGoDurationOk,
    testing::Values(
        ParseCase{"Zero", "0", nanoseconds(0)}, ParseCase{"NegativeZero", "-0", nanoseconds(0)},
        ParseCase{"ZeroWithUnit", "0s", nanoseconds(0)}, ParseCase{"Seconds", "60s", seconds(60)},
        ParseCase{"Minutes", "5m", minutes(5)}, ParseCase{"Hours", "48h", hours(48)},
        ParseCase{"Compound", "1h30m", minutes(90)},
        ParseCase{"CompoundAllUnits", "1h2m3s4ms5us6ns",
                  hours(1) + minutes(2) + seconds(3) + milliseconds(4) + microseconds(5) + nanoseconds(6)},
        ParseCase{"FractionalHours", "1.5h", minutes(90)}, ParseCase{"LeadingDot", ".5s", milliseconds(500)},
        ParseCase{"TrailingDot", "5.s", seconds(5)}, ParseCase{"Millis", "500ms", milliseconds(500)},
        ParseCase{"MicroU", "7us", microseconds(7)}, ParseCase{"MicroSign", "7\xC2\xB5s", microseconds(7)},
        ParseCase{"GreekMu", "7\xCE\xBCs", microseconds(7)}, ParseCase{"Nanos", "15ns", nanoseconds(15)},
        ParseCase{"Negative", "-1.5h", -minutes(90)}, ParseCase{"Plus", "+10s", seconds(10)},
        ParseCase{"SubNanosecondPrecisionKept", "1.000000001s", nanoseconds(1000000001)}),
    [](const testing::TestParamInfo<ParseCase>& info) { return std::string(info.param.name); });

struct BadCase {
  const char* name;
  std::string text;
  std::string want_in_message;
};

class ParseGoDurationBad : public testing::TestWithParam<BadCase> {};

TEST_P(ParseGoDurationBad, Refuses) {
  const BadCase& c = GetParam();
  StatusOr<nanoseconds> got = parseGoDuration(c.text);
  ASSERT_FALSE(got.isOk()) << c.text << " parsed as " << got->count();
  EXPECT_EQ(got.status().code(), Code::kInvalidArgument);
  EXPECT_NE(got.status().message().find(c.want_in_message), std::string::npos) << got.status().message();
  EXPECT_NE(got.status().message().find("\"" + c.text + "\""), std::string::npos) << got.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseGoDurationBad,
    testing::Values(BadCase{"Empty", "", "empty"}, BadCase{"UnknownUnit", "6x", "unknown unit \"x\""},
                    BadCase{"MissingUnit", "60", "missing unit"}, BadCase{"OnlySign", "-", "missing number"},
                    BadCase{"OnlyUnit", "s", "expected a number"}, BadCase{"LoneDot", ".s", "bad number"},
                    BadCase{"TwoDots", "1.5.5s", "bad number"}, BadCase{"Space", "1h 30m", "unknown unit"},
                    BadCase{"Days", "2d", "unknown unit \"d\""},
                    BadCase{"Overflow", "3000000h", "out of range"}),
    [](const testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

struct FormatCase {
  const char* name;
  nanoseconds d;
  std::string want;
};

class FormatGoDuration : public testing::TestWithParam<FormatCase> {};

TEST_P(FormatGoDuration, MatchesGo) {
  EXPECT_EQ(formatGoDuration(GetParam().d), GetParam().want);
}

// Expected strings are what Go's time.Duration.String() prints.
INSTANTIATE_TEST_SUITE_P(
    Table, FormatGoDuration,
    testing::Values(FormatCase{"Zero", nanoseconds(0), "0s"}, FormatCase{"Nanos", nanoseconds(100), "100ns"},
                    FormatCase{"Micros", microseconds(1), "1µs"},
                    FormatCase{"FractionalMicros", nanoseconds(1500), "1.5µs"},
                    FormatCase{"Millis", milliseconds(1), "1ms"},
                    FormatCase{"FractionalMillis", microseconds(2500), "2.5ms"},
                    FormatCase{"FractionalSeconds", milliseconds(1500), "1.5s"},
                    FormatCase{"Seconds", seconds(60), "1m0s"}, FormatCase{"MinSec", seconds(90), "1m30s"},
                    FormatCase{"Hours", hours(48), "48h0m0s"},
                    FormatCase{"HourMinute", hours(2) + minutes(45), "2h45m0s"},
                    FormatCase{"Negative", -seconds(90), "-1m30s"},
                    FormatCase{"NegativeMillis", -milliseconds(5), "-5ms"}),
    [](const testing::TestParamInfo<FormatCase>& info) { return std::string(info.param.name); });

TEST(GoDuration, FormatThenParseRoundTrips) {
  for (nanoseconds d : {nanoseconds(1), nanoseconds(999), nanoseconds(123456), nanoseconds(123456789),
                        nanoseconds(3723000000001LL), -nanoseconds(5400000000000LL)}) {
    std::string text = formatGoDuration(d);
    StatusOr<nanoseconds> back = parseGoDuration(text);
    ASSERT_TRUE(back.isOk()) << text << ": " << back.status().toString();
    EXPECT_EQ(back->count(), d.count()) << text;
  }
}

}  // namespace
}  // namespace knap
