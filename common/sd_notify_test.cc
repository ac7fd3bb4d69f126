// sd_notify against a real unix datagram socket (path and abstract), the
// watchdog variables, and the journald level prefix of common/log.
#include "common/sd_notify.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/log.h"

namespace knap::sd {
namespace {

using std::chrono::microseconds;

// A bound SOCK_DGRAM socket standing in for systemd's notify socket.
class Listener {
 public:
  explicit Listener(const std::string& name) : name_(name) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    socklen_t len;
    if (name[0] == '@') {
      std::memcpy(addr.sun_path + 1, name.data() + 1, name.size() - 1);
      len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    } else {
      ::unlink(name.c_str());
      std::memcpy(addr.sun_path, name.data(), name.size());
      len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + 1);
    }
    bound_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0;
  }
  ~Listener() {
    ::close(fd_);
    if (name_[0] == '/') ::unlink(name_.c_str());
  }
  bool bound() const { return bound_; }
  // The next datagram, or "<none>" after 5 s (the send is synchronous, so it is already queued).
  std::string receive() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return "<none>";
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    return n < 0 ? "<error>" : std::string(buf, static_cast<size_t>(n));
  }
  bool empty() {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }

 private:
  std::string name_;
  int fd_ = -1;
  bool bound_ = false;
};

std::string tempSocketPath() {
  return "/tmp/knap-sd-notify-test-" + std::to_string(::getpid()) + ".sock";
}

TEST(Notifier, DisabledWithoutSocketIsANoOp) {
  Notifier n;
  EXPECT_FALSE(n.enabled());
  EXPECT_TRUE(n.ready("up").isOk());
  EXPECT_TRUE(n.watchdog().isOk());
}

TEST(Notifier, SendsToAPathSocket) {
  Listener l(tempSocketPath());
  ASSERT_TRUE(l.bound());
  Notifier n(tempSocketPath(), std::nullopt);
  ASSERT_TRUE(n.status("starting: opening the store").isOk());
  EXPECT_EQ(l.receive(), "STATUS=starting: opening the store");
  ASSERT_TRUE(n.ready("serving").isOk());
  EXPECT_EQ(l.receive(), "READY=1\nSTATUS=serving\nMAINPID=" + std::to_string(::getpid()));
  ASSERT_TRUE(n.stopping("received Terminated").isOk());
  EXPECT_EQ(l.receive(), "STOPPING=1\nSTATUS=received Terminated");
}

TEST(Notifier, SendsToAnAbstractSocket) {
  std::string name = "@knap-sd-notify-test-" + std::to_string(::getpid());
  Listener l(name);
  ASSERT_TRUE(l.bound());
  Notifier n(name, microseconds(500000));
  ASSERT_TRUE(n.watchdog().isOk());
  EXPECT_EQ(l.receive(), "WATCHDOG=1");
}

TEST(Notifier, StatusIsOneLine) {
  Listener l(tempSocketPath());
  ASSERT_TRUE(l.bound());
  Notifier n(tempSocketPath(), std::nullopt);
  ASSERT_TRUE(n.status("a\nREADY=1").isOk());
  EXPECT_EQ(l.receive(), "STATUS=a READY=1");  // no forged READY line
}

TEST(Notifier, WatchdogIsSilentWhenNotWatched) {
  Listener l(tempSocketPath());
  ASSERT_TRUE(l.bound());
  Notifier n(tempSocketPath(), std::nullopt);
  ASSERT_TRUE(n.watchdog().isOk());
  EXPECT_TRUE(l.empty());
}

TEST(Notifier, ErrorsNameTheSocket) {
  Notifier missing("/nonexistent-dir/notify.sock", std::nullopt);
  Status s = missing.ready("x");
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("/nonexistent-dir/notify.sock"), std::string::npos) << s.message();
  Notifier relative("notify.sock", std::nullopt);
  EXPECT_NE(relative.ready("x").message().find("neither an absolute path"), std::string::npos);
  Notifier too_long("/" + std::string(200, 'a'), std::nullopt);
  EXPECT_NE(too_long.ready("x").message().find("too long"), std::string::npos);
  Notifier abstract_too_long("@" + std::string(200, 'a'), std::nullopt);
  EXPECT_NE(abstract_too_long.ready("x").message().find("too long"), std::string::npos);
}

TEST(Notifier, FromEnvironmentReadsAndUnsetsTheVariables) {
  Listener l(tempSocketPath());
  ASSERT_TRUE(l.bound());
  ::setenv("NOTIFY_SOCKET", tempSocketPath().c_str(), 1);
  ::setenv("WATCHDOG_USEC", "30000000", 1);
  ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
  Notifier n = Notifier::fromEnvironment();
  EXPECT_EQ(std::getenv("NOTIFY_SOCKET"), nullptr);
  EXPECT_EQ(std::getenv("WATCHDOG_USEC"), nullptr);
  EXPECT_EQ(std::getenv("WATCHDOG_PID"), nullptr);
  EXPECT_TRUE(n.enabled());
  ASSERT_TRUE(n.watchdogInterval().has_value());
  EXPECT_EQ(*n.watchdogInterval(), microseconds(15000000));  // half, as sd_watchdog_enabled(3) advises
  ASSERT_TRUE(n.ready("up").isOk());
  EXPECT_EQ(l.receive().rfind("READY=1\n", 0), 0u);
}

struct WatchdogCase {
  const char* name;
  const char* usec;
  const char* pid;  // "SELF" = our pid
  bool ok;
  long long interval_us;  // -1 = no watchdog
};

class ParseWatchdog : public testing::TestWithParam<WatchdogCase> {};

TEST_P(ParseWatchdog, Case) {
  const WatchdogCase& c = GetParam();
  pid_t self = 4242;
  const char* pid = c.pid && std::strcmp(c.pid, "SELF") == 0 ? "4242" : c.pid;
  auto r = parseWatchdog(c.usec, pid, self);
  ASSERT_EQ(r.isOk(), c.ok) << (r.isOk() ? "ok" : r.status().message());
  if (!c.ok) {
    EXPECT_NE(r.status().message().find("WATCHDOG_"), std::string::npos) << r.status().message();
    return;
  }
  if (c.interval_us < 0)
    EXPECT_FALSE(r->has_value());
  else
    EXPECT_EQ(**r, microseconds(c.interval_us));
}

INSTANTIATE_TEST_SUITE_P(Table, ParseWatchdog,
                         testing::Values(WatchdogCase{"Unset", nullptr, nullptr, true, -1},
                                         WatchdogCase{"Empty", "", nullptr, true, -1},
                                         WatchdogCase{"Zero", "0", nullptr, true, -1},
                                         WatchdogCase{"NoPid", "20000000", nullptr, true, 10000000},
                                         WatchdogCase{"OurPid", "20000000", "SELF", true, 10000000},
                                         WatchdogCase{"OtherPid", "20000000", "1", true, -1},
                                         WatchdogCase{"One", "1", nullptr, true, 1},
                                         WatchdogCase{"NotANumber", "20s", nullptr, false, 0},
                                         WatchdogCase{"Negative", "-5", nullptr, false, 0},
                                         WatchdogCase{"Huge", "99999999999999999999999", nullptr, false, 0},
                                         WatchdogCase{"BadPid", "20000000", "x1", false, 0}),
                         [](const testing::TestParamInfo<WatchdogCase>& i) {
                           return std::string(i.param.name);
                         });

// --- journald level prefixes (common/log) -------------------------------------

std::string streamId(int fd) {
  struct stat st {};
  ::fstat(fd, &st);
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

TEST(JournalStream, MatchesOnlyTheFileOnTheDescriptor) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  std::string id = streamId(p[1]);
  EXPECT_TRUE(log::isJournalStream(id.c_str(), p[1]));
  EXPECT_FALSE(log::isJournalStream(nullptr, p[1]));
  EXPECT_FALSE(log::isJournalStream("", p[1]));
  EXPECT_FALSE(log::isJournalStream((id + "x").c_str(), p[1]));
  EXPECT_FALSE(log::isJournalStream(("-" + id).c_str(), p[1]));
  EXPECT_FALSE(log::isJournalStream("1:2", p[1]));
  EXPECT_FALSE(log::isJournalStream(":", p[1]));
  int other[2];
  ASSERT_EQ(::pipe(other), 0);
  EXPECT_FALSE(log::isJournalStream(id.c_str(), other[1]));
  for (int fd : {p[0], p[1], other[0], other[1]}) ::close(fd);
}

// Runs `fn` with stderr redirected into a pipe and returns what it wrote.
template <typename Fn>
std::string captureStderr(Fn fn) {
  int p[2];
  if (::pipe(p) != 0) return "<pipe failed>";
  int saved = ::dup(2);
  ::dup2(p[1], 2);
  ::close(p[1]);
  fn(streamId(2));
  ::dup2(saved, 2);
  ::close(saved);
  ::fcntl(p[0], F_SETFL, O_NONBLOCK);
  char buf[4096];
  ssize_t n = ::read(p[0], buf, sizeof(buf));
  ::close(p[0]);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

TEST(JournalStream, LinesCarryTheirSyslogLevelOnlyUnderJournald) {
  std::string journal = captureStderr([](const std::string& id) {
    ::setenv("JOURNAL_STREAM", id.c_str(), 1);
    log::detectJournal();
    LOG(WARNING) << "disk almost full";
    LOG(ERROR) << "cannot open";
    LOG(INFO) << "serving";
  });
  EXPECT_EQ(journal.rfind("<4>W ", 0), 0u) << journal;
  EXPECT_NE(journal.find("\n<3>E "), std::string::npos) << journal;
  EXPECT_NE(journal.find("\n<6>I "), std::string::npos) << journal;

  std::string plain = captureStderr([](const std::string&) {
    ::setenv("JOURNAL_STREAM", "1:2", 1);  // a journal stream, but not our stderr
    log::detectJournal();
    LOG(WARNING) << "disk almost full";
  });
  EXPECT_EQ(plain.rfind("W ", 0), 0u) << plain;
  ::unsetenv("JOURNAL_STREAM");
  log::detectJournal();
}

}  // namespace
}  // namespace knap::sd
