#include "common/guard.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace knap {
namespace {

TEST(GuardTest, RunGuardedSwallowsAndReports) {
  EXPECT_TRUE(runGuarded("ok", [] {}));
  EXPECT_FALSE(runGuarded("std", [] { throw std::runtime_error("boom"); }));
  EXPECT_FALSE(runGuarded("int", [] { throw 7; }));
  // The nlohmann::type_error a malformed stored object raises.
  EXPECT_FALSE(runGuarded("json", [] {
    nlohmann::json j = "a string";
    (void)j.value("spec", nlohmann::json::object());
  }));
}

TEST(GuardTest, RunRestartingRunsTheLoopAgainUntilItReturns) {
  int runs = 0;
  runRestarting(
      "loop",
      [&] {
        if (++runs < 3) throw std::runtime_error("again");
      },
      std::chrono::milliseconds(0));
  EXPECT_EQ(runs, 3);
}

TEST(GuardTest, StatusOfThrowingTurnsTheExceptionIntoInternal) {
  EXPECT_TRUE(statusOfThrowing("ok", [] { return Status::ok(); }).isOk());
  EXPECT_EQ(statusOfThrowing("nf", [] { return notFound("x"); }).code(), Code::kNotFound);
  Status st = statusOfThrowing("reconcile Service default/a", []() -> Status {
    nlohmann::json j = 5;
    return j.at("spec").is_object() ? Status::ok() : Status::ok();
  });
  EXPECT_EQ(st.code(), Code::kInternal);
  EXPECT_NE(st.message().find("reconcile Service default/a: nlohmann::json exception"), std::string::npos)
      << st.message();
}

TEST(GuardTest, CurrentExceptionTextNamesTheKind) {
  try {
    throw std::out_of_range("far");
  } catch (...) {
    EXPECT_EQ(currentExceptionText(), "exception: far");
  }
  try {
    throw 1;
  } catch (...) {
    EXPECT_EQ(currentExceptionText(), "unknown exception");
  }
}

}  // namespace
}  // namespace knap
