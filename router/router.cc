// The Router's event loops, listeners and per-connection proxy coroutines.
// docs: router/README.md walks through one request in this file.
#include "router/router.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>
#include <thread>

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/log.h"
#include "router/headers.h"

namespace knap::router {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using asio::awaitable;

namespace {

constexpr size_t kChunkBytes = 64 * 1024;
constexpr size_t kUpstreamHeaderLimit = 64 * 1024;

auto tok(beast::error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

enum class Kind { kExternal, kInternal, kAdmin };

std::string peerIp(const tcp::socket& s) {
  beast::error_code ec;
  tcp::endpoint ep = s.remote_endpoint(ec);
  if (ec) return "";
  asio::ip::address a = ep.address();
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6()).to_string();
  }
  return a.to_string();
}

// "ip:port" / "[v6]:port" -> endpoint.
bool parseEndpointKey(const std::string& key, tcp::endpoint* out) {
  const size_t colon = key.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = key.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    port = std::stoi(key.substr(colon + 1));
  } catch (...) {
    return false;
  }
  beast::error_code ec;
  asio::ip::address addr = asio::ip::make_address(host, ec);
  if (ec || port <= 0 || port > 65535) return false;
  *out = tcp::endpoint(addr, static_cast<uint16_t>(port));
  return true;
}

// True when an idle pooled connection still looks usable: no EOF and no
// unexpected bytes waiting.
bool idleConnectionAlive(tcp::socket& s) {
  if (!s.is_open()) return false;
  char byte;
  const ssize_t n = ::recv(s.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return false;  // peer closed
  if (n > 0) return false;   // garbage on an idle connection
  return errno == EAGAIN || errno == EWOULDBLOCK;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

double seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

std::string Endpoint::key() const {
  if (ip.find(':') != std::string::npos) return "[" + ip + "]:" + std::to_string(port);
  return ip + ":" + std::to_string(port);
}

// ---------------------------------------------------------------------------

struct RevisionState {
  RevisionState(QueueLimits limits, MonoTime now) : queue(limits), stats(now) {}
  RevisionConfig config() const {
    std::lock_guard<std::mutex> lock(mu);
    return config_;
  }
  mutable std::mutex mu;
  RevisionConfig config_;
  std::vector<std::string> endpoints;  // under mu
  uint64_t endpoints_version = 0;      // under mu: newest applied setEndpoints version
  WakeInfo wake;                       // under mu: how it last woke from zero
  ActivatorQueue queue;
  scaler::RequestStats stats;
};

struct Worker {
  explicit Worker(size_t i) : index(i) {}
  asio::io_context ioc{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::thread thread;
  size_t index;
  // Keep-alive pool: idle pod connections by endpoint key. Touched only on
  // this worker's thread.
  std::map<std::string, std::vector<std::unique_ptr<beast::tcp_stream>>> idle;
};

struct ListenerSpec {
  Kind kind;
  std::string address;
  int port;
};

struct Listener {
  Kind kind;
  std::unique_ptr<tcp::acceptor> acceptor;
  int port = -1;
};

// Wakes a queued request's coroutine from whichever thread grants its slot.
struct WaitState : std::enable_shared_from_this<WaitState> {
  explicit WaitState(asio::io_context::executor_type ex) : executor(ex), timer(ex) {}
  void deliver(StatusOr<std::string> g) {
    {
      std::lock_guard<std::mutex> lock(mu);
      result.emplace(std::move(g));
    }
    // The timer is only touched on its own thread; post the wake-up there.
    asio::post(executor, [self = shared_from_this()]() { self->timer.cancel(); });
  }
  bool ready() {
    std::lock_guard<std::mutex> lock(mu);
    return result.has_value();
  }
  asio::io_context::executor_type executor;
  asio::steady_timer timer;
  std::mutex mu;
  std::optional<StatusOr<std::string>> result;
  bool client_gone = false;  // under mu
};

struct Router::Impl {
  Impl(RouterOptions o, const TimeSource& t) : opts(std::move(o)), time(t) {
    table = RoutingTable::empty();
    if (opts.threads < 1) opts.threads = 1;
  }

  // Everything a request holds for a revision; released when it is
  // destroyed (end of the response, or end of an upgraded tunnel).
  struct RequestGuard {
    RequestGuard(Impl* i, std::shared_ptr<RevisionState> r, std::string rev, MonoTime s)
        : impl(i), state(std::move(r)), revision(std::move(rev)), start(s) {
      state->stats.requestIn(start);
    }
    ~RequestGuard() {
      const MonoTime now = impl->time.monotonic();
      if (!endpoint.empty()) state->queue.release(endpoint);
      state->stats.requestOut(now);
      impl->metrics.requests_total.with({revision, std::to_string(code == 0 ? 499 : code)}).inc();
      impl->metrics.request_duration.with({revision}).observe(seconds(now - start));
    }
    Impl* impl;
    std::shared_ptr<RevisionState> state;
    std::string revision;
    MonoTime start;
    std::string endpoint;  // slot held
    int code = 0;          // status sent to the client (0: none)
  };

  std::shared_ptr<const RoutingTable> snapshot() const {
    std::lock_guard<std::mutex> lock(table_mu);
    return table;
  }

  std::shared_ptr<RevisionState> revisionState(const std::string& revision) {
    std::lock_guard<std::mutex> lock(rev_mu);
    auto& slot = revisions[revision];
    if (!slot) {
      slot = std::make_shared<RevisionState>(opts.queue, time.monotonic());
    }
    return slot;
  }

  std::shared_ptr<RevisionState> findRevision(const std::string& revision) const {
    std::lock_guard<std::mutex> lock(rev_mu);
    auto it = revisions.find(revision);
    return it == revisions.end() ? nullptr : it->second;
  }

  // -- pool -----------------------------------------------------------------
  std::unique_ptr<beast::tcp_stream> takeIdle(Worker& w, const std::string& endpoint) {
    auto it = w.idle.find(endpoint);
    if (it == w.idle.end()) return nullptr;
    auto& v = it->second;
    while (!v.empty()) {
      std::unique_ptr<beast::tcp_stream> s = std::move(v.back());
      v.pop_back();
      if (idleConnectionAlive(s->socket())) return s;
    }
    w.idle.erase(it);
    return nullptr;
  }
  void putIdle(Worker& w, const std::string& endpoint, std::unique_ptr<beast::tcp_stream> s) {
    auto& v = w.idle[endpoint];
    if (v.size() >= opts.max_idle_upstream_per_endpoint) return;
    s->expires_never();
    v.push_back(std::move(s));
  }

  // -- responses written by the router itself -------------------------------
  // (A plain function building the message, then a coroutine sending it:
  // GCC 12 miscompiles string-literal arguments to coroutine parameters.)
  using LocalResponse = http::response<http::string_body>;
  awaitable<bool> writeLocal(beast::tcp_stream& client, unsigned version, http::status status,
                             const std::string& body, bool keep_alive,
                             const std::vector<std::pair<std::string, std::string>>& extra = {},
                             const char* content_type = "text/plain; charset=utf-8") {
    auto r = std::make_unique<LocalResponse>(status, version < 10 ? 11 : version);
    r->set(http::field::server, "knap");
    for (const auto& [k, v] : extra) r->set(k, v);
    if (!body.empty()) r->set(http::field::content_type, content_type);
    r->body() = body;
    if (!body.empty() && body.back() != '\n') r->body() += "\n";
    r->keep_alive(keep_alive);
    r->prepare_payload();
    return sendLocal(client, std::move(r), keep_alive);
  }
  awaitable<bool> sendLocal(beast::tcp_stream& client, std::unique_ptr<LocalResponse> r,
                            bool keep_alive) {
    client.expires_after(opts.client_io_timeout);
    beast::error_code ec;
    co_await http::async_write(client, *r, tok(ec));
    co_return !ec && keep_alive;
  }

  // Helpers kept out of coroutine bodies (GCC 12 rejects braced lists of
  // string literals there).
  void countProbe(const char* kind) { metrics.probes_total.with({kind}).inc(); }
  // The cold start of the request that woke `revision`: records the
  // histogram and returns the K-Knap-Cold-Start value.
  std::string noteColdStart(RevisionState& st, const std::string& revision, WallTime arrived, Duration d) {
    WakeInfo wake;
    {
      std::lock_guard<std::mutex> lock(st.mu);
      wake = st.wake;
    }
    std::string path = wake.path.empty() ? "unknown" : wake.path;
    if (wake.image_ready_at && *wake.image_ready_at > arrived) path = "pulled";
    const double secs = seconds(d);
    metrics.cold_start.with({revision, path}).observe(secs);
    char dur[32];
    std::snprintf(dur, sizeof dur, "%.3f", secs);
    return "path=" + path + "; dur=" + dur;
  }
  void countUnrouted() { metrics.requests_total.with({"", "404"}).inc(); }
  static std::vector<std::pair<std::string, std::string>> hashHeader(const std::string& v) {
    return {{std::string(kHashHeader), v}};
  }

  // -- listeners --------------------------------------------------------------
  awaitable<void> acceptLoop(Listener* l) {
    asio::steady_timer backoff(workers[0]->ioc);
    for (;;) {
      Worker& w = *workers[next_worker.fetch_add(1) % workers.size()];
      beast::error_code ec;
      tcp::socket sock = co_await l->acceptor->async_accept(w.ioc, tok(ec));
      if (ec == asio::error::operation_aborted || !l->acceptor->is_open()) co_return;
      if (ec) {
        LOG(WARNING) << "router: accept: " << ec.message();
        backoff.expires_after(std::chrono::milliseconds(50));
        co_await backoff.async_wait(tok(ec));
        continue;
      }
      sock.set_option(tcp::no_delay(true), ec);
      asio::co_spawn(w.ioc, serveConnection(std::move(sock), l->kind, &w), asio::detached);
    }
  }

  awaitable<void> serveConnection(tcp::socket sock, Kind kind, Worker* w) {
    beast::tcp_stream client(std::move(sock));
    const std::string client_ip = peerIp(client.socket());
    beast::flat_buffer buf;
    std::vector<char> chunk(kChunkBytes);
    bool first = true;
    for (;;) {
      beast::error_code ec;
      if (buf.size() == 0) {
        // Idle between requests: the keep-alive timeout; a fresh
        // connection must start its request within the header timeout.
        client.expires_after(first ? opts.header_read_timeout : opts.keepalive_idle_timeout);
        const size_t n = co_await client.async_read_some(buf.prepare(4096), tok(ec));
        if (ec) break;
        buf.commit(n);
      }
      first = false;
      http::request_parser<http::buffer_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(opts.max_header_bytes));
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      client.expires_after(opts.header_read_timeout);
      co_await http::async_read_header(client, buf, parser, tok(ec));
      if (ec) {
        if (ec == http::error::header_limit) {
          const std::string msg =
              "request header larger than " + std::to_string(opts.max_header_bytes) + " bytes";
          co_await writeLocal(client, 11, http::status::request_header_fields_too_large, msg, false);
        } else if (ec != beast::error::timeout && ec != http::error::end_of_stream &&
                   ec != asio::error::eof && ec != asio::error::connection_reset &&
                   ec != asio::error::operation_aborted) {
          const std::string msg = "malformed request: " + ec.message();
          co_await writeLocal(client, 11, http::status::bad_request, msg, false);
        }
        break;
      }
      bool keep = false;
      if (kind == Kind::kAdmin) {
        keep = co_await handleAdmin(client, parser);
      } else {
        keep = co_await handleRequest(client, buf, parser, kind, *w, client_ip, chunk);
      }
      if (!keep) break;
      if (buf.size() == 0) buf.shrink_to_fit();  // idle connections hold no big buffer
    }
    if (client.socket().is_open()) {
      beast::error_code ec;
      client.socket().shutdown(tcp::socket::shutdown_send, ec);
      client.close();
    }
  }

  awaitable<bool> handleAdmin(beast::tcp_stream& client,
                              http::request_parser<http::buffer_body>& parser) {
    auto& req = parser.get();
    const bool keep = parser.keep_alive() && parser.is_done();
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      co_return co_await writeLocal(client, req.version(), http::status::method_not_allowed,
                                    "only GET", false);
    }
    if (path == "/metrics") {
      co_return co_await writeLocal(client, req.version(), http::status::ok, metrics.render(), keep,
                                    {}, "text/plain; version=0.0.4; charset=utf-8");
    }
    if (path == "/healthz") {
      co_return co_await writeLocal(client, req.version(), http::status::ok, "ok", keep);
    }
    const std::string msg = "not found: " + path + " (try /metrics or /healthz)";
    co_return co_await writeLocal(client, req.version(), http::status::not_found, msg, keep);
  }

  // Answers K-Network-Probe requests (§5.5, §5.6, §5.10); never forwarded
  // and never counted as requests of a revision.
  awaitable<bool> handleProbe(beast::tcp_stream& client,
                              http::request_parser<http::buffer_body>& parser,
                              std::string_view value, const std::string& host,
                              const RoutingTable& table, Kind kind) {
    auto& req = parser.get();
    const bool keep = parser.keep_alive() && parser.is_done();
    if (value == "activator") {
      countProbe("activator");
      co_return co_await writeLocal(client, req.version(), http::status::ok, "activator", keep);
    }
    if (value == "probe") {
      countProbe("probe");
      auto h = req.find(beast::string_view(kHashHeader.data(), kHashHeader.size()));
      const std::string hash = h == req.end() ? "" : std::string(h->value());
      if (hash.empty()) {
        co_return co_await writeLocal(client, req.version(), http::status::bad_request,
                                      "K-Network-Probe: probe needs a K-Network-Hash header", keep);
      }
      if (table.lookup(host, kind == Kind::kInternal ? ListenerKind::kInternal
                                                      : ListenerKind::kExternal) == nullptr) {
        const std::string msg = "no route for host \"" + host + "\"";
        co_return co_await writeLocal(client, req.version(), http::status::not_found, msg, keep);
      }
      // "override" asks for the hash of the programmed table (§5.6 step 1).
      const std::string answer =
          hash == "override" && !table.networkHash().empty() ? table.networkHash() : hash;
      co_return co_await writeLocal(client, req.version(), http::status::ok, "", keep,
                                    hashHeader(answer));
    }
    countProbe("invalid");
    const std::string msg = "unexpected K-Network-Probe value \"" + std::string(value) + "\"";
    co_return co_await writeLocal(client, req.version(), http::status::bad_request, msg, keep);
  }

  awaitable<bool> handleRequest(beast::tcp_stream& client, beast::flat_buffer& buf,
                                http::request_parser<http::buffer_body>& parser, Kind kind,
                                Worker& w, const std::string& client_ip, std::vector<char>& chunk);

  awaitable<void> pump(std::shared_ptr<struct Tunnel> t, bool client_to_pod);

  RouterOptions opts;
  const TimeSource& time;
  RouterMetrics metrics;
  std::function<void(const std::string&)>* on_cold = nullptr;

  mutable std::mutex table_mu;
  std::shared_ptr<const RoutingTable> table;
  mutable std::mutex rev_mu;
  std::map<std::string, std::shared_ptr<RevisionState>> revisions;

  // Guards `workers` against setEndpoints() racing stop(); the request path
  // never takes it (a worker outlives every coroutine running on it).
  std::mutex lifecycle_mu;
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<std::unique_ptr<Listener>> listeners;
  std::atomic<size_t> next_worker{0};
  bool started = false;
  bool stopped = false;
};

// An upgraded connection: bytes spliced both ways until both sides close.
struct Tunnel {
  Tunnel(tcp::socket c, tcp::socket p) : client(std::move(c)), pod(std::move(p)) {}
  tcp::socket client;
  tcp::socket pod;
  std::string client_leftover;  // bytes the client sent after its request header
  std::string pod_leftover;     // bytes the pod sent after its 101 header
  std::unique_ptr<Router::Impl::RequestGuard> guard;  // slot and stats held while open
};

awaitable<void> Router::Impl::pump(std::shared_ptr<Tunnel> t, bool client_to_pod) {
  tcp::socket& from = client_to_pod ? t->client : t->pod;
  tcp::socket& to = client_to_pod ? t->pod : t->client;
  std::string& leftover = client_to_pod ? t->client_leftover : t->pod_leftover;
  beast::error_code ec;
  if (!leftover.empty()) {
    co_await asio::async_write(to, asio::buffer(leftover), tok(ec));
    leftover.clear();
  }
  std::vector<char> data(kChunkBytes);
  while (!ec) {
    const size_t n = co_await from.async_read_some(asio::buffer(data), tok(ec));
    if (ec) break;
    co_await asio::async_write(to, asio::buffer(data.data(), n), tok(ec));
  }
  beast::error_code ignored;
  if (ec == asio::error::eof) {
    to.shutdown(tcp::socket::shutdown_send, ignored);  // half-close, the other way may go on
  } else {
    from.close(ignored);
    to.close(ignored);
  }
}

awaitable<bool> Router::Impl::handleRequest(beast::tcp_stream& client, beast::flat_buffer& buf,
                                            http::request_parser<http::buffer_body>& parser,
                                            Kind kind, Worker& w, const std::string& client_ip,
                                            std::vector<char>& chunk) {
  auto& req = parser.get();
  const MonoTime start = time.monotonic();
  const unsigned version = req.version();
  const bool client_keep = parser.keep_alive();
  auto reusable = [&] { return client_keep && parser.is_done(); };
  const ListenerKind lk = kind == Kind::kInternal ? ListenerKind::kInternal : ListenerKind::kExternal;

  auto host_it = req.find(http::field::host);
  const std::string host = host_it == req.end() ? "" : std::string(host_it->value());
  if (host.empty()) {
    co_return co_await writeLocal(client, version, http::status::bad_request,
                                  "missing Host header", false);
  }
  const std::shared_ptr<const RoutingTable> tbl = snapshot();
  auto probe = req.find(beast::string_view(kProbeHeader.data(), kProbeHeader.size()));
  if (probe != req.end()) {
    const std::string value(probe->value());
    co_return co_await handleProbe(client, parser, value, normalizeHost(host), *tbl, kind);
  }
  const HostRoute* route = tbl->lookup(host, lk);
  if (route == nullptr) {
    countUnrouted();
    const std::string msg = "no route for host \"" + normalizeHost(host) + "\"";
    co_return co_await writeLocal(client, version, http::status::not_found, msg, reusable());
  }
  const std::string revision = route->pick();
  std::shared_ptr<RevisionState> state = revisionState(revision);
  const RevisionConfig cfg = state->config();
  const MonoTime deadline = start + cfg.timeout;
  const MonoTime first_byte_deadline =
      cfg.response_start_timeout > Duration::zero()
          ? std::min(deadline, start + cfg.response_start_timeout)
          : deadline;
  auto guard = std::make_unique<RequestGuard>(this, state, revision, start);

  // 1. A slot on a pod: now, or after waiting in the activator queue.
  bool cold_start = false;
  WallTime arrived{};
  {
    auto ws = std::make_shared<WaitState>(w.ioc.get_executor());
    ActivatorQueue::Acquired acq = state->queue.acquire(
        start, first_byte_deadline, [ws](StatusOr<std::string> g) { ws->deliver(std::move(g)); });
    if (acq.outcome == ActivatorQueue::Outcome::kRejected) {
      guard->code = 503;
      co_return co_await writeLocal(client, version, http::status::service_unavailable,
                                    acq.status.message(), reusable());
    }
    if (acq.outcome == ActivatorQueue::Outcome::kGranted) {
      guard->endpoint = acq.endpoint;
    } else {
      Gauge& queued_gauge = metrics.queued_requests.with({revision});
      queued_gauge.add(1);
      cold_start = acq.first_cold;
      if (cold_start) arrived = time.now() - (time.monotonic() - start);
      if (acq.cold && on_cold != nullptr && *on_cold) (*on_cold)(revision);
      ws->timer.expires_at(std::min(start + opts.queue.max_wait, first_byte_deadline));
      // A client that hangs up while queued must not keep its place (nor
      // count as concurrency): watch its socket. Only when no body is
      // pending, since then nothing but EOF is expected from it.
      const bool watch_client = parser.is_done();
      if (watch_client) {
        const uint64_t waiter = acq.waiter;
        client.socket().async_wait(
            tcp::socket::wait_read,
            [ws, state, waiter, fd = client.socket().native_handle()](beast::error_code wec) {
              if (wec) return;  // cancelled: the wait is over
              char byte;
              const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
              const bool gone = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
              if (!gone || !state->queue.cancel(waiter)) return;
              {
                std::lock_guard<std::mutex> lock(ws->mu);
                ws->client_gone = true;
                ws->result.emplace(unavailable("client closed the connection while queued"));
              }
              ws->timer.cancel();
            });
      }
      while (!ws->ready()) {
        beast::error_code ec;
        co_await ws->timer.async_wait(tok(ec));
        if (ec) continue;  // cancelled: a result was delivered (or a stale wake-up)
        state->queue.expire(time.monotonic());
        if (!ws->ready() && state->queue.cancel(acq.waiter)) {
          // Timer and TimeSource disagreed by a hair; the timer is the truth.
          const bool request_first = first_byte_deadline <= start + opts.queue.max_wait;
          std::lock_guard<std::mutex> lock(ws->mu);
          ws->result.emplace(request_first
                                 ? Status(Code::kDeadlineExceeded, "activator request timeout")
                                 : unavailable("no pod became available within the activator "
                                               "queue wait limit"));
        }
      }
      queued_gauge.add(-1);
      if (watch_client) {
        beast::error_code ignored;
        client.socket().cancel(ignored);
      }
      StatusOr<std::string> grant = [&] {
        std::lock_guard<std::mutex> lock(ws->mu);
        return *ws->result;
      }();
      if (ws->client_gone) co_return false;  // nobody to answer; code stays 499
      if (!grant.isOk()) {
        const bool timeout = grant.status().code() == Code::kDeadlineExceeded;
        guard->code = timeout ? 504 : 503;
        co_return co_await writeLocal(
            client, version, timeout ? http::status::gateway_timeout : http::status::service_unavailable,
            grant.status().message(), reusable());
      }
      guard->endpoint = grant.value();
      metrics.queue_wait.with({revision}).observe(seconds(time.monotonic() - start));
    }
  }
  const std::string endpoint = guard->endpoint;
  tcp::endpoint pod_addr;
  if (!parseEndpointKey(endpoint, &pod_addr)) {
    guard->code = 502;
    const std::string msg = "bad pod endpoint " + endpoint;
    co_return co_await writeLocal(client, version, http::status::bad_gateway, msg, reusable());
  }

  // 2. Headers for the pod.
  const bool is_upgrade = isUpgradeRequest(req);
  const bool had_body = !parser.is_done();
  const bool request_chunked = parser.chunked();
  bool expect_continue = false;
  if (auto e = req.find(http::field::expect); e != req.end()) {
    expect_continue = lower(std::string_view(e->value().data(), e->value().size())) == "100-continue";
  }
  rewriteRequestHeaders(req, client_ip, opts.forwarded_proto, is_upgrade);
  if (request_chunked) req.chunked(true);
  req.version(11);
  if (expect_continue && had_body) {
    // We answer Expect ourselves, now that a pod slot is ours.
    static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    beast::error_code ec;
    client.expires_after(opts.client_io_timeout);
    co_await asio::async_write(client.socket(), asio::buffer(kContinue, sizeof kContinue - 1), tok(ec));
    if (ec) co_return false;
  }

  // 3. Send the request (streaming its body) and read the response header.
  std::unique_ptr<beast::tcp_stream> up;
  beast::flat_buffer ubuf;
  // Beast reads at most the free capacity of a flat_buffer (>= 512 bytes):
  // give it room so bodies move in large reads.
  ubuf.reserve(kChunkBytes);
  if (had_body) buf.reserve(kChunkBytes);
  std::optional<http::response_parser<http::buffer_body>> rp;
  for (int attempt = 0;; ++attempt) {
    beast::error_code ec;
    up = attempt == 0 ? takeIdle(w, endpoint) : nullptr;
    const bool reused = up != nullptr;
    if (!up) {
      up = std::make_unique<beast::tcp_stream>(w.ioc);
      up->expires_at(std::min(time.monotonic() + opts.upstream_connect_timeout, first_byte_deadline));
      co_await up->async_connect(pod_addr, tok(ec));
      if (ec) {
        const bool timeout = ec == beast::error::timeout && time.monotonic() >= first_byte_deadline;
        guard->code = timeout ? 504 : 502;
        // (Message built outside the co_await: GCC 12 mishandles temporaries
        // of a ?: inside a co_await expression.)
        const std::string msg =
            timeout ? std::string("request timeout")
                    : "cannot connect to pod " + endpoint + ": " + ec.message();
        co_return co_await writeLocal(
            client, version, timeout ? http::status::gateway_timeout : http::status::bad_gateway,
            msg, reusable());
      }
      up->socket().set_option(tcp::no_delay(true), ec);
    }
    http::request_serializer<http::buffer_body> sr{req};
    bool upstream_failed = false;
    do {
      if (!parser.is_done()) {
        req.body().data = chunk.data();
        req.body().size = chunk.size();
        client.expires_at(std::min(first_byte_deadline, time.monotonic() + opts.client_io_timeout));
        co_await http::async_read_some(client, buf, parser, tok(ec));
        if (ec == http::error::need_buffer) ec = {};
        if (ec) {
          // The client stalled or vanished mid-upload.
          if (ec == beast::error::timeout && time.monotonic() >= first_byte_deadline) {
            guard->code = 504;
            co_await writeLocal(client, version, http::status::gateway_timeout, "request timeout",
                                false);
          }
          co_return false;
        }
        const size_t n = chunk.size() - req.body().size;
        req.body().data = chunk.data();
        req.body().size = n;
        req.body().more = !parser.is_done();
        if (n == 0 && !parser.is_done()) continue;
      } else {
        req.body().data = nullptr;
        req.body().size = 0;
        req.body().more = false;
      }
      up->expires_at(first_byte_deadline);
      co_await http::async_write(*up, sr, tok(ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        upstream_failed = true;
        break;
      }
    } while (!parser.is_done() || !sr.is_done());

    if (!upstream_failed) {
      rp.emplace();
      rp->header_limit(kUpstreamHeaderLimit);
      rp->body_limit(std::numeric_limits<std::uint64_t>::max());
      if (req.method() == http::verb::head) rp->skip(true);
      up->expires_at(first_byte_deadline);
      ubuf.clear();
      co_await http::async_read_header(*up, ubuf, *rp, tok(ec));
      if (!ec) break;
    }
    // A pooled connection the pod closed meanwhile: retry once on a fresh
    // one when nothing of the body was consumed.
    if (reused && !had_body && attempt == 0 && ec != beast::error::timeout) continue;
    const bool timeout = ec == beast::error::timeout;
    guard->code = timeout ? 504 : 502;
    const std::string msg =
        timeout ? std::string("request timeout") : "pod " + endpoint + " failed: " + ec.message();
    co_return co_await writeLocal(
        client, version, timeout ? http::status::gateway_timeout : http::status::bad_gateway, msg,
        timeout && reusable());
  }

  // 4. Relay the response; from its first byte on only the idle timeout applies.
  auto& resp = rp->get();
  const int code = resp.result_int();
  const bool switching = code == 101 && is_upgrade;
  const bool pod_keep = rp->keep_alive();
  bool keep = client_keep;
  if (!switching) {
    const bool chunked = rp->chunked();
    const bool has_length = rp->content_length().has_value();
    const bool until_eof = !rp->is_done() && !chunked && !has_length;
    rewriteResponseHeaders(resp, false);
    if (chunked || until_eof) {
      if (version >= 11) {
        resp.chunked(true);
      } else {
        keep = false;
      }
    }
    resp.version(version >= 11 ? 11 : 10);
    resp.keep_alive(keep);
  } else {
    rewriteResponseHeaders(resp, true);
    resp.version(11);
  }
  guard->code = code;
  if (cold_start) {
    const std::string cold = noteColdStart(*state, revision, arrived, time.monotonic() - start);
    resp.set(beast::string_view(kColdStartHeader.data(), kColdStartHeader.size()), cold);
  }
  http::response_serializer<http::buffer_body> rs{resp};
  beast::error_code ec;
  client.expires_after(opts.client_io_timeout);
  co_await http::async_write_header(client, rs, tok(ec));
  if (ec) co_return false;

  if (switching) {
    // 5. Upgrade: splice bytes both ways; the slot stays held until both close.
    auto tunnel = std::make_shared<Tunnel>(client.release_socket(), up->release_socket());
    auto cb = buf.data();
    tunnel->client_leftover.assign(static_cast<const char*>(cb.data()), cb.size());
    buf.consume(buf.size());
    auto pb = ubuf.data();
    tunnel->pod_leftover.assign(static_cast<const char*>(pb.data()), pb.size());
    tunnel->guard = std::move(guard);
    asio::co_spawn(w.ioc, pump(tunnel, true), asio::detached);
    asio::co_spawn(w.ioc, pump(tunnel, false), asio::detached);
    co_return false;
  }

  do {
    if (!rp->is_done()) {
      resp.body().data = chunk.data();
      resp.body().size = chunk.size();
      if (cfg.idle_timeout > Duration::zero()) {
        up->expires_after(cfg.idle_timeout);
      } else {
        up->expires_never();
      }
      co_await http::async_read_some(*up, ubuf, *rp, tok(ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return false;  // pod failed or went idle mid-stream: cut the client
      const size_t n = chunk.size() - resp.body().size;
      resp.body().data = chunk.data();
      resp.body().size = n;
      resp.body().more = !rp->is_done();
      if (n == 0 && !rp->is_done()) continue;
    } else {
      resp.body().data = nullptr;
      resp.body().size = 0;
      resp.body().more = false;
    }
    client.expires_after(opts.client_io_timeout);
    co_await http::async_write(client, rs, tok(ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return false;
  } while (!rp->is_done() || !rs.is_done());

  if (pod_keep && rp->is_done() && parser.is_done() && ubuf.size() == 0) {
    putIdle(w, endpoint, std::move(up));
  }
  guard.reset();
  co_return keep && parser.is_done();
}

// ---------------------------------------------------------------------------

Router::Router(RouterOptions options, const TimeSource& time)
    : impl_(std::make_unique<Impl>(std::move(options), time)) {
  impl_->on_cold = &on_cold_request;
}

Router::~Router() { stop(); }

Status Router::start() {
  Impl& im = *impl_;
  if (im.started) return failedPrecondition("router already started");
  im.started = true;
  for (int i = 0; i < im.opts.threads; ++i) im.workers.push_back(std::make_unique<Worker>(i));
  const std::vector<ListenerSpec> specs = {
      {Kind::kExternal, im.opts.address, im.opts.port},
      {Kind::kInternal, im.opts.internal_address, im.opts.internal_port},
      {Kind::kAdmin, im.opts.admin_address, im.opts.admin_port},
  };
  for (const ListenerSpec& spec : specs) {
    auto l = std::make_unique<Listener>();
    l->kind = spec.kind;
    if (spec.port >= 0) {
      beast::error_code ec;
      const asio::ip::address addr = asio::ip::make_address(spec.address, ec);
      if (ec) return invalidArgument("router: bad listen address \"" + spec.address + "\"");
      l->acceptor = std::make_unique<tcp::acceptor>(im.workers[0]->ioc);
      const tcp::endpoint ep(addr, static_cast<uint16_t>(spec.port));
      l->acceptor->open(ep.protocol(), ec);
      if (!ec) l->acceptor->set_option(asio::socket_base::reuse_address(true), ec);
      if (!ec) l->acceptor->bind(ep, ec);
      if (!ec) l->acceptor->listen(asio::socket_base::max_listen_connections, ec);
      if (ec) {
        const std::string where = spec.address + ":" + std::to_string(spec.port);
        im.listeners.clear();
        im.workers.clear();
        return unavailable("router: cannot listen on " + where + ": " + ec.message());
      }
      l->port = l->acceptor->local_endpoint().port();
    }
    im.listeners.push_back(std::move(l));
  }
  for (auto& l : im.listeners) {
    if (l->acceptor) asio::co_spawn(im.workers[0]->ioc, im.acceptLoop(l.get()), asio::detached);
  }
  for (auto& w : im.workers) {
    w->guard.emplace(w->ioc.get_executor());
    Worker* wp = w.get();
    wp->thread = std::thread([wp] { wp->ioc.run(); });
  }
  LOG(INFO) << "router: listening external=" << port() << " internal=" << internalPort()
            << " admin=" << adminPort() << " threads=" << im.workers.size();
  return Status::ok();
}

void Router::stop() {
  Impl& im = *impl_;
  if (!im.started || im.stopped) return;
  im.stopped = true;
  auto shutdownQueues = [&] {
    std::lock_guard<std::mutex> lock(im.rev_mu);
    for (auto& [name, st] : im.revisions) st->queue.shutdown(unavailable("router stopping"));
  };
  shutdownQueues();
  for (auto& w : im.workers) {
    w->guard.reset();
    w->ioc.stop();
  }
  for (auto& w : im.workers) {
    if (w->thread.joinable()) w->thread.join();
  }
  shutdownQueues();  // requests queued while the loops were stopping
  std::lock_guard<std::mutex> lock(im.lifecycle_mu);
  im.listeners.clear();
  for (auto& w : im.workers) w->idle.clear();
  im.workers.clear();  // destroys pending handlers and coroutine frames
}

int Router::port() const {
  return impl_->listeners.size() > 0 ? impl_->listeners[0]->port : -1;
}
int Router::internalPort() const {
  return impl_->listeners.size() > 1 ? impl_->listeners[1]->port : -1;
}
int Router::adminPort() const {
  return impl_->listeners.size() > 2 ? impl_->listeners[2]->port : -1;
}

void Router::setRoutingTable(std::shared_ptr<const RoutingTable> table) {
  if (!table) table = RoutingTable::empty();
  std::lock_guard<std::mutex> lock(impl_->table_mu);
  impl_->table = std::move(table);
}

bool Router::setEndpoints(const std::string& revision, const std::vector<Endpoint>& endpoints,
                          const WakeInfo& wake, uint64_t version) {
  std::shared_ptr<RevisionState> st = impl_->revisionState(revision);
  std::vector<std::string> keys;
  keys.reserve(endpoints.size());
  for (const Endpoint& e : endpoints) keys.push_back(e.key());
  std::vector<std::string> gone;
  {
    // The queue is updated under st->mu too, so two racing updates reach it
    // in the same order as they pass the version check.
    std::lock_guard<std::mutex> lock(st->mu);
    if (version != 0) {
      if (version < st->endpoints_version) return false;  // stale: a newer list is applied
      st->endpoints_version = version;
    }
    for (const std::string& old : st->endpoints) {
      if (std::find(keys.begin(), keys.end(), old) == keys.end()) gone.push_back(old);
    }
    st->endpoints = keys;
    if (!wake.path.empty()) st->wake = wake;
    st->queue.setEndpoints(keys);
    impl_->metrics.revision_pods.with({revision, "ready"}).set(static_cast<double>(keys.size()));
  }
  if (!gone.empty()) {
    // Drop pooled connections to pods that went away.
    std::lock_guard<std::mutex> lock(impl_->lifecycle_mu);
    for (auto& w : impl_->workers) {
      Worker* wp = w.get();
      asio::post(wp->ioc, [wp, gone] {
        for (const std::string& g : gone) wp->idle.erase(g);
      });
    }
  }
  return true;
}

void Router::setWarmPool(const std::string& revision, const WarmPoolStats& pool) {
  if (pool.pods == 0 && !impl_->findRevision(revision)) {
    // An empty pool of a revision the router does not know (removed): no series.
    impl_->metrics.warm_pool_pods.removeAll(revision);
    impl_->metrics.warm_pool_memory.remove({revision});
    return;
  }
  for (const char* mode : {"created", "frozen"}) {
    if (pool.mode != mode) impl_->metrics.warm_pool_pods.remove({revision, mode});
  }
  impl_->metrics.warm_pool_pods.with({revision, pool.mode}).set(pool.pods);
  impl_->metrics.warm_pool_memory.with({revision}).set(static_cast<double>(pool.memory_bytes));
}

void Router::setRevisionConfig(const std::string& revision, const RevisionConfig& config) {
  std::shared_ptr<RevisionState> st = impl_->revisionState(revision);
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->config_ = config;
  }
  st->queue.setContainerConcurrency(config.container_concurrency);
}

void Router::removeRevision(const std::string& revision) {
  std::shared_ptr<RevisionState> st;
  {
    std::lock_guard<std::mutex> lock(impl_->rev_mu);
    auto it = impl_->revisions.find(revision);
    if (it == impl_->revisions.end()) return;
    st = it->second;
    impl_->revisions.erase(it);
  }
  st->queue.shutdown(unavailable("revision " + revision + " was removed"));
  impl_->metrics.removeRevision(revision);
}

void Router::setDesiredPods(const std::string& revision, int pods) {
  impl_->metrics.revision_pods.with({revision, "desired"}).set(pods);
}

scaler::RequestStatsReport Router::collect(const std::string& revision, MonoTime now) {
  std::shared_ptr<RevisionState> st = impl_->findRevision(revision);
  if (!st) return {};
  return st->stats.report(now);
}

std::string Router::renderMetrics() const { return impl_->metrics.render(); }

size_t Router::queued(const std::string& revision) const {
  std::shared_ptr<RevisionState> st = impl_->findRevision(revision);
  return st ? st->queue.queued() : 0;
}

}  // namespace knap::router
