// TlsSocket: the server side of TLS on a client connection, with OpenSSL
// reading and writing the socket itself. It replaces asio::ssl::stream
// (beast::ssl_stream) on the HTTPS listener.
//
// Why: asio's SSL engine runs every record through a BIO pair. A read is a
// recvmsg into the engine's buffer, a copy into the pair, a copy out into
// OpenSSL's record buffer; a write is the same backwards; each SSL call is
// wrapped in the engine's state machine, a composed operation per pass and
// an ERR_clear_error. Here SSL_read and SSL_write go straight to the socket
// (a BIO of ours: recv, and send with MSG_NOSIGNAL), read-ahead is on (one
// recv takes what has arrived, not one record header at a time), and the
// only waiting is for the socket to be readable or writable when OpenSSL
// says so (SSL_ERROR_WANT_READ/WRITE). Measured per proxied HTTPS request:
// docs/benchmarks.md.
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
    size_t len = 0;
    for (; it != end && len < kGatherBytes; ++it) {
      const boost::asio::const_buffer piece(*it);
      const size_t take = std::min(piece.size(), kGatherBytes - len);
      std::memcpy(gather_ + len, piece.data(), take);
      len += take;
    }
    return tryWriteBytes(gather_, len, n, ec);
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

 private:
  Step tryWriteBytes(const void* data, size_t len, size_t* n, error_code* ec);
  Step result(int ret, error_code* ec);

  struct ReadIo {
    boost::asio::mutable_buffer b;
    Step operator()(TlsSocket& s, size_t* n, error_code* ec) { return s.tryRead(b, n, ec); }
  };
  template <class ConstBuffers>
  struct WriteIo {
    ConstBuffers b;
    Step operator()(TlsSocket& s, size_t* n, error_code* ec) { return s.tryWrite(b, n, ec); }
  };

  // The operation: try; wait for what OpenSSL wants; try again. A result
  // at the first try is posted, never delivered from the initiating call.
  template <class Io>
  struct Op {
    TlsSocket* s;
    Io io;
    enum { kStart, kWaiting, kPosted } state = kStart;
    size_t n = 0;
    error_code result;
    template <class Self>
    void operator()(Self& self, error_code wait_ec = {}) {
      if (state == kPosted) return self.complete(result, n);
      if (state == kWaiting && wait_ec) return self.complete(wait_ec, 0);
      const Step step = io(*s, &n, &result);
      if (step == Step::kDone) {
        if (state == kStart) {
          state = kPosted;
          return boost::asio::post(s->get_executor(), std::move(self));
        }
        return self.complete(result, n);
      }
      state = kWaiting;
      s->tcp_.async_wait(step == Step::kWantRead ? DeadlineStream::socket_type::wait_read
                                                 : DeadlineStream::socket_type::wait_write,
                         std::move(self));
    }
  };

  DeadlineStream tcp_;
  SSL* ssl_ = nullptr;
  char gather_[kGatherBytes];
};

}  // namespace knap::router
