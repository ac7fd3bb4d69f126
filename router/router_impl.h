// Router internals shared by the stages of router/: router.cc (lifecycle,
// listeners, the per-connection read loop, admin and probe answers) and
// proxy.cc (route → activate → proxy of one request). Message framing is
// router/http1.h, pod connections router/upstream.h.
// Not part of the router's interface: include only from router/*.cc.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "router/certs.h"
#include "router/deadline_stream.h"
#include "router/headers.h"
#include "router/http1.h"
#include "router/router.h"
#include "router/tls_socket.h"
#include "router/upstream.h"

namespace knap::router {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using asio::awaitable;

inline constexpr size_t kChunkBytes = 64 * 1024;     // a body read
inline constexpr size_t kHeadReadBytes = 16 * 1024;  // a read for a pod's response head
// A client connection reads request heads this many bytes at a time into a
// buffer it keeps between requests (no allocation per request); a buffer
// grown bigger by a large head or a body is freed while the connection idles.
inline constexpr size_t kIdleBufferBytes = 4 * 1024;
inline constexpr size_t kUpstreamHeaderLimit = 64 * 1024;

inline auto tok(beast::error_code& ec) {
  return asio::redirect_error(asio::use_awaitable, ec);
}

inline double seconds(Duration d) {
  return std::chrono::duration<double>(d).count();
}

inline std::string_view bufView(const beast::flat_buffer& b) {
  return {static_cast<const char*>(b.data().data()), b.size()};
}

enum class Kind { kExternal, kInternal, kAdmin };

struct RevisionState {
  RevisionState(std::string revision, QueueLimits limits, MonoTime now)
      : name(std::move(revision)), queue(limits), stats(now) {}
  RevisionConfig config() const {
    std::lock_guard<std::mutex> lock(mu);
    return config_;
  }
  // Whether `key` is still one of the revision's endpoints: a pod connection
  // goes back to the pool only then. setEndpoints and removeRevision update
  // `endpoints` before they post the pools' drop(), so a connection parked
  // after that check is dropped by it, and one checked later is not parked.
  bool hasEndpoint(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mu);
    return std::find(endpoints.begin(), endpoints.end(), key) != endpoints.end();
  }
  const std::string name;  // the revision's (the metric series' label)
  mutable std::mutex mu;
  RevisionConfig config_;
  std::vector<std::string> endpoints;  // under mu
  uint64_t endpoints_version = 0;      // under mu: newest applied setEndpoints version
  WakeInfo wake;                       // under mu: how it last woke from zero
  ActivatorQueue queue;
  scaler::RequestStats stats;
  // The cells of requests_total{revision,code} and request_duration{revision}
  // of this revision, looked up in their families once rather than per
  // request (a family lookup builds its label vector and takes its mutex).
  // Valid while the state lives (removeRevision drops the state with its
  // series; requests_total keeps its counters, see RouterMetrics).
  Counter* requestsCounter(RouterMetrics& m, const std::string& revision, int code);
  Histogram* durationHistogram(RouterMetrics& m, const std::string& revision);

 private:
  std::mutex cells_mu;
  std::vector<std::pair<int, std::shared_ptr<Counter>>> by_code;  // under cells_mu; a few codes
  std::shared_ptr<Histogram> duration;                            // under cells_mu
  // The cells of every request that answers 200, read without the mutex
  // once set (owned by by_code / duration above).
  std::atomic<Counter*> ok_counter{nullptr};
  std::atomic<Histogram*> duration_cell{nullptr};
};

// The client side of a connection: plain TCP, or TLS over it (the HTTPS
// listener). An AsyncReadStream/AsyncWriteStream whose reads and writes go
// to the TLS layer when there is one; timeouts (expires_*: one deadline,
// router/deadline_stream.h) and the socket are the TCP layer's. Moved whole into a Tunnel on an Upgrade
// (valid() is false afterwards).
class ClientStream {
 public:
  using executor_type = DeadlineStream::executor_type;
  explicit ClientStream(tcp::socket s) : plain_(std::make_unique<DeadlineStream>(std::move(s))) {}
  ClientStream(tcp::socket s, SSL_CTX* ctx) : tls_(std::make_unique<TlsSocket>(std::move(s), ctx)) {}
  ClientStream(ClientStream&&) = default;
  ClientStream& operator=(ClientStream&&) = default;

  bool valid() const { return plain_ || tls_; }
  bool isTls() const { return tls_ != nullptr; }
  TlsSocket& tlsStream() { return *tls_; }
  DeadlineStream& tcpStream() { return tls_ ? tls_->next_layer() : *plain_; }
  tcp::socket& socket() { return tcpStream().socket(); }
  executor_type get_executor() { return tcpStream().get_executor(); }
  void expires_after(Duration d) { tcpStream().expires_after(d); }
  void expires_at(std::chrono::steady_clock::time_point t) { tcpStream().expires_at(t); }

  template <class Buffers, class Token>
  auto async_read_some(const Buffers& b, Token&& token) {
    return asio::async_initiate<Token, void(beast::error_code, std::size_t)>(
        [this](auto handler, const Buffers& bufs) {
          if (tls_) {
            tls_->async_read_some(bufs, std::move(handler));
          } else {
            plain_->async_read_some(bufs, std::move(handler));
          }
        },
        token, b);
  }
  template <class Buffers, class Token>
  auto async_write_some(const Buffers& b, Token&& token) {
    return asio::async_initiate<Token, void(beast::error_code, std::size_t)>(
        [this](auto handler, const Buffers& bufs) {
          if (tls_) {
            tls_->async_write_some(bufs, std::move(handler));
          } else {
            plain_->async_write_some(bufs, std::move(handler));
          }
        },
        token, b);
  }
  // What the connection takes at once, without waiting (0: finish with
  // async_write_some on the same bytes); see DeadlineStream and TlsSocket.
  template <class Buffers>
  std::size_t write_some_now(const Buffers& b, beast::error_code& ec) {
    return tls_ ? tls_->write_some_now(b, ec) : plain_->write_some_now(b, ec);
  }

 private:
  std::unique_ptr<DeadlineStream> plain_;
  std::unique_ptr<TlsSocket> tls_;
};

struct ClientConn;

struct Worker {
  Worker(size_t i, const TimeSource& time, const RouterOptions& o)
      : index(i), pool(time, o.upstream_idle_timeout, o.max_idle_upstream_per_endpoint) {}
  // Open client connections served here; touched only on this worker's
  // thread. Declared before `ioc` so it outlives the coroutine frames the
  // io_context destroys.
  std::set<ClientConn*> conns;
  // Pod response buffers kept between exchanges (SpareBuffer in proxy.cc:
  // no allocation per request); this worker's thread only. Declared before
  // `ioc` for the same reason as `conns`.
  std::vector<beast::flat_buffer> spare_buffers;
  asio::io_context ioc{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::thread thread;
  size_t index;
  UpstreamPool pool;  // touched only on this worker's thread
  // The routing table this worker's requests use (Impl::workerSnapshot);
  // this worker's thread only.
  std::shared_ptr<const RoutingTable> table_cache;
  uint64_t table_seen = 0;
};

struct Listener {
  Kind kind;
  bool tls = false;       // the HTTPS listener (kind kExternal)
  const char* name = "";  // metrics label: external, internal, admin, external-tls
  std::unique_ptr<tcp::acceptor> acceptor;
  int port = -1;
  std::atomic<int> open{0};           // client connections accepted and not yet closed
  std::shared_ptr<Gauge> open_gauge;  // knap_router_open_connections{listener}
};

// One accepted client connection, from accept until its socket is closed
// (an upgraded one is owned by its Tunnel). Counted in its Listener (the
// connection limit, drain) and registered with its worker (drain closes the
// idle ones). Created and destroyed on its worker's thread.
struct ClientConn {
  ClientConn(Router::Impl* i, Listener* l, Worker* w);
  ~ClientConn();
  ClientConn(const ClientConn&) = delete;
  ClientConn& operator=(const ClientConn&) = delete;
  Router::Impl* impl;
  Listener* listener;
  Worker* worker;
  tcp::socket* socket = nullptr;  // the client socket, wherever it lives now
  bool idle = false;              // kept alive between requests, nothing received yet
  bool fresh = true;              // no byte received on this connection yet
  // Set while the connection is an HTTP/2 session: Router::drain calls it
  // (on this worker) to send GOAWAY instead of closing idle connections.
  std::function<void()> drain_hook;
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

struct Tunnel;
class ClientSide;

struct Router::Impl {
  Impl(RouterOptions o, const TimeSource& t) : opts(std::move(o)), time(t) {
    table = RoutingTable::empty();
    if (opts.threads < 1) opts.threads = 1;
  }

  // Everything a request holds for a revision; released when it is
  // destroyed (end of the response, or end of an upgraded tunnel).
  struct RequestGuard {
    RequestGuard(Impl* i, std::shared_ptr<RevisionState> r, MonoTime s)
        : impl(i), state(std::move(r)), start(s) {
      state->stats.requestIn(start);
    }
    ~RequestGuard() {
      const MonoTime now = impl->time.monotonic();
      if (!endpoint.empty()) state->queue.release(endpoint);
      state->stats.requestOut(now);
      state->requestsCounter(impl->metrics, state->name, code == 0 ? 499 : code)->inc();
      state->durationHistogram(impl->metrics, state->name)->observe(seconds(now - start));
    }
    Impl* impl;
    std::shared_ptr<RevisionState> state;
    MonoTime start;
    std::string endpoint;  // slot held
    int code = 0;          // status sent to the client (0: none)
  };

  std::shared_ptr<const RoutingTable> snapshot() const {
    std::lock_guard<std::mutex> lock(table_mu);
    return table;
  }
  // The table for a request on worker `w`: the worker's copy, taken again
  // only when setRoutingTable has run since (no lock per request). An idle
  // worker keeps the table it last used until its next request.
  std::shared_ptr<const RoutingTable> workerSnapshot(Worker& w) {
    const uint64_t v = table_version.load(std::memory_order_acquire);
    if (v != w.table_seen || !w.table_cache) {
      w.table_cache = snapshot();
      w.table_seen = v;
    }
    return w.table_cache;
  }
  std::shared_ptr<RevisionState> revisionState(const std::string& revision);
  std::shared_ptr<RevisionState> findRevision(const std::string& revision) const;
  // Runs `fn(pool)` on every worker's thread (pod connections are per worker).
  void forEachPool(std::function<void(UpstreamPool&)> fn);

  // -- responses written by the router itself (router.cc) ---------------------
  // (A plain function building the message, then a coroutine sending it:
  // GCC 12 miscompiles string-literal arguments to coroutine parameters.)
  using LocalResponse = http::response<http::string_body>;
  std::unique_ptr<LocalResponse> localResponse(unsigned version, http::status status, const std::string& body,
                                               bool keep_alive,
                                               const std::vector<std::pair<std::string, std::string>>& extra,
                                               const char* content_type);
  awaitable<bool> writeLocal(ClientStream& client, unsigned version, http::status status,
                             const std::string& body, bool keep_alive,
                             const std::vector<std::pair<std::string, std::string>>& extra = {},
                             const char* content_type = "text/plain; charset=utf-8");
  // The same answer to a request of any client side (router/client_side.h).
  awaitable<bool> writeLocal(ClientSide& client, http::status status, const std::string& body,
                             bool keep_alive,
                             const std::vector<std::pair<std::string, std::string>>& extra = {},
                             const char* content_type = "text/plain; charset=utf-8");
  awaitable<bool> sendLocal(ClientStream& client, std::unique_ptr<LocalResponse> r, bool keep_alive);

  // Helpers kept out of coroutine bodies (GCC 12 rejects braced lists of
  // string literals there).
  void countProbe(const char* kind) { metrics.probes_total.with({kind})->inc(); }
  std::string noteColdStart(RevisionState& st, const std::string& revision, WallTime arrived, Duration d);
  void countUnrouted() { metrics.requests_total.with({"", "404"})->inc(); }
  static std::vector<std::pair<std::string, std::string>> locationHeader(const std::string& v) {
    return {{"Location", v}};
  }
  // The bound HTTPS port; -1 when that listener is off.
  int httpsPort() const { return listeners.size() > 3 ? listeners[3]->port : -1; }
  // https://<host>[:port]<target> for a Redirected answer (the port of
  // tls_redirect_port, else the bound one; none for 443).
  std::string httpsLocation(const std::string& host, const std::string& target) const;
  static bool isAcmeChallenge(const std::string& target) {
    return target.rfind("/.well-known/acme-challenge/", 0) == 0;
  }
  void countHandshake(bool ok) { metrics.tls_handshakes.with({ok ? "ok" : "failed"})->inc(); }
  static std::vector<std::pair<std::string, std::string>> hashHeader(const std::string& v) {
    return {{std::string(kHashHeader), v}};
  }

  // -- stages -----------------------------------------------------------------
  // router.cc: accept, read request heads, admin and probe answers.
  awaitable<void> acceptLoop(Listener* l);
  awaitable<void> sweepLoop(Worker* w);
  awaitable<void> serveConnection(tcp::socket sock, tcp::endpoint peer, Listener* l, Worker* w);
  awaitable<void> rejectConnection(tcp::socket sock);
  awaitable<bool> handleAdmin(ClientStream& client, const http1::RequestHead& head);
  awaitable<bool> handleProbe(ClientSide& client, const http1::RequestHead& head, std::string value,
                              std::string host, std::shared_ptr<const RoutingTable> table, Kind kind);
  // proxy.cc: route, activate (the activator queue), proxy, for a request
  // of any client side (HTTP/1.1 connection, HTTP/2 stream). Returns
  // whether the client connection stays usable for another request.
  awaitable<bool> handleRequest(ClientSide& client, http1::RequestHead& head, Kind kind, Worker& w,
                                const std::string& client_ip);
  // Waits (bounded by startup_hold) for the first routing table; the table then.
  awaitable<std::shared_ptr<const RoutingTable>> awaitFirstTable(Worker& w, MonoTime start);
  awaitable<void> pump(std::shared_ptr<Tunnel> t, bool client_to_pod);
  awaitable<void> tunnelWatchdog(std::shared_ptr<Tunnel> t);
  // Runs `fn` on every worker's thread (not waiting for it).
  void forEachWorker(std::function<void(Worker&)> fn);

  RouterOptions opts;
  const TimeSource& time;
  RouterMetrics metrics;
  std::function<void(const std::string&)>* on_cold = nullptr;

  std::shared_ptr<const CertTable> certSnapshot() const {
    std::lock_guard<std::mutex> lock(certs_mu);
    return certs;
  }
  // The HTTPS listener's context: policy of common/tls.h, no certificate of
  // its own; the SNI callback switches each handshake to its host's context.
  std::unique_ptr<asio::ssl::context> ssl_ctx;
  mutable std::mutex certs_mu;
  std::shared_ptr<const CertTable> certs = CertTable::empty();  // under certs_mu
  std::shared_ptr<const Router::AcmeChallenges> acme;           // under certs_mu; null = none
  // The key authorization for an ACME HTTP-01 request target, if the token is known.
  std::optional<std::string> acmeAnswer(const std::string& target) const;
  // 200 with exactly `key_authorization` as the body (no newline added).
  static std::unique_ptr<LocalResponse> acmeResponse(unsigned version, const std::string& key_authorization,
                                                     bool keep_alive, bool head_only) {
    auto r = std::make_unique<LocalResponse>(http::status::ok, version < 10 ? 11 : version);
    r->set(http::field::server, "knap");
    r->set(http::field::content_type, "application/octet-stream");
    r->body() = key_authorization;
    r->keep_alive(keep_alive);
    r->prepare_payload();
    if (head_only) r->body().clear();  // (Content-Length stays that of the GET answer)
    return r;
  }

  mutable std::mutex table_mu;
  std::shared_ptr<const RoutingTable> table;
  std::atomic<uint64_t> table_version{0};                 // bumped under table_mu after `table` changes
  bool table_set = false;                                 // under table_mu: setRoutingTable() was called
  std::vector<std::shared_ptr<WaitState>> table_waiters;  // under table_mu: requests held for it
  mutable std::mutex rev_mu;
  std::map<std::string, std::shared_ptr<RevisionState>> revisions;

  // Guards `workers` against setEndpoints() racing stop(); the request path
  // never takes it (a worker outlives every coroutine running on it).
  std::mutex lifecycle_mu;
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<std::unique_ptr<Listener>> listeners;
  std::atomic<size_t> next_worker{0};
  std::atomic<bool> draining{false};
  std::atomic<int> rejecting{0};  // connections being answered 503 over the limit
  bool started = false;
  bool stopped = false;
};

// An upgraded connection: bytes spliced both ways until both sides close
// (or no byte moved for tunnel_idle_timeout).
struct Tunnel {
  Tunnel(ClientStream c, tcp::socket p)
      : client(std::move(c)), pod(std::move(p)), idle_timer(pod.get_executor()) {}
  ClientStream client;
  tcp::socket pod;
  asio::steady_timer idle_timer;
  std::chrono::steady_clock::time_point last_io = std::chrono::steady_clock::now();
  int pumps_open = 2;
  std::shared_ptr<ClientConn> conn;                   // counted as the listener's connection while open
  std::string client_leftover;                        // bytes the client sent after its request header
  std::string pod_leftover;                           // bytes the pod sent after its 101 header
  std::unique_ptr<Router::Impl::RequestGuard> guard;  // slot and stats held while open
};

}  // namespace knap::router
