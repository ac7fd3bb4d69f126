// ApiServer: knapd's Kubernetes-style REST endpoint (HTTP/1.1, Boost.Beast)
// on loopback TCP and/or a root-only unix socket, so that a stock kubectl can
// manage serving.knative.dev/v1 objects. Request semantics live in
// RestHandler; this class owns sockets, the io_context thread(s), request
// limits and watch streaming (KUBECTL-WIRE §7).
//
// Threading: start() binds synchronously and then serves on its own
// io_context thread(s); each connection runs on its own strand. Store calls
// are made synchronously on those threads. Watch events arrive from the
// store's writer threads through one store listener, which only copies the
// event into each watcher's bounded queue and posts to the watcher's strand;
// a watcher whose queue overflows is closed (kubectl re-watches from its last
// resourceVersion). start()/stop() must not race each other. Store, Config and
// TimeSource are borrowed and must outlive the server.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "api/server/rest_handler.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/status.h"
#include "store/store.h"

namespace knap::api {

struct ApiServerOptions {
  // "host:port" for TCP ("127.0.0.1:0" picks a free port); empty = no TCP listener.
  std::string tcp_listen = "127.0.0.1:0";
  // An already-listening TCP socket (socket activation, common/listen_fds.h)
  // served instead of binding tcp_listen; owned by the server from start().
  int tcp_listen_fd = -1;
  // Path of a unix socket (created with mode 0600); empty = none.
  std::string unix_socket_path;
  size_t max_body_bytes = 3 * 1024 * 1024;  // larger bodies get 413
  size_t max_header_bytes = 64 * 1024;      // larger headers get 431
  std::chrono::seconds read_timeout{30};    // to read one request (and idle keep-alive)
  size_t watch_buffer_events = 1024;        // per watcher; overflow closes the watch
  int threads = 1;
  RequestPolicy policy;  // Host allow-list, watch timeout and bookmark interval
};

class ApiServer {
 public:
  ApiServer(ApiServerOptions options, const Config& config, store::Store& store, TimeSource& clock);
  ~ApiServer();  // calls stop()
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds the listeners and starts serving. kInvalidArgument for a bad listen
  // address, kUnavailable when a socket cannot be bound, kFailedPrecondition
  // when already started.
  Status start();
  // Closes listeners and every connection (watches included); joins threads. Idempotent.
  void stop();

  // The bound TCP port (after start(); 0 when there is no TCP listener).
  int tcpPort() const;
  // "http://127.0.0.1:PORT" for the TCP listener.
  std::string url() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Writes a kubeconfig (cluster "knap" at `server_url`, plain http, context
// "knap", namespace "default", current-context knap) with mode 0600, so that
// `kubectl --kubeconfig PATH get ksvc` talks to knapd. kUnavailable when the
// file cannot be written.
Status writeKubeconfig(const std::string& path, const std::string& server_url);

}  // namespace knap::api
