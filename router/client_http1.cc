// Http1Client: the client side of a request read from an HTTP/1.1
// connection (plain or TLS): the response head written as an HTTP/1.1 (or
// 1.0) status line with framing re-derived for this client, keep-alive
// decided here, an Upgrade turned into a tunnel.
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "router/client_side.h"

namespace knap::router {

using http1::Framing;

awaitable<bool> Http1Client::sendLocal(std::unique_ptr<Router::Impl::LocalResponse> r, bool keep_alive) {
  return impl_.sendLocal(client_, std::move(r), keep_alive);
}

bool Http1Client::watchHangup(std::function<void()> on_gone) {
  // Only when no body is pending: then nothing but EOF is expected.
  if (head_.framing != Framing::kNone) return false;
  watching_ = true;
  client_.socket().async_wait(
      tcp::socket::wait_read,
      [on_gone = std::move(on_gone), fd = client_.socket().native_handle()](beast::error_code wec) {
        if (wec) return;  // cancelled: the wait is over
        char byte;
        const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        const bool gone = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
        if (gone) on_gone();
      });
  return true;
}

void Http1Client::stopWatching() {
  if (!watching_) return;
  watching_ = false;
  beast::error_code ignored;
  client_.socket().cancel(ignored);
}

awaitable<bool> Http1Client::sendContinue() {
  static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
  beast::error_code ec;
  client_.expires_after(impl_.opts.client_io_timeout);
  co_await asio::async_write(client_, asio::buffer(kContinue, sizeof kContinue - 1), tok(ec));
  co_return !ec;
}

awaitable<RelayEnd> Http1Client::sendRequest(DeadlineStream& up, const std::string& pod_head, const Relay& r,
                                             beast::error_code& read_ec, std::string& framing_error) {
  return relayBody(client_, buf_, up, pod_head, r, read_ec, framing_error);
}

awaitable<ResponseEnd> Http1Client::sendResponse(ProxiedResponse& resp, DeadlineStream& up,
                                                 beast::flat_buffer& ubuf, Relay& body,
                                                 std::unique_ptr<Guard>& guard) {
  const unsigned version = head_.version;
  const int code = resp.code;
  bool keep = head_.keep_alive && !impl_.draining.load();
  bool chunked_out = false;
  std::string out;
  out.reserve(512);
  out += version >= 11 ? "HTTP/1.1 " : "HTTP/1.0 ";
  out += std::to_string(code);
  out += ' ';
  if (!resp.reason.empty()) {
    out += resp.reason;
  } else {
    const auto reason = http::obsolete_reason(static_cast<http::status>(code));
    out.append(reason.data(), reason.size());
  }
  out += "\r\n";
  http1::appendFields(*resp.fields, &out);
  if (!resp.switching) {
    switch (resp.framing) {
      case Framing::kNone:
        if (resp.has_content_length && (resp.head_request || code == 304)) {
          http1::appendContentLength(resp.content_length, &out);
        } else if (code >= 200 && code != 204 && code != 304) {
          out += "Content-Length: 0\r\n";
        }
        break;
      case Framing::kLength:
        http1::appendContentLength(resp.content_length, &out);
        break;
      case Framing::kChunked:
      case Framing::kUntilClose:
        if (version >= 11) {
          out += "Transfer-Encoding: chunked\r\n";
          chunked_out = true;
        } else {
          keep = false;  // an HTTP/1.0 client reads until close
        }
        break;
    }
    if (version >= 11 && !keep) out += "Connection: close\r\n";
    if (version < 11 && keep) out += "Connection: keep-alive\r\n";
  }
  if (!resp.cold_start.empty()) {
    out += std::string(kColdStartHeader) + ": " + resp.cold_start + "\r\n";
  }
  out += "\r\n";

  if (resp.switching) {
    // Upgrade: splice bytes both ways; the slot stays held until both close.
    beast::error_code ec;
    client_.expires_after(impl_.opts.client_io_timeout);
    co_await asio::async_write(client_, asio::buffer(out), tok(ec));
    if (ec) co_return ResponseEnd{};
    client_.tcpStream().expires_never();  // the tunnel has its own idle timeout
    auto tunnel = std::make_shared<Tunnel>(std::move(client_), up.release_socket());
    const std::string_view cb = bufView(buf_);
    tunnel->client_leftover.assign(cb.data(), cb.size());
    buf_.consume(buf_.size());
    const std::string_view pb = bufView(ubuf);
    tunnel->pod_leftover.assign(pb.data(), pb.size());
    tunnel->guard = std::move(guard);
    conn_->socket = &tunnel->client.socket();
    tunnel->conn = std::move(conn_);
    asio::co_spawn(w_.ioc, impl_.pump(tunnel, true), asio::detached);
    asio::co_spawn(w_.ioc, impl_.pump(tunnel, false), asio::detached);
    if (impl_.opts.tunnel_idle_timeout > Duration::zero()) {
      asio::co_spawn(w_.ioc, impl_.tunnelWatchdog(tunnel), asio::detached);
    }
    co_return ResponseEnd{};
  }

  // The usual answer: no body, or all of it read with the head. Head and
  // body go out at once, without relayBody's frame (as relayBody would: one
  // write, the rest asynchronously, the body's bytes consumed).
  const std::string_view have = bufView(ubuf);
  if (body.framing == Framing::kNone || (body.framing == Framing::kLength && have.size() >= body.length)) {
    const size_t body_bytes = body.framing == Framing::kLength ? static_cast<size_t>(body.length) : 0;
    const std::array<asio::const_buffer, 2> bufs{asio::buffer(out), asio::buffer(have.data(), body_bytes)};
    armDeadline(client_, body.write_deadline());
    beast::error_code ec;
    const size_t now = client_.write_some_now(bufs, ec);
    if (!ec && now < out.size() + body_bytes) co_await writeRest(client_, bufs, now, ec);
    ubuf.consume(body_bytes);
    co_return ResponseEnd{!ec, keep};
  }

  body.chunked_out = chunked_out;
  beast::error_code read_ec;
  std::string framing_error;
  const RelayEnd relayed = co_await relayBody(up, ubuf, client_, out, body, read_ec, framing_error);
  co_return ResponseEnd{relayed == RelayEnd::kDone, keep};
}

}  // namespace knap::router
