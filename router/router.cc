// The Router's lifecycle, listeners, per-connection read loop and the
// answers it gives itself (admin, probes). One request's route → activate →
// proxy stages are proxy.cc; message framing is http1.cc; pod connections
// upstream.cc. docs: router/README.md walks through one request.
#include "router/router.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <strings.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <future>
#include <set>
#include <string_view>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "common/guard.h"
#include "common/listen_fds.h"
#include "common/log.h"
#include "common/tls.h"
#include "router/client_side.h"
#include "router/h2_session.h"
#include "router/headers.h"
#include "router/router_impl.h"

namespace knap::router {

namespace {

// The client's address as accept() gave it (no getpeername per connection).
std::string peerIp(const tcp::endpoint& ep) {
  asio::ip::address a = ep.address();
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6()).to_string();
  }
  return a.to_string();
}

struct ListenerSpec {
  Kind kind;
  const char* name;
  std::string address;
  int port;
  int fd;  // adopt this listening socket instead of binding (-1: bind)
  bool tls = false;
};

// Whether an SNI value is an IP address literal (RFC 6066 forbids them;
// some clients send one when connecting to an address).
bool isIpLiteral(const char* name) {
  unsigned char buf[sizeof(struct in6_addr)];
  std::string_view n(name);
  if (n.size() > 2 && n.front() == '[' && n.back() == ']') n = n.substr(1, n.size() - 2);
  if (n.size() >= INET6_ADDRSTRLEN) return false;
  const std::string s(n);
  return ::inet_pton(AF_INET, s.c_str(), buf) == 1 || ::inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

// SNI: switches the handshake to the context of the certificate for the
// requested host (Router::Impl::certs). A host no certificate covers: the
// handshake fails with unrecognized_name (a wrong certificate is never
// served). No SNI (or an IP address as SNI): the certificate of
// RouterOptions::tls_default_host when one covers it, else unrecognized_name
// too; either way counted in knap_router_tls_no_sni_total.
int selectCertificate(SSL* ssl, int* alert, void* arg) {
  auto* impl = static_cast<Router::Impl*>(arg);
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  std::shared_ptr<const CertTable> certs = impl->certSnapshot();
  const CertEntry* e = nullptr;
  if (name != nullptr && !isIpLiteral(name)) {
    e = certs->lookup(name);
  } else {
    const std::string& fallback = impl->opts.tls_default_host;
    e = fallback.empty() ? nullptr : certs->lookup(fallback);
    impl->metrics.tls_no_sni.with({e != nullptr ? "default_host" : "refused"})->inc();
  }
  if (e == nullptr) {
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  if (SSL_session_reused(ssl)) {
    // A session resumes only under the name it was made for (RFC 8446
    // 4.6.1; every server context shares one session ID context, see
    // common/tls.cc, and OpenSSL does not compare the names itself).
    const char* made_for = SSL_SESSION_get0_hostname(SSL_get_session(ssl));
    const bool same =
        made_for == nullptr ? name == nullptr : name != nullptr && strcasecmp(made_for, name) == 0;
    if (!same) {
      *alert = SSL_AD_ILLEGAL_PARAMETER;
      return SSL_TLSEXT_ERR_ALERT_FATAL;
    }
  }
  SSL_set_SSL_CTX(ssl, e->ctx.get());  // holds its own reference to the context
  return SSL_TLSEXT_ERR_OK;
}

// ALPN: h2 (router/h2_session.cc) when the client offers it and
// RouterOptions::http2 is on, else http/1.1; a client offering neither gets
// no protocol (and falls back or fails on its side).
int selectAlpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
               unsigned int inlen, void* arg) {
  static const unsigned char kH2Http11[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  const bool h2 = arg != nullptr;  // (not the Impl: a context may outlive a Router)
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, h2 ? kH2Http11 : kHttp11,
                            h2 ? sizeof kH2Http11 : sizeof kHttp11, in, inlen) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

void* alpnArg(const RouterOptions& o) {
  return o.http2 ? reinterpret_cast<void*>(1) : nullptr;
}

// OpenSSL asks the context the SNI callback switched to for ALPN: every
// certificate's context gets selectAlpn once, before its first table is
// published (so never while a handshake reads it).
void installAlpn(const CertTable& certs, const RouterOptions& o) {
  static const int kAlpnSet = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  for (SSL_CTX* ctx : certs.contexts()) {
    if (SSL_CTX_get_ex_data(ctx, kAlpnSet) != nullptr) continue;
    SSL_CTX_set_alpn_select_cb(ctx, selectAlpn, alpnArg(o));
    SSL_CTX_set_ex_data(ctx, kAlpnSet, reinterpret_cast<void*>(1));
  }
}

// Adopts an already-listening TCP socket (socket activation); checks that it
// is one, so a wrong fd is a clear error, not a silent hang.
Status adoptListener(tcp::acceptor& acceptor, int fd, const char* name) {
  const std::string what = std::string("router: the ") + name + " listener's inherited socket: ";
  int family = 0;
  if (Status st = checkListeningTcp(fd, &family); !st.isOk()) return invalidArgument(what + st.message());
  beast::error_code ec;
  acceptor.assign(family == AF_INET ? tcp::v4() : tcp::v6(), fd, ec);
  if (ec) return invalidArgument(what + ec.message());
  return Status::ok();
}

bool outOfDescriptors(const beast::error_code& ec) {
  return ec == boost::system::errc::too_many_files_open ||
         ec == boost::system::errc::too_many_files_open_in_system ||
         ec == boost::system::errc::no_buffer_space || ec == boost::system::errc::not_enough_memory;
}

}  // namespace

std::string Endpoint::key() const {
  if (ip.find(':') != std::string::npos) return "[" + ip + "]:" + std::to_string(port);
  return ip + ":" + std::to_string(port);
}

std::shared_ptr<RevisionState> Router::Impl::revisionState(const std::string& revision) {
  std::lock_guard<std::mutex> lock(rev_mu);
  auto& slot = revisions[revision];
  if (!slot) slot = std::make_shared<RevisionState>(revision, opts.queue, time.monotonic());
  return slot;
}

std::shared_ptr<RevisionState> Router::Impl::findRevision(const std::string& revision) const {
  std::lock_guard<std::mutex> lock(rev_mu);
  auto it = revisions.find(revision);
  return it == revisions.end() ? nullptr : it->second;
}

Counter* RevisionState::requestsCounter(RouterMetrics& m, const std::string& revision, int code) {
  if (code == 200) {
    if (Counter* c = ok_counter.load(std::memory_order_acquire)) return c;
  }
  std::lock_guard<std::mutex> lock(cells_mu);
  for (const auto& [c, cell] : by_code) {
    if (c == code) return cell.get();
  }
  by_code.emplace_back(code, m.requests_total.with({revision, std::to_string(code)}));
  Counter* made = by_code.back().second.get();
  if (code == 200) ok_counter.store(made, std::memory_order_release);
  return made;
}

Histogram* RevisionState::durationHistogram(RouterMetrics& m, const std::string& revision) {
  if (Histogram* h = duration_cell.load(std::memory_order_acquire)) return h;
  std::lock_guard<std::mutex> lock(cells_mu);
  if (!duration) duration = m.request_duration.with({revision});
  duration_cell.store(duration.get(), std::memory_order_release);
  return duration.get();
}

ClientConn::ClientConn(Router::Impl* i, Listener* l, Worker* w) : impl(i), listener(l), worker(w) {
  worker->conns.insert(this);
}

ClientConn::~ClientConn() {
  worker->conns.erase(this);
  listener->open.fetch_sub(1);
  listener->open_gauge->add(-1);
}

void Router::Impl::forEachWorker(std::function<void(Worker&)> fn) {
  std::lock_guard<std::mutex> lock(lifecycle_mu);
  for (auto& w : workers) {
    Worker* wp = w.get();
    asio::post(wp->ioc, [wp, fn] { fn(*wp); });
  }
}

void Router::Impl::forEachPool(std::function<void(UpstreamPool&)> fn) {
  std::lock_guard<std::mutex> lock(lifecycle_mu);
  for (auto& w : workers) {
    Worker* wp = w.get();
    asio::post(wp->ioc, [wp, fn] { fn(wp->pool); });
  }
}

std::unique_ptr<Router::Impl::LocalResponse> Router::Impl::localResponse(
    unsigned version, http::status status, const std::string& body, bool keep_alive,
    const std::vector<std::pair<std::string, std::string>>& extra, const char* content_type) {
  auto r = std::make_unique<LocalResponse>(status, version < 10 ? 11 : version);
  r->set(http::field::server, "knap");
  for (const auto& [k, v] : extra) r->set(k, v);
  if (!body.empty()) r->set(http::field::content_type, content_type);
  r->body() = body;
  if (!body.empty() && body.back() != '\n') r->body() += "\n";
  r->keep_alive(keep_alive);
  r->prepare_payload();
  return r;
}

awaitable<bool> Router::Impl::writeLocal(ClientStream& client, unsigned version, http::status status,
                                         const std::string& body, bool keep_alive,
                                         const std::vector<std::pair<std::string, std::string>>& extra,
                                         const char* content_type) {
  keep_alive = keep_alive && !draining.load();
  return sendLocal(client, localResponse(version, status, body, keep_alive, extra, content_type), keep_alive);
}

awaitable<bool> Router::Impl::writeLocal(ClientSide& client, http::status status, const std::string& body,
                                         bool keep_alive,
                                         const std::vector<std::pair<std::string, std::string>>& extra,
                                         const char* content_type) {
  keep_alive = keep_alive && !draining.load();
  return client.sendLocal(localResponse(client.version(), status, body, keep_alive, extra, content_type),
                          keep_alive);
}

awaitable<bool> Router::Impl::sendLocal(ClientStream& client, std::unique_ptr<LocalResponse> r,
                                        bool keep_alive) {
  client.expires_after(opts.client_io_timeout);
  beast::error_code ec;
  co_await http::async_write(client, *r, tok(ec));
  co_return !ec && keep_alive;
}

std::string Router::Impl::noteColdStart(RevisionState& st, const std::string& revision, WallTime arrived,
                                        Duration d) {
  WakeInfo wake;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    wake = st.wake;
  }
  std::string path = wake.path.empty() ? "unknown" : wake.path;
  if (wake.image_ready_at && *wake.image_ready_at > arrived) path = "pulled";
  const double secs = seconds(d);
  metrics.cold_start.with({revision, path})->observe(secs);
  char dur[32];
  std::snprintf(dur, sizeof dur, "%.3f", secs);
  return "path=" + path + "; dur=" + dur;
}

std::string Router::Impl::httpsLocation(const std::string& host, const std::string& target) const {
  const std::string h = normalizeHost(host);
  const int port = opts.tls_redirect_port > 0 ? opts.tls_redirect_port : httpsPort();
  std::string out = "https://";
  out += h.find(':') != std::string::npos ? "[" + h + "]" : h;  // an IPv6 literal
  if (port != 443) out += ":" + std::to_string(port);
  // An absolute-form target (a proxy request) keeps only its path.
  std::string path = target;
  if (path.rfind("http://", 0) == 0) {
    const size_t slash = path.find('/', 7);
    path = slash == std::string::npos ? "/" : path.substr(slash);
  }
  if (path.empty() || path[0] != '/') path = "/" + path;
  return out + path;
}

// -- listeners ----------------------------------------------------------------

awaitable<void> Router::Impl::acceptLoop(Listener* l) {
  asio::steady_timer backoff(workers[0]->ioc);
  // Failed accepts (EMFILE and ENFILE above all: the pending connection
  // stays in the backlog, so an immediate retry fails again) back off
  // exponentially, 5 ms up to 1 s, and are logged at most every 10 s.
  Duration delay{0};
  std::chrono::steady_clock::time_point last_log{};
  for (;;) {
    Worker& w = *workers[next_worker.fetch_add(1) % workers.size()];
    beast::error_code ec;
    tcp::endpoint peer;
    tcp::socket sock = co_await l->acceptor->async_accept(w.ioc, peer, tok(ec));
    if (ec == asio::error::operation_aborted) co_return;
    // An accept that completed just as drain() closed the acceptor still
    // delivers its connection: serve it (dropping it would reset a client
    // whose request is already sent).
    if (ec && !l->acceptor->is_open()) co_return;
    if (ec) {
      metrics.accept_errors.with({l->name})->inc();
      if (ec == asio::error::connection_aborted) continue;  // that client is gone; the next one may wait
      delay = std::clamp<Duration>(delay * 2, std::chrono::milliseconds(5), std::chrono::seconds(1));
      const auto now = std::chrono::steady_clock::now();
      if (now - last_log >= std::chrono::seconds(10)) {
        last_log = now;
        LOG(WARNING) << "router: accept on the " << l->name << " listener failed: " << ec.message()
                     << (outOfDescriptors(ec) ? " (out of file descriptors or memory; raise LimitNOFILE or "
                                                "lower knap.router-max-connections)"
                                              : "")
                     << "; retrying with back-off";
      }
      backoff.expires_after(delay);
      co_await backoff.async_wait(tok(ec));
      if (!l->acceptor->is_open()) co_return;
      continue;
    }
    delay = Duration::zero();
    sock.set_option(tcp::no_delay(true), ec);
    if (opts.max_connections > 0 && l->open.load() >= opts.max_connections) {
      metrics.rejected_connections.with({l->name})->inc();
      if (l->tls) {
        sock.close(ec);  // no TLS handshake spent on a connection over the limit
        continue;
      }
      asio::co_spawn(w.ioc, rejectConnection(std::move(sock)), asio::detached);
      continue;
    }
    l->open.fetch_add(1);
    l->open_gauge->add(1);
    asio::co_spawn(w.ioc, serveConnection(std::move(sock), peer, l, &w), asio::detached);
    if (!l->acceptor->is_open()) co_return;
  }
}

// A connection over the listener's limit: a 503 that says so, then close.
// The request is not read (beyond draining what arrived, so that the close
// does not turn into a reset that destroys the answer); at most a second.
awaitable<void> Router::Impl::rejectConnection(tcp::socket sock) {
  struct Count {
    std::atomic<int>& n;
    ~Count() { n.fetch_sub(1); }
  } count{rejecting};
  if (rejecting.fetch_add(1) >= std::max(opts.max_connections, 64)) co_return;  // a flood: just close
  beast::tcp_stream s(std::move(sock));
  const std::string body = "router connection limit reached (" + std::to_string(opts.max_connections) +
                           " connections on this listener); retry later\n";
  const std::string msg =
      "HTTP/1.1 503 Service Unavailable\r\nServer: knap\r\nContent-Type: text/plain; "
      "charset=utf-8\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
  beast::error_code ec;
  s.expires_after(std::chrono::seconds(1));
  co_await asio::async_write(s, asio::buffer(msg), tok(ec));
  if (ec) co_return;
  s.socket().shutdown(tcp::socket::shutdown_send, ec);
  char sink[4096];
  for (size_t total = 0; !ec && total < 64 * 1024;) {
    total += co_await s.async_read_some(asio::buffer(sink), tok(ec));
  }
}

// Closes pod connections that sat idle past the upstream idle timeout.
awaitable<void> Router::Impl::sweepLoop(Worker* w) {
  asio::steady_timer timer(w->ioc);
  const Duration period = std::clamp<Duration>(opts.upstream_idle_timeout / 4, std::chrono::milliseconds(50),
                                               std::chrono::seconds(5));
  for (;;) {
    timer.expires_after(period);
    beast::error_code ec;
    co_await timer.async_wait(tok(ec));
    if (ec) co_return;
    w->pool.sweep();
  }
}

// Reads request heads (strict, http1::parseRequestHead) and hands each
// request to its stage; a framing error is answered and closes the connection.
awaitable<void> Router::Impl::serveConnection(tcp::socket sock, tcp::endpoint peer, Listener* l, Worker* w) {
  const Kind kind = l->kind;
  auto conn = std::make_shared<ClientConn>(this, l, w);
  const std::string client_ip = peerIp(peer);
  ClientStream client =
      l->tls ? ClientStream(std::move(sock), ssl_ctx->native_handle()) : ClientStream(std::move(sock));
  conn->socket = &client.socket();
  if (l->tls) {
    // The handshake counts against the header timeout of a new connection.
    beast::error_code ec;
    client.expires_after(opts.header_read_timeout);
    co_await client.tlsStream().handshake(ec);
    countHandshake(!ec);
    if (ec) {
      conn->socket = nullptr;
      client.tcpStream().close();
      co_return;
    }
    if (negotiatedH2(client)) {
      co_await serveH2(*this, *w, client, conn, client_ip, kind);
      conn->socket = nullptr;
      beast::error_code ignored;
      client.socket().close(ignored);
      co_return;
    }
  }
  beast::flat_buffer buf;
  bool first = true;
  for (;;) {
    // Draining: a kept-alive connection gets no further request.
    if (!first && buf.size() == 0 && draining.load()) break;
    beast::error_code ec;
    http1::RequestHead head;
    http1::Parse p = http1::Parse::kIncomplete;
    if (buf.size() > 0) p = http1::parseRequestHead(bufView(buf), &head);
    // A fresh connection must send its head within the header timeout; on a
    // kept-alive one the idle timeout runs until the first byte.
    std::optional<std::chrono::steady_clock::time_point> head_deadline;
    if (buf.size() > 0 || first) head_deadline = std::chrono::steady_clock::now() + opts.header_read_timeout;
    bool too_big = false;
    // Once a parse found the head incomplete, it is parsed again only when
    // it may have ended (linear in a head that trickles in).
    std::optional<http1::HeadScan> scan;
    while (p == http1::Parse::kIncomplete) {
      if (!scan && buf.size() > 0) {
        scan = http1::HeadScan{buf.size(), bufView(buf).find('\n') != std::string_view::npos};
      }
      if (buf.size() > opts.max_header_bytes) {
        too_big = true;
        break;
      }
      if (head_deadline) {
        client.expires_at(*head_deadline);
      } else {
        client.expires_after(opts.keepalive_idle_timeout);
      }
      conn->idle = !first && buf.size() == 0;
      const size_t n = co_await client.async_read_some(buf.prepare(kIdleBufferBytes), tok(ec));
      conn->idle = false;
      conn->fresh = false;
      if (ec) break;
      buf.commit(n);
      if (!head_deadline) head_deadline = std::chrono::steady_clock::now() + opts.header_read_timeout;
      if (scan && !http1::requestHeadWorthParsing(bufView(buf), &*scan)) continue;
      head = http1::RequestHead();
      p = http1::parseRequestHead(bufView(buf), &head);
    }
    if (too_big || (p == http1::Parse::kDone && head.head_bytes > opts.max_header_bytes)) {
      const std::string msg =
          "request header larger than " + std::to_string(opts.max_header_bytes) + " bytes";
      co_await writeLocal(client, 11, http::status::request_header_fields_too_large, msg, false);
      break;
    }
    if (ec) break;  // timeout, EOF or reset before a whole head: nothing to answer
    if (p == http1::Parse::kError) {
      const std::string msg = "malformed request: " + head.error;
      co_await writeLocal(client, 11, static_cast<http::status>(head.error_status), msg, false);
      break;
    }
    buf.consume(head.head_bytes);
    first = false;
    bool keep = false;
    if (kind == Kind::kAdmin) {
      keep = co_await handleAdmin(client, head);
    } else {
      Http1Client side(*this, *w, client, buf, head, conn);
      keep = co_await handleRequest(side, head, kind, *w, client_ip);
    }
    if (!keep || draining.load()) break;
    // Reused for the next request; idle connections hold no big buffer.
    if (buf.size() == 0 && buf.capacity() > kIdleBufferBytes) buf.shrink_to_fit();
  }
  if (conn) conn->socket = nullptr;  // (null: the connection went on as a tunnel)
  if (client.valid() && client.socket().is_open()) {
    client.tcpStream().close();  // (a FIN, or an RST when the client sent more than was read)
  }
}

awaitable<bool> Router::Impl::handleAdmin(ClientStream& client, const http1::RequestHead& head) {
  const bool keep = head.keep_alive && head.framing == http1::Framing::kNone;
  const std::string path = head.target.substr(0, head.target.find('?'));
  if (head.method != "GET" && head.method != "HEAD") {
    co_return co_await writeLocal(client, head.version, http::status::method_not_allowed, "only GET", false);
  }
  if (path == "/metrics") {
    co_return co_await writeLocal(client, head.version, http::status::ok, metrics.render(), keep, {},
                                  "text/plain; version=0.0.4; charset=utf-8");
  }
  if (path == "/healthz") {
    co_return co_await writeLocal(client, head.version, http::status::ok, "ok", keep);
  }
  const std::string msg = "not found: " + path + " (try /metrics or /healthz)";
  co_return co_await writeLocal(client, head.version, http::status::not_found, msg, keep);
}

// Answers K-Network-Probe requests (§5.5, §5.6, §5.10); never forwarded
// and never counted as requests of a revision.
awaitable<bool> Router::Impl::handleProbe(ClientSide& client, const http1::RequestHead& head,
                                          std::string value, std::string host,
                                          std::shared_ptr<const RoutingTable> table, Kind kind) {
  const bool keep = head.keep_alive && head.framing == http1::Framing::kNone;
  if (value == "activator") {
    countProbe("activator");
    co_return co_await writeLocal(client, http::status::ok, "activator", keep);
  }
  if (value == "probe") {
    countProbe("probe");
    auto h = head.fields.find(kHashHeader);
    const std::string hash = h == head.fields.end() ? "" : std::string(h->value());
    if (hash.empty()) {
      co_return co_await writeLocal(client, http::status::bad_request,
                                    "K-Network-Probe: probe needs a K-Network-Hash header", keep);
    }
    if (table->lookup(host, kind == Kind::kInternal ? ListenerKind::kInternal : ListenerKind::kExternal) ==
        nullptr) {
      const std::string msg = "no route for host \"" + host + "\"";
      co_return co_await writeLocal(client, http::status::not_found, msg, keep);
    }
    // "override" asks for the hash of the programmed table (§5.6 step 1).
    const std::string answer =
        hash == "override" && !table->networkHash().empty() ? table->networkHash() : hash;
    co_return co_await writeLocal(client, http::status::ok, "", keep, hashHeader(answer));
  }
  countProbe("invalid");
  const std::string msg = "unexpected K-Network-Probe value \"" + value + "\"";
  co_return co_await writeLocal(client, http::status::bad_request, msg, keep);
}

// ---------------------------------------------------------------------------

Router::Router(RouterOptions options, const TimeSource& time)
    : impl_(std::make_unique<Impl>(std::move(options), time)) {
  impl_->on_cold = &on_cold_request;
}

Router::~Router() {
  stop();
}

Status Router::start() {
  Impl& im = *impl_;
  if (im.started) return failedPrecondition("router already started");
  im.started = true;
  for (int i = 0; i < im.opts.threads; ++i) {
    im.workers.push_back(std::make_unique<Worker>(i, im.time, im.opts));
  }
  const std::vector<ListenerSpec> specs = {
      {Kind::kExternal, "external", im.opts.address, im.opts.port, im.opts.external_fd},
      {Kind::kInternal, "internal", im.opts.internal_address, im.opts.internal_port, -1},
      {Kind::kAdmin, "admin", im.opts.admin_address, im.opts.admin_port, -1},
      {Kind::kExternal, "external-tls", im.opts.tls_address, im.opts.tls_port, im.opts.tls_fd, true},
  };
  if (im.opts.tls_port >= 0 || im.opts.tls_fd >= 0) {
    im.ssl_ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    SSL_CTX* native = im.ssl_ctx->native_handle();
    if (Status st = tls::applyServerPolicy(native); !st.isOk()) {
      im.workers.clear();
      return st;
    }
    SSL_CTX_set_tlsext_servername_callback(native, selectCertificate);
    SSL_CTX_set_tlsext_servername_arg(native, &im);
    SSL_CTX_set_alpn_select_cb(native, selectAlpn, alpnArg(im.opts));
    // One TLS 1.3 session ticket per handshake, not OpenSSL's two: a client
    // resumes with one, and each ticket costs the server a key derivation
    // and an encryption on every full handshake.
    SSL_CTX_set_num_tickets(native, 1);
  }
  for (const ListenerSpec& spec : specs) {
    auto l = std::make_unique<Listener>();
    l->kind = spec.kind;
    l->tls = spec.tls;
    l->name = spec.name;
    l->open_gauge = im.metrics.open_connections.with({spec.name});
    if (spec.fd >= 0) {
      l->acceptor = std::make_unique<tcp::acceptor>(im.workers[0]->ioc);
      if (Status st = adoptListener(*l->acceptor, spec.fd, spec.name); !st.isOk()) {
        im.listeners.clear();
        im.workers.clear();
        return st;
      }
      beast::error_code ec;
      l->port = l->acceptor->local_endpoint(ec).port();
    } else if (spec.port >= 0) {
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
    asio::co_spawn(w->ioc, im.sweepLoop(w.get()), asio::detached);
    w->guard.emplace(w->ioc.get_executor());
    Worker* wp = w.get();
    wp->thread = std::thread([wp] { runRestarting("router io_context", [wp] { wp->ioc.run(); }); });
  }
  LOG(INFO) << "router: listening external=" << port() << " internal=" << internalPort()
            << " admin=" << adminPort() << " https=" << tlsPort() << " threads=" << im.workers.size();
  return Status::ok();
}

size_t Router::drain(Duration deadline) {
  Impl& im = *impl_;
  if (!im.started || im.stopped || im.workers.empty()) return 0;
  const auto end = std::chrono::steady_clock::now() + deadline;
  im.draining = true;
  // Stop accepting: the acceptors live on worker 0's thread. (A socket
  // handed over by socket activation stays open in its owner, so clients
  // that connect now wait in its backlog for the next daemon.)
  std::promise<void> closed;
  asio::post(im.workers[0]->ioc, [&im, &closed] {
    for (auto& l : im.listeners) {
      beast::error_code ignored;
      if (l->acceptor) l->acceptor->close(ignored);
    }
    closed.set_value();
  });
  closed.get_future().wait();
  // An accept that completed before the close may still have its handler
  // queued on worker 0: one more round trip, and its connection is counted.
  std::promise<void> settled;
  asio::post(im.workers[0]->ioc, [&settled] { settled.set_value(); });
  settled.get_future().wait();
  // Kept-alive connections waiting for their next request are closed now;
  // busy ones close after their response (Connection: close).
  // A new connection that has sent nothing yet gets two seconds to send its
  // request (a client that just connected), not the whole header timeout.
  im.forEachWorker([](Worker& w) {
    for (ClientConn* c : w.conns) {
      beast::error_code ignored;
      if (c->drain_hook) {
        c->drain_hook();  // HTTP/2: GOAWAY, open streams finish
      } else if (c->idle && c->socket != nullptr) {
        c->socket->close(ignored);
      }
    }
    auto grace = std::make_shared<asio::steady_timer>(w.ioc, std::chrono::seconds(2));
    grace->async_wait([grace, &w](const beast::error_code& ec) {
      if (ec) return;
      for (ClientConn* c : w.conns) {
        beast::error_code ignored;
        if (c->fresh && c->socket != nullptr) c->socket->close(ignored);
      }
    });
  });
  size_t open = openConnections();
  while (open > 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    open = openConnections();
  }
  LOG(INFO) << "router: drained"
            << (open == 0 ? ""
                          : "; " + std::to_string(open) + " connections still open at the drain deadline");
  return open;
}

size_t Router::openConnections() const {
  size_t n = 0;
  for (const auto& l : impl_->listeners) n += static_cast<size_t>(std::max(0, l->open.load()));
  return n;
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
  // Acceptors before the io_context they use; listeners after the
  // connections (coroutine frames) that count themselves in them.
  for (auto& l : im.listeners) l->acceptor.reset();
  im.workers.clear();  // destroys pending handlers and coroutine frames
  im.listeners.clear();
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
int Router::tlsPort() const {
  return impl_->listeners.size() > 3 ? impl_->listeners[3]->port : -1;
}

std::optional<std::string> Router::Impl::acmeAnswer(const std::string& target) const {
  static constexpr std::string_view kPrefix = "/.well-known/acme-challenge/";
  std::shared_ptr<const AcmeChallenges> challenges;
  {
    std::lock_guard<std::mutex> lock(certs_mu);
    challenges = acme;
  }
  if (!challenges || target.size() <= kPrefix.size()) return std::nullopt;
  auto it = challenges->find(target.substr(kPrefix.size()));
  if (it == challenges->end()) return std::nullopt;
  return it->second;
}

void Router::setAcmeChallenges(std::shared_ptr<const AcmeChallenges> challenges) {
  std::lock_guard<std::mutex> lock(impl_->certs_mu);
  impl_->acme = std::move(challenges);
}

void Router::setCertificates(std::shared_ptr<const CertTable> certs) {
  if (!certs) certs = CertTable::empty();
  std::lock_guard<std::mutex> lock(impl_->certs_mu);
  installAlpn(*certs, impl_->opts);
  impl_->certs = std::move(certs);
}

void Router::setRoutingTable(std::shared_ptr<const RoutingTable> table) {
  if (!table) table = RoutingTable::empty();
  std::vector<std::shared_ptr<WaitState>> waiters;
  {
    std::lock_guard<std::mutex> lock(impl_->table_mu);
    impl_->table = std::move(table);
    impl_->table_set = true;
    impl_->table_version.fetch_add(1, std::memory_order_release);
    waiters.swap(impl_->table_waiters);
  }
  for (auto& ws : waiters) ws->deliver(std::string());  // requests held for the first table
}

bool Router::setEndpoints(const std::string& revision, const std::vector<Endpoint>& endpoints,
                          const WakeInfo& wake, uint64_t version) {
  if (endpoints.empty() && !impl_->findRevision(revision)) {
    // No pods for a revision the router does not know (removed, its pods
    // just stopped): nothing to apply, and no state or series to create
    // that nothing would remove again.
    impl_->metrics.revision_pods.remove({revision, "ready"});
    return true;
  }
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
    impl_->metrics.revision_pods.with({revision, "ready"})->set(static_cast<double>(keys.size()));
  }
  if (!gone.empty()) {
    // Close pooled connections to pods that went away, now.
    impl_->forEachPool([gone](UpstreamPool& pool) {
      for (const std::string& g : gone) pool.drop(g);
    });
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
  impl_->metrics.warm_pool_pods.with({revision, pool.mode})->set(pool.pods);
  impl_->metrics.warm_pool_memory.with({revision})->set(static_cast<double>(pool.memory_bytes));
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
  std::vector<std::string> gone;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    gone.swap(st->endpoints);  // before the drops: no connection is parked after them
  }
  impl_->forEachPool([gone](UpstreamPool& pool) {
    for (const std::string& g : gone) pool.drop(g);
  });
  st->queue.shutdown(unavailable("revision " + revision + " was removed"));
  impl_->metrics.removeRevision(revision);
}

void Router::setDesiredPods(const std::string& revision, int pods) {
  impl_->metrics.revision_pods.with({revision, "desired"})->set(pods);
}

scaler::RequestStatsReport Router::collect(const std::string& revision, MonoTime now) {
  std::shared_ptr<RevisionState> st = impl_->findRevision(revision);
  if (!st) return {};
  return st->stats.report(now);
}

std::string Router::renderMetrics() const {
  return impl_->metrics.render();
}

void Router::setProcessMemory(const std::string& kind, double bytes) {
  impl_->metrics.process_memory.with({kind})->set(bytes);
}

size_t Router::queued(const std::string& revision) const {
  std::shared_ptr<RevisionState> st = impl_->findRevision(revision);
  return st ? st->queue.queued() : 0;
}

size_t Router::revisionCount() const {
  std::lock_guard<std::mutex> lock(impl_->rev_mu);
  return impl_->revisions.size();
}

}  // namespace knap::router
