// One request's stages after its head is parsed: route (Host → revision),
// activate (a pod slot from the revision's ActivatorQueue, waiting while it
// scales from zero), proxy (the request to the pod, the response back).
//
// Framing is re-derived for every message forwarded: the head is rebuilt
// from the parsed fields minus hop-by-hop headers, and Content-Length /
// Transfer-Encoding are written from the parse result (http1.h), never
// copied. A pod connection goes back to the pool only after a complete,
// in-sync exchange.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "common/string_util.h"
#include "router/client_side.h"
#include "router/headers.h"
#include "router/relay.h"
#include "router/router_impl.h"

namespace knap::router {

namespace {

using http1::Framing;

// "ip:port" / "[v6]:port" -> endpoint.
bool parseEndpointKey(const std::string& key, tcp::endpoint* out) {
  auto hp = splitHostPort(key);
  if (!hp || hp->port == 0) return false;
  beast::error_code ec;
  asio::ip::address addr = asio::ip::make_address(hp->host, ec);
  if (ec) return false;
  *out = tcp::endpoint(addr, static_cast<uint16_t>(hp->port));
  return true;
}

// The head sent to the pod: request line, end-to-end fields, then the
// framing this router derived.
std::string podRequestHead(const http1::RequestHead& head, bool send_zero_length) {
  std::string out;
  out.reserve(512);
  out += head.method;
  out += ' ';
  out += head.target;
  out += " HTTP/1.1\r\n";
  http1::appendFields(head.fields, &out);
  if (head.framing == Framing::kLength) {
    http1::appendContentLength(head.content_length, &out);
  } else if (head.framing == Framing::kChunked || head.framing == Framing::kUntilClose) {
    out += "Transfer-Encoding: chunked\r\n";
  } else if (send_zero_length) {
    out += "Content-Length: 0\r\n";
  }
  out += "\r\n";
  return out;
}

// A pod response buffer borrowed from the worker's spares for one exchange
// and given back after it (emptied) unless it grew past a head-sized one.
class SpareBuffer {
 public:
  explicit SpareBuffer(Worker& w) : w_(w) {
    if (!w.spare_buffers.empty()) {
      buf_ = std::move(w.spare_buffers.back());
      w.spare_buffers.pop_back();
    }
  }
  ~SpareBuffer() {
    if (w_.spare_buffers.size() < kMaxSpares && buf_.capacity() <= kHeadReadBytes) {
      buf_.clear();
      w_.spare_buffers.push_back(std::move(buf_));
    }
  }
  SpareBuffer(const SpareBuffer&) = delete;
  SpareBuffer& operator=(const SpareBuffer&) = delete;
  beast::flat_buffer& get() { return buf_; }

 private:
  static constexpr size_t kMaxSpares = 64;  // per worker: at most 1 MiB kept
  Worker& w_;
  beast::flat_buffer buf_;
};

// The TCP layer of either side of a tunnel.
tcp::socket& socketOf(tcp::socket& s) {
  return s;
}
tcp::socket& socketOf(ClientStream& s) {
  return s.socket();
}

// Reads the pod's response head into `ubuf` (interim 1xx answers other
// than 101 are skipped). kIncomplete with `ec` set: the read failed.
// `spoke`: set once the pod sent anything (an interim answer included).
awaitable<http1::Parse> readResponseHead(DeadlineStream& up, beast::flat_buffer& ubuf, bool head_request,
                                         http1::ResponseHead& rh, MonoTime deadline, beast::error_code& ec,
                                         bool& spoke) {
  for (;;) {
    if (ubuf.size() > 0) {
      rh = http1::ResponseHead();
      const http1::Parse p = http1::parseResponseHead(bufView(ubuf), head_request, &rh);
      if (p == http1::Parse::kDone && rh.status >= 100 && rh.status < 200 && rh.status != 101) {
        ubuf.consume(rh.head_bytes);
        continue;
      }
      if (p != http1::Parse::kIncomplete) co_return p;
      if (ubuf.size() > kUpstreamHeaderLimit) {
        rh.error = "response header larger than " + std::to_string(kUpstreamHeaderLimit) + " bytes";
        co_return http1::Parse::kError;
      }
    }
    up.expires_at(deadline);
    const size_t n = co_await up.async_read_some(ubuf.prepare(kHeadReadBytes), tok(ec));
    if (ec) co_return http1::Parse::kIncomplete;
    spoke = spoke || n > 0;
    ubuf.commit(n);
  }
}

// One direction of a tunnel: bytes from `from` to `to` until EOF or error.
// EOF half-closes `to` (the other way may go on); an error closes both.
template <class From, class To>
awaitable<void> pumpOneWay(From& from, To& to, std::string& leftover,
                           std::chrono::steady_clock::time_point& last_io) {
  beast::error_code ec;
  if (!leftover.empty()) {
    co_await asio::async_write(to, asio::buffer(leftover), tok(ec));
    leftover.clear();
  }
  std::vector<char> data(kChunkBytes);
  while (!ec) {
    const size_t n = co_await from.async_read_some(asio::buffer(data), tok(ec));
    if (ec) break;
    last_io = std::chrono::steady_clock::now();
    co_await asio::async_write(to, asio::buffer(data.data(), n), tok(ec));
  }
  beast::error_code ignored;
  // (A TLS client's close_notify reads as stream_truncated or eof alike.)
  if (ec == asio::error::eof) {
    socketOf(to).shutdown(tcp::socket::shutdown_send, ignored);
  } else {
    socketOf(from).close(ignored);
    socketOf(to).close(ignored);
  }
}

}  // namespace

awaitable<void> Router::Impl::pump(std::shared_ptr<Tunnel> t, bool client_to_pod) {
  if (client_to_pod) {
    co_await pumpOneWay(t->client, t->pod, t->client_leftover, t->last_io);
  } else {
    co_await pumpOneWay(t->pod, t->client, t->pod_leftover, t->last_io);
  }
  if (--t->pumps_open == 0) t->idle_timer.cancel();
}

// Closes a tunnel in which no byte moved either way for tunnel_idle_timeout.
awaitable<void> Router::Impl::tunnelWatchdog(std::shared_ptr<Tunnel> t) {
  const Duration idle = opts.tunnel_idle_timeout;
  while (t->pumps_open > 0) {
    t->idle_timer.expires_at(t->last_io + idle);
    beast::error_code ec;
    co_await t->idle_timer.async_wait(tok(ec));
    if (t->pumps_open == 0) break;
    if (!ec && std::chrono::steady_clock::now() >= t->last_io + idle) {
      beast::error_code ignored;
      t->client.socket().close(ignored);  // both pumps fail and finish
      t->pod.close(ignored);
      break;
    }
  }
}

awaitable<std::shared_ptr<const RoutingTable>> Router::Impl::awaitFirstTable(Worker& w, MonoTime start) {
  auto ws = std::make_shared<WaitState>(w.ioc.get_executor());
  {
    std::lock_guard<std::mutex> lock(table_mu);
    if (table_set) co_return table;
    table_waiters.push_back(ws);
  }
  ws->timer.expires_at(start + opts.startup_hold);
  while (!ws->ready()) {
    beast::error_code ec;
    co_await ws->timer.async_wait(tok(ec));
    if (!ec) break;  // the hold expired; the table as it is
  }
  {
    std::lock_guard<std::mutex> lock(table_mu);
    auto& v = table_waiters;
    v.erase(std::remove(v.begin(), v.end(), ws), v.end());
  }
  co_return snapshot();
}

awaitable<bool> Router::Impl::handleRequest(ClientSide& client, http1::RequestHead& head, Kind kind,
                                            Worker& w, const std::string& client_ip) {
  const MonoTime start = time.monotonic();
  const unsigned version = client.version();
  const bool client_keep = head.keep_alive;
  const bool has_body = head.framing != Framing::kNone;
  // An answer given before the body was read leaves the connection out of sync.
  auto reusable = [&] { return client_keep && !has_body; };
  const ListenerKind lk = kind == Kind::kInternal ? ListenerKind::kInternal : ListenerKind::kExternal;

  const std::string& host = head.host;
  if (host.empty()) {
    co_return co_await writeLocal(client, http::status::bad_request, "missing Host header", false);
  }
  std::shared_ptr<const RoutingTable> tbl = workerSnapshot(w);
  auto probe = head.fields.find(kProbeHeader);
  if (probe != head.fields.end()) {
    std::string value(probe->value());
    std::string nhost = normalizeHost(host);
    co_return co_await handleProbe(client, head, std::move(value), std::move(nhost), tbl, kind);
  }
  if (kind == Kind::kExternal && !client.tls() && isAcmeChallenge(head.target) &&
      (head.method == "GET" || head.method == "HEAD")) {
    // ACME HTTP-01 validation of a certificate order of ours.
    if (std::optional<std::string> answer = acmeAnswer(head.target)) {
      const bool keep = reusable() && !draining.load();
      co_return co_await client.sendLocal(acmeResponse(version, *answer, keep, head.method == "HEAD"), keep);
    }
  }
  const HostRoute* route = tbl->lookup(host, lk);
  if (route == nullptr && opts.startup_hold > Duration::zero()) {
    // Just started: the routes may not be loaded yet. Hold, not 404.
    tbl = co_await awaitFirstTable(w, start);
    route = tbl->lookup(host, lk);
  }
  if (route == nullptr) {
    countUnrouted();
    const std::string msg = "no route for host \"" + normalizeHost(host) + "\"";
    co_return co_await writeLocal(client, http::status::not_found, msg, reusable());
  }
  if (kind == Kind::kExternal && !client.tls() && opts.http_protocol != HttpProtocol::kEnabled &&
      httpsPort() >= 0 && !isAcmeChallenge(head.target)) {
    // http-protocol: Redirected / Disabled, while the HTTPS listener is on.
    if (opts.http_protocol == HttpProtocol::kRedirected) {
      const std::string location = httpsLocation(host, head.target);
      const std::string msg = "served over HTTPS: " + location;
      const auto extra = locationHeader(location);
      co_return co_await writeLocal(client, http::status::permanent_redirect, msg, reusable(), extra);
    }
    countUnrouted();
    const std::string msg = "host \"" + normalizeHost(host) +
                            "\" is served over HTTPS only (config-network http-protocol: Disabled)";
    co_return co_await writeLocal(client, http::status::not_found, msg, reusable());
  }
  const std::string& revision = route->pick();  // (the table snapshot `tbl` holds it)
  std::shared_ptr<RevisionState> state = revisionState(revision);
  const RevisionConfig cfg = state->config();
  const MonoTime deadline = start + cfg.timeout;
  const MonoTime first_byte_deadline = cfg.response_start_timeout > Duration::zero()
                                           ? std::min(deadline, start + cfg.response_start_timeout)
                                           : deadline;
  auto guard = std::make_unique<RequestGuard>(this, state, start);

  // 1. A slot on a pod: now, or after waiting in the activator queue.
  bool cold_start = false;
  WallTime arrived{};
  if (!state->queue.tryAcquire(&guard->endpoint)) {
    // No free slot now: wait in the queue (a wait state only then).
    auto ws = std::make_shared<WaitState>(w.ioc.get_executor());
    ActivatorQueue::Acquired acq = state->queue.acquire(
        start, first_byte_deadline, [ws](StatusOr<std::string> g) { ws->deliver(std::move(g)); });
    if (acq.outcome == ActivatorQueue::Outcome::kRejected) {
      guard->code = 503;
      co_return co_await writeLocal(client, http::status::service_unavailable, acq.status.message(),
                                    reusable());
    }
    if (acq.outcome == ActivatorQueue::Outcome::kGranted) {
      guard->endpoint = acq.endpoint;
    } else {
      // Held: the revision may be removed (its series dropped) while this request waits.
      std::shared_ptr<Gauge> queued_gauge = metrics.queued_requests.with({revision});
      queued_gauge->add(1);
      cold_start = acq.first_cold;
      if (cold_start) arrived = time.now() - (time.monotonic() - start);
      if (acq.cold && on_cold != nullptr && *on_cold) (*on_cold)(revision);
      ws->timer.expires_at(std::min(start + opts.queue.max_wait, first_byte_deadline));
      // A client that hangs up while queued must not keep its place (nor
      // count as concurrency).
      const uint64_t waiter = acq.waiter;
      const bool watching = client.watchHangup([ws, state, waiter] {
        if (!state->queue.cancel(waiter)) return;
        {
          std::lock_guard<std::mutex> lock(ws->mu);
          ws->client_gone = true;
          ws->result.emplace(unavailable("client closed the connection while queued"));
        }
        ws->timer.cancel();
      });
      while (!ws->ready()) {
        beast::error_code ec;
        co_await ws->timer.async_wait(tok(ec));
        if (ec) continue;  // cancelled: a result was delivered (or a stale wake-up)
        state->queue.expire(time.monotonic());
        if (!ws->ready() && state->queue.cancel(acq.waiter)) {
          // Timer and TimeSource disagreed by a hair; the timer is the truth.
          const bool request_first = first_byte_deadline <= start + opts.queue.max_wait;
          std::lock_guard<std::mutex> lock(ws->mu);
          ws->result.emplace(request_first ? Status(Code::kDeadlineExceeded, "activator request timeout")
                                           : unavailable("no pod became available within the activator "
                                                         "queue wait limit"));
        }
      }
      queued_gauge->add(-1);
      if (watching) client.stopWatching();
      StatusOr<std::string> grant = [&] {
        std::lock_guard<std::mutex> lock(ws->mu);
        return *ws->result;
      }();
      if (ws->client_gone) co_return false;  // nobody to answer; code stays 499
      if (!grant.isOk()) {
        const bool timeout = grant.status().code() == Code::kDeadlineExceeded;
        guard->code = timeout ? 504 : 503;
        co_return co_await writeLocal(
            client, timeout ? http::status::gateway_timeout : http::status::service_unavailable,
            grant.status().message(), reusable());
      }
      guard->endpoint = grant.value();
      metrics.queue_wait.with({revision})->observe(seconds(time.monotonic() - start));
    }
  }
  const std::string endpoint = guard->endpoint;

  // 2. The head for the pod, framing re-derived.
  const bool is_upgrade = isUpgradeRequest(head.fields);
  const bool head_request = head.method == "HEAD";
  const bool zero_length =
      head.framing == Framing::kNone && head.fields.find(http::field::content_length) != head.fields.end();
  rewriteRequestHeaders(head.fields, client_ip,
                        client.tls() ? std::string_view("https") : opts.forwarded_proto, is_upgrade);
  const std::string pod_head = podRequestHead(head, zero_length);
  if (head.expect_continue && has_body) {
    // We answer Expect ourselves, now that a pod slot is ours.
    if (!co_await client.sendContinue()) co_return false;
  }

  // 3. Send the request (streaming its body) and read the response head.
  std::unique_ptr<DeadlineStream> up;
  SpareBuffer spare(w);
  beast::flat_buffer& ubuf = spare.get();
  http1::ResponseHead rh;
  Relay req_relay;
  req_relay.framing = head.framing;
  req_relay.length = head.content_length;
  req_relay.chunked_out = head.framing == Framing::kChunked || head.framing == Framing::kUntilClose;
  req_relay.read_deadline = [this, first_byte_deadline] {
    return std::min(first_byte_deadline, time.monotonic() + opts.client_io_timeout);
  };
  req_relay.write_deadline = [first_byte_deadline] { return first_byte_deadline; };
  // The client side knows the pod connection while it is ours (declared
  // after `up`: told before `up` goes away).
  struct PodExchange {
    ClientSide& c;
    ~PodExchange() { c.podExchange(nullptr); }
  } pod_exchange{client};
  for (int attempt = 0;; ++attempt) {
    beast::error_code ec;
    up = attempt == 0 ? w.pool.take(endpoint, /*can_retry=*/!has_body) : nullptr;
    client.podExchange(up.get());
    const bool reused = up != nullptr;
    if (!up) {
      // (Parsed only to connect: a pooled connection's endpoint was parsed before.)
      tcp::endpoint pod_addr;
      if (!parseEndpointKey(endpoint, &pod_addr)) {
        guard->code = 502;
        const std::string msg = "bad pod endpoint " + endpoint;
        co_return co_await writeLocal(client, http::status::bad_gateway, msg, reusable());
      }
      up = std::make_unique<DeadlineStream>(w.ioc);
      client.podExchange(up.get());
      up->expires_at(std::min(time.monotonic() + opts.upstream_connect_timeout, first_byte_deadline));
      co_await up->async_connect(pod_addr, tok(ec));
      if (ec) {
        const bool timeout = ec == beast::error::timeout && time.monotonic() >= first_byte_deadline;
        guard->code = timeout ? 504 : 502;
        // (Message built outside the co_await: GCC 12 mishandles temporaries
        // of a ?: inside a co_await expression.)
        const std::string msg = timeout ? std::string("request timeout")
                                        : "cannot connect to pod " + endpoint + ": " + ec.message();
        co_return co_await writeLocal(
            client, timeout ? http::status::gateway_timeout : http::status::bad_gateway, msg, reusable());
      }
      up->socket().set_option(tcp::no_delay(true), ec);
    }
    beast::error_code read_ec;
    std::string framing_error;
    RelayEnd sent = RelayEnd::kWriteFailed;
    if (!has_body) {
      // A head alone (most requests): written here when the socket takes
      // it at once, as relayBody would, without its coroutine frames.
      armDeadline(*up, first_byte_deadline);
      beast::error_code wec;
      const asio::const_buffer head_buf = asio::buffer(pod_head);
      const size_t now = up->write_some_now(head_buf, wec);
      if (!wec && now < pod_head.size()) co_await writeRest(*up, head_buf, now, wec);
      sent = wec ? RelayEnd::kWriteFailed : RelayEnd::kDone;
      ec = wec;  // (a timeout is a 504, a reset names itself)
    } else {
      sent = co_await client.sendRequest(*up, pod_head, req_relay, read_ec, framing_error);
    }
    if (sent == RelayEnd::kBadFraming) {
      // The pod saw a partial request; its connection is dropped with `up`.
      const std::string msg = "malformed request body: " + framing_error;
      guard->code = 400;
      co_await writeLocal(client, http::status::bad_request, msg, false);
      co_return false;
    }
    if (sent == RelayEnd::kReadFailed) {
      // The client stalled or vanished mid-upload.
      if (!client.gone() && read_ec == beast::error::timeout && time.monotonic() >= first_byte_deadline) {
        guard->code = 504;
        co_await writeLocal(client, http::status::gateway_timeout, "request timeout", false);
      }
      co_return false;
    }
    http1::Parse p = http1::Parse::kIncomplete;
    bool pod_spoke = false;  // it had the request: never sent twice
    if (sent == RelayEnd::kDone) {
      if (ubuf.size() == 0) {
        // The usual case, here rather than in readResponseHead's frame: one
        // read brings the whole head (not an interim 1xx).
        up->expires_at(first_byte_deadline);
        const size_t n = co_await up->async_read_some(ubuf.prepare(kHeadReadBytes), tok(ec));
        ubuf.commit(ec ? 0 : n);
        pod_spoke = !ec && n > 0;
        if (!ec) {
          if (attempt > 0) rh = http1::ResponseHead();
          p = http1::parseResponseHead(bufView(ubuf), head_request, &rh);
          if (p == http1::Parse::kDone && rh.status >= 100 && rh.status < 200 && rh.status != 101) {
            p = http1::Parse::kIncomplete;  // an interim answer: readResponseHead skips it
          } else if (p == http1::Parse::kDone) {
            break;
          }
        }
      }
      if (!ec && p != http1::Parse::kError) {
        p = co_await readResponseHead(*up, ubuf, head_request, rh, first_byte_deadline, ec, pod_spoke);
        if (p == http1::Parse::kDone) break;
      }
    }
    // A pooled connection the pod closed meanwhile: retry once on a fresh
    // one when nothing of the body was consumed and the pod said nothing
    // (not even an interim 1xx: then it had the request, which may not be
    // idempotent).
    if (reused && !has_body && attempt == 0 && ec != beast::error::timeout && ubuf.size() == 0 &&
        !pod_spoke && p != http1::Parse::kError) {
      continue;
    }
    if (client.gone()) co_return false;  // it left (and the exchange was cut); code stays 499
    const bool timeout = ec == beast::error::timeout;
    guard->code = timeout ? 504 : 502;
    std::string msg;
    if (timeout) {
      msg = "request timeout";
    } else if (p == http1::Parse::kError) {
      msg = "pod " + endpoint + " sent a malformed response: " + rh.error;
    } else {
      msg = "pod " + endpoint + " failed: " + (ec ? ec.message() : std::string("write failed"));
    }
    co_return co_await writeLocal(client, timeout ? http::status::gateway_timeout : http::status::bad_gateway,
                                  msg, timeout && reusable());
  }

  // 4. The response for the client: its side writes the head (framing
  // re-derived) and streams the body; from the body's first byte on only
  // the idle timeout applies.
  const int code = rh.status;
  const bool switching = code == 101 && is_upgrade;
  if (code == 101 && !switching) {
    guard->code = 502;
    const std::string msg = "pod " + endpoint + " switched protocols unasked";
    co_return co_await writeLocal(client, http::status::bad_gateway, msg, false);
  }
  rewriteResponseHeaders(rh.fields, switching);
  ProxiedResponse resp;
  resp.code = code;
  resp.reason = rh.reason;
  resp.fields = &rh.fields;
  resp.framing = rh.framing;
  resp.content_length = rh.content_length;
  resp.has_content_length = rh.has_content_length;
  resp.head_request = head_request;
  resp.switching = switching;
  guard->code = code;
  if (cold_start) resp.cold_start = noteColdStart(*state, revision, arrived, time.monotonic() - start);
  ubuf.consume(rh.head_bytes);

  Relay resp_relay;
  resp_relay.framing = rh.framing;
  resp_relay.length = rh.content_length;
  resp_relay.lenient = true;
  const Duration idle = cfg.idle_timeout;
  resp_relay.read_deadline = [idle] {
    return idle > Duration::zero() ? std::chrono::steady_clock::now() + idle : MonoTime::max();
  };
  resp_relay.write_deadline = [this] { return std::chrono::steady_clock::now() + opts.client_io_timeout; };
  const ResponseEnd sent = co_await client.sendResponse(resp, *up, ubuf, resp_relay, guard);
  if (!sent.complete) co_return false;  // pod failed or went idle mid-stream, client gone, or a tunnel

  // In sync: the pod framed its answer, keeps the connection, and sent
  // nothing past the end of it. And the pod is still an endpoint: a drop()
  // of it may have run while this exchange was in flight.
  if (rh.keep_alive && rh.reusable_framing && rh.framing != Framing::kUntilClose && ubuf.size() == 0 &&
      state->hasEndpoint(endpoint)) {
    client.podExchange(nullptr);
    w.pool.put(endpoint, std::move(up));
  }
  guard.reset();
  co_return sent.keep;
}

}  // namespace knap::router
