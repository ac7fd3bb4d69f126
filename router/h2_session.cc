// One HTTP/2 connection (h2_session.h): an nghttp2 server session fed by a
// reader coroutine, flushed by a writer coroutine, watched by a watchdog;
// one request coroutine per stream runs Router::Impl::handleRequest with an
// H2Client as its client side.
#include "router/h2_session.h"

#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "common/log.h"
#include "router/client_side.h"
#include "router/relay.h"

namespace knap::router {

namespace {

using http1::Framing;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kMaxStreams = 100;         // concurrent streams (SETTINGS and request coroutines)
constexpr int32_t kStreamWindow = 64 * 1024;  // request body buffered per stream
constexpr int32_t kConnWindow = 1 << 20;      // the connection's receive window
constexpr size_t kConnInBudget = 1 << 20;     // request body buffered per connection
constexpr size_t kOutLimit = 64 * 1024;       // response body buffered per stream before the pod is read on
constexpr size_t kWriteBatch = 64 * 1024;     // bytes of frames per socket write
constexpr double kResetBurst = 200;           // RST_STREAM frames from the client: token bucket
constexpr double kResetPerSecond = 20;
constexpr size_t kMaxOutboundAcks = 100;  // SETTINGS/PING acknowledgements queued
constexpr size_t kMaxContinuations = 8;

MonoTime farFuture() {
  return Clock::now() + std::chrono::hours(24);
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         beast::iequals(beast::string_view(a.data(), a.size()), beast::string_view(b.data(), b.size()));
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Fields an HTTP/2 message must not carry (RFC 9113 §8.2.2).
bool connectionSpecific(std::string_view name) {
  return iequals(name, "connection") || iequals(name, "keep-alive") || iequals(name, "proxy-connection") ||
         iequals(name, "transfer-encoding") || iequals(name, "upgrade");
}

class H2Session;

struct H2Stream {
  H2Stream(asio::io_context::executor_type ex, int32_t i) : id(i), wake(ex) {}
  int32_t id;
  // The request as the stages see it (built at END_HEADERS).
  http1::RequestHead head;
  std::string authority, host_header;
  bool has_host = false;
  std::vector<std::string> cookies;
  bool has_content_length = false;
  size_t header_bytes = 0;
  int error_status = 0;  // a request answered by the router, not routed
  std::string error;
  // Request body received, not yet taken by the request coroutine.
  std::string in;
  size_t in_off = 0;
  bool in_eof = false;
  // Response body produced, not yet taken by nghttp2.
  std::string out;
  size_t out_off = 0;
  bool out_eof = false;
  bool deferred = false;                              // the data source said DEFERRED: resume when more comes
  bool responded = false;                             // response HEADERS submitted
  bool closed = false;                                // nghttp2 closed the stream (done, or reset)
  bool finished = false;                              // the request coroutine is done
  bool started = false;                               // its request header block was complete (END_HEADERS)
  bool end_sent = false;                              // END_STREAM went out (the response is whole)
  bool cancelled = false;                             // reset for a send stall
  MonoTime begun = std::chrono::steady_clock::now();  // its HEADERS frame came
  MonoTime stall_from{};                              // since when output waits without DATA going out
  asio::steady_timer wake;                            // the request coroutine waits on it for data/room
  MonoTime deadline{};                                // of its next body read or write
  std::function<void()> on_gone;
  DeadlineStream* pod = nullptr;

  size_t inAvail() const { return in.size() - in_off; }
  size_t outPending() const { return out.size() - out_off; }
  // Response bytes (or its END_STREAM) waiting for the client's window.
  bool sending() const { return responded && !end_sent && !cancelled && (outPending() > 0 || out_eof); }
};

// The TLS layer of an HTTP/2 connection after the handshake, owned here
// rather than by TlsSocket: the connection's SSL object is moved onto two
// memory BIOs, so SSL_read and SSL_write are plain calls that never wait
// (the socket is read and written by the session's reader and writer
// coroutines, on the worker's one thread, and the writer sends what
// several streams produced in one write; docs/decisions.md, "HTTP/2: a TLS
// pump of our own").
class TlsPump {
 public:
  TlsPump() = default;
  TlsPump(const TlsPump&) = delete;
  TlsPump& operator=(const TlsPump&) = delete;

  // Takes over `ssl` (its handshake done by TlsSocket, which keeps owning
  // the object and frees it later) onto memory BIOs: ciphertext left in
  // the old BIO moves to the new read BIO (records OpenSSL read ahead stay
  // in its own buffer: the first feed() hands them out). An error when the
  // handshake left output unsent or a BIO cannot be made.
  Status adopt(SSL* ssl) {
    BIO* old = SSL_get_rbio(ssl);
    if (old == nullptr || old != SSL_get_wbio(ssl))
      return internalError("TLS: unexpected BIO layout after handshake");
    if (BIO_ctrl_wpending(old) != 0) return internalError("TLS: handshake output left unsent");
    std::string leftover(BIO_ctrl_pending(old), '\0');
    if (!leftover.empty()) {
      const int n = BIO_read(old, leftover.data(), static_cast<int>(leftover.size()));
      leftover.resize(n > 0 ? static_cast<size_t>(n) : 0);
    }
    BIO* rbio = BIO_new(BIO_s_mem());
    BIO* wbio = BIO_new(BIO_s_mem());
    if (rbio == nullptr || wbio == nullptr) {
      BIO_free(rbio);
      BIO_free(wbio);
      return internalError("TLS: out of memory for BIOs");
    }
    BIO_set_mem_eof_return(rbio, -1);  // empty: "retry" (more bytes come), not EOF
    BIO_set_mem_eof_return(wbio, -1);
    if (!leftover.empty()) BIO_write(rbio, leftover.data(), static_cast<int>(leftover.size()));
    SSL_set_bio(ssl, rbio, wbio);  // frees the handshake's socket BIO (not the socket)
    SSL_set_options(ssl, SSL_OP_NO_RENEGOTIATION);
    ssl_ = ssl;
    rbio_ = rbio;
    wbio_ = wbio;
    return Status::ok();
  }

  enum class Read { kMore, kClosed, kFailed };
  // Feeds ciphertext from the socket; `sink(data, len)` gets each piece of
  // plaintext (false from it: stop, kFailed). kClosed: close_notify came.
  template <class Sink>
  Read feed(const uint8_t* data, size_t len, Sink&& sink) {
    if (len > 0 && BIO_write(rbio_, data, static_cast<int>(len)) != static_cast<int>(len))
      return Read::kFailed;
    for (;;) {
      const int n = SSL_read(ssl_, plain_, sizeof plain_);
      if (n > 0) {
        if (!sink(plain_, static_cast<size_t>(n))) return Read::kFailed;
        continue;
      }
      const int err = SSL_get_error(ssl_, n);
      if (err == SSL_ERROR_WANT_READ) return Read::kMore;
      if (err == SSL_ERROR_ZERO_RETURN) return Read::kClosed;
      ERR_clear_error();
      return Read::kFailed;
    }
  }
  // Encrypts `len` bytes of plaintext into the write BIO (never blocks: the
  // BIO grows). False: TLS failed (the connection is unusable).
  bool send(const char* data, size_t len) {
    size_t off = 0;
    while (off < len) {
      const int n = SSL_write(ssl_, data + off, static_cast<int>(std::min<size_t>(len - off, 1 << 30)));
      if (n <= 0) {
        ERR_clear_error();
        return false;
      }
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // close_notify into the write BIO.
  void shutdown() {
    if (SSL_shutdown(ssl_) < 0) ERR_clear_error();
  }
  // Moves the ciphertext waiting to go to the socket into `out` (replacing it).
  void takeOutput(std::string& out) {
    out.resize(BIO_ctrl_pending(wbio_));
    if (out.empty()) return;
    const int n = BIO_read(wbio_, out.data(), static_cast<int>(out.size()));
    out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  bool hasOutput() const { return BIO_ctrl_pending(wbio_) > 0; }

 private:
  SSL* ssl_ = nullptr;
  BIO* rbio_ = nullptr;  // owned by ssl_
  BIO* wbio_ = nullptr;  // owned by ssl_
  uint8_t plain_[16 * 1024];
};

class H2Session : public std::enable_shared_from_this<H2Session> {
 public:
  H2Session(Router::Impl& impl, Worker& w, ClientStream& client, std::shared_ptr<ClientConn> conn,
            std::string client_ip, Kind kind)
      : impl_(impl),
        w_(w),
        client_(client),
        conn_(std::move(conn)),
        client_ip_(std::move(client_ip)),
        kind_(kind),
        write_wake_(w.ioc),
        watchdog_(w.ioc),
        writer_done_timer_(w.ioc) {}
  ~H2Session() {
    if (ng_ != nullptr) nghttp2_session_del(ng_);
  }
  H2Session(const H2Session&) = delete;
  H2Session& operator=(const H2Session&) = delete;

  awaitable<void> run();

  // -- for the request coroutines (H2Client, H2Body) -------------------------
  bool ended() const { return ended_; }
  void kick() { write_wake_.cancel(); }
  // The request coroutine took `n` bytes of `st`'s body (or dropped them).
  void released(H2Stream& st, size_t n);
  // Submits the response head; the body (if `has_body`) follows from st.out.
  void submitResponse(H2Stream& st, int status,
                      const std::vector<std::pair<std::string, std::string>>& fields, bool has_body);
  void resume(H2Stream& st) {
    if (st.deferred && !ended_ && !st.closed) {
      st.deferred = false;
      nghttp2_session_resume_data(ng_, st.id);
    }
    kick();
  }
  void resetStream(H2Stream& st, uint32_t code) {
    if (!ended_ && !st.closed) nghttp2_submit_rst_stream(ng_, NGHTTP2_FLAG_NONE, st.id, code);
    kick();
  }
  void submitContinue(H2Stream& st) {
    if (ended_ || st.closed) return;
    const nghttp2_nv nv[] = {{const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(":status")),
                              const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>("100")), 7, 3,
                              NGHTTP2_NV_FLAG_NONE}};
    nghttp2_submit_headers(ng_, NGHTTP2_FLAG_NONE, st.id, nullptr, nv, 1, nullptr);
    kick();
  }
  Router::Impl& impl() { return impl_; }

 private:
  static int onBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* ud);
  static int onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                      const uint8_t* value, size_t valuelen, uint8_t flags, void* ud);
  static int onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* ud);
  static int onDataChunk(nghttp2_session*, uint8_t flags, int32_t stream_id, const uint8_t* data, size_t len,
                         void* ud);
  static int onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code, void* ud);
  static int onFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* ud);
  static ssize_t readBody(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length, uint32_t* flags,
                          nghttp2_data_source* source, void* ud);

  H2Stream* streamOf(int32_t id) {
    auto it = streams_.find(id);
    return it == streams_.end() ? nullptr : it->second.get();
  }
  void startStream(std::shared_ptr<H2Stream> st);
  awaitable<void> runStream(std::shared_ptr<H2Stream> st);
  awaitable<void> writer();
  awaitable<void> watchdog();
  void settleConnectionWindow();
  // One RST_STREAM against the reset budget; past it GOAWAY ENHANCE_YOUR_CALM.
  void spendResetToken(const char* what);
  void goAway();
  void closeSocket() {
    beast::error_code ignored;
    client_.socket().close(ignored);
  }
  void endAll();

  Router::Impl& impl_;
  Worker& w_;
  ClientStream& client_;
  std::shared_ptr<ClientConn> conn_;
  std::string client_ip_;
  Kind kind_;
  nghttp2_session* ng_ = nullptr;
  std::map<int32_t, std::shared_ptr<H2Stream>> streams_;  // open in nghttp2
  uint32_t running_ = 0;  // request coroutines not yet done (reset streams' included)
  bool any_stream_ = false;
  bool ended_ = false;  // the connection is over: no nghttp2 calls any more
  bool goaway_ = false;
  bool writer_done_ = false;
  bool writing_ = false;
  MonoTime write_started_{};
  MonoTime started_ = Clock::now();
  MonoTime last_active_ = Clock::now();
  MonoTime writer_done_at_{};
  MonoTime window_shut_since_{};
  MonoTime close_at_{};     // closed then whatever the writer did  // the connection's send window at 0 with
                            // output waiting
  size_t in_buffered_ = 0;  // request body bytes in streams' buffers
  size_t conn_owed_ = 0;    // bytes received not yet given back to the connection window
  double reset_tokens_ = kResetBurst;
  MonoTime reset_refill_ = Clock::now();
  asio::steady_timer write_wake_, watchdog_, writer_done_timer_;
  TlsPump tls_;
  std::string cipher_out_;  // ciphertext being written to the socket
};

// The body side of a stream for relayBody (a body pipe, relay.h).
struct H2Body {
  std::shared_ptr<H2Session> s;
  std::shared_ptr<H2Stream> st;
  void isBodyPipe() {}

  awaitable<size_t> read(asio::mutable_buffer b, beast::error_code& ec) {
    for (;;) {
      if (st->inAvail() > 0) {
        const size_t n = std::min(b.size(), st->inAvail());
        std::memcpy(b.data(), st->in.data() + st->in_off, n);
        st->in_off += n;
        if (st->in_off == st->in.size()) {
          st->in.clear();
          st->in_off = 0;
        }
        s->released(*st, n);
        co_return n;
      }
      if (st->in_eof) {
        ec = asio::error::eof;
        co_return 0;
      }
      if (st->closed || s->ended()) {
        ec = asio::error::connection_reset;
        co_return 0;
      }
      if (Clock::now() >= st->deadline) {
        ec = beast::error::timeout;
        co_return 0;
      }
      st->wake.expires_at(std::min(st->deadline, farFuture()));
      beast::error_code wec;
      co_await st->wake.async_wait(tok(wec));
    }
  }

  awaitable<void> write(const RelayBuffers& bufs, beast::error_code& ec) {
    for (;;) {
      if (st->closed || st->cancelled || s->ended()) {
        ec = asio::error::connection_reset;
        co_return;
      }
      if (st->outPending() < kOutLimit) break;
      if (Clock::now() >= st->deadline) {
        ec = beast::error::timeout;
        co_return;
      }
      st->wake.expires_at(std::min(st->deadline, farFuture()));
      beast::error_code wec;
      co_await st->wake.async_wait(tok(wec));
    }
    if (st->outPending() == 0) st->stall_from = Clock::now();
    if (st->out_off > 0 && st->out_off * 2 >= st->out.size()) {
      st->out.erase(0, st->out_off);
      st->out_off = 0;
    }
    for (const asio::const_buffer& b : bufs) st->out.append(static_cast<const char*>(b.data()), b.size());
    s->resume(*st);
  }
};

void armDeadline(H2Body& b, MonoTime t) {
  b.st->deadline = t;
}

// The client side of one HTTP/2 stream.
class H2Client final : public ClientSide {
 public:
  H2Client(std::shared_ptr<H2Session> s, std::shared_ptr<H2Stream> st)
      : s_(std::move(s)), st_(std::move(st)) {}
  bool tls() const override { return true; }
  unsigned version() const override { return 11; }

  awaitable<bool> sendLocal(std::unique_ptr<Router::Impl::LocalResponse> r, bool) override {
    if (st_->closed || s_->ended()) co_return false;
    std::vector<std::pair<std::string, std::string>> fields;
    for (const auto& f : *r) {
      const std::string_view name(f.name_string().data(), f.name_string().size());
      if (connectionSpecific(name)) continue;
      fields.emplace_back(lower(name), std::string(f.value()));
    }
    const bool has_body = !r->body().empty() && st_->head.method != "HEAD";
    if (has_body) {
      st_->out = std::move(r->body());
      st_->out_off = 0;
    }
    st_->out_eof = true;
    s_->submitResponse(*st_, r->result_int(), fields, has_body);
    co_return true;
  }
  bool watchHangup(std::function<void()> on_gone) override {
    if (st_->closed || s_->ended()) {
      on_gone();  // already gone: the waiter is cancelled at once
      return true;
    }
    st_->on_gone = std::move(on_gone);
    return true;
  }
  void stopWatching() override { st_->on_gone = nullptr; }
  void podExchange(DeadlineStream* up) override {
    st_->pod = up;
    if (up != nullptr && (st_->closed || s_->ended())) {
      beast::error_code ignored;
      up->socket().shutdown(tcp::socket::shutdown_both, ignored);
    }
  }
  bool gone() const override { return (st_->closed && !st_->out_eof) || s_->ended(); }
  awaitable<bool> sendContinue() override {
    s_->submitContinue(*st_);
    co_return !st_->closed && !s_->ended();
  }
  awaitable<RelayEnd> sendRequest(DeadlineStream& up, const std::string& pod_head, const Relay& r,
                                  beast::error_code& read_ec, std::string& framing_error) override {
    H2Body body{s_, st_};
    beast::flat_buffer none;
    co_return co_await relayBody(body, none, up, pod_head, r, read_ec, framing_error);
  }
  awaitable<ResponseEnd> sendResponse(ProxiedResponse& resp, DeadlineStream& up, beast::flat_buffer& ubuf,
                                      Relay& relay, std::unique_ptr<Guard>&) override {
    if (st_->closed || s_->ended()) co_return ResponseEnd{};
    if (resp.switching) {
      // (Cannot happen: an HTTP/2 request carries no Connection: upgrade.)
      s_->resetStream(*st_, NGHTTP2_INTERNAL_ERROR);
      co_return ResponseEnd{};
    }
    const int code = resp.code;
    std::vector<std::pair<std::string, std::string>> fields;
    fields.reserve(16);
    for (const auto& f : *resp.fields) {
      const std::string_view name(f.name_string().data(), f.name_string().size());
      if (connectionSpecific(name) || iequals(name, "te")) continue;
      fields.emplace_back(lower(name), std::string(f.value()));
    }
    bool has_body = false;
    switch (resp.framing) {
      case Framing::kNone:
        if (resp.has_content_length && (resp.head_request || code == 304)) {
          fields.emplace_back("content-length", std::to_string(resp.content_length));
        } else if (code >= 200 && code != 204 && code != 304) {
          fields.emplace_back("content-length", "0");
        }
        break;
      case Framing::kLength:
        fields.emplace_back("content-length", std::to_string(resp.content_length));
        has_body = resp.content_length > 0;
        break;
      case Framing::kChunked:
      case Framing::kUntilClose:
        has_body = true;
        break;
    }
    if (!resp.cold_start.empty()) fields.emplace_back(lower(kColdStartHeader), resp.cold_start);
    if (!has_body) st_->out_eof = true;
    s_->submitResponse(*st_, code, fields, has_body);
    if (!has_body) {
      // A declared but empty body (Content-Length: 0) is still read off the pod.
      co_return ResponseEnd{true, true};
    }
    relay.chunked_out = false;
    H2Body body{s_, st_};
    beast::error_code read_ec;
    std::string framing_error;
    const RelayEnd relayed = co_await relayBody(up, ubuf, body, std::string(), relay, read_ec, framing_error);
    if (relayed != RelayEnd::kDone) {
      // The pod failed or stalled mid-body, or the client left: the client
      // must not take a cut body for a whole one.
      s_->resetStream(*st_, NGHTTP2_INTERNAL_ERROR);
      co_return ResponseEnd{};
    }
    if (st_->outPending() == 0) st_->stall_from = Clock::now();
    st_->out_eof = true;
    s_->resume(*st_);
    co_return ResponseEnd{true, true};
  }

 private:
  std::shared_ptr<H2Session> s_;
  std::shared_ptr<H2Stream> st_;
};

// -- nghttp2 callbacks ---------------------------------------------------------

int H2Session::onBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* ud) {
  auto* self = static_cast<H2Session*>(ud);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  const int32_t id = frame->hd.stream_id;
  if (self->running_ >= kMaxStreams) {
    // Requests of reset streams still running count: refuse, do not queue.
    nghttp2_submit_rst_stream(self->ng_, NGHTTP2_FLAG_NONE, id, NGHTTP2_REFUSED_STREAM);
    return 0;
  }
  auto st = std::make_shared<H2Stream>(self->w_.ioc.get_executor(), id);
  st->deadline = farFuture();
  self->streams_[id] = st;
  self->any_stream_ = true;
  self->last_active_ = Clock::now();
  return 0;
}

int H2Session::onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                        const uint8_t* value, size_t valuelen, uint8_t, void* ud) {
  auto* self = static_cast<H2Session*>(ud);
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  H2Stream* st = self->streamOf(frame->hd.stream_id);
  if (st == nullptr) return 0;
  if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;  // trailers: dropped, as over HTTP/1.1
  const std::string_view n(reinterpret_cast<const char*>(name), namelen);
  const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
  // RFC 9113 §8.2.2 (nghttp2 checks it too): a malformed request, a stream error.
  if (connectionSpecific(n) || (n == "te" && v != "trailers")) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  st->header_bytes += namelen + valuelen + 32;  // as SETTINGS_MAX_HEADER_LIST_SIZE counts
  if (st->header_bytes > self->impl_.opts.max_header_bytes) {
    if (st->error_status == 0) {
      st->error_status = 431;
      st->error =
          "request header larger than " + std::to_string(self->impl_.opts.max_header_bytes) + " bytes";
      st->head.fields.clear();
    }
    return 0;
  }
  if (st->error_status != 0) return 0;
  if (!http1::isFieldValue(v)) {
    // The same field-value rule as HTTP/1.1's parser (router/http1.h).
    st->error_status = 400;
    st->error = "control character in the value of " + std::string(n);
    return 0;
  }
  if (!n.empty() && n[0] == ':') {
    if (n == ":method") {
      st->head.method = std::string(v);
    } else if (n == ":path") {
      st->head.target = std::string(v);
    } else if (n == ":authority") {
      st->authority = std::string(v);
    } else if (n == ":protocol") {
      st->error_status = 501;
      st->error = "extended CONNECT (" + std::string(v) + ") is not supported over HTTP/2; use HTTP/1.1";
    } else if (n == ":scheme" && v != "https" && v != "http") {
      st->error_status = 400;
      st->error = ":scheme \"" + std::string(v) + "\" is neither http nor https";
    }
    return 0;  // :scheme http: the connection is TLS whatever it says
  }
  if (n == "host") {
    if (st->has_host) {
      st->error_status = 400;
      st->error = "repeated host";
      return 0;
    }
    st->has_host = true;
    st->host_header = std::string(v);
    return 0;
  }
  if (n == "cookie") {
    st->cookies.emplace_back(v);
    return 0;
  }
  if (n == "content-length") {
    uint64_t len = 0;
    bool ok = !v.empty() && v.size() <= 18;
    for (char c : v) {
      if (c < '0' || c > '9') ok = false;
      len = len * 10 + static_cast<uint64_t>(c - '0');
    }
    if (!ok || st->has_content_length) {
      st->error_status = 400;
      st->error = "malformed or repeated content-length";
      return 0;
    }
    st->has_content_length = true;
    st->head.content_length = len;
  }
  if (n == "expect" && iequals(v, "100-continue")) st->head.expect_continue = true;
  st->head.fields.insert(n, v);
  return 0;
}

int H2Session::onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* ud) {
  auto* self = static_cast<H2Session*>(ud);
  // Only requests and their bodies keep a connection from being idle (a
  // PING or SETTINGS now and then does not hold a slot for ever).
  if (frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) self->last_active_ = Clock::now();
  switch (frame->hd.type) {
    case NGHTTP2_HEADERS: {
      auto it = self->streams_.find(frame->hd.stream_id);
      if (it == self->streams_.end()) return 0;
      H2Stream& st = *it->second;
      if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) st.in_eof = true;
      if (frame->headers.cat == NGHTTP2_HCAT_REQUEST && (frame->hd.flags & NGHTTP2_FLAG_END_HEADERS)) {
        self->startStream(it->second);
      } else {
        st.wake.cancel();  // trailers ending the body
      }
      return 0;
    }
    case NGHTTP2_DATA: {
      if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
        if (H2Stream* st = self->streamOf(frame->hd.stream_id)) {
          st->in_eof = true;
          st->wake.cancel();
        }
      }
      return 0;
    }
    case NGHTTP2_RST_STREAM:
      self->spendResetToken("reset streams");
      return 0;
    default:
      return 0;
  }
}

int H2Session::onDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data, size_t len,
                           void* ud) {
  auto* self = static_cast<H2Session*>(ud);
  H2Stream* st = self->streamOf(stream_id);
  if (st == nullptr || st->finished || st->error_status != 0) {
    // Nobody reads it: give the window back at once.
    nghttp2_session_consume(self->ng_, stream_id, len);
    return 0;
  }
  st->in.append(reinterpret_cast<const char*>(data), len);
  self->in_buffered_ += len;
  self->conn_owed_ += len;
  self->settleConnectionWindow();
  st->wake.cancel();
  return 0;
}

int H2Session::onFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* ud) {
  auto* self = static_cast<H2Session*>(ud);
  if (frame->hd.type == NGHTTP2_RST_STREAM) {
    // Resets a client provokes (malformed requests, refused streams, a
    // window kept shut) count like its own: each frees a stream slot while
    // work may go on. NO_ERROR ones follow a whole response: nothing runs on.
    if (frame->rst_stream.error_code != NGHTTP2_NO_ERROR) self->spendResetToken("provoked stream resets");
    return 0;
  }
  if (frame->hd.type != NGHTTP2_DATA && frame->hd.type != NGHTTP2_HEADERS) return 0;
  H2Stream* st = self->streamOf(frame->hd.stream_id);
  if (st == nullptr) return 0;
  if (frame->hd.type == NGHTTP2_DATA) st->stall_from = Clock::now();
  if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && !st->end_sent) {
    st->end_sent = true;
    // The response is whole but the client has not ended its side (a body
    // nobody reads, or none coming): RFC 9113 §8.1 RST_STREAM(NO_ERROR), so
    // the stream does not stay half-closed for ever.
    if (!st->in_eof) nghttp2_submit_rst_stream(self->ng_, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR);
  }
  return 0;
}

int H2Session::onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t, void* ud) {
  auto* self = static_cast<H2Session*>(ud);
  auto it = self->streams_.find(stream_id);
  if (it == self->streams_.end()) return 0;
  std::shared_ptr<H2Stream> st = std::move(it->second);
  self->streams_.erase(it);
  st->closed = true;
  const size_t unread = st->inAvail();
  st->in.clear();
  st->in_off = 0;
  if (unread > 0) {
    self->in_buffered_ -= unread;
    self->settleConnectionWindow();
  }
  if (!st->out_eof) {
    // Reset before its answer was whole: stop the work done for it.
    if (st->on_gone) {
      auto f = std::move(st->on_gone);
      st->on_gone = nullptr;
      f();
    }
    if (st->pod != nullptr) {
      beast::error_code ignored;
      st->pod->socket().shutdown(tcp::socket::shutdown_both, ignored);
    }
  }
  st->wake.cancel();
  self->last_active_ = Clock::now();
  return 0;
}

ssize_t H2Session::readBody(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                            nghttp2_data_source* source, void*) {
  auto* st = static_cast<H2Stream*>(source->ptr);
  const size_t n = std::min(length, st->outPending());
  if (n > 0) {
    std::memcpy(buf, st->out.data() + st->out_off, n);
    st->out_off += n;
    if (st->out_off == st->out.size()) {
      st->out.clear();
      st->out_off = 0;
    }
    st->wake.cancel();  // room for the relay
  }
  if (st->outPending() == 0) {
    if (st->out_eof) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
    } else if (n == 0) {
      st->deferred = true;
      return NGHTTP2_ERR_DEFERRED;
    }
  }
  return static_cast<ssize_t>(n);
}

// -- the session ---------------------------------------------------------------

void H2Session::spendResetToken(const char* what) {
  // Rapid reset (CVE-2023-44487) and its server-side twin (resets the
  // client provokes, CVE-2025-8671): one token bucket per connection.
  const MonoTime now = Clock::now();
  reset_tokens_ =
      std::min(kResetBurst,
               reset_tokens_ + kResetPerSecond * std::chrono::duration<double>(now - reset_refill_).count());
  reset_refill_ = now;
  if (reset_tokens_ >= 1) {
    reset_tokens_ -= 1;
    return;
  }
  if (!goaway_) {
    LOG(WARNING) << "router: HTTP/2 client " << client_ip_ << " " << what << " faster than "
                 << kResetPerSecond << "/s (burst " << kResetBurst
                 << "): GOAWAY ENHANCE_YOUR_CALM and the connection is closed";
  }
  goaway_ = true;
  nghttp2_session_terminate_session(ng_, NGHTTP2_ENHANCE_YOUR_CALM);
}

void H2Session::settleConnectionWindow() {
  // Give back to the connection window what does not keep more than
  // kConnInBudget buffered: bytes over it stay owed until streams read them.
  const size_t keep = in_buffered_ > kConnInBudget ? in_buffered_ - kConnInBudget : 0;
  if (conn_owed_ > keep && !ended_) {
    nghttp2_session_consume_connection(ng_, conn_owed_ - keep);
    conn_owed_ = keep;
    kick();
  }
}

void H2Session::released(H2Stream& st, size_t n) {
  if (ended_) return;
  in_buffered_ -= n;
  if (!st.closed) nghttp2_session_consume_stream(ng_, st.id, n);
  settleConnectionWindow();
  kick();
}

void H2Session::submitResponse(H2Stream& st, int status,
                               const std::vector<std::pair<std::string, std::string>>& fields,
                               bool has_body) {
  if (ended_ || st.closed || st.responded) return;
  st.responded = true;
  st.stall_from = Clock::now();
  const std::string code = std::to_string(status);
  std::vector<nghttp2_nv> nv;
  nv.reserve(fields.size() + 1);
  auto add = [&nv](const std::string& n, const std::string& v) {
    nv.push_back({const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(n.data())),
                  const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(v.data())), n.size(), v.size(),
                  NGHTTP2_NV_FLAG_NONE});
  };
  static const std::string kStatus = ":status";
  add(kStatus, code);
  for (const auto& [n, v] : fields) add(n, v);
  nghttp2_data_provider prd;
  prd.source.ptr = &st;
  prd.read_callback = &H2Session::readBody;
  const int rv = nghttp2_submit_response(ng_, st.id, nv.data(), nv.size(), has_body ? &prd : nullptr);
  if (rv != 0) {
    LOG(WARNING) << "router: HTTP/2 response on stream " << st.id << " refused: " << nghttp2_strerror(rv);
    nghttp2_submit_rst_stream(ng_, NGHTTP2_FLAG_NONE, st.id, NGHTTP2_INTERNAL_ERROR);
  }
  kick();
}

void H2Session::startStream(std::shared_ptr<H2Stream> st) {
  st->started = true;
  http1::RequestHead& h = st->head;
  h.version = 11;
  h.keep_alive = true;
  if (st->error_status == 0) {
    if (h.method == "CONNECT") {
      st->error_status = 501;
      st->error = "CONNECT is not supported";
    } else if (h.target.empty()) {
      st->error_status = 400;
      st->error = "missing :path";
    } else if (h.target[0] != '/' && !(h.target == "*" && h.method == "OPTIONS")) {
      st->error_status = 400;
      st->error = ":path must start with '/' (or be '*' with OPTIONS)";
    }
  }
  if (st->error_status == 0) {
    for (unsigned char c : h.target) {
      if (c <= 0x20 || c >= 0x7f) {
        st->error_status = 400;
        st->error = "malformed :path";
        break;
      }
    }
  }
  std::string host = st->authority.empty() ? st->host_header : st->authority;
  if (st->error_status == 0 && !st->authority.empty() && !st->host_header.empty() &&
      !iequals(st->authority, st->host_header)) {
    st->error_status = 400;
    st->error = "Host \"" + st->host_header + "\" differs from :authority \"" + st->authority + "\"";
  }
  if (st->error_status == 0 && (host.empty() || !http1::validHost(host))) {
    // The same Host rule as HTTP/1.1's parser (router/http1.h).
    st->error_status = 400;
    st->error = host.empty() ? "missing :authority" : "malformed :authority";
  }
  if (st->error_status == 0) {
    h.host = host;
    if (!host.empty()) h.fields.set(http::field::host, host);
    if (!st->cookies.empty()) {
      // RFC 9113 §8.2.3: split cookie fields are one again for HTTP/1.1.
      std::string joined;
      for (const std::string& c : st->cookies) {
        if (!joined.empty()) joined += "; ";
        joined += c;
      }
      h.fields.set(http::field::cookie, joined);
    }
    if (st->in_eof) {
      h.framing = Framing::kNone;
    } else if (st->has_content_length) {
      h.framing = Framing::kLength;
    } else {
      h.framing = Framing::kUntilClose;  // DATA until END_STREAM; chunked to the pod
    }
  } else {
    h.framing = Framing::kNone;
    h.method = h.method.empty() ? "GET" : h.method;
  }
  ++running_;
  asio::co_spawn(w_.ioc, runStream(std::move(st)), asio::detached);
}

awaitable<void> H2Session::runStream(std::shared_ptr<H2Stream> st) {
  auto self = shared_from_this();
  if (!st->closed && !ended_) {
    H2Client side(self, st);
    if (st->error_status != 0) {
      const std::string msg = "malformed request: " + st->error;
      co_await impl_.writeLocal(side, static_cast<http::status>(st->error_status), msg, false);
    } else {
      co_await impl_.handleRequest(side, st->head, kind_, w_, client_ip_);
    }
  }
  st->finished = true;
  st->on_gone = nullptr;
  if (!ended_) {
    if (!st->closed && !st->responded) resetStream(*st, NGHTTP2_INTERNAL_ERROR);
    // A body nobody will read: drop it, window given back.
    const size_t unread = st->inAvail();
    st->in.clear();
    st->in_off = 0;
    if (unread > 0) released(*st, unread);
  }
  --running_;
  last_active_ = Clock::now();
  kick();
}

void H2Session::goAway() {
  if (goaway_ || ended_) return;
  goaway_ = true;
  nghttp2_submit_goaway(ng_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(ng_),
                        NGHTTP2_NO_ERROR, nullptr, 0);
  kick();
}

awaitable<void> H2Session::writer() {
  auto self = shared_from_this();
  std::string batch;
  batch.reserve(kWriteBatch);
  DeadlineStream& sock = client_.tcpStream();
  for (;;) {
    if (ended_) break;
    // nghttp2's frames, up to a batch, encrypted in one go (16 KiB records),
    // plus whatever TLS itself queued meanwhile (an alert, a KeyUpdate answer).
    batch.clear();
    bool fatal = false;
    while (batch.size() < kWriteBatch) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(ng_, &data);
      if (n < 0) {
        fatal = true;
        break;
      }
      if (n == 0) break;
      batch.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (!batch.empty() && !tls_.send(batch.data(), batch.size())) {
      closeSocket();
      break;
    }
    const bool over =
        batch.empty() &&
        (fatal || ended_ || (nghttp2_session_want_read(ng_) == 0 && nghttp2_session_want_write(ng_) == 0));
    if (over) tls_.shutdown();  // close_notify goes out with the last bytes
    tls_.takeOutput(cipher_out_);
    if (!cipher_out_.empty()) {
      beast::error_code ec;
      writing_ = true;
      write_started_ = Clock::now();
      co_await asio::async_write(sock, asio::buffer(cipher_out_), tok(ec));
      writing_ = false;
      if (ec) {
        closeSocket();
        break;
      }
      if (!over) continue;
    }
    if (over) {
      // Over (GOAWAY sent and no stream left, or a fatal error): no more
      // writes; the reader sees the client close (or the watchdog ends it).
      beast::error_code ignored;
      sock.socket().shutdown(tcp::socket::shutdown_send, ignored);
      break;
    }
    // Nothing to send: wait for a kick (the reader, a stream, the watchdog).
    // (No suspension between the checks above and this wait: a kick cannot
    // be missed, the worker runs one handler at a time.)
    write_wake_.expires_at(farFuture());
    beast::error_code ec;
    co_await write_wake_.async_wait(tok(ec));
  }
  writer_done_ = true;
  writer_done_at_ = Clock::now();
  writer_done_timer_.cancel();
}

awaitable<void> H2Session::watchdog() {
  auto self = shared_from_this();
  const RouterOptions& o = impl_.opts;
  for (;;) {
    watchdog_.expires_after(std::chrono::seconds(1));
    beast::error_code ec;
    co_await watchdog_.async_wait(tok(ec));
    if (ended_) co_return;
    const MonoTime now = Clock::now();
    bool header_late = false, sending = false;
    std::vector<H2Stream*> stalled;
    for (auto& [id, st] : streams_) {
      if (!st->started && now - st->begun > o.header_read_timeout) header_late = true;
      if (st->sending()) {
        sending = true;
        if (now - st->stall_from > o.client_io_timeout) stalled.push_back(st.get());
      }
    }
    if (sending && !goaway_ && nghttp2_session_get_remote_window_size(ng_) <= 0) {
      if (window_shut_since_ == MonoTime{}) window_shut_since_ = now;
    } else {
      window_shut_since_ = MonoTime{};
    }
    if (close_at_ != MonoTime{} && now > close_at_) {
      closeSocket();  // GOAWAY had its chance to go out
    } else if (writing_ && now - write_started_ > o.client_io_timeout) {
      closeSocket();  // the client stopped reading
    } else if (window_shut_since_ != MonoTime{} && now - window_shut_since_ > o.client_io_timeout) {
      LOG(INFO) << "router: HTTP/2 client " << client_ip_ << " kept the connection's window shut for "
                << std::chrono::duration_cast<std::chrono::seconds>(o.client_io_timeout).count()
                << " s: closed";
      closeSocket();
    } else if (header_late && close_at_ == MonoTime{}) {
      // A header block begun and not completed (no CONTINUATION comes).
      LOG(INFO) << "router: HTTP/2 client " << client_ip_ << " left a header block unfinished for "
                << std::chrono::duration_cast<std::chrono::seconds>(o.header_read_timeout).count()
                << " s: GOAWAY, closed";
      goaway_ = true;
      nghttp2_session_terminate_session(ng_, NGHTTP2_NO_ERROR);
      close_at_ = now + std::chrono::seconds(2);
      kick();
    } else if (!any_stream_ && now - started_ > o.header_read_timeout) {
      closeSocket();  // no request since the handshake
    } else if (writer_done_ && now - writer_done_at_ > std::chrono::seconds(1)) {
      closeSocket();  // GOAWAY sent; the client did not close
    } else if (running_ == 0 && !sending && !header_late && now - last_active_ > o.keepalive_idle_timeout) {
      goAway();  // idle: GOAWAY, then closed once written
    } else if (impl_.draining.load() && !goaway_) {
      goAway();
    }
    // Streams whose client took no DATA for client_io_timeout while output
    // waited (its stream window kept at 0): reset, output dropped.
    if (!ended_) {
      for (H2Stream* st : stalled) {
        st->cancelled = true;
        st->out.clear();
        st->out_off = 0;
        nghttp2_submit_rst_stream(ng_, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
        st->wake.cancel();
      }
      if (!stalled.empty()) kick();
    }
  }
}

void H2Session::endAll() {
  ended_ = true;
  for (auto& [id, st] : streams_) {
    st->closed = true;
    if (st->on_gone) {
      auto f = std::move(st->on_gone);
      st->on_gone = nullptr;
      f();
    }
    if (st->pod != nullptr && !st->out_eof) {
      beast::error_code ignored;
      st->pod->socket().shutdown(tcp::socket::shutdown_both, ignored);
    }
    st->wake.cancel();
  }
  streams_.clear();
  write_wake_.cancel();
  watchdog_.cancel();
}

awaitable<void> H2Session::run() {
  if (Status st = tls_.adopt(client_.tlsStream().native_handle()); !st.isOk()) {
    LOG(WARNING) << "router: HTTP/2 connection from " << client_ip_ << ": " << st.message();
    co_return;
  }
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, &H2Session::onBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(cbs, &H2Session::onHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &H2Session::onFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &H2Session::onDataChunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &H2Session::onStreamClose);
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, &H2Session::onFrameSend);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_max_outbound_ack(opt, kMaxOutboundAcks);
  nghttp2_option_set_max_settings(opt, 32);
  nghttp2_option_set_max_continuations(opt, kMaxContinuations);
  // nghttp2's own reset limit stays as a backstop behind ours.
  const int rv = nghttp2_session_server_new2(&ng_, cbs, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  if (rv != 0) {
    ng_ = nullptr;
    LOG(WARNING) << "router: HTTP/2 session: " << nghttp2_strerror(rv);
    co_return;
  }
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kMaxStreams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(kStreamWindow)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(impl_.opts.max_header_bytes)},
      {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
  };
  nghttp2_submit_settings(ng_, NGHTTP2_FLAG_NONE, settings, sizeof settings / sizeof settings[0]);
  nghttp2_session_set_local_window_size(ng_, NGHTTP2_FLAG_NONE, 0, kConnWindow);
  if (impl_.draining.load()) goAway();

  std::weak_ptr<H2Session> weak = shared_from_this();
  conn_->drain_hook = [weak] {
    if (auto s = weak.lock()) s->goAway();
  };
  client_.tcpStream().expires_never();  // the watchdog keeps the time
  asio::co_spawn(w_.ioc, writer(), asio::detached);
  asio::co_spawn(w_.ioc, watchdog(), asio::detached);

  std::vector<uint8_t> rbuf(16 * 1024);
  bool flush = false;
  DeadlineStream& sock = client_.tcpStream();
  // (The first pass reads no socket: what came with the handshake, read
  // ahead into OpenSSL's buffer, is fed first.)
  for (bool first = true;; first = false) {
    beast::error_code ec;
    size_t n = 0;
    if (!first) {
      n = co_await sock.async_read_some(asio::buffer(rbuf), tok(ec));
      if (ec) break;  // the client closed (or the watchdog did): nothing more to say
      conn_->fresh = false;
    }
    if (writer_done_) continue;  // what the client still sends after our GOAWAY
    ssize_t ng_error = 0;
    const TlsPump::Read r = tls_.feed(rbuf.data(), n, [&](const uint8_t* data, size_t len) {
      const ssize_t used = nghttp2_session_mem_recv(ng_, data, len);
      if (used < 0) ng_error = used;
      return used >= 0;
    });
    if (ng_error < 0) {
      // A connection error (bad preface, flood, ...): nghttp2 queued a GOAWAY where it could.
      if (ng_error != NGHTTP2_ERR_BAD_CLIENT_MAGIC) {
        LOG(INFO) << "router: HTTP/2 connection from " << client_ip_
                  << " ended: " << nghttp2_strerror(static_cast<int>(ng_error));
      }
      goaway_ = true;
      flush = true;
      break;
    }
    if (r != TlsPump::Read::kMore) {
      // close_notify, or a TLS error (an alert may be queued): flush, end.
      flush = true;
      break;
    }
    kick();  // answers to what came (SETTINGS ack, WINDOW_UPDATE, responses)
  }
  if (flush && !writer_done_) {
    // Let the writer send what is queued (the GOAWAY), a bounded while.
    writer_done_timer_.expires_after(std::chrono::seconds(1));
    kick();
    beast::error_code ec;
    co_await writer_done_timer_.async_wait(tok(ec));
  }
  conn_->drain_hook = nullptr;
  endAll();
  closeSocket();
  // The writer's last write fails on the closed socket; it must be done
  // before the ClientStream goes away with this frame's caller.
  while (!writer_done_) {
    writer_done_timer_.expires_after(std::chrono::seconds(1));
    beast::error_code ec;
    co_await writer_done_timer_.async_wait(tok(ec));
  }
}

}  // namespace

bool negotiatedH2(ClientStream& client) {
  if (!client.isTls()) return false;
  const unsigned char* proto = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(client.tlsStream().native_handle(), &proto, &len);
  return len == 2 && proto[0] == 'h' && proto[1] == '2';
}

awaitable<void> serveH2(Router::Impl& impl, Worker& w, ClientStream& client, std::shared_ptr<ClientConn> conn,
                        std::string client_ip, Kind kind) {
  auto session = std::make_shared<H2Session>(impl, w, client, std::move(conn), std::move(client_ip), kind);
  co_await session->run();
}

}  // namespace knap::router
