// DeadlineStream: one deadline for reads and writes, timeout as in
// beast::tcp_stream (error::timeout), the timer re-armed lazily.
#include "router/deadline_stream.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <optional>

namespace knap::router {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A connected pair on loopback: `a` wrapped in a DeadlineStream, `b` plain.
struct Pair {
  asio::io_context ioc;
  std::optional<DeadlineStream> a;
  tcp::socket b{ioc};
  Pair() {
    tcp::acceptor acc(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    tcp::socket s(ioc);
    s.connect(acc.local_endpoint());
    acc.accept(b);
    a.emplace(std::move(s));
  }
};

// Runs handlers until `done` or 10 s (an armed timer would keep run() busy
// until it fires: the stream leaves it armed on purpose).
template <class Pred>
void runUntil(asio::io_context& ioc, Pred done) {
  const auto limit = Clock::now() + 10s;
  ioc.restart();
  while (!done() && Clock::now() < limit) ioc.run_one_for(50ms);
}

TEST(DeadlineStreamTest, ReadPastTheDeadlineEndsWithTimeout) {
  Pair p;
  char byte;
  boost::system::error_code got;
  const auto t0 = Clock::now();
  p.a->expires_after(100ms);
  p.a->async_read_some(asio::buffer(&byte, 1), [&](boost::system::error_code ec, size_t) { got = ec; });
  p.ioc.run();
  EXPECT_EQ(got, boost::beast::error::timeout);
  EXPECT_GE(Clock::now() - t0, 100ms);
  // Past the deadline, a new operation fails at once; a new deadline clears it.
  p.ioc.restart();
  p.a->async_read_some(asio::buffer(&byte, 1), [&](boost::system::error_code ec, size_t) { got = ec; });
  p.ioc.run();
  EXPECT_EQ(got, boost::beast::error::timeout);
}

TEST(DeadlineStreamTest, OperationsWithinTheDeadlineComplete) {
  Pair p;
  char data[4] = {};
  boost::system::error_code got = asio::error::would_block;
  size_t n = 0;
  p.a->expires_after(10s);
  p.a->async_read_some(asio::buffer(data), [&](boost::system::error_code ec, size_t k) {
    got = ec;
    n = k;
  });
  asio::write(p.b, asio::buffer("ping", 4));
  runUntil(p.ioc, [&] { return got != asio::error::would_block; });
  EXPECT_FALSE(got) << got.message();
  EXPECT_EQ(n, 4u);
}

TEST(DeadlineStreamTest, ALaterDeadlineIsHonouredByTheArmedTimer) {
  Pair p;
  char byte;
  boost::system::error_code first, second;
  // A read with a short deadline completes; the timer stays armed for it.
  p.a->expires_after(150ms);
  p.a->async_read_some(asio::buffer(&byte, 1), [&](boost::system::error_code ec, size_t) { first = ec; });
  first = asio::error::would_block;
  asio::write(p.b, asio::buffer("x", 1));
  runUntil(p.ioc, [&] { return first != asio::error::would_block; });
  EXPECT_FALSE(first) << first.message();
  // The next read gets a longer deadline; data comes after the first
  // deadline has passed but before the second: no timeout.
  const auto t0 = Clock::now();
  p.a->expires_after(1500ms);
  p.a->async_read_some(asio::buffer(&byte, 1), [&](boost::system::error_code ec, size_t) { second = ec; });
  second = asio::error::would_block;
  asio::steady_timer later(p.ioc, 400ms);
  later.async_wait([&](boost::system::error_code) { asio::write(p.b, asio::buffer("y", 1)); });
  runUntil(p.ioc, [&] { return second != asio::error::would_block; });
  EXPECT_FALSE(second) << second.message();
  EXPECT_GE(Clock::now() - t0, 400ms);
}

TEST(DeadlineStreamTest, AnEarlierDeadlineRearmsTheTimer) {
  Pair p;
  char byte;
  boost::system::error_code first, second;
  p.a->expires_after(10s);
  p.a->async_read_some(asio::buffer(&byte, 1), [&](boost::system::error_code ec, size_t) { first = ec; });
  first = asio::error::would_block;
  asio::write(p.b, asio::buffer("x", 1));
  runUntil(p.ioc, [&] { return first != asio::error::would_block; });
  ASSERT_FALSE(first);
  const auto t0 = Clock::now();
  p.a->expires_after(100ms);
  p.a->async_read_some(asio::buffer(&byte, 1), [&](boost::system::error_code ec, size_t) { second = ec; });
  runUntil(p.ioc, [&] { return !!second; });
  EXPECT_EQ(second, boost::beast::error::timeout);
  EXPECT_LT(Clock::now() - t0, 5s) << "waited for the old 10 s timer";
}

TEST(DeadlineStreamTest, ExpiresNeverWaitsForData) {
  Pair p;
  char byte;
  boost::system::error_code got = asio::error::would_block;
  p.a->expires_after(50ms);
  p.a->expires_never();
  p.a->async_read_some(asio::buffer(&byte, 1), [&](boost::system::error_code ec, size_t) { got = ec; });
  asio::steady_timer later(p.ioc, 200ms);
  later.async_wait([&](boost::system::error_code) { asio::write(p.b, asio::buffer("z", 1)); });
  runUntil(p.ioc, [&] { return got != asio::error::would_block; });
  EXPECT_FALSE(got) << got.message();
}

TEST(DeadlineStreamTest, DestroyedWithAnArmedTimer) {
  Pair p;
  char byte;
  p.a->expires_after(50ms);
  p.a->async_read_some(asio::buffer(&byte, 1), [](boost::system::error_code, size_t) {});
  p.a.reset();  // the read ends aborted, the timer's handler finds the stream gone
  p.ioc.run();
  SUCCEED();
}

}  // namespace
}  // namespace knap::router
