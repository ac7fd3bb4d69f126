// TlsSocket: the server side of TLS on a client connection, with OpenSSL
// reading and writing the socket itself. It replaces asio::ssl::stream
// (beast::ssl_stream) on the HTTPS listener.
//
// Why: asio's SSL engine runs every record through a BIO pair. A read is a
// recvmsg into the engine's buffer, a copy into the pair, a copy out into
// OpenSSL's record buffer; a write is the same backwards; each SSL call is
// wrapped in the engine's state machine, a composed operation per pass and
// an ERR_clear_error. Here OpenSSL has a BIO of ours: it writes straight to
// the socket (send with MSG_NOSIGNAL) and reads the ciphertext this class
// received (one buffer, one copy into OpenSSL's record buffer; read-ahead
// takes all of it at once). When OpenSSL wants more, the socket is read
// with an ordinary async_read_some: Asio tries it at once and otherwise
// waits for the edge, without the epoll_ctl that an async_wait costs in
// Asio 1.74 on every call. Only a write that finds the socket full waits
// for writability. Measured per proxied HTTPS request: docs/benchmarks.md.
//
// The calls are the ones the router used of ssl::stream: handshake,
// async_read_some/async_write_some (an AsyncReadStream/AsyncWriteStream;
// completions are never invoked inline), native_handle, next_layer (the
// DeadlineStream whose deadline covers every wait). write_some_now writes
// what the socket takes without waiting, as DeadlineStream's does.
//
// Thread safety: one strand (the worker's thread); at most one read and one
// write pending, as for a socket. OpenSSL allows a read waiting for data
// while a write goes out (a WebSocket tunnel does both).
#pragma once

#include <openssl/ssl.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/error.hpp>

#include "router/deadline_stream.h"

namespace knap::router {

class TlsSocket {
 public:
  using executor_type = DeadlineStream::executor_type;
  using error_code = boost::system::error_code;

  // A server-side SSL object from `ctx` on the socket. `ctx` outlives this.
  TlsSocket(boost::asio::ip::tcp::socket s, SSL_CTX* ctx);
  ~TlsSocket();
  TlsSocket(const TlsSocket&) = delete;
  TlsSocket& operator=(const TlsSocket&) = delete;

  SSL* native_handle() { return ssl_; }
  DeadlineStream& next_layer() { return tcp_; }
  executor_type get_executor() { return tcp_.get_executor(); }

  // The server handshake, waiting under next_layer()'s deadline.
  boost::asio::awaitable<void> handshake(error_code& ec);

  enum class Step { kDone, kWantRead, kWantWrite };
  // One SSL_read into `b`: kDone with `n` bytes or an error in `ec` (eof:
  // the peer closed), or which readiness to wait for before trying again.
  Step tryRead(boost::asio::mutable_buffer b, size_t* n, error_code* ec);
  // One SSL_write of the first bytes of `b` (buffers are gathered into one
  // record of up to kGatherBytes): kDone with the plaintext bytes taken
  // (maybe fewer than offered), or which readiness to wait for. After a
  // kWant* the next write must offer the same bytes again (OpenSSL holds
  // the record half sent).
  // (Gathered in a per-thread buffer: OpenSSL has encrypted the bytes when
  // SSL_write returns, even when the record waits to go out.)
  template <class ConstBuffers>
  Step tryWrite(const ConstBuffers& b, size_t* n, error_code* ec) {
    auto it = boost::asio::buffer_sequence_begin(b);
    const auto end = boost::asio::buffer_sequence_end(b);
    while (it != end && boost::asio::const_buffer(*it).size() == 0) ++it;
    if (it == end) {
      *n = 0;
      return Step::kDone;
    }
    const boost::asio::const_buffer first(*it);
    auto next = it;
    ++next;
    while (next != end && boost::asio::const_buffer(*next).size() == 0) ++next;
    if (next == end || first.size() >= kGatherBytes) return tryWriteBytes(first.data(), first.size(), n, ec);
    char* gather = gatherBuffer();
    size_t len = 0;
    for (; it != end && len < kGatherBytes; ++it) {
      const boost::asio::const_buffer piece(*it);
      const size_t take = std::min(piece.size(), kGatherBytes - len);
      std::memcpy(gather + len, piece.data(), take);
      len += take;
    }
    return tryWriteBytes(gather, len, n, ec);
  }

  // What the socket takes at once (the bytes written, 0 when it must wait:
  // finish with async_write_some on the same bytes), as DeadlineStream's.
  template <class ConstBuffers>
  size_t write_some_now(const ConstBuffers& b, error_code& ec) {
    size_t n = 0;
    if (tryWrite(b, &n, &ec) != Step::kDone) return 0;
    return ec ? 0 : n;
  }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& b, Token&& token) {
    boost::asio::mutable_buffer first;
    for (auto it = boost::asio::buffer_sequence_begin(b); it != boost::asio::buffer_sequence_end(b); ++it) {
      first = boost::asio::mutable_buffer(*it);
      if (first.size() > 0) break;
    }
    return boost::asio::async_compose<Token, void(error_code, size_t)>(Op<ReadIo>{this, ReadIo{first}}, token,
                                                                       tcp_.socket());
  }
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& b, Token&& token) {
    return boost::asio::async_compose<Token, void(error_code, size_t)>(
        Op<WriteIo<ConstBuffers>>{this, WriteIo<ConstBuffers>{b}}, token, tcp_.socket());
  }

  static constexpr size_t kGatherBytes = 16 * 1024;  // one TLS record's plaintext
  static constexpr size_t kReadBytes = 16 * 1024;    // received ciphertext not yet taken

  // For the BIO (tls_socket.cc): OpenSSL takes received ciphertext; writes
  // go to the socket.
  int bioRead(char* data, size_t len, size_t* read);
  int bioWrite(const char* data, size_t len, size_t* written);
  size_t bioPending() const { return rend_ - rin_; }
  // The receive buffer this connection holds now (0 while idle).
  size_t receiveBufferBytes() const { return rbuf_ ? kReadBytes : 0; }

 private:
  Step tryWriteBytes(const void* data, size_t len, size_t* n, error_code* ec);
  Step result(int ret, error_code* ec);
  static char* gatherBuffer();
  // The free part of the receive buffer, for the next socket read.
  boost::asio::mutable_buffer fillSpace();
  // One receive now into the receive buffer, made for it (and freed
  // again when nothing came and it holds nothing): bytes, or 0 with `ec`
  // (would_block: wait again; eof; an error); then filled().
  size_t receive(error_code& ec);
  // A socket read into fillSpace() ended: false when `ec` ends the
  // operation (end of stream is not: OpenSSL reports it, close_notify or not).
  bool filled(const error_code& ec, size_t n);

  struct ReadIo {
    boost::asio::mutable_buffer b;
    Step operator()(TlsSocket& s, size_t* n, error_code* ec) { return s.tryRead(b, n, ec); }
  };
  template <class ConstBuffers>
  struct WriteIo {
    ConstBuffers b;
    Step operator()(TlsSocket& s, size_t* n, error_code* ec) { return s.tryWrite(b, n, ec); }
  };

  // The operation: try; get what OpenSSL wants (more ciphertext read, or
  // room to write); try again. A result at the first try is posted, never
  // delivered from the initiating call.
  template <class Io>
  struct Op {
    TlsSocket* s;
    Io io;
    enum { kStart, kWaiting, kPosted } state = kStart;
    bool filling = false;  // waiting for the socket to have something to read
    size_t n = 0;
    error_code result;
    // Started, or the posted result.
    template <class Self>
    void operator()(Self& self) {
      if (state == kPosted) return self.complete(result, n);
      step(self);
    }
    // Writable (or readable, see below) again; or, `filling`, the socket
    // has something to read: received into the buffer, made now.
    template <class Self>
    void operator()(Self& self, error_code ec) {
      if (filling) {
        filling = false;
        if (!ec) {
          size_t got = s->receive(ec);
          if (ec == boost::asio::error::would_block) return fill(self);  // (a report from before)
          if (s->filled(ec, got)) return step(self);
        }
        s->fill_pending_ = false;
        return self.complete(ec, 0);
      }
      if (ec) return self.complete(ec, 0);
      step(self);
    }
    template <class Self>
    void fill(Self& self) {
      filling = true;
      s->tcp_.async_wait_readable(std::move(self));
    }
    template <class Self>
    void step(Self& self) {
      const Step st = io(*s, &n, &result);
      if (st == Step::kDone) {
        if (state == kStart) {
          state = kPosted;
          return boost::asio::post(s->get_executor(), std::move(self));
        }
        return self.complete(result, n);
      }
      state = kWaiting;
      if (st == Step::kWantWrite) {
        return s->tcp_.async_wait(DeadlineStream::socket_type::wait_write, std::move(self));
      }
      if (s->fill_pending_) {
        // (The other direction's operation is reading already: wait for
        // what it receives. Only a write that must read first comes here.)
        return s->tcp_.async_wait(DeadlineStream::socket_type::wait_read, std::move(self));
      }
      if (s->bioPending() == kReadBytes) {
        // (OpenSSL takes all it is given; a full buffer it still wants
        // more than is a broken peer or a bug, not a reason to spin.)
        return self.complete(boost::asio::error::no_buffer_space, 0);
      }
      // The receive buffer is made (or grown into) only once the socket has
      // something: an idle connection waits without one.
      s->fill_pending_ = true;
      fill(self);
    }
  };

  DeadlineStream tcp_;
  SSL* ssl_ = nullptr;
  // Freed with its size: the block cache (common/block_cache.h) then needs
  // no lookup, which matters for a buffer made and freed per request.
  struct SizedFree {
    void operator()(char* p) const { ::operator delete(p, kReadBytes); }
  };
  std::unique_ptr<char, SizedFree>
      rbuf_;  // received ciphertext [rin_, rend_); made for a read, freed once taken
  size_t rin_ = 0;
  size_t rend_ = 0;
  bool eof_ = false;           // the peer ended the stream
  bool fill_pending_ = false;  // a socket read into rbuf_ is in flight
};

}  // namespace knap::router
