// DeadlineStream: a TCP socket with one deadline for its reads, writes and
// connect, for the router's client and pod connections. It replaces
// beast::tcp_stream there, with the same calls (expires_at/after/never,
// async_read_some/write_some/connect/wait, socket(), close(), release_socket(),
// and write_some_now: a write attempted at once, without waiting)
// and the same result on expiry: the pending operations end with
// beast::error::timeout, as does any operation started past the deadline.
//
// Why not beast::tcp_stream: it arms its timer before and cancels it after
// every read and write (two timer-queue operations and a cancelled handler
// per I/O); in the router's profile that was about a quarter of the cost of
// a proxied request. Here setting the deadline only stores a time; the one
// timer is armed when an operation starts and none is armed, and is left
// running when the operation ends. When it fires it re-arms for the current
// deadline if that is later (the deadline moved on meanwhile), does nothing
// if no operation is pending, and otherwise cancels the socket's operations,
// which then report timeout. So a kept-alive connection costs one timer wait
// per deadline period, not two per I/O.
//
// Reads do not try the socket first when it was left empty and epoll has
// not reported it readable since (router/readiness.h).
//
// Thread safety: like a socket, one strand (here: the worker's one-thread
// io_context); at most one read and one write pending at a time.
#pragma once

#include <chrono>
#include <memory>
#include <utility>

#include <boost/asio/async_result.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>

#include "router/readiness.h"

namespace knap::router {

class DeadlineStream {
 public:
  using socket_type = boost::asio::ip::tcp::socket;
  using executor_type = socket_type::executor_type;
  using clock = std::chrono::steady_clock;

  explicit DeadlineStream(socket_type s)
      : socket_(std::move(s)), state_(std::make_shared<State>(socket_.get_executor())) {
    state_->socket = &socket_;
  }
  explicit DeadlineStream(boost::asio::io_context& ctx) : DeadlineStream(socket_type(ctx)) {}
  ~DeadlineStream() {
    state_->socket = nullptr;  // a timer handler still queued finds the stream gone
    state_->timer.cancel();
  }
  DeadlineStream(const DeadlineStream&) = delete;
  DeadlineStream& operator=(const DeadlineStream&) = delete;

  executor_type get_executor() noexcept { return socket_.get_executor(); }
  socket_type& socket() noexcept { return socket_; }
  // The socket, moved out; the stream keeps no deadline for it.
  socket_type release_socket() {
    expires_never();
    state_->timer.cancel();
    return std::move(socket_);
  }
  void close() {
    boost::system::error_code ignored;
    socket_.close(ignored);
  }

  void expires_at(clock::time_point t) {
    state_->deadline = t;
    state_->timed_out = false;
  }
  void expires_after(clock::duration d) { expires_at(clock::now() + d); }
  void expires_never() { expires_at(clock::time_point::max()); }

  // Reads into the first non-empty buffer of `b` once the socket may hold
  // bytes: at once (posted) unless a receive left it empty and epoll has not
  // reported it readable since (router/readiness.h: no receive that finds
  // nothing).
  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& b, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& bufs) {
          if (!start()) return expired(std::move(handler));
          using H = decltype(handler);
          if constexpr (!readiness::kSupported) {
            socket_.async_read_some(bufs, Done<H>{state_, std::move(handler)});
          } else {
            boost::asio::mutable_buffer into;
            for (auto it = boost::asio::buffer_sequence_begin(bufs);
                 it != boost::asio::buffer_sequence_end(bufs); ++it) {
              into = boost::asio::mutable_buffer(*it);
              if (into.size() > 0) break;
            }
            if (into.size() == 0) {  // (reads nothing, at once: Asio's answer)
              return socket_.async_read_some(bufs, Done<H>{state_, std::move(handler)});
            }
            readiness::asyncWaitReadable(socket_, ReadWhenReady<H>{state_, into, std::move(handler)});
          }
        },
        token, b);
  }
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& b, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& bufs) {
          if (!start()) return expired(std::move(handler));
          socket_.async_write_some(bufs, Done<decltype(handler)>{state_, std::move(handler)});
        },
        token, b);
  }
  // Writes what the socket takes at once, without waiting (the socket is
  // put in non-blocking mode; asynchronous operations are unaffected), and
  // returns the bytes written; the rest is for async_write_some. A small
  // write to a socket with room completes here without a coroutine
  // suspension, a posted completion and the event-loop turn (epoll_wait)
  // that costs. Like an operation started past the deadline, it fails with
  // timeout then.
  template <class ConstBuffers>
  std::size_t write_some_now(const ConstBuffers& b, boost::system::error_code& ec) {
    State& st = *state_;
    if (st.timed_out || (st.deadline != clock::time_point::max() && st.deadline <= clock::now())) {
      st.timed_out = true;
      ec = boost::beast::error::timeout;
      return 0;
    }
    if (!socket_.non_blocking()) {
      socket_.non_blocking(true, ec);
      if (ec) return 0;
    }
    const std::size_t n = socket_.write_some(b, ec);
    if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) {
      ec = {};
      return 0;
    }
    return ec ? 0 : n;
  }
  // Waits until the socket is readable or writable (router/tls_socket.h:
  // TLS reads and writes the socket itself), under the same deadline.
  template <class Token>
  auto async_wait(socket_type::wait_type w, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [this](auto handler, socket_type::wait_type what) {
          if (!start()) return expiredCode(std::move(handler));
          socket_.async_wait(what, CodeDone<decltype(handler)>{state_, std::move(handler)});
        },
        token, w);
  }
  // Waits until a read would find something (bytes, end of stream or an
  // error) without reading (router/readiness.h: no syscall while the socket
  // was left empty), under the same deadline; then read_now. For a reader
  // that allocates its buffer only once there is something to read.
  template <class Token>
  auto async_wait_readable(Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [this](auto handler) {
          if (!start()) return expiredCode(std::move(handler));
          if constexpr (readiness::kSupported) {
            readiness::asyncWaitReadable(socket_, CodeDone<decltype(handler)>{state_, std::move(handler)});
          } else {
            socket_.async_wait(socket_type::wait_read,
                               CodeDone<decltype(handler)>{state_, std::move(handler)});
          }
        },
        token);
  }
  // One receive now, never waiting: the bytes received, or 0 with `ec`
  // set (would_block: nothing there yet; eof; the socket's error).
  std::size_t read_now(boost::asio::mutable_buffer b, boost::system::error_code& ec) {
    return readiness::readNow(socket_, b, ec);
  }
  template <class Token>
  auto async_connect(const boost::asio::ip::tcp::endpoint& ep, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [this](auto handler, const boost::asio::ip::tcp::endpoint& e) {
          if (!start()) return expiredCode(std::move(handler));
          socket_.async_connect(e, CodeDone<decltype(handler)>{state_, std::move(handler)});
        },
        token, ep);
  }

 private:
  struct State {
    explicit State(const executor_type& ex) : timer(ex) {}
    boost::asio::steady_timer timer;
    clock::time_point deadline = clock::time_point::max();
    clock::time_point armed_for = clock::time_point::max();  // the timer's expiry while armed
    bool armed = false;
    bool timed_out = false;   // the timer cancelled the pending operations
    int pending = 0;          // operations in flight
    uint64_t generation = 0;  // of the armed wait; older completions are stale
    socket_type* socket = nullptr;
  };

  // Counts the operation in and makes sure the timer covers the deadline.
  // False when the deadline has passed already (the operation fails at once).
  bool start() {
    State& st = *state_;
    if (st.timed_out) return false;
    if (st.deadline != clock::time_point::max()) {
      if (st.deadline <= clock::now()) return false;
      if (!st.armed || st.armed_for > st.deadline) arm(state_);
    }
    ++st.pending;
    return true;
  }
  static void arm(const std::shared_ptr<State>& sp) {
    State& st = *sp;
    st.armed = true;
    st.armed_for = st.deadline;
    const uint64_t gen = ++st.generation;
    st.timer.expires_at(st.deadline);  // cancels an earlier wait (stale by its generation)
    st.timer.async_wait([weak = std::weak_ptr<State>(sp), gen](const boost::system::error_code&) {
      std::shared_ptr<State> s = weak.lock();
      if (!s || s->socket == nullptr || gen != s->generation) return;
      s->armed = false;
      if (s->pending == 0 || s->deadline == clock::time_point::max())
        return;  // idle: the next operation arms it
      if (clock::now() < s->deadline) {
        arm(s);  // the deadline moved on
        return;
      }
      s->timed_out = true;
      boost::system::error_code ignored;
      s->socket->cancel(ignored);
    });
  }
  template <class Handler>
  void expired(Handler handler) {
    state_->timed_out = true;
    boost::asio::post(socket_.get_executor(), [h = std::move(handler)]() mutable {
      std::move(h)(boost::system::error_code(boost::beast::error::timeout), std::size_t{0});
    });
  }
  // expired() for an operation that completes with a code alone.
  template <class Handler>
  void expiredCode(Handler handler) {
    state_->timed_out = true;
    boost::asio::post(socket_.get_executor(), [h = std::move(handler)]() mutable {
      std::move(h)(boost::system::error_code(boost::beast::error::timeout));
    });
  }
  static boost::system::error_code mapped(State& st, boost::system::error_code ec) {
    --st.pending;
    if (st.timed_out && ec) return boost::system::error_code(boost::beast::error::timeout);
    return ec;
  }
  template <class Handler>
  struct Done {
    std::shared_ptr<State> state;
    Handler handler;
    void operator()(boost::system::error_code ec, std::size_t n) {
      ec = mapped(*state, ec);
      std::move(handler)(ec, n);
    }
  };
  // A read waiting for readiness: receives when it comes, and waits again
  // if the receive found nothing after all (a report from before the
  // socket was last emptied; that receive clears the reactor's flag, so the
  // wait is queued, not a loop).
  template <class Handler>
  struct ReadWhenReady {
    std::shared_ptr<State> state;
    boost::asio::mutable_buffer into;
    Handler handler;
    void operator()(boost::system::error_code ec) {
      std::size_t n = 0;
      if (!ec) {
        if (state->socket == nullptr) {
          ec = boost::asio::error::operation_aborted;
        } else {
          n = readiness::readNow(*state->socket, into, ec);
          if (ec == boost::asio::error::would_block) {
            // Waits again, unless the timer fired meanwhile (it cancelled
            // nothing: this read was not queued then).
            if (state->timed_out) {
              ec = boost::beast::error::timeout;
            } else {
              socket_type& s = *state->socket;
              return readiness::asyncWaitReadable(s, std::move(*this));
            }
          }
        }
      }
      Done<Handler>{std::move(state), std::move(handler)}(ec, n);
    }
  };
  template <class Handler>
  struct CodeDone {
    std::shared_ptr<State> state;
    Handler handler;
    void operator()(boost::system::error_code ec) {
      ec = mapped(*state, ec);
      std::move(handler)(ec);
    }
  };

  socket_type socket_;
  std::shared_ptr<State> state_;
};

}  // namespace knap::router
