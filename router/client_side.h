// The client side of one request, as the route → activate → proxy stages
// (proxy.cc, Router::Impl::handleRequest) see it: the request head and a
// body source in, a response head and a body sink out. Two implementations:
// Http1Client (client_http1.cc: a request read from an HTTP/1.1 connection,
// plain or TLS) and the HTTP/2 stream of router/h2_session.cc. Everything
// about routing, the activator queue, concurrency, timeouts and the pod
// connection stays in handleRequest, once, for both.
//
// Threading: an instance lives on its connection's worker thread and is
// used by one request's coroutine (plus the side's own connection machinery
// on the same thread).
//
// Not part of the router's interface: include only from router/*.cc.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "router/relay.h"
#include "router/router_impl.h"

namespace knap::router {

// The pod's answer, rewritten for the client: hop-by-hop and framing
// headers are gone from `fields`; the side derives its own framing.
struct ProxiedResponse {
  int code = 0;
  std::string_view reason;   // the pod's reason phrase ("": the standard one)
  Fields* fields = nullptr;  // end-to-end fields
  http1::Framing framing = http1::Framing::kNone;
  uint64_t content_length = 0;  // kLength; for HEAD/304 the declared length
  bool has_content_length = false;
  bool head_request = false;
  bool switching = false;  // a 101 answer to an upgrade request
  std::string cold_start;  // K-Knap-Cold-Start value; "" = none
};

struct ResponseEnd {
  bool complete = false;  // the whole body reached the client (the pod connection is in sync)
  bool keep = false;      // the client connection can carry another request
};

class ClientSide {
 public:
  using Guard = Router::Impl::RequestGuard;
  virtual ~ClientSide() = default;
  // Came over TLS (X-Forwarded-Proto: https; no ACME answers, no redirect).
  virtual bool tls() const = 0;
  // The HTTP version of local answers (10 or 11; an HTTP/2 stream says 11).
  virtual unsigned version() const = 0;
  // An answer the router makes itself. Returns whether the client
  // connection can carry another request (`keep_alive` and it was sent).
  virtual awaitable<bool> sendLocal(std::unique_ptr<Router::Impl::LocalResponse> r, bool keep_alive) = 0;
  // While the request waits in the activator queue: `on_gone` runs (on this
  // worker) if the client goes away. Returns false when the side cannot
  // tell (then nothing is watched). stopWatching() before the wait ends.
  virtual bool watchHangup(std::function<void()> on_gone) = 0;
  virtual void stopWatching() = 0;
  // The pod connection of the exchange under way (nullptr: none). A side
  // that learns of the client's leaving (an HTTP/2 stream reset) shuts it
  // down so that the exchange ends at once instead of at its timeout.
  virtual void podExchange(DeadlineStream* up) {}
  // The client is known to have left (an answer would go nowhere).
  virtual bool gone() const { return false; }
  // Expect: 100-continue, once a pod slot is held. False: the client is gone.
  virtual awaitable<bool> sendContinue() = 0;
  // Writes `pod_head` to the pod, then the request body as `r` frames it
  // (read deadline: the client's; write deadline: the pod's).
  virtual awaitable<RelayEnd> sendRequest(DeadlineStream& up, const std::string& pod_head, const Relay& r,
                                          beast::error_code& read_ec, std::string& framing_error) = 0;
  // The response head, then its body streamed from `up` (bytes already read
  // in `ubuf`) as `body` frames it (read deadline: the pod's; write: the
  // client's). On a switch of protocols the side may take the pod socket
  // and `guard` for a tunnel.
  virtual awaitable<ResponseEnd> sendResponse(ProxiedResponse& resp, DeadlineStream& up,
                                              beast::flat_buffer& ubuf, Relay& body,
                                              std::unique_ptr<Guard>& guard) = 0;
};

// A request read by serveConnection from an HTTP/1.1 connection.
class Http1Client final : public ClientSide {
 public:
  Http1Client(Router::Impl& impl, Worker& w, ClientStream& client, beast::flat_buffer& buf,
              const http1::RequestHead& head, std::shared_ptr<ClientConn>& conn)
      : impl_(impl), w_(w), client_(client), buf_(buf), head_(head), conn_(conn) {}
  bool tls() const override { return client_.isTls(); }
  unsigned version() const override { return head_.version; }
  awaitable<bool> sendLocal(std::unique_ptr<Router::Impl::LocalResponse> r, bool keep_alive) override;
  bool watchHangup(std::function<void()> on_gone) override;
  void stopWatching() override;
  awaitable<bool> sendContinue() override;
  awaitable<RelayEnd> sendRequest(DeadlineStream& up, const std::string& pod_head, const Relay& r,
                                  beast::error_code& read_ec, std::string& framing_error) override;
  awaitable<ResponseEnd> sendResponse(ProxiedResponse& resp, DeadlineStream& up, beast::flat_buffer& ubuf,
                                      Relay& body, std::unique_ptr<Guard>& guard) override;

 private:
  Router::Impl& impl_;
  Worker& w_;
  ClientStream& client_;
  beast::flat_buffer& buf_;
  const http1::RequestHead& head_;
  std::shared_ptr<ClientConn>& conn_;
  bool watching_ = false;
};

}  // namespace knap::router
