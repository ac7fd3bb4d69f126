// Router: knap's data plane — ingress, activator and queue-proxy in one hop
// (ARCHITECTURE.md "One request, end to end"; KNATIVE-CONTRACT.md §5).
//
//   client ─► listener ─► Host lookup (RoutingTable snapshot) ─► weighted pick
//          ─► ActivatorQueue of the revision (breaker; queue while no pod is free;
//             on_cold_request at zero pods) ─► keep-alive pool ─► pod ip:port
//
// Listeners: external (`port`), internal (`internal_port`, also serves
// cluster-local hosts), admin (`admin_port`, GET /metrics and /healthz,
// meant for 127.0.0.1) and HTTPS (`tls_port`: the external hosts over TLS,
// the certificate chosen by SNI from the CertTable given to
// setCertificates()). Any of them may be disabled with -1; 0 = ephemeral.
// One io_context per worker thread; one acceptor per listener hands new
// connections to workers round robin; a connection lives on one worker, so
// its handlers never run concurrently (the io_context is its strand).
//
// Timers: socket and queue timeouts run on Asio's steady clock; queue wait
// and metrics read the TimeSource (the same clock for RealTimeSource). The
// activator queue's logic is tested on a SimulatedTimeSource
// (activator_queue_test.cc); the Router itself needs RealTimeSource.
//
// Thread safety: start() and stop() are called by the owner from one
// thread; every other public method may be called from any thread, also
// while serving and while stop() runs. setRoutingTable() swaps an immutable snapshot (in-flight
// requests keep theirs); setEndpoints()/setRevisionConfig() take a short
// per-revision lock. on_cold_request must be set before start(); it is
// called on a worker thread and must not block (post to your own loop).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "router/activator_queue.h"
#include "router/certs.h"
#include "router/metrics.h"
#include "router/routing_table.h"
#include "scaler/driver.h"

namespace knap::router {

struct Endpoint {
  std::string ip;  // IPv4 or IPv6 literal
  uint16_t port = 0;
  std::string key() const;  // "ip:port" ("[v6]:port")
  bool operator==(const Endpoint&) const = default;
};

// How a revision's first ready pod came to be the last time it woke from
// zero (reported by the pod runner with the endpoints). The cold start of a
// request that woke the revision is labelled with `path`, or "pulled" when
// `image_ready_at` is later than the request's arrival (its image was pulled
// while it waited).
struct WakeInfo {
  std::string path;                        // "warm", "frozen", "cached", "adopted"; "" = unknown
  std::optional<WallTime> image_ready_at;  // the Revision's knap.dev/image-ready-at
  bool operator==(const WakeInfo&) const = default;
};

// A revision's warm pool, for knap_warm_pool_pods / knap_warm_pool_memory_bytes.
struct WarmPoolStats {
  std::string mode;          // "created" or "frozen"
  int pods = 0;              // warm pods ready to promote
  int64_t memory_bytes = 0;  // memory those pods hold
};

// The response header on the request that woke a revision from zero:
// "path=<warm|frozen|cached|pulled|adopted|unknown>; dur=<seconds, 3 decimals>".
inline constexpr std::string_view kColdStartHeader = "K-Knap-Cold-Start";

// Per-revision settings from the Revision spec (§5.7, §5.8).
struct RevisionConfig {
  int container_concurrency = 0;                 // 0 = unlimited
  Duration timeout = std::chrono::seconds(300);  // timeoutSeconds; queue time counts
  Duration response_start_timeout{0};            // 0 = none
  Duration idle_timeout{0};                      // 0 = none
};

// What the plain external listener does with a routed host while the HTTPS
// listener is on (config-network `http-protocol`).
enum class HttpProtocol {
  kEnabled,     // served over HTTP too
  kRedirected,  // 308 to https://<host>[:tls port]<target>
  kDisabled,    // 404: served over HTTPS only
};

struct RouterOptions {
  std::string address = "0.0.0.0";
  int port = 0;
  std::string internal_address = "127.0.0.1";
  int internal_port = -1;
  std::string admin_address = "127.0.0.1";
  int admin_port = -1;
  int threads = 2;
  size_t max_header_bytes = 32 * 1024;  // larger request headers get 431
  Duration header_read_timeout = std::chrono::seconds(10);
  Duration keepalive_idle_timeout =
      std::chrono::seconds(60);  // a kept-alive client connection idle this long is closed
  Duration client_io_timeout =
      std::chrono::seconds(60);  // a client that stalls a read/write this long is dropped
  Duration upstream_connect_timeout = std::chrono::seconds(5);
  size_t max_idle_upstream_per_endpoint = 64;                 // per worker
  Duration upstream_idle_timeout = std::chrono::seconds(30);  // idle pod connections closed after this
  QueueLimits queue;                                          // activator queue depth / max wait
  std::string forwarded_proto = "http";
  // Client connections open at once per listener, upgraded tunnels included;
  // 0 = no limit. A connection accepted over the limit is answered
  // `503 Service Unavailable` (`Connection: close`, `Retry-After: 1`) and
  // closed, so a client learns why instead of hanging in the backlog.
  int max_connections = 10000;
  // An Upgrade tunnel (WebSocket) with no byte in either direction for this
  // long is closed, releasing its pod slot; 0 = never.
  Duration tunnel_idle_timeout = std::chrono::minutes(5);
  // Until the first setRoutingTable() after start(), a request for a host
  // that is not in the (empty) table waits up to this long for the table
  // instead of getting 404 at once (a restarted daemon has not synced its
  // routes yet). 0 = no hold.
  Duration startup_hold{0};
  // An already-listening TCP socket (socket activation, a restart that keeps
  // the socket) to serve as the external listener instead of binding
  // `address:port`. The router owns it from start() on.
  int external_fd = -1;
  // The HTTPS listener (external hosts over TLS); -1 = off.
  std::string tls_address = "0.0.0.0";
  int tls_port = -1;
  int tls_fd = -1;  // as external_fd, for the HTTPS listener
  // Applies only while the HTTPS listener is on. K-Network-Probe requests
  // and /.well-known/acme-challenge/ are answered over HTTP in every mode.
  HttpProtocol http_protocol = HttpProtocol::kEnabled;
  // The port written in Redirected answers' Location; 0 = the bound HTTPS port.
  int tls_redirect_port = 0;
  // HTTP/2 on the HTTPS listener (ALPN h2, router/h2_session.h); off: ALPN
  // offers http/1.1 only.
  bool http2 = true;
};

class Router final : public scaler::MetricsSource {
 public:
  Router(RouterOptions options, const TimeSource& time);
  ~Router() override;
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Binds the listeners and starts the worker threads. Returns Unavailable
  // when an address cannot be bound, FailedPrecondition if already started.
  Status start();
  // Graceful drain (SIGTERM): stops accepting on every listener, closes
  // kept-alive connections that are idle between requests, and from now on
  // answers every response with `Connection: close` and closes the
  // connection after it. In-flight requests, queued (activator) ones
  // included, go on. Blocks until no client connection is open or `deadline`
  // passed; returns the connections still open then (0 = drained). Call
  // stop() afterwards. Call from the owner's thread, after start().
  size_t drain(Duration deadline);
  // Closes listeners and connections, fails queued requests, joins threads.
  // Idempotent.
  void stop();
  // Client connections open on all listeners (tunnels included).
  size_t openConnections() const;
  // Bound ports (after start()); -1 for a disabled listener.
  int port() const;
  int internalPort() const;
  int adminPort() const;
  int tlsPort() const;

  // Replaces the HTTPS listener's certificates; the next handshake uses them.
  void setCertificates(std::shared_ptr<const CertTable> certs);
  // ACME HTTP-01 (RFC 8555 §8.3): token -> key authorization. The plain
  // external listener answers GET /.well-known/acme-challenge/<token> for a
  // known token itself (200, text/plain, whatever the Host); other tokens
  // go on to routing like any request.
  using AcmeChallenges = std::unordered_map<std::string, std::string>;
  void setAcmeChallenges(std::shared_ptr<const AcmeChallenges> challenges);

  // Replaces the routing table; requests already routed keep the old one.
  void setRoutingTable(std::shared_ptr<const RoutingTable> table);
  // Ready pod endpoints of `revision` ("ns/name"); releases queued requests.
  // `wake` (when its path is set) is how the revision last woke from zero; it
  // is stored before the queue is released, so a waking request sees it.
  // `version` (0: unversioned, always applied) orders updates that race on
  // their way here: an update older than the newest applied one for the
  // revision is dropped (returns false); true when applied. An empty list for
  // a revision the router does not know (removed) creates nothing.
  bool setEndpoints(const std::string& revision, const std::vector<Endpoint>& endpoints,
                    const WakeInfo& wake = {}, uint64_t version = 0);
  // The revision's warm pool (knap_warm_pool_pods{revision,mode},
  // knap_warm_pool_memory_bytes{revision}).
  void setWarmPool(const std::string& revision, const WarmPoolStats& pool);
  void setRevisionConfig(const std::string& revision, const RevisionConfig& config);
  // Forgets the revision: queued requests get 503, metrics series dropped.
  void removeRevision(const std::string& revision);
  // For knap_revision_pods{state="desired"}; "ready" follows setEndpoints.
  void setDesiredPods(const std::string& revision, int pods);

  // Called when a request for `revision` is queued while it has no ready
  // endpoint (the daemon wires it to ScalerDriver::poke and the pod runner).
  std::function<void(const std::string& revision)> on_cold_request;

  // scaler::MetricsSource: requests held for the revision, queued included.
  scaler::RequestStatsReport collect(const std::string& revision, MonoTime now) override;
  scaler::MetricsSource& metrics() { return *this; }

  // Prometheus text (what the admin listener serves on /metrics).
  std::string renderMetrics() const;
  // Requests waiting in `revision`'s activator queue (tests, status pages).
  size_t queued(const std::string& revision) const;
  // Revisions the router holds state for (tests: a removed one leaves none).
  size_t revisionCount() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace knap::router
