#include "runtime/pod/subprocess.h"

#include <gtest/gtest.h>

namespace knap::runtime {
namespace {

// The real clock for the subprocess calls of this test (only mains name it in knap code).
StatusOr<ProgramResult> runProgram(const std::vector<std::string>& argv, const ProgramOptions& o) {
  return runtime::runProgram(argv, o, RealTimeSource::instance());
}
StatusOr<std::string> runChecked(const std::vector<std::string>& argv, const ProgramOptions& o = {}) {
  return runtime::runChecked(argv, o, RealTimeSource::instance());
}

TEST(SubprocessTest, FeedsStdinAndCapturesBothStreams) {
  ProgramOptions o;
  o.stdin_text = "hello\nworld\n";
  auto r = runProgram({"sh", "-c", "cat; echo oops >&2; exit 3"}, o);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->stdout_text, "hello\nworld\n");
  EXPECT_EQ(r->stderr_text, "oops\n");
}

TEST(SubprocessTest, LargeStdinRoundTrips) {
  ProgramOptions o;
  o.stdin_text = std::string(3 << 20, 'x');
  auto r = runProgram({"cat"}, o);
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->stdout_text.size(), o.stdin_text.size());
}

TEST(SubprocessTest, ChildThatIgnoresStdinDoesNotKillUs) {
  ProgramOptions o;
  o.stdin_text = std::string(1 << 20, 'x');  // more than a socket buffer: the write fails with EPIPE
  auto r = runProgram({"true"}, o);
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->exit_code, 0);
}

TEST(SubprocessTest, EnvironmentIsExactlyTheGivenOne) {
  ProgramOptions o;
  o.env = {"CNI_COMMAND=ADD", "PATH=/usr/bin:/bin"};
  auto r = runProgram({"/usr/bin/env"}, o);
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->stdout_text, "CNI_COMMAND=ADD\nPATH=/usr/bin:/bin\n");
}

TEST(SubprocessTest, MissingProgramIsNotFound) {
  auto r = runProgram({"/nonexistent/knap-plugin"}, {});
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_FALSE(runProgram({}, {}).isOk());
}

TEST(SubprocessTest, TimeoutKillsTheChild) {
  ProgramOptions o;
  o.timeout = std::chrono::milliseconds(200);
  const MonoTime start = RealTimeSource::instance().monotonic();
  auto r = runProgram({"sleep", "10"}, o);
  const auto took = RealTimeSource::instance().monotonic() - start;
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), Code::kDeadlineExceeded);
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(SubprocessTest, RunCheckedCarriesStderr) {
  auto ok = runChecked({"echo", "fine"});
  ASSERT_TRUE(ok.isOk());
  EXPECT_EQ(*ok, "fine\n");
  auto bad = runChecked({"sh", "-c", "echo 'Cannot find device \"x\"' >&2; exit 1"});
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), Code::kInternal);
  EXPECT_NE(bad.status().message().find("exited with 1: Cannot find device \"x\""), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace knap::runtime
