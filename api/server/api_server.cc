#include "api/server/api_server.h"

#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include "api/server/k8s_status.h"
#include "api/server/pki.h"
#include "api/server/rest_handler.h"
#include "common/base64.h"
#include "common/guard.h"
#include "common/listen_fds.h"
#include "common/log.h"
#include "common/string_util.h"
#include "common/tls.h"

namespace knap::api {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;

namespace {

// A watcher as seen by the store listener: a bounded queue of events that the
// connection's strand drains. Shared between the listener thread and the strand.
struct WatchQueue {
  std::mutex mu;
  std::deque<store::Event> events;
  bool overflow = false;
  bool scheduled = false;
  bool closed = false;
  size_t limit = 1024;
  std::string kind;
  std::string ns;
  std::function<void()> schedule;  // posts a drain to the connection's strand
};

// All live watchers. Held by shared_ptr so that the store listener never
// outlives it, even when a delivery races stop().
struct WatchRegistry {
  std::mutex mu;
  uint64_t next_id = 1;
  std::map<uint64_t, std::weak_ptr<WatchQueue>> watchers;

  uint64_t add(const std::shared_ptr<WatchQueue>& q) {
    std::lock_guard<std::mutex> lock(mu);
    watchers[next_id] = q;
    return next_id++;
  }
  void remove(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    watchers.erase(id);
  }
  void deliver(const store::Event& ev) {
    std::vector<std::shared_ptr<WatchQueue>> targets;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& [id, weak] : watchers) {
        if (auto q = weak.lock()) {
          if (q->kind == ev.object.key.kind && (q->ns.empty() || q->ns == ev.object.key.ns))
            targets.push_back(q);
        }
      }
    }
    for (auto& q : targets) {
      bool post = false;
      {
        std::lock_guard<std::mutex> lock(q->mu);
        if (q->closed) continue;
        if (q->events.size() >= q->limit) {
          q->overflow = true;
        } else {
          q->events.push_back(ev);
        }
        if (!q->scheduled) {
          q->scheduled = true;
          post = true;
        }
      }
      if (post) q->schedule();
    }
  }
};

std::string chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return std::string(size) + data + "\r\n";
}

}  // namespace

class ApiServer::Impl {
 public:
  Impl(ApiServerOptions options, const Config& config, store::Store& store, TimeSource& clock)
      : options_(std::move(options)),
        store_(store),
        handler_(store, config, clock, options_.policy),
        registry_(std::make_shared<WatchRegistry>()) {}

  ~Impl() { stop(); }

  Status start();
  void stop();

  template <typename Protocol, bool kTls>
  class Session;

  // Accept back-off state of one listener.
  struct AcceptState {
    std::optional<net::steady_timer> timer;
    std::chrono::milliseconds delay{0};
  };

  template <typename Protocol>
  void accept(typename Protocol::acceptor& acceptor, AcceptState& state);
  template <typename Protocol>
  void startSession(typename Protocol::socket socket);

  // Connection accounting: a session holds a slot for its lifetime; at the cap
  // the listeners park a resume callback that the next freed slot runs.
  void acquireSlot() {
    std::lock_guard<std::mutex> lock(conn_mu_);
    ++connections_;
  }
  void releaseSlot() {
    std::vector<std::function<void()>> resume;
    {
      std::lock_guard<std::mutex> lock(conn_mu_);
      --connections_;
      if (connections_ < options_.max_connections && !stopping_) resume.swap(parked_);
    }
    for (auto& f : resume) net::post(ioc_, std::move(f));
  }
  // True when the caller may accept again now; otherwise `resume` is parked.
  bool mayAcceptOrPark(std::function<void()> resume) {
    std::lock_guard<std::mutex> lock(conn_mu_);
    if (connections_ < options_.max_connections) return true;
    if (parked_.empty()) {
      LOG(WARNING) << "api: " << connections_
                   << " open connections (knap.api-max-connections): new clients wait";
    }
    parked_.push_back(std::move(resume));
    return false;
  }

  ApiServerOptions options_;
  store::Store& store_;
  RestHandler handler_;
  std::shared_ptr<WatchRegistry> registry_;  // declared before ioc_: sessions unregister on destruction
  std::mutex conn_mu_;  // declared before ioc_: sessions release their slot on destruction
  size_t connections_ = 0;
  bool stopping_ = false;
  std::vector<std::function<void()>> parked_;
  std::optional<net::ssl::context> ssl_ctx_;
  int listener_id_ = 0;
  bool started_ = false;
  bool stopped_ = false;
  int tcp_port_ = 0;
  std::string url_;

  Status makeSslContext();
  Status bindTcp();
  Status prepareTcp();

  net::io_context ioc_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_;
  std::optional<net::ip::tcp::acceptor> tcp_acceptor_;
  std::optional<net::local::stream_protocol::acceptor> unix_acceptor_;
  AcceptState tcp_accept_state_;
  AcceptState unix_accept_state_;
  std::vector<std::thread> threads_;
};

// One HTTP/1.1 connection: read request, handle, write response, repeat; or
// switch to streaming a watch until it ends, then close.
template <typename Protocol, bool kTls>
class ApiServer::Impl::Session : public std::enable_shared_from_this<Session<Protocol, kTls>> {
 public:
  using Plain = beast::basic_stream<Protocol>;
  using Stream = std::conditional_t<kTls, beast::ssl_stream<Plain>, Plain>;

  Session(typename Protocol::socket socket, Impl& server)
      : stream_(makeStream(std::move(socket), server)), server_(server) {
    server_.acquireSlot();
  }

  ~Session() {
    if (watch_id_) server_.registry_->remove(watch_id_);
    server_.releaseSlot();
  }

  void run() {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      if constexpr (kTls) {
        // The handshake has the read timeout too: a client that never finishes it is dropped.
        self->lowest().expires_after(self->server_.options_.read_timeout);
        self->stream_.async_handshake(net::ssl::stream_base::server, [self](beast::error_code ec) {
          if (ec) {
            self->close();
            return;
          }
          std::string cn;
          std::vector<std::string> orgs;
          if (verifiedPeerNames(self->stream_.native_handle(), &cn, &orgs)) {
            self->peer_user_ = userFromCertificate(cn, orgs);
          }
          self->doRead();
        });
      } else {
        self->doRead();
      }
    });
  }

 private:
  static Stream makeStream(typename Protocol::socket socket, Impl& server) {
    if constexpr (kTls)
      return Stream(std::move(socket), *server.ssl_ctx_);
    else
      return Stream(std::move(socket));
  }

  Plain& lowest() { return beast::get_lowest_layer(stream_); }

  void doRead() {
    parser_.emplace();
    parser_->body_limit(server_.options_.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(server_.options_.max_header_bytes));
    lowest().expires_after(server_.options_.read_timeout);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, std::size_t) { self->onRead(ec); });
  }

  void onRead(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::operation_aborted ||
        ec == net::error::connection_reset) {
      close();
      return;
    }
    if (ec == beast::error::timeout) {
      close();
      return;
    }
    if (ec == http::error::body_limit) {
      sendErrorAndClose(makeApiError(413, "RequestEntityTooLarge",
                                     "the request body is too large: the limit is " +
                                         std::to_string(server_.options_.max_body_bytes) + " bytes"));
      return;
    }
    if (ec == http::error::header_limit) {
      sendErrorAndClose(makeApiError(431, "RequestHeaderFieldsTooLarge",
                                     "the request headers are too large: the limit is " +
                                         std::to_string(server_.options_.max_header_bytes) + " bytes"));
      return;
    }
    if (ec) {
      if (ec.category() == http::make_error_code(http::error::bad_method).category()) {
        sendErrorAndClose(makeApiError(400, "BadRequest", "malformed HTTP request: " + ec.message()));
      } else {
        close();
      }
      return;
    }
    http::request<http::string_body> req = parser_->release();
    HttpRequest r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    r.content_type = std::string(req[http::field::content_type]);
    r.accept = std::string(req[http::field::accept]);
    r.host = std::string(req[http::field::host]);
    r.origin = std::string(req[http::field::origin]);
    r.authorization = std::string(req[http::field::authorization]);
    r.if_none_match = std::string(req[http::field::if_none_match]);
    r.local_admin = std::is_same_v<Protocol, net::local::stream_protocol>;
    r.cert_user = peer_user_;
    r.body = std::move(req.body());
    keep_alive_ = req.keep_alive();
    version_ = req.version();

    WatchRequest w;
    std::optional<HttpResponse> werr;
    if (server_.handler_.parseWatch(r, &w, &werr)) {
      if (werr) {
        sendResponse(*werr);
        return;
      }
      startWatch(std::move(w));
      return;
    }
    HttpResponse resp = server_.handler_.handle(r);
    if (r.method == "HEAD") resp.body.clear();
    sendResponse(resp);
  }

  void sendResponse(const HttpResponse& resp) {
    auto res =
        std::make_shared<http::response<http::string_body>>(static_cast<http::status>(resp.code), version_);
    res->set(http::field::server, "knapd");
    res->set(http::field::content_type, resp.content_type);
    // API responses carry credentials-bound data: never stored by a cache,
    // never content-sniffed. (The console's assets set their own caching.)
    res->set(http::field::cache_control, "no-store");
    res->set("X-Content-Type-Options", "nosniff");
    for (const auto& w : resp.warnings) res->insert(http::field::warning, w);
    for (const auto& [k, v] : resp.headers) res->set(k, v);
    res->keep_alive(keep_alive_);
    res->body() = resp.body;
    res->prepare_payload();
    lowest().expires_after(server_.options_.read_timeout);
    http::async_write(stream_, *res,
                      [self = this->shared_from_this(), res](beast::error_code ec, std::size_t) {
                        if (ec) {
                          self->close();
                          return;
                        }
                        if (!res->keep_alive()) {
                          self->closeGracefully();
                          return;
                        }
                        self->doRead();
                      });
  }

  // Sends a Status and closes; then drains what the client still sends for a
  // moment so that the close does not reset the connection before the client
  // has read the reply.
  void sendErrorAndClose(const ApiError& err) {
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(err.code), 11);
    res->set(http::field::server, "knapd");
    res->set(http::field::content_type, "application/json");
    res->set(http::field::cache_control, "no-store");
    res->set("X-Content-Type-Options", "nosniff");
    res->keep_alive(false);
    res->body() = toJsonText(err.body);
    res->prepare_payload();
    lowest().expires_after(std::chrono::seconds(5));
    http::async_write(stream_, *res,
                      [self = this->shared_from_this(), res](beast::error_code ec, std::size_t) {
                        if (ec) {
                          self->close();
                          return;
                        }
                        beast::error_code ignored;
                        self->lowest().socket().shutdown(Protocol::socket::shutdown_send, ignored);
                        self->drainThenClose();
                      });
  }

  void drainThenClose() {
    lowest().expires_after(std::chrono::seconds(2));
    stream_.async_read_some(net::buffer(scratch_),
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                              if (ec) {
                                self->close();
                                return;
                              }
                              self->drainThenClose();
                            });
  }

  // Ends the connection; over TLS with a close_notify first, so that clients
  // see a clean end of stream (bounded by a short timeout).
  void closeGracefully() {
    if constexpr (kTls) {
      lowest().expires_after(std::chrono::seconds(1));
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) { self->close(); });
    } else {
      close();
    }
  }

  void close() {
    beast::error_code ignored;
    lowest().socket().shutdown(Protocol::socket::shutdown_both, ignored);
    lowest().close();
  }

  // ---- watch ----

  void startWatch(WatchRequest w) {
    watch_ = std::move(w);
    lowest().expires_never();
    queue_ = std::make_shared<WatchQueue>();
    queue_->limit = server_.options_.watch_buffer_events;
    queue_->kind = watch_.info->kind;
    queue_->ns = watch_.ns;
    std::weak_ptr<Session> weak = this->shared_from_this();
    auto executor = stream_.get_executor();
    queue_->schedule = [weak, executor] {
      net::post(executor, [weak] {
        if (auto s = weak.lock()) s->drainWatch();
      });
    };
    // Register before reading history so that nothing committed in between is missed;
    // duplicates are dropped by resourceVersion.
    watch_id_ = server_.registry_->add(queue_);

    std::vector<std::pair<const char*, json>> initial;
    const std::string& rv_text = watch_.resource_version;
    if (rv_text.empty() || rv_text == "0") {
      // Start with the current state as ADDED events, like Kubernetes.
      int64_t rv = 0;
      std::vector<store::Object> objs;
      for (int attempt = 0; attempt < 5; ++attempt) {
        rv = server_.store_.currentResourceVersion();
        auto listed = server_.store_.list(watch_.info->kind, watch_.ns);
        if (!listed.isOk()) {
          endWatchWithError(errorFromStatus(listed.status(), nullptr, ""));
          return;
        }
        objs = std::move(*listed);
        if (server_.store_.currentResourceVersion() == rv) break;
      }
      for (store::Object& o : objs) {
        watch_state_.seed(watch_, o);
        if (RestHandler::watchMatches(watch_, o)) initial.emplace_back("ADDED", std::move(o.body));
        rv = std::max(rv, o.resource_version);
      }
      last_rv_ = rv;
    } else {
      int64_t since = std::stoll(rv_text);
      auto events = server_.store_.eventsSince(since, watch_.info->kind);
      if (!events.isOk()) {
        if (events.status().code() == Code::kGone) {
          HttpResponse gone = server_.handler_.expiredResponse(rv_text);
          server_.registry_->remove(watch_id_);
          watch_id_ = 0;
          sendResponse(gone);
          return;
        }
        endWatchWithError(errorFromStatus(events.status(), nullptr, ""));
        return;
      }
      // Objects unchanged since `since` are what the client was given then.
      auto listed = server_.store_.list(watch_.info->kind, watch_.ns);
      if (listed.isOk()) {
        for (const store::Object& o : *listed)
          if (o.resource_version <= since) watch_state_.seed(watch_, o);
      }
      last_rv_ = since;
      for (store::Event& ev : *events) {
        if (ev.resource_version <= last_rv_) continue;
        last_rv_ = ev.resource_version;
        if (const char* type = watch_state_.classify(watch_, ev))
          initial.emplace_back(type, std::move(ev.object.body));
      }
    }

    std::string header =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n"
        "X-Content-Type-Options: nosniff\r\nServer: knapd\r\nTransfer-Encoding: chunked\r\nConnection: "
        "close\r\n\r\n";
    enqueue(std::move(header));
    for (auto& [type, body] : initial) emitEvent(type, body);

    // Every watch ends: at timeoutSeconds, or at the server's randomised default.
    timer_.emplace(stream_.get_executor());
    timer_->expires_after(watch_.timeout);
    timer_->async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (!ec) self->finishWatch();
    });
    if (watch_.bookmarks && !watch_.table) {
      bookmark_timer_.emplace(stream_.get_executor());
      scheduleBookmark();
    }
    watchForClientGone();
    drainWatch();
  }

  // The client sends nothing during a watch: bytes or EOF from it mean it went away.
  // (A wait, not a read: the TLS layer must stay free for the closing handshake.)
  // With several threads running the io_context, a readiness event from before the
  // request was read can arrive late and complete the wait with nothing to read
  // (CI saw watches cut after 3 ms), so a peek decides: nothing there, wait again.
  void watchForClientGone() {
    lowest().socket().async_wait(
        net::socket_base::wait_read, [self = this->shared_from_this()](beast::error_code ec) {
          if (self->ending_) return;
          if (!ec) {
            char byte;
            ssize_t n = ::recv(self->lowest().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
              self->watchForClientGone();
              return;
            }
          }
          self->abortWatch();
        });
  }

  // A BOOKMARK every bookmark_interval: a heartbeat that also tells the
  // client how far it has seen, so a re-watch resumes without a relist.
  void scheduleBookmark() {
    bookmark_timer_->expires_after(watch_.bookmark_interval);
    bookmark_timer_->async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec || self->ending_) return;
      self->enqueue(chunk(RestHandler::watchBookmarkLine(self->watch_, self->last_rv_)));
      self->scheduleBookmark();
    });
  }

  void endWatchWithError(const ApiError& err) {
    server_.registry_->remove(watch_id_);
    watch_id_ = 0;
    HttpResponse r;
    r.code = err.code;
    r.body = toJsonText(err.body);
    sendResponse(r);
  }

  void emitEvent(const char* type, const json& body) {
    enqueue(chunk(RestHandler::watchEventLine(watch_, type, body, first_event_)));
    first_event_ = false;
  }

  void drainWatch() {
    if (ending_) return;
    std::deque<store::Event> events;
    bool overflow;
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      events.swap(queue_->events);
      overflow = queue_->overflow;
      queue_->scheduled = false;
    }
    for (store::Event& ev : events) {
      if (ev.resource_version <= last_rv_) continue;
      last_rv_ = ev.resource_version;
      if (const char* type = watch_state_.classify(watch_, ev)) emitEvent(type, ev.object.body);
    }
    if (overflow || out_.size() > server_.options_.watch_buffer_events) {
      LOG(WARNING) << "api: closing a slow watcher of " << watch_.info->plural;
      abortWatch();
    }
  }

  void unregisterWatch() {
    if (queue_) {
      std::lock_guard<std::mutex> lock(queue_->mu);
      queue_->closed = true;
      queue_->events.clear();
    }
    if (watch_id_) server_.registry_->remove(watch_id_);
    watch_id_ = 0;
    if (timer_) timer_->cancel();
    if (bookmark_timer_) bookmark_timer_->cancel();
  }

  // Ends the stream cleanly (timeoutSeconds): final chunk, then close.
  void finishWatch() {
    if (ending_) return;
    ending_ = true;
    unregisterWatch();
    close_after_flush_ = true;
    enqueue("0\r\n\r\n");
  }

  // The client left or cannot keep up: close now.
  void abortWatch() {
    ending_ = true;
    unregisterWatch();
    out_.clear();
    close();
  }

  void enqueue(std::string data) {
    out_.push_back(std::move(data));
    if (!writing_) pump();
  }

  void pump() {
    if (out_.empty()) {
      if (close_after_flush_) closeGracefully();
      return;
    }
    writing_ = true;
    net::async_write(stream_, net::buffer(out_.front()),
                     [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                       self->writing_ = false;
                       if (ec) {
                         self->abortWatch();
                         return;
                       }
                       if (!self->out_.empty()) self->out_.pop_front();
                       self->pump();
                     });
  }

  Stream stream_;
  Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
  unsigned version_ = 11;
  std::array<char, 4096> scratch_;
  std::optional<UserInfo> peer_user_;  // from a verified client certificate

  WatchRequest watch_;
  WatchState watch_state_;
  std::shared_ptr<WatchQueue> queue_;
  uint64_t watch_id_ = 0;
  int64_t last_rv_ = 0;
  bool first_event_ = true;
  bool ending_ = false;
  bool writing_ = false;
  bool close_after_flush_ = false;
  std::deque<std::string> out_;
  std::optional<net::steady_timer> timer_;
  std::optional<net::steady_timer> bookmark_timer_;
};

template <typename Protocol>
void ApiServer::Impl::startSession(typename Protocol::socket socket) {
  if constexpr (std::is_same_v<Protocol, net::ip::tcp>) {
    if (ssl_ctx_) {
      std::make_shared<Session<Protocol, true>>(std::move(socket), *this)->run();
      return;
    }
  }
  std::make_shared<Session<Protocol, false>>(std::move(socket), *this)->run();
}

template <typename Protocol>
void ApiServer::Impl::accept(typename Protocol::acceptor& acceptor, AcceptState& state) {
  acceptor.async_accept(net::make_strand(ioc_), [this, &acceptor, &state](beast::error_code ec,
                                                                          typename Protocol::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (ec && ec != net::error::connection_aborted) {
      // EMFILE, ENFILE, ENOBUFS, ENOMEM...: retrying at once would spin. Back off.
      auto next = state.delay.count() == 0 ? std::chrono::milliseconds(10)
                                           : std::min(state.delay * 2, std::chrono::milliseconds(1000));
      if (state.delay.count() == 0)
        LOG(WARNING) << "api: accept failed (" << ec.message() << "): backing off";
      state.delay = next;
      if (!state.timer) state.timer.emplace(ioc_);
      state.timer->expires_after(state.delay);
      state.timer->async_wait([this, &acceptor, &state](beast::error_code tec) {
        if (!tec && acceptor.is_open()) accept<Protocol>(acceptor, state);
      });
      return;
    }
    state.delay = std::chrono::milliseconds(0);
    if constexpr (std::is_same_v<Protocol, net::ip::tcp>) {
      // A response is written in more than one segment (TLS records, head and
      // body): with Nagle's algorithm the last waits for the client's delayed
      // ACK, ~40 ms on a small answer. kube-apiserver (Go) sets it too.
      beast::error_code nodelay_ec;
      if (!ec) socket.set_option(net::ip::tcp::no_delay(true), nodelay_ec);
    }
    if (!ec) startSession<Protocol>(std::move(socket));
    if (mayAcceptOrPark([this, &acceptor, &state] {
          if (acceptor.is_open()) accept<Protocol>(acceptor, state);
        }))
      accept<Protocol>(acceptor, state);
  });
}

// Binds the TCP listener named by options_.tcp_listen.
Status ApiServer::Impl::bindTcp() {
  beast::error_code ec;
  const std::string& addr = options_.tcp_listen;
  auto hp = splitHostPort(addr);
  if (!hp) return invalidArgument("tcp listen address \"" + addr + "\" must be ip:port (IPv6 in brackets)");
  auto ip = net::ip::make_address(hp->host, ec);
  if (ec) return invalidArgument("tcp listen address \"" + addr + "\" is not ip:port");
  net::ip::tcp::endpoint ep(ip, static_cast<unsigned short>(hp->port));
  tcp_acceptor_.emplace(ioc_);
  tcp_acceptor_->open(ep.protocol(), ec);
  if (!ec) tcp_acceptor_->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) tcp_acceptor_->bind(ep, ec);
  if (!ec) tcp_acceptor_->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    tcp_acceptor_.reset();
    return unavailable("cannot listen on " + addr + ": " + ec.message());
  }
  return Status::ok();
}

// Checks the bound TCP listener's address against the security options,
// prepares TLS and the URL. Independent of how the acceptor was obtained.
Status ApiServer::Impl::prepareTcp() {
  beast::error_code ec;
  auto local = tcp_acceptor_->local_endpoint(ec);
  if (ec) return unavailable("the API's TCP listener has no address: " + ec.message());
  std::string shown =
      (local.address().is_v6() ? "[" + local.address().to_string() + "]" : local.address().to_string()) +
      ":" + std::to_string(local.port());
  if (!local.address().is_loopback() && (!options_.tls || !options_.policy.access)) {
    return failedPrecondition("refusing to serve the API on " + shown +
                              " without TLS and authentication: plain HTTP (knap.api-insecure-loopback) is "
                              "allowed only on a loopback address such as 127.0.0.1");
  }
  if (options_.tls) KNAP_RETURN_IF_ERROR(makeSslContext());
  tcp_port_ = local.port();
  auto bound = local.address();
  if (bound.is_unspecified())
    bound = bound.is_v4() ? net::ip::address(net::ip::address_v4::loopback())
                          : net::ip::address(net::ip::address_v6::loopback());
  url_ = std::string(options_.tls ? "https://" : "http://") +
         (bound.is_v6() ? "[" + bound.to_string() + "]" : bound.to_string()) + ":" +
         std::to_string(tcp_port_);
  return Status::ok();
}

Status ApiServer::Impl::start() {
  if (started_) return failedPrecondition("ApiServer already started");
  beast::error_code ec;
  if (options_.tcp_listen_fd >= 0) {  // inherited (socket activation)
    int family = 0;
    if (Status st = checkListeningTcp(options_.tcp_listen_fd, &family); !st.isOk())
      return invalidArgument("inherited API socket: " + st.message());
    tcp_acceptor_.emplace(ioc_);
    tcp_acceptor_->assign(family == AF_INET ? net::ip::tcp::v4() : net::ip::tcp::v6(), options_.tcp_listen_fd,
                          ec);
    if (ec) {
      tcp_acceptor_.reset();
      return invalidArgument("inherited API socket: " + ec.message());
    }
  } else if (!options_.tcp_listen.empty()) {
    KNAP_RETURN_IF_ERROR(bindTcp());
  }
  if (tcp_acceptor_) {
    if (Status st = prepareTcp(); !st.isOk()) {
      tcp_acceptor_->close(ec);
      tcp_acceptor_.reset();
      return st;
    }
  }
  if (!options_.unix_socket_path.empty()) {
    const std::string& path = options_.unix_socket_path;
    ::unlink(path.c_str());
    unix_acceptor_.emplace(ioc_);
    net::local::stream_protocol::endpoint ep(path);
    unix_acceptor_->open(ep.protocol(), ec);
    // Create the socket file with mode 0600 (umask applies at bind()).
    mode_t old_mask = ::umask(0177);
    if (!ec) unix_acceptor_->bind(ep, ec);
    ::umask(old_mask);
    if (!ec && ::chmod(path.c_str(), 0600) != 0) ec = beast::error_code(errno, beast::system_category());
    if (!ec) unix_acceptor_->listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      unix_acceptor_.reset();
      if (tcp_acceptor_) tcp_acceptor_->close(ec);
      tcp_acceptor_.reset();
      return unavailable("cannot listen on unix socket " + path + ": " + ec.message());
    }
  }
  std::weak_ptr<WatchRegistry> weak = registry_;
  listener_id_ = store_.addListener([weak](const store::Event& ev) {
    if (auto r = weak.lock()) r->deliver(ev);
  });
  if (tcp_acceptor_) accept<net::ip::tcp>(*tcp_acceptor_, tcp_accept_state_);
  if (unix_acceptor_) accept<net::local::stream_protocol>(*unix_acceptor_, unix_accept_state_);
  work_.emplace(net::make_work_guard(ioc_));
  for (int i = 0; i < std::max(1, options_.threads); ++i)
    threads_.emplace_back([this] { runRestarting("api io_context", [this] { ioc_.run(); }); });
  started_ = true;
  LOG(INFO) << "api: serving Kubernetes-style REST" << (url_.empty() ? "" : " on " + url_)
            << (options_.unix_socket_path.empty() ? "" : " and unix:" + options_.unix_socket_path) << " with "
            << std::max(1, options_.threads) << " threads"
            << (options_.policy.access ? ", authentication on"
                                       : ", no authentication (every caller is admin)");
  return Status::ok();
}

void ApiServer::Impl::stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  {
    std::lock_guard<std::mutex> lock(conn_mu_);
    stopping_ = true;
    parked_.clear();
  }
  store_.removeListener(listener_id_);
  work_.reset();
  ioc_.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  // The io_context no longer runs, so the acceptors can be closed from here.
  beast::error_code ec;
  if (tcp_acceptor_) tcp_acceptor_->close(ec);
  if (unix_acceptor_) unix_acceptor_->close(ec);
  if (!options_.unix_socket_path.empty()) ::unlink(options_.unix_socket_path.c_str());
}

ApiServer::ApiServer(ApiServerOptions options, const Config& config, store::Store& store, TimeSource& clock)
    : impl_(std::make_unique<Impl>(std::move(options), config, store, clock)) {}

ApiServer::~ApiServer() = default;

Status ApiServer::start() {
  return impl_->start();
}
void ApiServer::stop() {
  impl_->stop();
}
int ApiServer::tcpPort() const {
  return impl_->tcp_port_;
}
std::string ApiServer::url() const {
  return impl_->url_;
}

void ApiServer::setReady(bool ready) {
  impl_->handler_.setReady(ready);
}

Status ApiServer::Impl::makeSslContext() {
  const ApiServerOptions::Tls& tls = *options_.tls;
  ssl_ctx_.emplace(net::ssl::context::tls_server);
  beast::error_code ec;
  // TLS 1.2+ and the cipher list every knap TLS listener uses (common/tls.h).
  KNAP_RETURN_IF_ERROR(knap::tls::applyServerPolicy(ssl_ctx_->native_handle()));
  ssl_ctx_->use_certificate_chain(net::buffer(tls.cert_chain_pem), ec);
  if (ec) return invalidArgument("the API serving certificate cannot be used: " + ec.message());
  ssl_ctx_->use_private_key(net::buffer(tls.key_pem), net::ssl::context::pem, ec);
  if (ec) return invalidArgument("the API serving key cannot be used: " + ec.message());
  if (!tls.client_ca_pem.empty()) {
    ssl_ctx_->add_certificate_authority(net::buffer(tls.client_ca_pem), ec);
    if (ec) return invalidArgument("the API client CA cannot be used: " + ec.message());
    // Ask for a client certificate; a request without one may still bring a token.
    ssl_ctx_->set_verify_mode(net::ssl::verify_peer, ec);
    // With peer verification OpenSSL refuses to resume a session (a browser's
    // second connection) unless a session id context is set: an "internal
    // error" alert instead of the page's scripts.
    static const unsigned char kSessionContext[] = "knapd-api";
    SSL_CTX_set_session_id_context(ssl_ctx_->native_handle(), kSessionContext, sizeof kSessionContext - 1);
    BIO* bio = BIO_new_mem_buf(tls.client_ca_pem.data(), static_cast<int>(tls.client_ca_pem.size()));
    if (X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
      SSL_CTX_add_client_CA(ssl_ctx_->native_handle(), ca);
      X509_free(ca);
    }
    BIO_free(bio);
  }
  return Status::ok();
}

Status configureApiSecurity(const Config& config, const std::string& data_dir,
                            const std::vector<std::string>& extra_hosts, ApiServerOptions* options,
                            KubeconfigCredentials* credentials) {
  *credentials = {};
  if (config.knap.api_insecure_loopback) {
    options->tls.reset();
    options->policy.access.reset();
    LOG(WARNING) << "api: knap.api-insecure-loopback is set: plain HTTP without authentication, every local "
                    "user is admin";
    return Status::ok();
  }
  std::vector<std::string> hosts = extra_hosts;
  // A specific listen address must be in the serving certificate too.
  if (auto hp = splitHostPort(options->tcp_listen)) {
    beast::error_code ec;
    auto ip = net::ip::make_address(hp->host, ec);
    if (!ec && !ip.is_unspecified()) hosts.push_back(ip.to_string());
  }
  auto pki = ensurePki(data_dir + "/pki", hosts);
  if (!pki.isOk()) return Status(pki.status().code(), "the API certificates: " + pki.status().message());
  options->tls = ApiServerOptions::Tls{pki->server_cert_pem, pki->server_key_pem, pki->ca_cert_pem};
  auto access = std::make_shared<AccessControl>();
  if (!config.knap.api_token_file.empty()) {
    auto tokens = TokenFile::load(config.knap.api_token_file);
    if (!tokens.isOk()) return invalidArgument("knap.api-token-file: " + tokens.status().message());
    LOG(INFO) << "api: " << tokens->size() << " bearer tokens from " << config.knap.api_token_file;
    access->tokens = std::move(*tokens);
  }
  auto sa_tokens = ServiceAccountTokens::loadOrCreate(data_dir + "/service-account.key");
  if (!sa_tokens.isOk())
    return Status(sa_tokens.status().code(), "service account tokens: " + sa_tokens.status().message());
  access->service_account_tokens = std::make_shared<const ServiceAccountTokens>(std::move(*sa_tokens));
  access->bindings = config.knap.api_role_bindings;
  options->policy.access = std::move(access);
  *credentials = {pki->ca_cert_pem, pki->admin_cert_pem, pki->admin_key_pem};
  return Status::ok();
}

Status writeKubeconfig(const std::string& path, const std::string& server_url,
                       const KubeconfigCredentials& credentials) {
  std::string ca = credentials.ca_pem.empty()
                       ? ""
                       : "    certificate-authority-data: " + base64Encode(credentials.ca_pem) + "\n";
  std::string user = "  user: {}\n";
  if (!credentials.client_cert_pem.empty()) {
    user =
        "  user:\n"
        "    client-certificate-data: " +
        base64Encode(credentials.client_cert_pem) +
        "\n"
        "    client-key-data: " +
        base64Encode(credentials.client_key_pem) + "\n";
  }
  std::string text =
      "apiVersion: v1\n"
      "kind: Config\n"
      "clusters:\n"
      "- name: knap\n"
      "  cluster:\n" +
      ca + "    server: " + server_url +
      "\n"
      "contexts:\n"
      "- name: knap\n"
      "  context:\n"
      "    cluster: knap\n"
      "    user: knap\n"
      "    namespace: default\n"
      "current-context: knap\n"
      "preferences: {}\n"
      "users:\n"
      "- name: knap\n" +
      user;
  std::string tmp = path + ".tmp";
  mode_t old_mask = ::umask(0077);
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      ::umask(old_mask);
      return unavailable("cannot write kubeconfig " + tmp);
    }
  }
  ::umask(old_mask);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return unavailable("cannot rename kubeconfig to " + path);
  return Status::ok();
}

}  // namespace knap::api
