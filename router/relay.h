// Moving one message body between two byte streams, decoding its framing
// on the way in and writing it re-framed on the way out (router/http1.h
// decides the framing). Used by proxy.cc's stages for both directions and by
// every client side (router/client_side.h): the HTTP/1.1 connection and the
// HTTP/2 stream.
//
// A stream type used as From or To needs async_read_some / async_write_some
// (Asio's AsyncReadStream / AsyncWriteStream), or is a body pipe (an HTTP/2
// stream's body: `co_await read(mutable_buffer, ec)` and `co_await
// write(buffers, ec)`, see kIsBodyPipe), and an overload of
// `armDeadline(stream, MonoTime)` that makes its next operations fail with
// beast::error::timeout at that time (MonoTime::max(): never).
//
// Not part of the router's interface: include only from router/*.cc.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "router/router_impl.h"

namespace knap::router {

enum class RelayEnd { kDone, kReadFailed, kWriteFailed, kBadFraming };

struct Relay {
  http1::Framing framing = http1::Framing::kNone;
  uint64_t length = 0;       // kLength
  bool lenient = false;      // chunked parsing of a pod's body
  bool chunked_out = false;  // re-encode as chunked (else raw bytes)
  // Deadlines of the next read from `from` / write to `to` (MonoTime::max(): none).
  std::function<MonoTime()> read_deadline, write_deadline;
};

// The pieces of one relay write (on the stack for the usual few).
using RelayBuffers = boost::container::small_vector<asio::const_buffer, 12>;

// A body pipe: reads and writes are coroutines of its own (no Asio stream).
template <class S>
inline constexpr bool kIsBodyPipe = requires(S& s) {
  s.isBodyPipe();
};

inline void armDeadline(DeadlineStream& s, MonoTime t) {
  if (t == MonoTime::max()) {
    s.expires_never();
  } else {
    s.expires_at(t);
  }
}
inline void armDeadline(ClientStream& s, MonoTime t) {
  armDeadline(s.tcpStream(), t);
}

// The bytes of `bufs` past the first `written` (what write_some_now took at
// once, usually all of it: then this is not called and costs no coroutine
// frame), written asynchronously.
template <class Stream, class Buffers>
awaitable<void> writeRest(Stream& to, const Buffers& bufs, size_t written, beast::error_code& ec) {
  beast::buffers_suffix<Buffers> rest(bufs);
  rest.consume(written);
  co_await asio::async_write(to, rest, tok(ec));
}

// Moves one message body from `from` (bytes already read in `fbuf`) to
// `to`, decoding its framing and writing it re-framed; the first write
// carries `prefix` (the message head). Stops exactly at the body's end:
// bytes after it stay in `fbuf`.
template <class From, class To>
awaitable<RelayEnd> relayBody(From& from, beast::flat_buffer& fbuf, To& to, const std::string& prefix,
                              const Relay& r, beast::error_code& read_ec, std::string& framing_error) {
  using http1::Framing;
  static const char kCrlf[] = "\r\n";
  static const char kLastChunk[] = "0\r\n\r\n";
  beast::error_code ec;
  bool prefix_sent = false;
  uint64_t remaining = r.length;
  http1::ChunkedDecoder dec(r.lenient);
  // (On the stack for the usual few pieces: no allocation per message.)
  http1::ChunkedDecoder::Spans spans;
  RelayBuffers out;
  std::string size_line;
  bool eof = false;
  for (;;) {
    bool finished = false;
    size_t consume = 0;
    out.clear();
    if (!prefix_sent && !prefix.empty()) out.push_back(asio::buffer(prefix));
    const std::string_view avail = bufView(fbuf);
    spans.clear();
    if (r.framing == Framing::kLength) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining, avail.size()));
      if (n > 0) spans.push_back(avail.substr(0, n));
      consume = n;
      remaining -= n;
      finished = remaining == 0;
    } else if (r.framing == Framing::kChunked) {
      consume = dec.feed(avail, &spans);
      if (dec.failed()) {
        framing_error = dec.error();
        co_return RelayEnd::kBadFraming;
      }
      finished = dec.done();
    } else if (r.framing == Framing::kUntilClose) {
      if (!avail.empty()) spans.push_back(avail);
      consume = avail.size();
      finished = eof;
    } else {
      finished = true;
    }
    size_t total = 0;
    for (std::string_view s : spans) total += s.size();
    if (total > 0 && r.chunked_out) {
      size_line = http1::chunkSizeLine(total);
      out.push_back(asio::buffer(size_line));
    }
    for (std::string_view s : spans) out.push_back(asio::buffer(s.data(), s.size()));
    if (total > 0 && r.chunked_out) out.push_back(asio::buffer(kCrlf, 2));
    if (finished && r.chunked_out) out.push_back(asio::buffer(kLastChunk, 5));
    if (!out.empty()) {
      armDeadline(to, r.write_deadline());
      if constexpr (kIsBodyPipe<To>) {
        co_await to.write(out, ec);
      } else {
        // What the socket (or TLS on it) takes at once first (usually all
        // of it), then the rest asynchronously.
        size_t now = 0;
        if constexpr (std::is_same_v<To, DeadlineStream> || std::is_same_v<To, ClientStream>) {
          now = to.write_some_now(out, ec);
        }
        if (!ec && now < asio::buffer_size(out)) co_await writeRest(to, out, now, ec);
      }
      if (ec) co_return RelayEnd::kWriteFailed;
      prefix_sent = true;
    }
    fbuf.consume(consume);
    if (finished) co_return RelayEnd::kDone;
    armDeadline(from, r.read_deadline());
    size_t n = 0;
    if constexpr (kIsBodyPipe<From>) {
      n = co_await from.read(fbuf.prepare(kChunkBytes), read_ec);
    } else {
      n = co_await from.async_read_some(fbuf.prepare(kChunkBytes), tok(read_ec));
    }
    fbuf.commit(n);
    if (read_ec == asio::error::eof && r.framing == Framing::kUntilClose) {
      read_ec = {};
      eof = true;
    } else if (read_ec) {
      co_return RelayEnd::kReadFailed;
    }
  }
}

}  // namespace knap::router
