#include "tools/knap/table.h"

#include <gtest/gtest.h>

namespace knap::cli {
namespace {

TEST(TableTest, AlignsColumnsAndTrimsTrailingSpace) {
  Table t;
  t.row({"hello", "http://hello.default.localhost", ""});
  t.header({"NAME", "URL", "READY"});
  EXPECT_EQ(t.render(),
            "NAME    URL                              READY\n"
            "hello   http://hello.default.localhost\n");
}

TEST(TableTest, CountsUtf8CodePointsForWidth) {
  Table t;
  t.header({"µs", "x"});
  t.row({"ab", "y"});
  EXPECT_EQ(t.render(), "µs   x\nab   y\n");
}

}  // namespace
}  // namespace knap::cli
