#include "common/listen_fds.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

namespace knap {
namespace {

constexpr pid_t kSelf = 4242;

std::vector<ListenFd> ok(const char* pid, const char* fds, const char* names) {
  auto r = parseListenFds(pid, fds, names, kSelf);
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  return r.isOk() ? *r : std::vector<ListenFd>{};
}

std::string err(const char* pid, const char* fds, const char* names) {
  auto r = parseListenFds(pid, fds, names, kSelf);
  EXPECT_FALSE(r.isOk());
  return r.isOk() ? "" : r.status().message();
}

TEST(ListenFds, NoneUnlessMeantForUs) {
  EXPECT_TRUE(ok(nullptr, "2", "a:b").empty());       // no LISTEN_PID
  EXPECT_TRUE(ok("4243", "2", "a:b").empty());        // another process's
  EXPECT_TRUE(ok("4242", nullptr, nullptr).empty());  // no LISTEN_FDS
}

TEST(ListenFds, NamedAndUnnamed) {
  EXPECT_EQ(ok("4242", "2", "router:api"), (std::vector<ListenFd>{{3, "router"}, {4, "api"}}));
  EXPECT_EQ(ok("4242", "1", nullptr), (std::vector<ListenFd>{{3, "unknown"}}));
  EXPECT_EQ(ok("4242", "3", "a::c"), (std::vector<ListenFd>{{3, "a"}, {4, ""}, {5, "c"}}));
}

TEST(ListenFds, HostileValuesAreErrorsNamingTheVariable) {
  EXPECT_NE(err("abc", "1", nullptr).find("LISTEN_PID"), std::string::npos);
  EXPECT_NE(err("-1", "1", nullptr).find("LISTEN_PID"), std::string::npos);
  EXPECT_NE(err("0", "1", nullptr).find("LISTEN_PID"), std::string::npos);
  EXPECT_NE(err(" 4242", "1", nullptr).find("LISTEN_PID"), std::string::npos);
  EXPECT_NE(err("99999999999999999999", "1", nullptr).find("LISTEN_PID"), std::string::npos);
  EXPECT_NE(err("4242", "0", nullptr).find("LISTEN_FDS"), std::string::npos);
  EXPECT_NE(err("4242", "-2", nullptr).find("LISTEN_FDS"), std::string::npos);
  EXPECT_NE(err("4242", "2x", nullptr).find("LISTEN_FDS"), std::string::npos);
  EXPECT_NE(err("4242", "", nullptr).find("LISTEN_FDS"), std::string::npos);
  EXPECT_NE(err("4242", "2147483647", nullptr).find("more than"), std::string::npos);
  EXPECT_NE(err("4242", "4294967296", nullptr).find("LISTEN_FDS"), std::string::npos);
  EXPECT_NE(err("4242", "2", "router").find("names 1 sockets but LISTEN_FDS is 2"), std::string::npos);
  EXPECT_NE(err("4242", "1", "a:b:c").find("LISTEN_FDNAMES"), std::string::npos);
  EXPECT_NE(err("4242", "1", "bad\nname").find("invalid name"), std::string::npos);
  EXPECT_NE(err("4242", "1", std::string(300, 'x').c_str()).find("invalid name"), std::string::npos);
}

TEST(ListenFds, TakeMarksCloexecAndUnsetsTheEnvironment) {
  // Put a listening socket at fd 3 (whatever is there is saved and restored).
  const int saved = ::dup(3);
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(s, 4), 0);
  if (s != 3) {
    ASSERT_EQ(::dup2(s, 3), 3);
    ::close(s);
  }
  ::fcntl(3, F_SETFD, 0);
  ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
  ::setenv("LISTEN_FDS", "1", 1);
  ::setenv("LISTEN_FDNAMES", "router", 1);
  auto r = takeListenFds();
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(*r, (std::vector<ListenFd>{{3, "router"}}));
  EXPECT_TRUE(::fcntl(3, F_GETFD) & FD_CLOEXEC);
  EXPECT_EQ(std::getenv("LISTEN_PID"), nullptr);
  EXPECT_EQ(std::getenv("LISTEN_FDS"), nullptr);
  EXPECT_EQ(std::getenv("LISTEN_FDNAMES"), nullptr);
  int family = 0;
  EXPECT_TRUE(checkListeningTcp(3, &family).isOk());
  EXPECT_EQ(family, AF_INET);

  // A socket that is not listening, and an fd that is not a socket, are named.
  int c = ::socket(AF_INET, SOCK_STREAM, 0);
  Status st = checkListeningTcp(c, &family);
  EXPECT_NE(st.message().find("not listening"), std::string::npos) << st.toString();
  ::close(c);
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  st = checkListeningTcp(p[0], &family);
  EXPECT_NE(st.message().find("not a socket"), std::string::npos) << st.toString();
  ::close(p[0]);
  ::close(p[1]);

  // A LISTEN_FDS that names an fd that is not open is an error (and still unsets).
  ::close(3);
  ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
  ::setenv("LISTEN_FDS", "1", 1);
  auto bad = takeListenFds();
  EXPECT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("is not open"), std::string::npos) << bad.status().toString();
  EXPECT_EQ(std::getenv("LISTEN_FDS"), nullptr);
  if (saved >= 0) {
    ::dup2(saved, 3);
    ::close(saved);
  }
}

}  // namespace
}  // namespace knap
