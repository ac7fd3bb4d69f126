// router/readiness.h: reads that wait for epoll's report instead of trying
// recv first must never miss bytes, a FIN or a reset, whatever the order in
// which they arrive, are reported and are read.
#include "router/readiness.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include "router/deadline_stream.h"

namespace knap::router {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

// A connected pair on loopback: `a` (the side under test) in a
// DeadlineStream, `b` the peer, a plain socket on its own context.
struct Pair {
  asio::io_context ioc{1};
  asio::io_context peer_ioc;
  std::optional<DeadlineStream> a;
  tcp::socket b{peer_ioc};
  Pair() {
    tcp::acceptor acc(peer_ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    tcp::socket s(ioc);
    s.connect(acc.local_endpoint());
    acc.accept(b);
    b.set_option(tcp::no_delay(true));
    a.emplace(std::move(s));
  }
  void send(const std::string& data) { asio::write(b, asio::buffer(data)); }
};

// One DeadlineStream read, run to completion (or 5 s: a missed edge shows as
// the read never completing).
struct ReadResult {
  error_code ec = asio::error::would_block;
  std::string data;
  bool done() const { return ec != asio::error::would_block; }
};
ReadResult readOnce(Pair& p, size_t size) {
  ReadResult r;
  std::string buf(size, '\0');
  p.a->expires_after(5s);
  p.a->async_read_some(asio::buffer(buf), [&](error_code ec, size_t n) {
    r.ec = ec;
    r.data = buf.substr(0, n);
  });
  const auto limit = Clock::now() + 6s;
  p.ioc.restart();
  while (!r.done() && Clock::now() < limit) p.ioc.run_one_for(20ms);
  return r;
}

// Lets the reactor take in what epoll reports now (without any read queued;
// the work guard makes poll() run the reactor even with nothing pending).
void poll(Pair& p) {
  auto guard = asio::make_work_guard(p.ioc);
  p.ioc.restart();
  p.ioc.poll();
  std::this_thread::sleep_for(2ms);
  p.ioc.restart();
  p.ioc.poll();
}

TEST(ReadinessTest, ASocketLeftEmptyIsNotTriedUntilEpollReportsIt) {
  Pair p;
  p.send("hello");
  // The arrival's report taken in first: a report from before the receive
  // would set the flag again later (harmless: one receive finds nothing).
  std::this_thread::sleep_for(5ms);
  poll(p);
  ReadResult r = readOnce(p, 64);
  ASSERT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.data, "hello");
  if (!readiness::kSupported) {  // (another Boost: every read is tried first, as Asio does)
    EXPECT_TRUE(readiness::mayHaveData(p.a->socket()));
    return;
  }
  // Fewer bytes than asked: the socket was emptied, and nothing came since.
  EXPECT_FALSE(readiness::mayHaveData(p.a->socket()));
  poll(p);
  EXPECT_FALSE(readiness::mayHaveData(p.a->socket()));
  // New bytes are a new edge: reported, the socket may hold data again.
  p.send("again");
  std::this_thread::sleep_for(5ms);
  poll(p);
  EXPECT_TRUE(readiness::mayHaveData(p.a->socket()));
  r = readOnce(p, 64);
  EXPECT_EQ(r.data, "again");
}

TEST(ReadinessTest, AFullBufferLeavesTheSocketToBeTriedAgain) {
  Pair p;
  p.send("0123456789");
  ReadResult r = readOnce(p, 4);
  EXPECT_EQ(r.data, "0123");
  EXPECT_TRUE(readiness::mayHaveData(p.a->socket()));
  r = readOnce(p, 4);
  EXPECT_EQ(r.data, "4567");
  r = readOnce(p, 4);
  EXPECT_EQ(r.data, "89");
}

TEST(ReadinessTest, AReadWaitingOnAnEmptiedSocketGetsLaterBytes) {
  Pair p;
  p.send("a");
  EXPECT_EQ(readOnce(p, 16).data, "a");
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    p.send("b");
  });
  ReadResult r = readOnce(p, 16);
  later.join();
  ASSERT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.data, "b");
}

// The bytes and the FIN arrive before the read, in one report or two: the
// read that returns the bytes must not leave the FIN unseen (no edge follows
// it), whether or not the reactor took the report in before the read.
TEST(ReadinessTest, AFinThatCameWithTheLastBytesIsNotMissed) {
  for (const bool reported_first : {false, true}) {
    for (const bool warm : {false, true}) {
      SCOPED_TRACE(std::string(reported_first ? "report taken in first" : "read before the report") +
                   (warm ? ", socket read before" : ", first read"));
      Pair p;
      if (warm) {
        p.send("x");
        EXPECT_EQ(readOnce(p, 16).data, "x");
      }
      p.send("last");
      p.b.shutdown(tcp::socket::shutdown_send);
      std::this_thread::sleep_for(5ms);
      if (reported_first) poll(p);
      ReadResult r = readOnce(p, 16);
      EXPECT_EQ(r.data, "last");
      r = readOnce(p, 16);
      EXPECT_EQ(r.ec, asio::error::eof) << r.ec.message();
    }
  }
}

TEST(ReadinessTest, AFinAfterTheSocketWasEmptiedEndsAWaitingRead) {
  Pair p;
  p.send("x");
  EXPECT_EQ(readOnce(p, 16).data, "x");
  std::thread later([&] {
    std::this_thread::sleep_for(30ms);
    p.b.shutdown(tcp::socket::shutdown_send);
  });
  ReadResult r = readOnce(p, 16);
  later.join();
  EXPECT_EQ(r.ec, asio::error::eof) << r.ec.message();
}

TEST(ReadinessTest, AResetAfterBytesIsReported) {
  Pair p;
  p.send("x");
  EXPECT_EQ(readOnce(p, 16).data, "x");
  p.send("bye");
  std::this_thread::sleep_for(5ms);
  poll(p);
  // SO_LINGER 0: close sends a reset.
  p.b.set_option(asio::socket_base::linger(true, 0));
  p.b.close();
  ReadResult r = readOnce(p, 16);
  if (!r.ec) {
    EXPECT_EQ(r.data, "bye");
    r = readOnce(p, 16);
  }
  EXPECT_TRUE(r.done());
  EXPECT_TRUE(r.ec == asio::error::connection_reset || r.ec == asio::error::eof) << r.ec.message();
}

TEST(ReadinessTest, AWaitingReadEndsWithTimeoutAtTheDeadline) {
  Pair p;
  p.send("x");
  EXPECT_EQ(readOnce(p, 16).data, "x");
  ReadResult r;
  char buf[16];
  const auto t0 = Clock::now();
  p.a->expires_after(80ms);
  p.a->async_read_some(asio::buffer(buf), [&](error_code ec, size_t) { r.ec = ec; });
  p.ioc.restart();
  while (!r.done() && Clock::now() - t0 < 5s) p.ioc.run_one_for(20ms);
  EXPECT_EQ(r.ec, boost::beast::error::timeout);
  EXPECT_GE(Clock::now() - t0, 80ms);
  // The socket still works afterwards.
  p.send("y");
  EXPECT_EQ(readOnce(p, 16).data, "y");
}

TEST(ReadinessTest, AnAsioReadOnAnEmptiedSocketStillCompletes) {
  // Code that reads the socket with Asio directly (the upstream pool's
  // MSG_PEEK watch) queues on the same registration.
  Pair p;
  p.send("x");
  EXPECT_EQ(readOnce(p, 16).data, "x");
  error_code got = asio::error::would_block;
  char c;
  p.a->socket().async_receive(asio::buffer(&c, 1), MSG_PEEK, [&](error_code ec, size_t) { got = ec; });
  std::thread later([&] {
    std::this_thread::sleep_for(30ms);
    p.b.shutdown(tcp::socket::shutdown_send);
  });
  const auto limit = Clock::now() + 5s;
  p.ioc.restart();
  while (got == asio::error::would_block && Clock::now() < limit) p.ioc.run_one_for(20ms);
  later.join();
  EXPECT_EQ(got, asio::error::eof) << got.message();
}

// Bytes in random pieces at random moments, the FIN at the end, read with
// random buffer sizes: every byte arrives, in order, then EOF; a missed
// edge would leave a read hanging past its 5 s deadline (a timeout).
TEST(ReadinessTest, RandomArrivalsAndReadsLoseNothing) {
  std::mt19937 rng(12345);
  for (int round = 0; round < 40; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Pair p;
    std::string sent;
    for (int i = 0; i < 200; ++i)
      sent += std::to_string(i) + (i % 7 == 0 ? std::string(rng() % 3000, 'z') : ",");
    const unsigned seed = rng();
    std::thread writer([&p, &sent, seed] {
      std::mt19937 r(seed);
      size_t at = 0;
      while (at < sent.size()) {
        const size_t n = std::min(sent.size() - at, size_t{1} + r() % 700);
        asio::write(p.b, asio::buffer(sent.data() + at, n));
        at += n;
        switch (r() % 4) {
          case 0:
            break;
          case 1:
            std::this_thread::yield();
            break;
          default:
            std::this_thread::sleep_for(std::chrono::microseconds(r() % 300));
        }
      }
      p.b.shutdown(tcp::socket::shutdown_send);
    });
    std::string got;
    ReadResult r;
    for (;;) {
      if (rng() % 3 == 0) poll(p);
      r = readOnce(p, 1 + rng() % 2048);
      if (r.ec) break;
      got += r.data;
    }
    writer.join();
    EXPECT_EQ(r.ec, asio::error::eof) << r.ec.message();
    ASSERT_EQ(got, sent);
  }
}

// --- attack-readiness: sequences found by review ---------------------------

// The reactor's descriptor states come from a pool and are reused by the
// next socket opened on the same io_context; task_result_ (the events of the
// last report) is not reset when one is. A connection that ended with a FIN
// leaves EPOLLRDHUP there, so markDrained never clears the flag for the next
// socket until that socket's own first report: a read on a new, silent
// connection (an accepted client that has not sent yet) receives EAGAIN,
// waits with the flag still set, completes at once (posted), receives
// EAGAIN again... a busy loop. And since the re-wait in ReadWhenReady does
// not look at the deadline, the timer's cancel() never finds the operation
// queued: the read neither ends at its deadline nor stops spinning.
TEST(ReadinessAttackTest, ASocketReusingTheStateOfOneThatGotAFinDoesNotSpin) {
  if (!readiness::kSupported) GTEST_SKIP();
  asio::io_context ioc{1};
  asio::io_context peer_ioc;
  tcp::acceptor acc(peer_ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  {
    // Connection 1: bytes, then the peer's FIN; read to EOF, then closed.
    tcp::socket s(ioc);
    s.connect(acc.local_endpoint());
    tcp::socket b(peer_ioc);
    acc.accept(b);
    DeadlineStream a(std::move(s));
    asio::write(b, asio::buffer(std::string("x")));
    b.shutdown(tcp::socket::shutdown_send);
    std::string got;
    error_code last;
    for (int i = 0; i < 4 && !last; ++i) {
      char buf[16];
      bool done = false;
      a.expires_after(2s);
      a.async_read_some(asio::buffer(buf), [&](error_code ec, size_t n) {
        last = ec;
        got.append(buf, n);
        done = true;
      });
      ioc.restart();
      const auto limit = Clock::now() + 3s;
      while (!done && Clock::now() < limit) ioc.run_one_for(20ms);
    }
    ASSERT_EQ(got, "x");
    ASSERT_EQ(last, asio::error::eof);
  }  // `a` closed: its descriptor state goes back to the pool
  // Connection 2: opened on the same context (gets the same state), silent.
  tcp::socket s(ioc);
  s.connect(acc.local_endpoint());
  tcp::socket b(peer_ioc);
  acc.accept(b);
  DeadlineStream a(std::move(s));
  char buf[16];
  error_code r = asio::error::would_block;
  const auto t0 = Clock::now();
  a.expires_after(150ms);
  a.async_read_some(asio::buffer(buf), [&](error_code ec, size_t) { r = ec; });
  ioc.restart();
  size_t handlers = 0;
  while (r == asio::error::would_block && Clock::now() - t0 < 1500ms) handlers += ioc.run_one_for(20ms);
  const bool ended = r != asio::error::would_block;
  // (Unstick it if it spins: bytes are a report of its own.)
  if (!ended) {
    asio::write(b, asio::buffer(std::string("z")));
    while (r == asio::error::would_block && Clock::now() - t0 < 5s) handlers += ioc.run_one_for(20ms);
  }
  EXPECT_TRUE(ended) << "the read did not end at its 150 ms deadline";
  if (ended) {
    EXPECT_EQ(r, boost::beast::error::timeout) << r.message();
  }
  EXPECT_LT(handlers, 100u) << "handlers run for one silent read (a busy loop)";
}

// A read whose wait completes in the same reactor turn as the deadline
// timer, but after it: the reactor completes the socket's write first (in
// place) and posts the read's wait completion behind the timer's handler
// (perform_io runs the write queue before the read queue, and only the
// first completion runs in place). The timer finds the read pending, sets
// timed_out and cancels the socket, which has nothing queued; the read's
// handler then receives EAGAIN (the report was for bytes taken between
// epoll_wait and perform_io; here a handler queued before the report takes
// them, as a posted read of the same stream would) and waits again, with
// no timer armed and timed_out ignored: it never ends. (Asio's own read
// would still be queued in the reactor there, and cancel() would end it
// with timeout.)
TEST(ReadinessAttackTest, AReadRewaitingAfterTheTimerFiredStillTimesOut) {
  if (!readiness::kSupported) GTEST_SKIP();
  Pair p;
  DeadlineStream& a = *p.a;
  const int fd = a.socket().native_handle();
  p.send("x");
  ASSERT_EQ(readOnce(p, 16).data, "x");  // (warm: RDHUP registered, flag clear)
  // Fill the way out so that a write waits (small buffers).
  a.socket().set_option(asio::socket_base::send_buffer_size(8192));
  std::string junk(1 << 16, 'j');
  while (::send(fd, junk.data(), junk.size(), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) {
  }
  a.expires_after(150ms);
  const auto t0 = Clock::now();
  bool wrote = false;
  error_code r = asio::error::would_block;
  size_t n = 0;
  char buf[4096];
  a.async_write_some(asio::buffer(junk), [&](error_code, size_t) { wrote = true; });
  a.async_read_some(asio::buffer(buf), [&](error_code ec, size_t m) {
    r = ec;
    n = m;
  });
  poll(p);  // both queued in the reactor
  ASSERT_EQ(r, asio::error::would_block);
  ASSERT_FALSE(wrote);
  // While the loop is not running: the peer makes room (a writable edge),
  // sends (a readable edge), and the deadline passes.
  {
    p.b.non_blocking(true);
    std::vector<char> sink(1 << 16);
    error_code ec;
    for (int i = 0, idle = 0; i < 400 && idle < 20; ++i) {
      p.b.read_some(asio::buffer(sink), ec);
      if (ec == asio::error::would_block) {
        ++idle;
        std::this_thread::sleep_for(1ms);
      } else {
        idle = 0;
      }
    }
    p.b.non_blocking(false);
    pollfd pf{fd, POLLOUT, 0};
    ASSERT_EQ(::poll(&pf, 1, 0), 1) << "not writable after the peer drained";
  }
  p.send("abc");
  std::this_thread::sleep_until(t0 + 200ms);
  // Queued before the reactor's next turn: takes the bytes that turn reports.
  std::string taken;
  asio::post(p.ioc, [&] {
    char t[64];
    const ssize_t k = ::recv(fd, t, sizeof t, MSG_DONTWAIT);
    if (k > 0) taken.assign(t, k);
  });
  p.ioc.restart();
  while (r == asio::error::would_block && Clock::now() - t0 < 1500ms) p.ioc.run_one_for(20ms);
  EXPECT_EQ(taken, "abc");
  EXPECT_TRUE(wrote);
  EXPECT_EQ(r, boost::beast::error::timeout) << (r == asio::error::would_block ? "never ended" : r.message());
  p.a->close();
  p.ioc.restart();
  p.ioc.run_for(50ms);
}

// TCP urgent data: recv stops at the urgent mark, returning fewer bytes
// than asked while bytes remain (those after the mark). markDrained takes
// the short read for an emptied socket and no further edge comes: the next
// read waits until its deadline although the bytes are there.
TEST(ReadinessAttackTest, BytesAfterAnUrgentMarkAreRead) {
  Pair p;
  p.send("w");
  ASSERT_EQ(readOnce(p, 16).data, "w");  // (warm: RDHUP registered, no re-check to come)
  p.send("abc");
  asio::write(p.b, asio::buffer(std::string("X")), asio::transfer_all());
  {
    const char x = 'U';
    ASSERT_EQ(::send(p.b.native_handle(), &x, 1, MSG_OOB), 1);
  }
  p.send("def");
  std::this_thread::sleep_for(20ms);
  std::string got;
  const auto t0 = Clock::now();
  for (int i = 0; i < 4 && got.size() < 7; ++i) {
    char buf[64];
    error_code r = asio::error::would_block;
    size_t n = 0;
    p.a->expires_after(1s);
    p.a->async_read_some(asio::buffer(buf), [&](error_code ec, size_t m) {
      r = ec;
      n = m;
    });
    p.ioc.restart();
    while (r == asio::error::would_block && Clock::now() - t0 < 3s) p.ioc.run_one_for(20ms);
    if (r) {
      ADD_FAILURE() << "read " << i << " after " << got.size() << " bytes: " << r.message();
      break;
    }
    got.append(buf, n);
  }
  EXPECT_EQ(got, "abcXdef");  // (the urgent byte is out of band)
  EXPECT_LT(Clock::now() - t0, 500ms);
}

}  // namespace
}  // namespace knap::router
