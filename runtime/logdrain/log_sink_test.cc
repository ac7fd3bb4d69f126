// LogSink on real files and /dev/full (every write ENOSPC), and the
// knap-logdrain binary driven the way containerd's shim drives it (stdout on
// fd 3, stderr on fd 4, ready pipe on fd 5, "dir D max N" arguments).
#include "runtime/logdrain/log_sink.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace knap::logdrain {
namespace {

namespace fs = std::filesystem;

std::string tempDir() {
  char tmpl[] = "/tmp/knap-logdrain-XXXXXX";
  return ::mkdtemp(tmpl);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(LogSinkTest, AppendsAndRotatesBySize) {
  std::string dir = tempDir();
  LogSink s(dir + "/out.log", 100);
  for (int i = 0; i < 10; ++i) s.append("line " + std::to_string(i) + " .........\n");  // 17 bytes each
  EXPECT_GE(s.rotations(), 1u);
  EXPECT_LE(fs::file_size(dir + "/out.log"), 100u);
  EXPECT_LE(fs::file_size(dir + "/out.log.1"), 100u);
  std::string all = slurp(dir + "/out.log.1") + slurp(dir + "/out.log");
  EXPECT_NE(all.find("line 9"), std::string::npos);
  EXPECT_EQ(s.droppedLines(), 0u);
  fs::remove_all(dir);
}

TEST(LogSinkTest, AFullDiskDropsAndCountsLinesWithoutBlocking) {
  LogSink s("/dev/full", 0);  // every write fails with ENOSPC
  s.append("a\nb\nc\n");
  s.append("partial");
  EXPECT_EQ(s.droppedLines(), 4u);
  EXPECT_EQ(s.droppedBytes(), 13u);
}

TEST(LogSinkTest, WhenSpaceReturnsTheLogSaysHowMuchWasDropped) {
  std::string dir = tempDir();
  bool full = true;
  LogSink s(dir + "/out.log", 0, [&](int fd, const char* d, size_t n) -> long {
    if (full) {
      errno = ENOSPC;
      return -1;
    }
    return ::write(fd, d, n);
  });
  s.append("before\n");
  for (int i = 0; i < 1000; ++i) s.append("lost line\n");
  EXPECT_EQ(s.droppedLines(), 1001u);
  full = false;
  s.append("after\n");
  std::string text = slurp(dir + "/out.log");
  EXPECT_EQ(text,
            "knap-logdrain: dropped 1001 lines (10007 bytes) while writing failed: No space left on "
            "device\nafter\n");
  s.append("more\n");
  EXPECT_EQ(slurp(dir + "/out.log"), text + "more\n") << "the note is written once";
  fs::remove_all(dir);
}

// Runs knap-logdrain as the shim does; returns its pid and the write ends.
struct Drain {
  pid_t pid = -1;
  int out = -1, err = -1, ready = -1;
};

Drain startDrain(const std::string& dir, const std::string& max) {
  const char* bin = std::getenv("KNAP_LOGDRAIN");
  int o[2], e[2], r[2];
  EXPECT_EQ(::pipe(o), 0);
  EXPECT_EQ(::pipe(e), 0);
  EXPECT_EQ(::pipe(r), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(o[0], 3);
    ::dup2(e[0], 4);
    ::dup2(r[1], 5);
    for (int fd = 6; fd < 64; ++fd) ::close(fd);
    ::execl(bin, bin, "max", max.c_str(), "dir", dir.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(o[0]);
  ::close(e[0]);
  ::close(r[1]);
  return Drain{pid, o[1], e[1], r[0]};
}

int waitExit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(KnapLogdrainTest, SignalsReadyDrainsBothStreamsAndExitsAtEof) {
  ASSERT_NE(std::getenv("KNAP_LOGDRAIN"), nullptr) << "meson sets KNAP_LOGDRAIN";
  std::string dir = tempDir();
  Drain d = startDrain(dir, "1000000");
  char b;
  EXPECT_EQ(::read(d.ready, &b, 1), 0) << "ready = fd 5 closed";
  ASSERT_EQ(::write(d.out, "to stdout\n", 10), 10);
  ASSERT_EQ(::write(d.err, "to stderr\n", 10), 10);
  ::close(d.out);
  ::close(d.err);
  EXPECT_EQ(waitExit(d.pid), 0);
  EXPECT_EQ(slurp(dir + "/stdout.log"), "to stdout\n");
  EXPECT_EQ(slurp(dir + "/stderr.log"), "to stderr\n");
  fs::remove_all(dir);
}

TEST(KnapLogdrainTest, KeepsReadingWhenEveryWriteFails) {
  std::string dir = tempDir();
  fs::create_symlink("/dev/full", dir + "/stdout.log");  // a disk that is always full
  Drain d = startDrain(dir, "1000000");
  char b;
  (void)::read(d.ready, &b, 1);
  // 16 MiB is far more than a pipe holds: without a reader the write blocks.
  std::string chunk(64 * 1024, 'x');
  chunk.back() = '\n';
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 256; ++i)
    ASSERT_EQ(::write(d.out, chunk.data(), chunk.size()), static_cast<ssize_t>(chunk.size()));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  ::close(d.out);
  ::close(d.err);
  EXPECT_EQ(waitExit(d.pid), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace knap::logdrain
